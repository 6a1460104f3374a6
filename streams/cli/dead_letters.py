"""Replaying dead letters: records the worker refused, sent back to the topics they came from.

Sits after the worker's dead-letter output (`streams.pipeline.outputs.Outputs.dead_letter`),
behind `claimstream replay-dead-letters`: once the cause is fixed (a policy behind its sources, a
bug), each chosen dead letter's original key, value and headers (without the
`claimstream.error.*` ones) go back to its original topic, and the worker decides it like any
claim. A signed claim whose signature is older than the policy's `signing.max_age` would only be
refused again as replayed: it is listed, not sent (its source must sign and publish it again).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator, Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TextIO

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import ConsumerRecord

from streams.core.admission.authenticity import SIGNED_AT_HEADER
from streams.core.records.errors import ClaimstreamError
from streams.pipeline.outputs import ERROR_HEADER_PREFIX
from streams.settings import Settings
from streams.wire.kafka import client_options

FETCH_MS = 500
ASSIGNMENT_S = 30.0  # how long the topic's metadata may take to arrive


@dataclass
class Replayed:
    """What a replay did: records sent per original topic, and those left where they are."""

    sent: Counter[str] = field(default_factory=Counter)
    expired: int = 0  # signed claims past max_age: listed, not sent
    unchosen: int = 0  # another reason, outside the time window, or a tombstone

    def summary(self, max_age: timedelta, dry_run: bool) -> str:
        verb = "would send" if dry_run else "sent"
        topics = ", ".join(f"{topic}: {n}" for topic, n in sorted(self.sent.items()))
        line = f"replay-dead-letters: {verb} {self.sent.total()}" + (
            f" ({topics})" if topics else ""
        )
        if self.expired:
            line += (
                f"; {self.expired} signed past max_age {max_age.total_seconds():g}s not sent "
                "(the worker would refuse them as replayed: their sources must sign and "
                "publish them again)"
            )
        return line + f"; {self.unchosen} not chosen"


@dataclass(frozen=True)
class Choice:
    """Which dead letters to replay: by reason (empty: any) and by when they were rejected."""

    reasons: Collection[str] = ()
    since: datetime | None = None
    until: datetime | None = None

    def takes(self, errors: dict[str, str]) -> bool:
        if self.reasons and errors.get("reason") not in self.reasons:
            return False
        if self.since is None and self.until is None:
            return True
        try:
            rejected_at = datetime.fromisoformat(errors.get("rejected_at", ""))
        except ValueError:
            return False
        return (self.since is None or rejected_at >= self.since) and (
            self.until is None or rejected_at < self.until
        )


async def replay_dead_letters(
    settings: Settings,
    choice: Choice,
    max_age: timedelta,
    now: datetime,
    report: TextIO,
    dry_run: bool = False,
) -> Replayed:
    """Send the chosen dead letters, as they are on the dead-letter topic now, back to their
    original topics; write one line to `report` for each signed claim too old to send."""
    replayed = Replayed()
    producer = None if dry_run else AIOKafkaProducer(**client_options(settings), acks="all")
    if producer is not None:
        await producer.start()
    try:
        async for message in _dead_letters(settings):
            headers: Sequence[tuple[str, bytes]] = message.headers or ()
            errors = {
                name.removeprefix(ERROR_HEADER_PREFIX): bytes(value or b"").decode(
                    "utf-8", "replace"
                )
                for name, value in headers
                if name.startswith(ERROR_HEADER_PREFIX)
            }
            topic = errors.get("topic")
            if topic is None or message.value is None or not choice.takes(errors):
                replayed.unchosen += 1
                continue
            original = [
                (n, bytes(v or b"")) for n, v in headers if not n.startswith(ERROR_HEADER_PREFIX)
            ]
            signed_at = _signed_at(original)
            if signed_at is not None and now - signed_at > max_age:
                replayed.expired += 1
                report.write(
                    f"dead letter {message.partition}@{message.offset} from {topic} "
                    f"({errors.get('reason')}): signed at {signed_at.isoformat()}, older than "
                    f"signing.max_age {max_age.total_seconds():g}s; not sent\n"
                )
                continue
            if producer is not None:
                await producer.send_and_wait(
                    topic, message.value, key=message.key, headers=original
                )
            replayed.sent[topic] += 1
    finally:
        if producer is not None:
            with contextlib.suppress(Exception):
                await producer.stop()
    return replayed


async def _dead_letters(settings: Settings) -> AsyncIterator[ConsumerRecord]:
    """Every record on the dead-letter topic up to its end when the replay began."""
    topic = settings.topics.dead_letters
    consumer = AIOKafkaConsumer(
        topic, **client_options(settings), enable_auto_commit=False, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        deadline = time.monotonic() + ASSIGNMENT_S
        while not consumer.assignment():  # without a group, assigned once metadata arrives
            if time.monotonic() > deadline:
                raise ClaimstreamError(f"no topic {topic} on {settings.bootstrap}")
            await asyncio.sleep(0.1)
        partitions = sorted(consumer.assignment())
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        left = {tp for tp in partitions if ends[tp] > 0}
        while left:
            fetched = await consumer.getmany(*left, timeout_ms=FETCH_MS)
            for tp, messages in fetched.items():
                for message in messages:
                    if message.offset < ends[tp]:
                        yield message
            for tp in list(left):
                if await consumer.position(tp) >= ends[tp]:
                    left.discard(tp)
    finally:
        await consumer.stop()


def _signed_at(headers: Sequence[tuple[str, bytes]]) -> datetime | None:
    """When the claim was signed, if it was and the time reads (else the worker judges it)."""
    for name, value in headers:
        if name == SIGNED_AT_HEADER:
            try:
                signed_at = datetime.fromisoformat(value.decode("ascii"))
            except (UnicodeDecodeError, ValueError):
                return None
            return signed_at if signed_at.tzinfo is not None else None
    return None
