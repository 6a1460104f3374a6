"""The record collector: hands a batch's output records to a producer and notes their acks.

The loop's ticks and the commit strategies send through it: records are grouped into one
producer batch per topic partition (partitioned as aiokafka's default partitioner would), and
each acknowledged run of changelog records tells its task how far its changelog reached. The
shared producer is the collector's; exactly once sends a task's records through the task's own
transactional producer instead. Modelled on Kafka Streams' `RecordCollector`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from aiokafka import AIOKafkaProducer

from streams.pipeline import Outgoing
from streams.pipeline.rekey import partition_of

log = logging.getLogger(__name__)

Pending = list[tuple[str, int, "asyncio.Future[Any]"]]  # topic, records, the batch's ack


def producer_options(idempotent: bool) -> dict[str, Any]:
    options: dict[str, Any] = {
        # A batch's records are all enqueued before the loop waits for them: nothing to linger for.
        "linger_ms": 0,
        "max_batch_size": 256 * 1024,
        "acks": "all",
    }
    if idempotent:
        options["enable_idempotence"] = True
    return options


class RecordCollector:
    """Sends records in batches per topic partition; `journaled_to(partition, end)` hears how far
    each changelog partition is acknowledged."""

    def __init__(self, changelog: str, journaled_to: Callable[[int, int], None]) -> None:
        self.changelog = changelog
        self.journaled_to = journaled_to
        self._producer: AIOKafkaProducer | None = None
        self._partitions: dict[str, list[int]] = {}  # each output topic's partitions
        self._unkeyed = 0  # spreads records without a key over partitions

    def attach(self, producer: AIOKafkaProducer) -> None:
        self._producer = producer

    async def send_all(
        self, records: list[Outgoing], via: AIOKafkaProducer | None = None
    ) -> dict[int, int]:
        """Send `records` and wait until all are acknowledged: how far each changelog
        partition they wrote to reaches."""
        return await self.acknowledged(await self.enqueue(records, via))

    async def enqueue(
        self, records: list[Outgoing], via: AIOKafkaProducer | None = None
    ) -> Pending:
        """Hand `records` to the producer (`via`, else the shared one) as one batch per topic
        partition.

        Measured against one `send` per record (aiokafka appends each to its own accumulator
        batch, with a future and a coroutine per record): see `claimstream bench` stage_us."""
        producer = via or self._producer
        assert producer is not None
        by_partition: dict[tuple[str, int], list[Outgoing]] = {}
        known = self._partitions
        for record in records:
            partition = record.partition
            if partition is None:
                # Looked up without awaiting once the topic's partitions are known.
                partitions = known.get(record.topic) or await self._partitions_of(
                    producer, record.topic
                )
                partition = self._partition_in(partitions, record.key)
            by_partition.setdefault((record.topic, partition), []).append(record)
        pending: Pending = []
        for (topic, partition), group in by_partition.items():
            batch, count = producer.create_batch(), 0
            for record in group:
                if _appended(batch, record):
                    count += 1
                    continue
                pending.append(
                    (topic, count, await producer.send_batch(batch, topic, partition=partition))
                )
                batch, count = producer.create_batch(), 1
                if not _appended(batch, record):
                    raise ValueError(f"a record for {topic} is larger than a whole batch")
            pending.append(
                (topic, count, await producer.send_batch(batch, topic, partition=partition))
            )
        return pending

    async def acknowledged(self, pending: Pending) -> dict[int, int]:
        """Wait for the batches' acknowledgements; note how far each task's changelog reached,
        and return it: changelog partition -> the offset after its last record here."""
        acknowledged = await asyncio.gather(*(future for _, _, future in pending))
        ends: dict[int, int] = {}
        for (topic, count, _), metadata in zip(pending, acknowledged, strict=True):
            if topic == self.changelog:
                end = metadata.offset + count
                ends[metadata.partition] = max(ends.get(metadata.partition, 0), end)
                self.journaled_to(metadata.partition, end)
        return ends

    async def _partitions_of(self, producer: AIOKafkaProducer, topic: str) -> list[int]:
        partitions = self._partitions[topic] = sorted(await producer.partitions_for(topic))
        return partitions

    def _partition_in(self, partitions: list[int], key: bytes | None) -> int:
        """The partition aiokafka's default partitioner would pick (murmur2 of the key)."""
        if key is None:
            self._unkeyed += 1
            return partitions[self._unkeyed % len(partitions)]
        return partitions[partition_of(key, len(partitions))]


class Unawaited:
    """Sends through a collector without waiting for the acknowledgement, one send at a time:
    `in_flight` says whether the last is still unacknowledged (and raises what failed it)."""

    def __init__(self, collector: RecordCollector) -> None:
        self.collector = collector
        self._sent: asyncio.Future[dict[int, int]] | None = None

    def in_flight(self) -> bool:
        sent = self._sent
        if sent is None:
            return False
        if not sent.done():
            return True
        self._sent = None
        sent.result()
        return False

    async def send(self, records: list[Outgoing]) -> None:
        pending = await self.collector.enqueue(records)
        self._sent = asyncio.ensure_future(self.collector.acknowledged(pending))

    async def settled(self) -> None:
        """Wait for the send in flight; a failure is logged (stopping: nothing is retried)."""
        sent, self._sent = self._sent, None
        if sent is None:
            return
        try:
            await sent
        except Exception as exc:
            log.warning("collector: records not sent (%s: %s)", type(exc).__name__, exc)


def _appended(batch: Any, record: Outgoing) -> bool:
    """Whether the record fit in the producer batch (aiokafka returns None when it is full)."""
    # aiokafka's batch builder takes a list only.
    headers = list(record.headers) if record.headers else []
    appended = batch.append(
        key=record.key, value=record.value, timestamp=record.timestamp_ms, headers=headers
    )
    return appended is not None
