"""The loop's outcome counts: summed over batches, sent at most once an interval without waiting
for the acknowledgement, one send in flight, and all of them at stop.

Driven on a stand-in for the collector (`tests.support.fakes.Collector`): the counts' agent
runs against real brokers in tests/stream/test_lifecycle.py."""

from __future__ import annotations

import asyncio
from collections import Counter

from streams.arbiter.tallies import Tallies
from tests.support.fakes import Collector, settle

HOUR = 3600.0  # an interval no test outlasts: a send is due only when the test says so


def counts(collector: Collector, n: int) -> dict[bytes | None, bytes | None]:
    assert all(record.topic == "outcomes" for record in collector.sends[n])
    return {record.key: record.value for record in collector.sends[n]}


def test_counts_go_out_summed_over_batches_once_an_interval_and_all_at_stop() -> None:
    async def scenario() -> None:
        collector = Collector()
        tallies = Tallies(collector, "outcomes", interval_s=HOUR)  # type: ignore[arg-type]
        tallies.add(Counter({b"f|resolved|none": 2}))
        await tallies.send()
        assert counts(collector, 0) == {b"f|resolved|none": b"2"}, "the first waits for none"
        collector.ack_send(0)
        await settle()
        tallies.add(Counter({b"f|resolved|none": 1}))
        await tallies.send()
        tallies.add(Counter({b"f|resolved|none": 3, b"f|conflict|value": 1}))
        await tallies.send()
        assert len(collector.sends) == 1, "counts went out before the interval was over"
        tallies._sent_at -= HOUR
        await tallies.send()
        assert counts(collector, 1) == {b"f|resolved|none": b"4", b"f|conflict|value": b"1"}
        tallies.add(Counter({b"f|insufficient|none": 1}))
        stopping = asyncio.ensure_future(tallies.send(now=True))
        await settle()
        assert not stopping.done(), "sent beside an unacknowledged send"
        collector.ack_send(1)
        await asyncio.wait_for(stopping, 1)
        assert counts(collector, 2) == {b"f|insufficient|none": b"1"}
        await tallies.send(now=True)
        assert len(collector.sends) == 3, "nothing gathered, nothing sent"

    asyncio.run(scenario())


def test_the_counts_of_a_failed_send_go_out_again_with_the_next() -> None:
    async def scenario() -> None:
        collector = Collector()
        tallies = Tallies(collector, "outcomes", interval_s=HOUR)  # type: ignore[arg-type]
        tallies.add(Counter({b"f|resolved|none": 2}))
        await tallies.send()
        collector.ack_send(0, error=ConnectionError("broker gone"))
        await settle()
        tallies.add(Counter({b"f|resolved|none": 1, b"f|conflict|value": 1}))
        tallies._sent_at -= HOUR
        await tallies.send()
        assert counts(collector, 1) == {b"f|resolved|none": b"3", b"f|conflict|value": b"1"}

    asyncio.run(scenario())
