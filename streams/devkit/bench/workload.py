"""The bench's input: the generated claims as Avro records, the topics they fill, how a phase
offers claims at a pace, and `Throughput`, what the throughput phases report.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from streams.core.admission.intake import parse_claim
from streams.core.keys.state import state_key
from streams.core.records.contracts import Claim
from streams.core.records.errors import ContractError
from streams.devkit.synthetic import generate_claims
from streams.wire.registry import FolderRegistry, WireCodec

CODEC = WireCodec(FolderRegistry())
PAID = "order.payment_status"  # the field the latency, soak and engine phases use
SEATS = "contract.seats"  # no freshness: a key of it never re-decides by time alone
SOURCES = ["billing-api", "crm", "reporting-replica", "billing-cache"]


def payment(
    claim_id: str,
    subject: str,
    observed_at: datetime,
    value: str = "paid",
    source: str = "billing-api",
) -> Claim:
    return Claim(
        claim_id=claim_id,
        subject=subject,
        field=PAID,
        status="present",
        value=value,
        source=source,
        observed_at=observed_at,
    )


def seats(claim_id: str, subject: str, observed_at: datetime, value: int = 12) -> Claim:
    """A seat count from crm: a claim whose key sets no timer (its field never goes stale)."""
    return Claim(
        claim_id=claim_id,
        subject=subject,
        field=SEATS,
        status="present",
        value=value,
        source="crm",
        observed_at=observed_at,
    )


async def offer(producer: AIOKafkaProducer, topic: str, claim: Claim) -> None:
    key = state_key(claim.subject, claim.field).encode()
    await producer.send(topic, CODEC.encode(topic, claim), key=key)


async def keep_pace(started: float, sent: int, rate: float) -> None:
    """Sleep until the `sent`-th record is due at `rate` per second from `started`."""
    ahead = started + sent / rate - time.perf_counter()
    if ahead > 0:
        await asyncio.sleep(ahead)


@dataclass(frozen=True)
class Workload:
    records: list[tuple[bytes, bytes]]
    claims: list[Claim]


def workload(count: int, subjects: int, seed: int, topic: str) -> Workload:
    """Generated claims as (key, Avro value); claims the contract refuses become garbage bytes."""
    now = datetime.now(UTC)
    rng = random.Random(seed)
    records, claims = [], []
    for data in generate_claims(count, now, seed=seed, subjects=subjects, bad_share=0.02):
        try:
            claim = parse_claim(data)
        except ContractError:
            records.append((b"bad", rng.randbytes(40)))
            continue
        claims.append(claim)
        records.append((state_key(claim.subject, claim.field).encode(), CODEC.encode(topic, claim)))
    return Workload(records, claims)


async def create_topics(bootstrap: str, names: list[str], partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1) for name in names])
    finally:
        await admin.close()


async def fill(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, linger_ms=10, max_batch_size=512 * 1024, acks=1
    )
    await producer.start()
    try:
        futures = [await producer.send(topic, value, key=key) for key, value in records]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


@dataclass(frozen=True)
class Throughput:
    """Claims per second, and the CPU time the consuming process spent per claim: on a machine
    shared with other work the rates swing with the load, the CPU cost per claim much less."""

    per_s: float
    cpu_us: float
