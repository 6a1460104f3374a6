"""The pure core: contracts, policy, normalization and arbitration.

Nothing under this package performs I/O beyond reading a policy file, and nothing imports
faust, aiokafka, fastavro or prometheus_client; a test enforces it.

Its rooms, in the order a claim flows through them; each imports only the rooms before it
(tests/test_layout.py holds the order):
- records: the records, their instants and bounds, the reasons one is refused, and the policy
  they are judged by.
- admission: a claim's signature checked, its value normalized and admitted (or refused).
- decision: how claims agree, the evidence and events a decision is built with, the decision
  record and its id, and the summary a key keeps of each.
- rules: the rules as a table, and its shortcuts (second encodings held equal to it).
- keys: what a key keeps, its transitions, its bounds and next check, and its stored form.
- timeline: the transitions time alone makes, and the policies and subject aliases in force
  over time.
- reading: decisions read back: explained, as of an instant, replayed, previewed under a policy.
- sources: what settled conflicts say of the sources.
"""
