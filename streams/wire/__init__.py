"""The wire: how the core's records become bytes on Kafka topics and back.

The rooms, in the order a record crosses them:
- `kafka`: the connection options every consumer, producer and admin client opens with.
- `registry`: Confluent framing (`0x00`, a schema id, the body) and the schema registries a
  worker reads; `WireCodec`, the framed encode and decode the pipeline calls.
- `codec`: the packaged Avro schemas, and the core's records encoded and decoded with them.
- `claim_reader`: a Claim's Avro body read straight into a `LeanClaim` (the decode fast path).
- `avro_writer`: Avro bodies written by writers compiled once from the schemas.
- `decision_bytes`: decision records assembled from parts written once.
- `history_topic`: a topic read whole (policies, aliases, erasures, subject keys): every
  partition from its start, no group, to its end and again as it grows.
- `personal`: personal values sealed under a data subject's key (AES-GCM-SIV), the key wrapped
  by the deployment's (AES-GCM).
- `subject_keys`: the data subjects' wrapped keys on their compacted topic.
- `partitioner`: Kafka's default partitioner's hash (murmur2), as the Java client computes it.

Imports point down only: to the core, the settings and the packaged schemas.
"""
