"""Upgrades and rollbacks on a real broker: a worker refuses key state it cannot read."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from streams.core.keys.state import state_key
from streams.devkit.brokers import KafkaBroker
from tests.stream.support import Deployment, one_claim, produce, publishable, read_topic, records

pytestmark = pytest.mark.integration


async def create_changelog(bootstrap: str, name: str, partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(name, partitions, 1, topic_configs={"cleanup.policy": "compact"})]
        )
    finally:
        await admin.close()


def test_a_state_format_from_a_newer_release_stops_the_worker_before_it_consumes(
    kafka: KafkaBroker, deployment_factory: Any
) -> None:
    """A rolled-back worker meets a v6 record (as a newer release would write) in every task's
    changelog partition: it stops naming the version, and decides and commits nothing."""
    deployment: Deployment = deployment_factory(kafka.bootstrap)
    changelog = f"{deployment.name}-key-state-changelog"
    asyncio.run(create_changelog(kafka.bootstrap, changelog, deployment.partitions))
    field = one_claim(0, "paid").field
    newer = [
        (
            state_key(f"inv:v6-{p}", field).encode(),
            msgspec.msgpack.encode({"version": 6, "subject": f"inv:v6-{p}", "field": field}),
            [],
            p,
        )
        for p in range(deployment.partitions)
    ]
    asyncio.run(produce(kafka.bootstrap, changelog, newer))
    claims = publishable(40, seed=5, now=datetime.now(UTC))
    sent = records(deployment, claims, random.Random(5))
    asyncio.run(produce(kafka.bootstrap, deployment.topics.claims, sent))

    worker = deployment.worker()
    try:
        with contextlib.suppress(RuntimeError):  # it may stop before its web API answers
            worker.start()
        deadline = time.monotonic() + 90
        while worker.alive and time.monotonic() < deadline:
            time.sleep(0.5)
        log = worker.log_tail(100_000)
        assert "key state format v6 is newer than this release reads (v1-v5)" in log, log[-3000:]
        assert "upgrade, or restore from a changelog written by this release" in log
        assert not worker.alive, f"the worker kept running:\n{worker.diagnosis()}"
        assert worker.proc is not None
        assert worker.proc.returncode != 0
    finally:
        worker.stop()
    decisions = asyncio.run(read_topic(kafka.bootstrap, deployment.topics.decisions, idle_s=2))
    assert decisions == []
    assert asyncio.run(committed(kafka.bootstrap, f"{deployment.name}-arbiter")) == {}


async def committed(bootstrap: str, group: str) -> dict[Any, Any]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    return {tp: meta.offset for tp, meta in offsets.items() if meta.offset >= 0}
