"""The pure core: contracts, policy, normalization and arbitration.

Nothing under this package performs I/O beyond reading a policy file, and nothing imports
faust, aiokafka, fastavro or prometheus_client; a test enforces it.

The rooms, in the order a claim flows through them (every module of the package):
- contracts: the records (instants: their integer microseconds); errors: the reasons a record is
  refused; policy: the field rules (policy_schema: the policy file's JSON Schema, for editors);
  members: the enum members the hot path reads, bound once; memo: identity caches (a policy's
  compiled normalizers).
- authenticity: a claim's signature; intake: admission (authority, lineage) through normalize
  (each value in its field's type and unit) within bounds (how large each text may be, and what
  a key's records take in bytes).
- keystate: one key's transitions, which decide through the engine; timers: the transitions
  time alone makes, fired in order up to an instant; rollout: the policies in force over time,
  and a key moved through them (policy_history: that history as JSON lines; preview: what keys
  would decide were a policy put in force now, beside what they decide now).
- engine: the rules as a table (rulebook: the table's vocabulary; agreement: how claims agree);
  shortcuts (fused, incremental): the table's second encodings, held equal to it.
- arbitration: the decision record and its id; side_records: the evidence and the events a
  decision is built with.
- summary: the decisions a key keeps; upkeep: its bounds and next check; journal: how a key's
  state is stored (stored: the stored forms, field by field).
- explain, asof, replay: reading decisions back (replay with the clock through timers).
- settlement, dependence, suggestions: what closed conflicts say of the sources.
"""
