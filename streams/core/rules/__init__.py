"""The rules that decide a key.

- rulebook: the table's vocabulary (its context and step results).
- engine: the rules as a table, the specification.
- shortcuts: second encodings of the table for the common cases, held equal to it.
"""
