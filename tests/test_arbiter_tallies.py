"""The loop's outcome counts: summed over batches, sent once a second without waiting for the
acknowledgement, one send in flight, and all of them at stop.

Driven on a stand-in for the collector: the counts' agent runs against real brokers in
tests/stream/test_lifecycle.py."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from streams.arbiter.tallies import Tallies
from streams.pipeline import Outgoing


class Collector:
    """Hands out an acknowledgement per send that the test settles."""

    def __init__(self) -> None:
        self.sent: list[list[Outgoing]] = []
        self.acks: list[asyncio.Future[Any]] = []

    async def enqueue(self, records: list[Outgoing], via: Any = None) -> list[Any]:
        ack = asyncio.get_running_loop().create_future()
        self.sent.append(records)
        self.acks.append(ack)
        return [("outcomes", 0, ack)]

    async def acknowledged(self, pending: list[Any]) -> dict[int, int]:
        await asyncio.gather(*(ack for _, _, ack in pending))
        return {}

    def counts(self, n: int) -> dict[bytes | None, bytes]:
        assert all(record.topic == "outcomes" for record in self.sent[n])
        return {record.key: record.value for record in self.sent[n]}


async def settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


def test_counts_go_out_summed_over_batches_once_a_second_and_all_at_stop() -> None:
    async def scenario() -> None:
        collector = Collector()
        tallies = Tallies(collector, "outcomes")  # type: ignore[arg-type]
        tallies.add(Counter({b"f|resolved|none": 2}))
        await tallies.send()
        assert collector.counts(0) == {b"f|resolved|none": b"2"}
        collector.acks[0].set_result(None)
        await settle()
        tallies.add(Counter({b"f|resolved|none": 1}))
        await tallies.send()
        tallies.add(Counter({b"f|resolved|none": 3, b"f|conflict|value": 1}))
        await tallies.send()
        assert len(collector.sent) == 1, "counts went out before the interval was over"
        tallies._sent_at -= 1.0
        await tallies.send()
        assert collector.counts(1) == {b"f|resolved|none": b"4", b"f|conflict|value": b"1"}
        tallies.add(Counter({b"f|insufficient|none": 1}))
        stopping = asyncio.ensure_future(tallies.send(now=True))
        await settle()
        assert not stopping.done(), "sent beside an unacknowledged send"
        collector.acks[1].set_result(None)
        await asyncio.wait_for(stopping, 1)
        assert collector.counts(2) == {b"f|insufficient|none": b"1"}
        await tallies.send(now=True)
        assert len(collector.sent) == 3, "nothing gathered, nothing sent"

    asyncio.run(scenario())


def test_the_counts_of_a_failed_send_go_out_again_with_the_next() -> None:
    async def scenario() -> None:
        collector = Collector()
        tallies = Tallies(collector, "outcomes")  # type: ignore[arg-type]
        tallies.add(Counter({b"f|resolved|none": 2}))
        await tallies.send()
        collector.acks[0].set_exception(ConnectionError("broker gone"))
        await settle()
        tallies.add(Counter({b"f|resolved|none": 1, b"f|conflict|value": 1}))
        tallies._sent_at -= 1.0
        await tallies.send()
        assert collector.counts(1) == {b"f|resolved|none": b"3", b"f|conflict|value": b"1"}

    asyncio.run(scenario())
