"""Offered load on a running worker: claim-to-decision latency at a fixed rate on fresh keys,
and a steady soak that samples the worker's memory.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from streams.core.contracts import Decision
from streams.devkit.bench.worker import BenchWorker
from streams.devkit.bench.workload import CODEC, SOURCES, keep_pace, offer, payment
from streams.settings import Topics


@dataclass
class Offered:
    """What an offered load measured: each decision's claim-to-decision latency (from the
    claim's timestamp, which it is decided as of, to this process reading the decision), split
    at the decision record's own timestamp (when the worker appended it to a producer batch,
    in ms): in the worker (fetch, decide, until sent) and delivery (broker, this consumer); and
    the decisions per second the worker kept up with."""

    latencies: list[float] = field(default_factory=list)
    in_worker: list[float] = field(default_factory=list)
    delivery: list[float] = field(default_factory=list)
    rate: float = 0.0


async def latency(bootstrap: str, topics: Topics, rate: float, total: int) -> Offered:
    """Offer `total` claims at `rate`/s on fresh keys (each one yields a decision)."""
    consumer = AIOKafkaConsumer(
        topics.decisions, bootstrap_servers=bootstrap, auto_offset_reset="latest"
    )
    await consumer.start()
    await asyncio.sleep(1.0)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0, acks=1)
    await producer.start()
    tag = uuid.uuid4().hex[:6]
    offered = Offered()
    latencies = offered.latencies
    started = time.perf_counter()
    finished = started

    async def send_all() -> None:
        for n in range(total):
            fresh = payment(f"lat-{tag}-{n}", f"lat-{tag}-{n}", datetime.now(UTC))
            await offer(producer, topics.claims, fresh)
            await keep_pace(started, n + 1, rate)

    async def collect() -> None:
        nonlocal finished
        deadline = time.monotonic() + total / rate + 60
        while len(latencies) < total and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=200)
            received = time.time()
            for messages in batch.values():
                for message in messages:
                    # Two fields, not a validated Decision: this process shares the machine
                    # with the worker it measures.
                    decision = CODEC.decode_record(Decision, message.value)
                    if decision["subject"].startswith(f"lat-{tag}-"):
                        claimed, appended = decision["decided_at"].timestamp(), message.timestamp
                        latencies.append(received - claimed)
                        offered.in_worker.append(appended / 1000 - claimed)
                        offered.delivery.append(received - appended / 1000)
                        finished = time.perf_counter()

    try:
        await asyncio.gather(send_all(), collect())
    finally:
        await producer.stop()
        await consumer.stop()
    offered.rate = len(latencies) / max(finished - started, 1e-6)
    return offered


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
