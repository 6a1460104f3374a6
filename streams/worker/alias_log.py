"""The cluster's alias history, on its topic: every worker regroups the same keys' evidence at
the same instants, whichever worker owns them, and replay is given the same history.

The aliases topic (`claims.subject-aliases`, kept for ever) holds one record a change
(`pipeline.alias_records`). `claimstream alias add` and `remove` publish one, taking effect a
lead time later (`policy_lead_s`, as a policy does) so every worker has read it before its
instant. Where the policy in force has a `stewards` section that asks for it, a record must be
signed by a steward key.

A worker reads the topic to its end before it decides anything (`AliasFollower.on_start`) and
follows it after, between batches. The history is the records in the order of their instants
(ties: partition, then offset, so every reader orders them alike); a record that is not proven,
or whose change would close a cycle, is logged and passed over, never applied (the command
refuses a cycle before publishing).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiokafka import AIOKafkaProducer

from streams.core.records.errors import ClaimstreamError, RejectedInput
from streams.core.records.policy import Review
from streams.core.timeline.alias_review import Waiting, reviewed
from streams.core.timeline.aliases import AliasChange, AliasHistory
from streams.pipeline.alias_records import Signer, alias_record, change_of
from streams.pipeline.authentication import read_record
from streams.pipeline.processor import Processor
from streams.pipeline.records import Incoming
from streams.settings import Settings
from streams.wire.history_topic import HistoryTopic
from streams.wire.kafka import client_options
from streams.worker.history_follower import HistoryFollower

log = logging.getLogger(__name__)

Proof = Callable[[Incoming, datetime], None]
"""Raises `RejectedInput` unless an alias record is proven a steward's (`check_alias`)."""


@dataclass(frozen=True, slots=True)
class PublishedChange:
    """An alias change as the topic holds it, and where."""

    change: AliasChange
    partition: int
    offset: int


class AliasLog(HistoryTopic):
    """The aliases topic read from its start, every partition, and the history its records make.
    With `proof`, a record not proven a steward's is passed over (its signature's age counts to
    when it was written)."""

    def __init__(self, settings: Settings, proof: Proof | None = None) -> None:
        super().__init__(settings, settings.topics.aliases)
        self.published: list[PublishedChange] = []
        self.unread: list[dict[str, str]] = []
        """Each record not applied for itself (unreadable, not proven): where, its key, why."""
        self.closing_cycles: list[dict[str, str]] = []
        """Each change not applied as it closes a cycle (`history`): where, its key, and why."""
        self.waiting: list[Waiting] = []
        """Each change waiting for stewards' approvals (`history` with a review)."""
        self._proof = proof

    def take(self, record: Any) -> bool:
        published = self._published(record)
        if published is not None:
            self.published.append(published)
        return published is not None

    def _published(self, record: Any) -> PublishedChange | None:
        where = f"{self.topic}[{record.partition}]@{record.offset}"
        try:
            change = change_of(record.key, record.value, record.headers, record.timestamp)
            if self._proof is not None:
                written = datetime.fromtimestamp(record.timestamp / 1000, UTC)
                self._proof(read_record(self.topic, record), written)
        except (ClaimstreamError, RejectedInput) as exc:
            log.error("aliases topic: %s passed over, not applied: %s", where, exc)
            alias = (record.key or b"").decode("utf-8", "replace")
            self.unread.append({"record": where, "alias": alias, "error": str(exc)})
            return None
        return PublishedChange(change, record.partition, record.offset)

    @property
    def passed_over(self) -> list[dict[str, str]]:
        """Every record read and not applied, with why."""
        return [*self.unread, *self.closing_cycles]

    def history(self, review_at: Callable[[datetime], Review] | None = None) -> AliasHistory:
        """The changes read, in the order of their instants, each one that closes a cycle passed
        over (and logged). With `review_at` (the review the policy in force at an instant asks
        for), a change counts once approved, from the last approval's instant (`alias_review`);
        those still waiting are `waiting`."""
        ordered = sorted(self.published, key=lambda p: (p.change.at, p.partition, p.offset))
        changes = [p.change for p in ordered]
        if review_at is not None:
            changes, self.waiting = reviewed(changes, review_at)
        history, refused = AliasHistory.accepting(changes)
        for change, exc in refused:
            log.error("aliases topic: %s passed over: %s", change.alias, exc)
        where = {
            (p.change.alias, p.change.canonical, p.change.by): f"{self.topic}[{p.partition}]@"
            f"{p.offset}"
            for p in reversed(ordered)
        }
        self.closing_cycles = [
            {
                "record": where[(change.alias, change.canonical, change.by)],
                "alias": change.alias,
                "error": str(exc),
            }
            for change, exc in refused
        ]
        return history


async def publish_alias(
    settings: Settings, change: AliasChange, signer: Signer | None = None
) -> None:
    """Publish `change` to the aliases topic (signed by `signer` where given)."""
    key, value, headers = alias_record(change, signer)
    producer = AIOKafkaProducer(**client_options(settings), acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(settings.topics.aliases, value, key=key, headers=headers)
    finally:
        await producer.stop()


async def published_history(settings: Settings) -> AliasLog:
    """The aliases topic as published (signatures not checked), read to its end."""
    alias_log = AliasLog(settings)
    await alias_log.start()
    try:
        await alias_log.read()
    finally:
        await alias_log.stop()
    return alias_log


class AliasFollower(HistoryFollower):
    """The aliases topic followed (`HistoryFollower`): each new history goes to the processor
    (`adopt_aliases`), its records proven as the policy in force when each is read asks."""

    def __init__(
        self, settings: Settings, processor: Processor, turn: asyncio.Lock, **kwargs: Any
    ) -> None:
        self.alias_log = AliasLog(
            settings, lambda record, now: processor.authentication.check_alias(record, now)
        )
        super().__init__(settings, processor, turn, self.alias_log, **kwargs)

    def adopt(self) -> None:
        history = self.alias_log.history(self.review_at)
        self.processor.adopt_aliases(history)
        latest = history.latest
        log.info(
            "aliases: %d changes, the last in force from %s",
            len(history.changes),
            latest.isoformat() if latest else "-",
        )
