"""The limit claimstream is compared with: plain aiokafka loops over the same records (decode,
one record out per claim), a model-validating one and the leanest one a person could write.
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


async def raw_limit(bootstrap: str, source: str, sink: str, expected: int) -> Throughput:
    """Batched consume + Avro decode + one produced record per claim: claims per second."""
    consumer, producer = await _raw_clients(bootstrap, source, "raw")
    seen, started, cpu_started = 0, None, 0.0
    try:
        while seen < expected:
            batch = await consumer.getmany(timeout_ms=1000, max_records=5000)
            if started is None and batch:
                started, cpu_started = time.perf_counter(), time.process_time()
            futures = []
            for messages in batch.values():
                for message in messages:
                    try:
                        claim = CODEC.decode(Claim, message.value)
                        out = claim.claim_id.encode()
                    except RejectedInput:
                        out = b"dead"
                    futures.append(await producer.send(sink, out, key=message.key))
                    seen += 1
            if futures:
                await asyncio.gather(*futures)
                await consumer.commit()
        assert started is not None
        cpu_us = (time.process_time() - cpu_started) / seen * 1e6
        return Throughput(seen / (time.perf_counter() - started), cpu_us)
    finally:
        await consumer.stop()
        await producer.stop()


async def raw_lean_limit(bootstrap: str, source: str, sink: str, expected: int) -> Throughput:
    """The fastest loop a person could write: batched consume, fastavro to a dict (no model),
    one record out per claim produced per partition with `send_batch`: claims per second."""
    consumer, producer = await _raw_clients(bootstrap, source, "raw-lean")
    schema = parsed_schema("Claim")
    partitions = len(await producer.partitions_for(sink))
    seen, started, cpu_started = 0, None, 0.0
    try:
        while seen < expected:
            batch = await consumer.getmany(timeout_ms=1000, max_records=5000)
            if started is None and batch:
                started, cpu_started = time.perf_counter(), time.process_time()
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
                    partition = partition_of(message.key, partitions)
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
                    seen += 1
            for partition, builder in outgoing.items():
                futures.append(await producer.send_batch(builder, sink, partition=partition))
            if futures:
                await asyncio.gather(*futures)
                await consumer.commit()
        assert started is not None
        cpu_us = (time.process_time() - cpu_started) / seen * 1e6
        return Throughput(seen / (time.perf_counter() - started), cpu_us)
    finally:
        await consumer.stop()
        await producer.stop()
