"""One key (a subject and field): what it keeps, how it changes, how it is stored.

- state: a KeyState and the bounds on what it keeps.
- transitions: how a key changes with a claim, a resolution, the clock, a new policy or an
  alias; emission: what each of its decisions sends (a changed belief, an escalation).
- upkeep: a key's bounds applied, its next check, the claims its policy refuses.
- journal: how a key's state is stored (stored: the stored forms, field by field).
"""
