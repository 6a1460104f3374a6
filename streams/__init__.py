"""claimstream: deterministic, auditable reconciliation of conflicting claims on Kafka.

The layers, lowest first (`LAYERS` in tests/test_layout.py: a module imports only from its own
layer and the ones before it), each package's docstring the index of its modules:
- `core`: the pure core (contracts, policy, normalization, the rules, a key's state);
- the foundation: `settings` (defaults, file, CLAIMSTREAM_* variables), `topic_names` (the
  topics' names), `packaged` (the files the package carries), `build_info` (which modules run
  compiled);
- `wire` (bytes on Kafka), `ops` (metrics, health, stalls, logs), `pipeline` (one record in,
  state and records out), `state` (a task's key states), `arbiter` (the batched hot path);
- `client` (the public client), `console` (the steward console), `agents` (the MCP server);
- `worker` (the Faust app that wires them), `audit` (everything believed as of an instant,
  replayed from a cut of the topics with no worker), `devkit` (brokers, demo, bench: never in a
  worker), and `cli`, the command line.
"""

from streams.build_info import choose_sources

__version__ = "0.1.0"

choose_sources()  # before any other module of the package is imported
