"""Offered load on a running worker: claim-to-decision latency at a fixed rate on fresh keys,
and a steady soak that samples the worker's memory.
"""

from __future__ import annotations

import asyncio
import gc
import random
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from streams.core.keystate import state_key
from streams.devkit.bench.worker import BenchWorker
from streams.devkit.bench.workload import CODEC, PAID, SOURCES, keep_pace, offer, payment
from streams.pipeline.rekey import partition_of
from streams.settings import Topics


@dataclass
class Offered:
    """What an offered load measured: each decision's claim-to-decision latency (from the
    claim's timestamp, which it is decided as of, to this process reading the decision), split
    at the decision record's own timestamp (when the worker appended it to a producer batch,
    in ms): in the worker (fetch, decide, until sent) and delivery (broker, this consumer); the
    part of the first before the claim was acknowledged to this process; and the decisions per
    second the worker kept up with."""

    latencies: list[float] = field(default_factory=list)
    in_worker: list[float] = field(default_factory=list)
    delivery: list[float] = field(default_factory=list)
    # From the claim's timestamp to its producer batch's acknowledgement (seen by this process):
    # of the time in the worker, how much the claim took to be on the broker at all.
    to_broker: list[float] = field(default_factory=list)
    rate: float = 0.0


FRESH_PREFIX = "lat-{tag}-"
DIGITS = 9
FRESH = FRESH_PREFIX + f"{{number:0{DIGITS}d}}"  # fixed width: rewritten in place
PACE_S = 0.005  # how often the offered load appends the claims due: a few per partition
_TEMPLATE_NUMBER = 0


def fresh_claims(
    topic: str, tag: str, numbers: Iterable[int], observed_at: datetime
) -> Iterator[tuple[bytes, bytes]]:
    """(key, Avro value) of `payment` for each fresh key's number, its claim id its subject:
    the bytes `CODEC.encode` gives, made by rewriting one claim encoded for all of them, so
    that offering a claim costs the load next to nothing beside the worker it measures."""
    placeholder = FRESH.format(tag=tag, number=_TEMPLATE_NUMBER)
    value = CODEC.encode(topic, payment(placeholder, placeholder, observed_at))
    key = state_key(placeholder, PAID).encode()
    marker = placeholder.encode()
    for number in numbers:
        subject = FRESH.format(tag=tag, number=number).encode()
        yield key.replace(marker, subject), value.replace(marker, subject)


def _stamp_acked(acked: list[float], first: int, end: int, _: object) -> None:
    """When the producer batches of claims `first` to `end` were all acknowledged."""
    acked[first:end] = [time.time()] * (end - first)


