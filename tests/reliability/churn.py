"""A long churn run, not part of CI: three static workers on a 3-broker cluster while, every
minute, a worker is SIGKILLed and restarted, another is restarted gracefully, and the broker
leading the most input, decision and changelog partitions is SIGKILLed and brought back.

    .venv/bin/python -m tests.reliability.churn --minutes 10

Prints the checker line (and exits 1 if anything was lost or a problem was found).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from streams.devkit.brokers import KafkaCluster
from tests.reliability.checker import (
    History,
    busiest_leader,
    changelog_of,
    deployment_on,
    judge,
    publish_steadily,
    workload,
)
from tests.stream.support import WorkerProcess

RATE = 100.0  # claims/s offered
WORKERS = 3


async def churn(
    cluster: KafkaCluster, workers: list[WorkerProcess], topics: list[str], minutes: int
) -> float:
    """Faults once a minute; returns when the last one is over (monotonic time)."""
    started = time.monotonic()
    for minute in range(minutes):
        killed, restarted = workers[minute % WORKERS], workers[(minute + 1) % WORKERS]
        killed.kill()
        await asyncio.sleep(5)
        await asyncio.to_thread(killed.start)
        await asyncio.to_thread(restarted.stop)
        await asyncio.to_thread(restarted.start)
        victim, led = await busiest_leader(cluster, topics)
        node = cluster.node(victim)
        node.kill()
        await asyncio.sleep(10)
        await asyncio.to_thread(node.start)
        print(
            f"churn: minute {minute + 1}: killed {killed.data_dir.name}, restarted "
            f"{restarted.data_dir.name}, killed broker {victim} (leading {led} partitions)",
            flush=True,
        )
        await asyncio.sleep(max(0.0, started + 60 * (minute + 1) - time.monotonic()))
    return time.monotonic()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=int, default=10)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="claimstream-churn-") as root,
        KafkaCluster(size=3, partitions=4, data_dir=Path(root) / "cluster") as cluster,
    ):
        deployment = deployment_on(
            cluster.bootstrap,
            Path(root),
            static_membership=True,
            settings={
                "replication_factor": "3",
                "min_insync_replicas": "2",
                "broker_session_timeout_s": "20",
            },
        )
        workers = [deployment.worker(n).start() for n in range(WORKERS)]
        topics = [deployment.topics.claims, deployment.topics.decisions, changelog_of(deployment)]
        history = History()
        claims = workload(int(RATE * 60 * args.minutes), 73)
        ended = [time.monotonic()]

        async def run() -> None:
            publishing = publish_steadily(
                cluster.bootstrap, deployment.topics.claims, claims, RATE, history
            )
            _, ended[0] = await asyncio.gather(
                publishing, churn(cluster, workers, topics, args.minutes)
            )

        try:
            asyncio.run(run())
            verdict = judge(
                f"churn-{args.minutes}min",
                deployment,
                history,
                ended[0],
                [node.log_path for node in cluster.nodes],
            )
        finally:
            for worker in workers:
                worker.stop()
    for problem in verdict.problems:
        print(f"churn: problem: {problem}")
    return 1 if verdict.lost or verdict.problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
