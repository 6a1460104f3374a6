"""The pure core: contracts, policy, normalization and arbitration.

Nothing under this package performs I/O beyond reading a policy file, and nothing imports
faust, aiokafka, fastavro or prometheus_client; a test enforces it.

The rooms, in the order a claim flows through them:
- contracts, errors: the records and the reasons a record is refused; policy: the field rules.
- authenticity: a claim's signature; intake: admission (authority, lineage) through normalize.
- keystate: one key's transitions; journal: how a key's state is stored (memo: identity caches).
- engine: the rules as a table (agreement: how claims agree); shortcuts: fused and incremental,
  second encodings of the table for the common cases, held equal to it.
- arbitration: the decision record and its id; explain, asof, replay: reading decisions back.
"""
