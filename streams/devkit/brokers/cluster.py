"""Apache Kafka, several nodes: each a broker and a KRaft controller of one quorum.

Built from single-node `KafkaBroker`s that share a cluster id and a voter set, with replication
set cluster-wide, so a test can SIGKILL the leader of a partition and bring it back.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Self

from streams.devkit.brokers.kafka import KafkaBroker, new_cluster_id
from streams.devkit.brokers.process import DataDirLifecycle, free_port


class KafkaCluster(DataDirLifecycle):
    """``size`` Apache Kafka nodes, each a broker and a KRaft controller of one quorum, data on
    disk.

    Every topic (internal ones included) gets ``size`` replicas and ``min.insync.replicas`` of
    ``min_insync`` (2 of 3: an acks=all write survives one broker lost), so a node may be
    SIGKILLed and brought back (``nodes[i].kill()`` / ``.start()``) while the quorum, the group
    coordinator and every partition's leadership move to the survivors.
    """

    def __init__(
        self,
        size: int = 3,
        partitions: int = 4,
        data_dir: Path | None = None,
        min_insync: int = 2,
        heap: str = "384m",
    ) -> None:
        if not 1 <= min_insync <= size:
            raise ValueError(f"min_insync={min_insync} must be within 1..size={size}")
        self._owns_dir = data_dir is None
        self.data_dir = data_dir or Path(tempfile.mkdtemp(prefix="claimstream-cluster-"))
        self.size = size
        self.min_insync = min_insync
        controller_ports = [free_port() for _ in range(size)]
        voters = ",".join(f"{n + 1}@127.0.0.1:{port}" for n, port in enumerate(controller_ports))
        replicated = {
            "default.replication.factor": str(size),
            "min.insync.replicas": str(min_insync),
            "offsets.topic.replication.factor": str(size),
            "transaction.state.log.replication.factor": str(size),
            "transaction.state.log.min.isr": str(min_insync),
        }
        cluster_id = new_cluster_id()
        self.nodes = []
        for n, controller_port in enumerate(controller_ports):
            node = KafkaBroker(
                data_dir=self.data_dir / f"node-{n + 1}",
                partitions=partitions,
                extra_config=replicated,
                heap=heap,
                node_id=n + 1,
                voters=voters,
                cluster_id=cluster_id,
            )
            node.controller_port = controller_port
            self.nodes.append(node)

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes)

    def node(self, node_id: int) -> KafkaBroker:
        return self.nodes[node_id - 1]

    def start(self) -> Self:
        """Spawn every node, then wait for each to serve (none can before a quorum is up)."""
        try:
            down = [
                node for node in self.nodes if node.proc is None or node.proc.poll() is not None
            ]
            for node, proc in [(node, node.spawn()) for node in down]:
                node._wait_ready(proc)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
