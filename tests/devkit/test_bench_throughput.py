"""The bench's throughput phase on Apache Kafka: the raw loops and a worker take turns over the
same records, a round each, and every side reads every record once; each round's CPU ratio is
measured on the round's own claims."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest

from streams.devkit.bench.throughput import ROUNDS, throughput_phase
from streams.devkit.bench.worker import BenchWorker, worker_env
from streams.devkit.bench.workload import workload
from streams.devkit.brokers import KafkaBroker
from streams.worker.topics import ensure_topics
from tests.support.bench import bench_settings

CLAIMS = 2000


@pytest.mark.integration
def test_the_raw_loops_and_the_worker_read_every_record_in_turns(
    bench_kafka: KafkaBroker, tmp_path: Path
) -> None:
    settings = bench_settings(bench_kafka, tmp_path, "yardstick")
    asyncio.run(ensure_topics(settings))
    load = workload(CLAIMS, 300, seed=1, topic=settings.topics.claims)
    log = tmp_path / "worker.log"
    worker = BenchWorker(settings, worker_env(settings), log)
    try:
        found = throughput_phase(bench_kafka.bootstrap, settings.app_id, settings, load, worker)
        assert worker.processed() == CLAIMS, log.read_text()[-3000:]
    finally:
        worker.stop()
    print(f"bench throughput of {CLAIMS} claims in {ROUNDS} rounds: {found}")
    assert len(found.round_cpu_ratios) == ROUNDS
    assert all(math.isfinite(r) and r > 0 for r in found.round_cpu_ratios)
    for side in (found.raw, found.lean, found.ours):
        assert side.per_s > 0
        assert side.cpu_us > 0
