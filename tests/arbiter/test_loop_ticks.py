"""The loop's ticks: sent without waiting for their acknowledgement, one send in flight.

Driven on a real arbiter, not started: its schedule holds due timers, its own collector sends
through a stand-in producer (attached as the loop attaches the real one) whose acknowledgements
the test settles. The batches around the ticks run against real brokers in tests/stream."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from streams.arbiter.loop import Arbiter
from streams.core.records.instants import micros
from streams.core.records.policy import load_policy
from streams.ops.health import Pulse
from streams.ops.metrics import Metrics
from streams.pipeline import Processor
from streams.settings import Settings
from streams.state.cache import StateCache
from streams.state.keystore import Changes, Timer
from streams.state.task import TaskStore
from tests.support.fakes import Producer, settle
from tests.support.pipeline import CODEC

DUE = datetime(2026, 1, 1, tzinfo=UTC)


def arbiter(data_dir: Path, producer: Producer, due_keys: int = 0, **settings: Any) -> Arbiter:
    """An arbiter on the default settings but `settings`, sending through `producer`, whose one
    task has `due_keys` keys (k0, k1...) due at DUE."""
    chosen = Settings(data_dir=data_dir, **settings)
    policy = load_policy(chosen.policy)
    metrics = Metrics(policy, CollectorRegistry())
    pulse = Pulse(metrics, chosen.liveness_timeout_s, chosen.restore_timeout_s)
    processor = Processor(chosen, policy, CODEC, metrics)
    loop = Arbiter(chosen, processor, metrics, chosen.topics.inputs(), pulse)
    loop.collector.attach(producer)  # type: ignore[arg-type]
    task = TaskStore(StateCache(10))
    task.store.write(Changes(timers={b"k%d" % n: Timer(micros(DUE)) for n in range(due_keys)}))
    loop.schedule.attach(0, task)
    return loop


def test_ticks_go_out_without_waiting_and_wait_for_the_send_in_flight(tmp_path: Path) -> None:
    async def scenario() -> None:
        producer = Producer()
        loop = arbiter(tmp_path, producer, due_keys=3, expiry_ticks_per_batch=1)
        await asyncio.wait_for(loop._tick(0), 1)  # not held by the unacked send
        assert producer.batches == [[b"k0"]]
        await loop._tick(0)
        assert producer.batches == [[b"k0"]], "a second send started while one is in flight"
        producer.acks[0].set_result(None)
        await settle()
        await loop._tick(0)
        assert producer.batches == [[b"k0"], [b"k1"]]

    asyncio.run(scenario())


def test_a_failed_send_of_ticks_fails_the_next_turn(tmp_path: Path) -> None:
    async def scenario() -> None:
        producer = Producer()
        loop = arbiter(tmp_path, producer, due_keys=3, expiry_ticks_per_batch=1)
        await loop._tick(0)
        producer.acks[0].set_exception(ConnectionError("broker gone"))
        await settle()
        with pytest.raises(ConnectionError):
            await loop._tick(0)
        assert producer.batches == [[b"k0"]]

    asyncio.run(scenario())


def test_ticks_take_a_share_of_the_time_since_the_last_at_the_cost_of_a_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    budgets: list[int] = []

    async def scenario() -> None:
        loop = arbiter(tmp_path, Producer(), expiry_ticks_per_batch=64)
        take_due = loop.schedule.take_due

        def taken(now: datetime, budget: int | None = None) -> list[tuple[bytes, datetime]]:
            assert budget is not None
            budgets.append(budget)
            return take_due(now, budget)

        monkeypatch.setattr(loop.schedule, "take_due", taken)
        loop.pacing.record_cost = 0.0004  # a fetch wait (10 ms) affords 25 records
        await loop._tick(10)  # input arrived: a quarter of it
        loop.pacing._last -= 1.0  # long ago: counted as one fetch wait
        await loop._tick(0)  # none came: half of it
        await loop._tick(500)  # a full batch: input is waiting
        await loop._tick(10)  # right after the last: the one a batch always gets

    asyncio.run(scenario())
    assert budgets == [6, 12, 1, 1]
