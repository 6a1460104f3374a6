"""The records and the policy they are judged by: the ground floor of the core.

- contracts: the records (claims, resolutions, decisions; instants: their integer microseconds);
  lean: a claim as the hot path holds it, compiled.
- errors: the reasons a record is refused, one tree.
- bounds: how large each text may be, and what a key's records take in bytes.
- policy: the field rules (policy_schema: the policy file's JSON Schema, for editors); members:
  the enum members the hot path reads, bound once; memo: identity caches (a policy's compiled
  normalizers).
"""
