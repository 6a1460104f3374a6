"""A claim admitted: its signature checked, its value normalized, its authority and lineage
assigned by the policy, or the reason it is refused.

- authenticity: a claim's signature.
- normalize: each value in its field's type and unit (a unit or semantic mismatch is refused
  before any comparison).
- intake: admission (authority, lineage, validity) through normalize, within the records' bounds.
"""
