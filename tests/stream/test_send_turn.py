"""The loop's send turn after a batch, against a real broker: aiokafka's sender has written the
batch's records by the end of it (with no request in flight), so they are not held back behind
the next batch's decisions."""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaProducer

from streams.arbiter.collector import RecordCollector, producer_options
from streams.arbiter.loop import send_turn
from streams.devkit.brokers import KafkaBroker
from streams.pipeline import Outgoing


def _unwritten(producer: AIOKafkaProducer) -> int:
    """Batches the producer holds that its sender has not taken into a request (aiokafka's
    accumulator: what this turn exists for)."""
    return sum(len(batches) for batches in producer._message_accumulator._batches.values())


def test_a_batch_is_on_the_wire_after_the_send_turn_and_not_after_one_iteration(
    kafka: KafkaBroker,
) -> None:
    async def scenario() -> list[int]:
        producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, **producer_options(False))
        await producer.start()
        collector = RecordCollector("changelog-unused", lambda partition, end: None)
        collector.attach(producer)
        unwritten = []
        try:
            for turn in (False, True):
                records = [
                    Outgoing("send-turn", f"k{n}".encode(), b"v", partition=0) for n in range(50)
                ]
                pending = await collector.enqueue(records)
                if turn:
                    # Not a race with the clock: the sender's wake-ups were queued before the
                    # turn's timer, so they run first even if 1 ms passes in one iteration.
                    await send_turn()
                else:
                    await asyncio.sleep(0)  # one iteration: the sender has not written yet
                unwritten.append(_unwritten(producer))
                await collector.acknowledged(pending)  # no request in flight for the next one
        finally:
            await producer.stop()
        return unwritten

    too_short, turn = asyncio.run(scenario())
    assert too_short == 1, "one iteration wrote the batch too: the check proves nothing"
    assert turn == 0, "the batch was still in the producer after the send turn"