async def latency(bootstrap: str, topics: Topics, rate: float, total: int) -> Offered:
    """Offer `total` claims at `rate`/s on fresh keys (each one yields a decision).

    Every `PACE_S` the claims due are appended to one producer batch per partition, each
    stamped with the time it is appended: what its latency is measured from, as the worker
    decides it as of that timestamp. A decision is matched to its claim by its key, not
    decoded: this process shares the machine with the worker it measures.

    This process's heap (the generated workload, the throughput phase's claims) is frozen
    first: left to the collector, a full collection walked it for 467-581 ms in the middle of
    the phase, and the claims that fell due meanwhile went out as one burst of 1.6-3.2k, which
    the worker's p99 then counted as its own."""
    gc.collect()
    gc.freeze()
    consumer = AIOKafkaConsumer(
        topics.decisions, bootstrap_servers=bootstrap, auto_offset_reset="latest"
    )
    await consumer.start()
    await asyncio.sleep(1.0)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0, acks=1)
    await producer.start()
    tag = uuid.uuid4().hex[:6]
    prefix = FRESH_PREFIX.format(tag=tag).encode()
    stamped_ms = [0] * total  # each claim's record timestamp, 0 until sent
    acked = [0.0] * total  # when each claim's producer batch was acknowledged here
    decided_at = [0.0] * total  # when each claim's decision was read here, 0 until then
    offered = Offered()
    latencies = offered.latencies
    started = time.perf_counter()
    finished = started

    async def send_all() -> None:
        partitions = len(await producer.partitions_for(topics.claims))
        acks: list[asyncio.Future[Any]] = []
        sent = 0
        while sent < total:
            due = min(total, int((time.perf_counter() - started) * rate) + 1)
            wall = time.time()
            stamp = int(wall * 1000)
            observed_at = datetime.fromtimestamp(wall, UTC)
            stamped_ms[sent:due] = [stamp] * (due - sent)
            claims = fresh_claims(topics.claims, tag, range(sent, due), observed_at)
            batches = await send_batched(producer, topics.claims, partitions, claims, stamp)
            asyncio.gather(*batches).add_done_callback(partial(_stamp_acked, acked, sent, due))
            acks += batches
            sent = due
            await asyncio.sleep(PACE_S)
        await asyncio.gather(*acks)

    async def collect() -> None:
        nonlocal finished
        deadline = time.monotonic() + total / rate + 60
        decided = bytearray(total)  # a key re-decided later (by time) counts once
        width = len(prefix)
        while len(latencies) < total and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=200)
            received = time.time()
            for messages in batch.values():
                for message in messages:
                    key = message.key
                    if not key or not key.startswith(prefix):
                        continue
                    number = int(key[width : width + DIGITS])
                    if decided[number] or not stamped_ms[number]:
                        continue
                    decided[number] = 1
                    claimed, appended = stamped_ms[number] / 1000, message.timestamp / 1000
                    latencies.append(received - claimed)
                    offered.in_worker.append(appended - claimed)
                    offered.delivery.append(received - appended)
                    decided_at[number] = received
                    finished = time.perf_counter()

    try:
        await asyncio.gather(send_all(), collect())
    finally:
        await producer.stop()
        await consumer.stop()
        gc.unfreeze()
    offered.to_broker = [
        acked[n] - stamped_ms[n] / 1000 for n in range(total) if decided_at[n] and acked[n]
    ]
    offered.rate = len(latencies) / max(finished - started, 1e-6)
    return offered


async def send_batched(
    producer: AIOKafkaProducer,
    topic: str,
    partitions: int,
    records: Iterable[tuple[bytes, bytes]],
    stamp_ms: int | None,
) -> list[asyncio.Future[Any]]:
    """Send `records` stamped `stamp_ms` (None: the producer's clock) in one producer batch per
    partition (more when one fills up), each on its key's default partition: the batches'
    acknowledgements."""
    builders: dict[int, Any] = {}
    acks = []
    for key, value in records:
        partition = partition_of(key, partitions)
        builder = builders.get(partition)
        if builder is None or builder.append(key=key, value=value, timestamp=stamp_ms) is None:
            if builder is not None:  # full: send it, start the next
                acks.append(await producer.send_batch(builder, topic, partition=partition))
            builder = builders[partition] = producer.create_batch()
            builder.append(key=key, value=value, timestamp=stamp_ms)
    for partition, builder in builders.items():
        acks.append(await producer.send_batch(builder, topic, partition=partition))
    return acks


async def soak(
    bootstrap: str, topics: Topics, worker: BenchWorker, rate: float, seconds: float, keys: int
) -> list[tuple[float, int, int]]:
    """Offer claims at a steady `rate`/s for `seconds` on `keys` keys, each claim newer than
    the last for its key: with bounded history, memory must level off. Samples (elapsed s,
    worker RSS, tracked keys) every 30 s."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks=1)
    await producer.start()
    rng = random.Random(5)
    samples: list[tuple[float, int, int]] = []
    started = time.perf_counter()
    next_sample, sent = started, 0
    try:
        while (elapsed := time.perf_counter() - started) < seconds:
            claim = payment(
                f"soak-{sent}",
                f"soak-{sent % keys}",
                datetime.now(UTC),
                value=rng.choice(["paid", "paid", "unpaid"]),
                source=rng.choice(SOURCES),
            )
            await offer(producer, topics.claims, claim)
            sent += 1
            if time.perf_counter() >= next_sample:
                samples.append((round(elapsed), worker.rss(), worker.state_keys()))
                print(f"bench: soak t={elapsed:.0f}s rss={samples[-1][1]} keys={samples[-1][2]}")
                next_sample += 30
            await keep_pace(started, sent, rate)
        await producer.flush()
        await asyncio.sleep(2)
        samples.append((round(time.perf_counter() - started), worker.rss(), worker.state_keys()))
    finally:
        await producer.stop()
    return samples
