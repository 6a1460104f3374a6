"""The loop's ticks: sent without waiting for their acknowledgement, one send in flight.

Driven on a stand-in for the loop's parts (settings, schedule, collector): the batches around
the ticks run against real brokers in tests/stream."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from streams.arbiter.collector import Unawaited
from streams.arbiter.loop import Arbiter

DUE = datetime(2026, 1, 1, tzinfo=UTC)


class Collector:
    """Hands out an acknowledgement per send that the test settles."""

    def __init__(self) -> None:
        self.sent: list[list[Any]] = []
        self.acks: list[asyncio.Future[Any]] = []

    async def enqueue(self, records: list[Any], via: Any = None) -> list[Any]:
        ack = asyncio.get_running_loop().create_future()
        self.sent.append(records)
        self.acks.append(ack)
        return [("rekeyed", len(records), ack)]

    async def acknowledged(self, pending: list[Any]) -> dict[int, int]:
        await asyncio.gather(*(ack for _, _, ack in pending))
        return {}


def loop_parts(collector: Collector) -> Any:
    keys = iter(range(1000))
    return SimpleNamespace(
        settings=SimpleNamespace(expiry_ticks_per_batch=2, batch_size=500, batch_within_s=0.01),
        schedule=SimpleNamespace(take_due=lambda now, budget: [(b"k%d" % next(keys), DUE)]),
        metrics=SimpleNamespace(expiry_ticks=SimpleNamespace(inc=lambda n: None)),
        processor=SimpleNamespace(tick=lambda key, at: key),
        ticks_out=Unawaited(collector),
        _record_cost=0.0,
        _ticked_at=0.0,
    )


async def settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


def test_ticks_go_out_without_waiting_and_wait_for_the_send_in_flight() -> None:
    async def scenario() -> None:
        collector = Collector()
        parts = loop_parts(collector)
        await asyncio.wait_for(Arbiter._tick(parts, 0), 1)  # not held by the unacked send
        assert collector.sent == [[b"k0"]]
        await Arbiter._tick(parts, 0)
        assert collector.sent == [[b"k0"]], "a second send started while one is in flight"
        collector.acks[0].set_result(None)
        await settle()
        await Arbiter._tick(parts, 0)
        assert collector.sent == [[b"k0"], [b"k1"]]

    asyncio.run(scenario())


def test_a_failed_send_of_ticks_fails_the_next_turn() -> None:
    async def scenario() -> None:
        collector = Collector()
        parts = loop_parts(collector)
        await Arbiter._tick(parts, 0)
        collector.acks[0].set_exception(ConnectionError("broker gone"))
        await settle()
        with pytest.raises(ConnectionError):
            await Arbiter._tick(parts, 0)
        assert collector.sent == [[b"k0"]]

    asyncio.run(scenario())


def test_ticks_take_a_share_of_the_time_since_the_last_at_the_cost_of_a_record() -> None:
    budgets: list[int] = []

    def take_due(now: datetime, budget: int) -> list[tuple[bytes, datetime]]:
        budgets.append(budget)
        return []

    async def scenario() -> None:
        parts = loop_parts(Collector())
        parts.settings.expiry_ticks_per_batch = 64
        parts.schedule = SimpleNamespace(take_due=take_due)
        parts._record_cost = 0.0004  # a fetch wait (10 ms) affords 25 records
        await Arbiter._tick(parts, 10)  # input arrived: a quarter of it
        parts._ticked_at -= 1.0  # long ago: counted as one fetch wait
        await Arbiter._tick(parts, 0)  # none came: half of it
        await Arbiter._tick(parts, 500)  # a full batch: input is waiting
        await Arbiter._tick(parts, 10)  # right after the last: the one a batch always gets

    asyncio.run(scenario())
    assert budgets == [6, 12, 1, 1]
