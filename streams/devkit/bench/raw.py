"""The limit claimstream is compared with: plain aiokafka loops over the same records (decode,
one record out per claim), a model-validating one and the leanest one a person could write,
each read in rounds interleaved with the worker's (`RawLoop`).
"""

from __future__ import annotations

import asyncio
import io
import time
import uuid
from typing import Any

import fastavro
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from streams.core.records.contracts import Claim
from streams.core.records.errors import RejectedInput
from streams.devkit.bench.workload import CODEC, Throughput
from streams.pipeline.rekey import partition_of
from streams.wire.codec import parsed_schema


async def _raw_clients(
    bootstrap: str, source: str, group_prefix: str
) -> tuple[AIOKafkaConsumer, AIOKafkaProducer]:
    """The started consumer (a fresh group reading `source` from the start) and producer the
    raw loops share."""
    consumer = AIOKafkaConsumer(
        source,
        bootstrap_servers=bootstrap,
        group_id=f"{group_prefix}-{uuid.uuid4().hex[:6]}",
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=4 * 1024 * 1024,
    )
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, linger_ms=5, max_batch_size=256 * 1024, acks=1
    )
    await consumer.start()
    await producer.start()
    return consumer, producer


class RawLoop:
    """A plain aiokafka loop over the records filled in `source`, one record out per claim to
    `sink`, read a round at a time so its rounds interleave with the worker's (both then see the
    machine alike). `lean`: the leanest loop a person could write (fastavro to a dict, no model;
    per-partition batches sent with `send_batch`); otherwise it decodes each claim into the
    pydantic contract and sends it alone. The clients live on `runner`'s event loop."""

    def __init__(
        self, runner: asyncio.Runner, bootstrap: str, source: str, sink: str, lean: bool
    ) -> None:
        self.runner, self.source, self.sink, self.lean = runner, source, sink, lean
        self.consumer, self.producer = runner.run(
            _raw_clients(bootstrap, source, "raw-lean" if lean else "raw")
        )
        self.partitions = len(runner.run(self.producer.partitions_for(sink)))
        self.schema = parsed_schema("Claim")
        self.seen = 0
        self.seconds = self.cpu_seconds = 0.0

    def round(self, until: int) -> None:
        """Read on until `until` claims are read in all."""
        started, cpu_started = time.perf_counter(), time.process_time()
        self.runner.run(self._read(until))
        self.seconds += time.perf_counter() - started
        self.cpu_seconds += time.process_time() - cpu_started

    def throughput(self) -> Throughput:
        return Throughput(self.seen / self.seconds, self.cpu_seconds / self.seen * 1e6)

    def stop(self) -> None:
        self.runner.run(self.consumer.stop())
        self.runner.run(self.producer.stop())

    async def _read(self, until: int) -> None:
        while self.seen < until:
            wanted = min(5000, until - self.seen)  # a round ends where the worker's does
            batch = await self.consumer.getmany(timeout_ms=1000, max_records=wanted)
            futures = await (self._lean(batch) if self.lean else self._model(batch))
            if futures:
                await asyncio.gather(*futures)
                await self.consumer.commit()

    async def _model(self, batch: dict[Any, list[Any]]) -> list[Any]:
        """Batched consume + Avro decode into the contract + one produced record per claim."""
        futures = []
        for messages in batch.values():
            for message in messages:
                try:
                    claim = CODEC.decode(Claim, message.value)
                    out = claim.claim_id.encode()
                except RejectedInput:
                    out = b"dead"
                futures.append(await self.producer.send(self.sink, out, key=message.key))
                self.seen += 1
        return futures

    async def _lean(self, batch: dict[Any, list[Any]]) -> list[Any]:
        """fastavro to a dict, one record out per claim in a batch per partition."""
        producer, sink, schema = self.producer, self.sink, self.schema
        outgoing: dict[int, Any] = {}
        futures = []
        for messages in batch.values():
            for message in messages:
                try:
                    body = io.BytesIO(message.value[5:])
                    record: Any = fastavro.schemaless_reader(body, schema, None)
                    out = record["claim_id"].encode()
                except Exception:
                    out = b"dead"
                partition = partition_of(message.key, self.partitions)
                builder = outgoing.get(partition)
                if (
                    builder is None
                    or builder.append(key=message.key, value=out, timestamp=None) is None
                ):
                    if builder is not None:  # full: send it, start the next
                        futures.append(
                            await producer.send_batch(builder, sink, partition=partition)
                        )
                    builder = outgoing[partition] = producer.create_batch()
                    builder.append(key=message.key, value=out, timestamp=None)
                self.seen += 1
        for partition, builder in outgoing.items():
            futures.append(await producer.send_batch(builder, sink, partition=partition))
        return futures
