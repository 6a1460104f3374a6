"""What settled conflicts say of the sources.

- settlement: which sources a closed conflict proved right or wrong.
- dependence: sources that copy one another, seen in their settled conflicts.
- suggestions: what the policy owner might change, from those figures.
"""
