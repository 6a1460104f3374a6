"""One key (a subject and field): what it keeps, how it changes, how it is stored.

- state: a KeyState and the bounds on what it keeps.
- transitions: how a key changes with a claim, a resolution, the clock, a new policy or an
  alias; emission: what each of its decisions sends (a changed belief, an escalation).
- upkeep: a key's bounds applied, its next check, the claims its policy refuses.
- journal: how a key's state is stored (stored: the stored forms, field by field).
- stewardship: how a steward's statement changes what a key holds of its stewards (proposals,
  approvals, undo, its task), kept in its steward_log; belief: what a key believes now, read
  without changing it (the web API's decision, an approval's basis, a stale view).
"""
