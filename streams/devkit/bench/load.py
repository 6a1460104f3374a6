"""Offered load on a running worker: claim-to-decision latency at a fixed rate on fresh keys,
and a steady soak that samples the worker's memory.
"""

from __future__ import annotations

import asyncio
import gc
import math
import random
import statistics
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from streams.core.keys.state import state_key
from streams.core.records.contracts import Claim
from streams.devkit.bench.worker import BenchWorker
from streams.devkit.bench.workload import CODEC, SOURCES, keep_pace, offer, payment
from streams.pipeline.rekey import partition_of
from streams.topic_names import Topics


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
    offered_s: float = 0.0  # from the first claim sent to the last


FRESH_PREFIX = "lat-{tag}-"
DIGITS = 9
FRESH = FRESH_PREFIX + f"{{number:0{DIGITS}d}}"  # fixed width: rewritten in place
PACE_S = 0.005  # how often the offered load appends the claims due: a few per partition
_TEMPLATE_NUMBER = 0


def fresh_claims(
    topic: str,
    tag: str,
    numbers: Iterable[int],
    observed_at: datetime,
    make: Callable[[str, str, datetime], Claim] = payment,
) -> Iterator[tuple[bytes, bytes]]:
    """(key, Avro value) of `make`'s claim (`payment`) for each fresh key's number, its claim id
    its subject: the bytes `CODEC.encode` gives, made by rewriting one claim encoded for all of
    them, so that offering a claim costs the load next to nothing beside the worker it
    measures."""
    placeholder = FRESH.format(tag=tag, number=_TEMPLATE_NUMBER)
    template = make(placeholder, placeholder, observed_at)
    value = CODEC.encode(topic, template)
    key = state_key(placeholder, template.field).encode()
    marker = placeholder.encode()
    for number in numbers:
        subject = FRESH.format(tag=tag, number=number).encode()
        yield key.replace(marker, subject), value.replace(marker, subject)


def _stamp_acked(acked: list[float], first: int, end: int, _: object) -> None:
    """When the producer batches of claims `first` to `end` were all acknowledged."""
    acked[first:end] = [time.time()] * (end - first)


@dataclass
class _Sent:
    """The offered claims by number, grown as they are sent (with `until`, how many is not known
    before): when each was stamped, acknowledged and decided, and matching decisions to them."""

    prefix: bytes  # the run's fresh keys' prefix
    stamped_ms: list[int] = field(default_factory=list)  # each claim's record timestamp
    acked: list[float] = field(default_factory=list)  # its producer batch acknowledged here
    decided_at: list[float] = field(default_factory=list)  # its decision read here, 0 until
    decided: bytearray = field(default_factory=bytearray)  # a key re-decided later counts once

    def add(self, count: int, stamp_ms: int) -> None:
        self.stamped_ms.extend([stamp_ms] * count)
        self.acked.extend([0.0] * count)
        self.decided_at.extend([0.0] * count)
        self.decided.extend(bytes(count))

    def read(self, message: Any, received: float, offered: Offered) -> bool:
        """Whether `message` is the first decision of one of these claims (then measured)."""
        key, width = message.key, len(self.prefix)
        if not key or not key.startswith(self.prefix):
            return False
        number = int(key[width : width + DIGITS])
        if number >= len(self.decided) or self.decided[number]:
            return False
        self.decided[number] = 1
        claimed, appended = self.stamped_ms[number] / 1000, message.timestamp / 1000
        offered.latencies.append(received - claimed)
        offered.in_worker.append(appended - claimed)
        offered.delivery.append(received - appended)
        self.decided_at[number] = received
        return True

    def to_broker(self) -> list[float]:
        stamped, acked, decided_at = self.stamped_ms, self.acked, self.decided_at
        return [
            acked[n] - stamped[n] / 1000 for n in range(len(acked)) if decided_at[n] and acked[n]
        ]


async def latency(
    bootstrap: str,
    topics: Topics,
    rate: float,
    total: int,
    begin: asyncio.Event | None = None,
    until: asyncio.Event | None = None,
    min_s: float = 0.0,
    make: Callable[[str, str, datetime], Claim] = payment,
) -> Offered:
    """Offer `total` claims at `rate`/s on fresh keys (each one yields a decision), each
    `make`'s claim (a payment status); with `begin`, from when it is set (the clients are
    started before), and with `until`, only until it is set (after at least `min_s`): then
    `total` is only a bound.

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
    claims = _Sent(FRESH_PREFIX.format(tag=tag).encode())
    offered = Offered()
    if begin is not None:
        await begin.wait()
    started = time.perf_counter()
    finished = started
    sending: list[float] = []  # when the last claim was sent, once it was

    async def send_all() -> None:
        partitions = len(await producer.partitions_for(topics.claims))
        acks: list[asyncio.Future[Any]] = []
        sent = 0
        while sent < total:
            due = min(total, int((time.perf_counter() - started) * rate) + 1)
            wall = time.time()
            stamp = int(wall * 1000)
            claims.add(due - sent, stamp)
            records = fresh_claims(
                topics.claims, tag, range(sent, due), datetime.fromtimestamp(wall, UTC), make
            )
            batches = await send_batched(producer, topics.claims, partitions, records, stamp)
            ack = partial(_stamp_acked, claims.acked, sent, due)
            asyncio.gather(*batches).add_done_callback(ack)
            acks += batches
            sent = due
            if until is not None and until.is_set() and time.perf_counter() - started >= min_s:
                break
            await asyncio.sleep(PACE_S)
        sending.append(time.monotonic())
        offered.offered_s = time.perf_counter() - started
        await asyncio.gather(*acks)

    async def collect() -> None:
        nonlocal finished
        deadline = time.monotonic() + total / rate + 60
        while not sending or len(offered.latencies) < len(claims.stamped_ms):
            if time.monotonic() > (sending[0] + 60 if sending else deadline):
                break
            batch = await consumer.getmany(timeout_ms=200)
            received = time.time()
            for messages in batch.values():
                for message in messages:
                    if claims.read(message, received, offered):
                        finished = time.perf_counter()

    try:
        await asyncio.gather(send_all(), collect())
    finally:
        await producer.stop()
        await consumer.stop()
        gc.unfreeze()
    offered.to_broker = claims.to_broker()
    offered.rate = len(offered.latencies) / max(finished - started, 1e-6)
    return offered


def percentiles(prefix: str, seconds: list[float]) -> dict[str, float]:
    """p50 and p99 of `seconds` in ms, as `{prefix}p50_ms` and `{prefix}p99_ms`."""
    quantiles = statistics.quantiles(seconds, n=100) if len(seconds) >= 2 else [math.nan] * 99
    return {
        f"{prefix}p50_ms": round(quantiles[49] * 1000, 1),
        f"{prefix}p99_ms": round(quantiles[98] * 1000, 1),
    }


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
