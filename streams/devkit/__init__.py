"""The dev kit: what develops, demonstrates and measures claimstream, never what a worker runs.

The rooms: `brokers/` (real brokers on loopback ports: Apache Kafka from Maven jars, a Kafka
cluster, Tansu) with `kafka/` (no module: the jar assembly script and its pom, shipped for
`brokers.kafka`), `dev` and `demo` (the `dev` bundle and its scenarios), `synthetic` (generated
claims), `bench/` (`claimstream bench`, phase by phase), and `registry_server` over
`registry_store` (a small Confluent-compatible schema registry). Nothing outside this package
imports it except the CLI's `dev` and `bench` commands (lazily, in streams.cli.main) and the
tests; tests/devkit/test_boundary.py holds the line.
"""
