"""Liveness, readiness and the lag probe of a real arbiter on a real Kafka broker, time injected.

The arbiter runs in the test's event loop (no Faust app around it), so the test can hold the lock
a batch needs, which blocks the loop the way a stuck send or commit does, and drive the clock the
liveness verdict reads."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from streams.arbiter.loop import Arbiter
from streams.core.keys.state import state_key
from streams.core.records.contracts import Claim
from streams.core.records.policy import load_policy
from streams.devkit.brokers import KafkaBroker
from streams.ops.health import LagProbe, Pulse, report_health
from streams.ops.metrics import Metrics
from streams.pipeline import Processor
from streams.settings import Settings
from streams.worker.topics import ensure_topics
from tests.stream.support import CODEC, Deployment, produce

pytestmark = pytest.mark.integration

LIVENESS_TIMEOUT_S = 30.0


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def eventually(
    condition: Callable[[], Awaitable[bool]], what: str, within_s: float = 90
) -> None:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if await condition():
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def claims(count: int) -> list[tuple[bytes, Claim]]:
    made = []
    for n in range(count):
        claim = Claim(
            claim_id=f"h{n}-{random.random()}",
            subject=f"inv:health-{n}",
            field="order.payment_status",
            status="present",
            value="paid",
            source="billing-api",
            observed_at=datetime.now(UTC),
        )
        made.append((state_key(claim.subject, claim.field).encode(), claim))
    return made


async def publish(bootstrap: str, topic: str, count: int) -> None:
    await produce(
        bootstrap, topic, [(key, CODEC.encode(topic, claim), []) for key, claim in claims(count)]
    )


def lag(metrics: Metrics, topic: str) -> float | None:
    return metrics.registry.get_sample_value("claimstream_consumer_lag_records", {"topic": topic})


def gauge(metrics: Metrics, name: str) -> float | None:
    return metrics.registry.get_sample_value(name)


def committed(metrics: Metrics) -> float:
    return metrics.registry.get_sample_value("claimstream_records_committed_total") or 0.0


async def test_liveness_follows_the_loop_and_lag_keeps_counting_while_it_is_blocked(
    kafka: KafkaBroker, deployment_factory: Any, tmp_path: Path
) -> None:
    deployment: Deployment = deployment_factory(kafka.bootstrap)
    settings = Settings(
        app_id=deployment.name,
        broker=kafka.bootstrap,
        policy=deployment.policy,
        partitions=deployment.partitions,
        topics=deployment.topics,
        data_dir=tmp_path,
        liveness_timeout_s=LIVENESS_TIMEOUT_S,
    )
    await ensure_topics(settings)
    policy = load_policy(settings.policy)
    metrics = Metrics(policy)
    processor = Processor(settings, policy, CODEC, metrics, group=f"{settings.app_id}-arbiter")
    clock = FakeClock()
    pulse = Pulse(metrics, settings.liveness_timeout_s, settings.restore_timeout_s, clock=clock)
    arbiter = Arbiter(settings, processor, metrics, settings.topics.inputs(), pulse)
    open_tasks = arbiter.ownership.open_tasks
    report_health(metrics, pulse, open_tasks)
    probe = LagProbe(settings, metrics, arbiter.group, arbiter.inputs, lambda: pulse.owned)
    claims_topic = settings.topics.claims

    assert not pulse.readiness(open_tasks()).ok, "ready before joining the group"
    await arbiter.start()
    await probe.start()
    try:

        async def ready() -> bool:
            return pulse.readiness(open_tasks()).ok

        await eventually(ready, "the arbiter to own and restore its tasks")
        verdict = pulse.readiness(open_tasks())
        assert verdict.details["tasks_assigned"] == list(range(settings.partitions))
        assert pulse.liveness().ok
        assert gauge(metrics, "claimstream_worker_up") == 1
        assert gauge(metrics, "claimstream_worker_ready") == 1
        assert gauge(metrics, "claimstream_tasks_owned") == settings.partitions
        assert gauge(metrics, "claimstream_rebalances_total") == 1
        assert gauge(metrics, "claimstream_restore_seconds_count") == 1

        # Traffic flows: everything published gets committed, nothing waits.
        await probe.refresh()
        await publish(kafka.bootstrap, claims_topic, 20)

        async def drained() -> bool:
            await probe.refresh()
            return lag(metrics, claims_topic) == 0 and committed(metrics) >= 20

        await eventually(drained, "20 claims committed and no lag")

        # Block the loop (a batch needs this lock) and publish: the lag must keep counting.
        async with arbiter.turn:
            before = committed(metrics)
            await publish(kafka.bootstrap, claims_topic, 30)

            async def waiting() -> bool:
                await probe.refresh()
                return lag(metrics, claims_topic) == 30

            await eventually(waiting, "the lag gauge to show the 30 waiting claims")
            assert committed(metrics) == before
            assert pulse.liveness().ok, "a blocked loop within the timeout is still live"
            clock.now += LIVENESS_TIMEOUT_S + 1
            stuck = pulse.liveness()
            assert not stuck.ok
            assert "arbiter loop has not completed an iteration for 31s" in stuck.reasons[0]
            assert gauge(metrics, "claimstream_worker_up") == 0, "the metric falls with it"
            assert pulse.readiness(open_tasks()).ok, "its tasks are still open"

        # Released: the loop iterates again, the claims are committed, the lag drains.
        async def recovered() -> bool:
            await probe.refresh()
            return (
                pulse.liveness().ok
                and lag(metrics, claims_topic) == 0
                and committed(metrics) >= before + 30
            )

        await eventually(recovered, "the loop to recover and commit the 30 claims")
        assert gauge(metrics, "claimstream_worker_up") == 1
    finally:
        await probe.stop()
        await arbiter.stop()
