"""`claimstream bench`: claimstream next to the raw Kafka limit, on the same generated claims.

One broker is started for the run. The same Avro claims (a realistic mix: many subjects, several
fields, contended keys, stale claims, conflicts, bad records) are consumed by both, in
interleaved rounds (a fifth of the records each, one side after the other):
- the limit: a plain aiokafka consumer that decodes each claim and produces one record per claim;
- claimstream: a real worker process arbitrating them end to end.
Then a fixed offered load at half claimstream's rate measures claim-to-decision latency; with
`--merge-pairs`, aliases merge that many pairs of keys (each alias key's evidence moved to its
canonical key, live claims offered meanwhile); the worker is restarted on a new policy (every
key moved to it, the same live claims), and the pure engine is timed alone. The last line
printed is one JSON object with the figures.

The rooms, in the order a run uses them: `workload` (the claims, topics and pacing), `raw` (the
aiokafka limits), `worker` (the worker process under test), `throughput` (the limits and the
worker over the same records in turn, round by round), `peer` (with `--peer quixstreams`, the
same records through a minimal stateful quixstreams pipeline in a process of its own, the bench
extra's and imported by that process alone), `cores` (the CPU time of the worker, the broker and
the bench, and with `--pin-cores` the cores each may run on), `load`
(latency and soak under an offered rate), `merge` (aliases taking effect: the evidence of
`<prefix>-alias-<n>` moved to `<prefix>-<n>`; only when asked), `rollout` (the restart on policy
B and its sweep, and what both share: the live load beside its baseline, the decisions watched,
the sweep's gauges read to 0), `inprocess` (engine and state size without a broker), `scale` (a
worker holding N keys: its memory, disk, restarts and rollout; only when asked), and `run`,
which runs the phases in that order and reports. Apart from a run: `shell` (`python -m
streams.devkit.bench.shell`), the worker's per-claim path without a broker, and `audit`
(`python -m streams.devkit.bench.audit`), `claimstream audit export` over a million keys.
"""
