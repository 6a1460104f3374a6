"""The cluster's erasures, on their topic: every worker drops the same keys at the same instants
and passes over the same records, and replay and the audit export are given the same erasures.

The erasures topic (`claims.erasures`, one partition, kept for ever: an erasure is a fact that
must outlive what it erased) holds one record a statement, keyed by the request's id, valued
with its JSON (`ErasureStatement.as_json`): a request (`claimstream erase SUBJECT --reason`) or
an approval (`claimstream erase approve ID`), each taking effect a lead time later
(`policy_lead_s`, as a policy does) so every worker has read it before its instant. Which
requests are in effect is `core.timeline.erasures.reviewed`, by the review the policy in force
at each request's instant asks for. A record that does not read is logged and passed over.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from streams.core.records.errors import ErasureError, RejectedInput
from streams.core.records.policy import Review
from streams.core.timeline.erasures import Erasure, ErasureStatement, Pending, reviewed
from streams.pipeline.authentication import read_record
from streams.pipeline.processor import Processor
from streams.pipeline.records import Incoming
from streams.settings import Settings
from streams.wire.history_topic import HistoryTopic
from streams.worker.erasure_receipts import ReceiptLog, shred
from streams.worker.history_follower import HistoryFollower

log = logging.getLogger(__name__)


Proof = Callable[[Incoming, str, datetime], None]
"""Raises `RejectedInput` unless an erasure record is proven the named steward's
(`Authentication.check_erasure`)."""


class ErasureLog(HistoryTopic):
    """The erasures topic read from its start, and the erasures its records put in effect. With
    `proof`, a record not proven its steward's is passed over (its signature's age counts to
    when it was written): an erasure destroys data, so where stewards sign, it is signed."""

    def __init__(self, settings: Settings, proof: Proof | None = None) -> None:
        super().__init__(settings, settings.topics.erasures)
        self._proof = proof
        self.statements: list[ErasureStatement] = []
        self.unread: list[dict[str, str]] = []
        """Each record not read: where, and why."""
        self.waiting: list[Pending] = []
        """Requests waiting for stewards' approvals (`in_effect`)."""

    def take(self, record: Any) -> bool:
        try:
            statement = ErasureStatement.from_record(record.key, record.value)
            if self._proof is not None:
                written = datetime.fromtimestamp(record.timestamp / 1000, UTC)
                self._proof(read_record(self.topic, record), statement.by, written)
            self.statements.append(statement)
        except (ErasureError, RejectedInput) as exc:
            where = f"{self.topic}[{record.partition}]@{record.offset}"
            log.error("erasures topic: %s passed over: %s", where, exc)
            self.unread.append({"record": where, "error": str(exc)})
            return False
        return True

    def in_effect(self, review_at: Callable[[datetime], Review]) -> list[Erasure]:
        """The requests in effect, by the review the policy in force at each one asks for;
        those still waiting are `waiting`."""
        erasures, self.waiting = reviewed(self.statements, review_at)
        return erasures

    def find(self, erasure_id: str) -> list[ErasureStatement]:
        """The statements about one request, in the order published."""
        return [s for s in self.statements if s.erasure_id == erasure_id]


async def published_erasures(settings: Settings, proof: Proof | None = None) -> ErasureLog:
    """The erasures topic as published, read to its end (with `proof`, only what it proves)."""
    erasure_log = ErasureLog(settings, proof)
    await erasure_log.start()
    try:
        await erasure_log.read()
    finally:
        await erasure_log.stop()
    return erasure_log


class ErasureFollower(HistoryFollower):
    """The erasures topic followed (`HistoryFollower`): the erasures in effect go to the
    processor (`adopt_erasures`), each record proven as the policy in force when it is read
    asks, and each erasure's keys are shredded once its instant has passed
    (`erasure_receipts`)."""

    def __init__(
        self, settings: Settings, processor: Processor, turn: asyncio.Lock, **kwargs: Any
    ) -> None:
        self.erasure_log = ErasureLog(
            settings,
            lambda record, steward, at: processor.authentication.check_erasure(record, steward, at),
        )
        self.receipts = ReceiptLog(settings)
        super().__init__(settings, processor, turn, self.erasure_log, **kwargs)

    def adopt(self) -> None:
        erasures = self.erasure_log.in_effect(self.review_at)
        self.processor.clock.adopt_erasures(erasures)
        log.info("erasures: %d in effect, %d waiting", len(erasures), len(self.erasure_log.waiting))

    async def on_start(self) -> None:
        await self.receipts.start()
        await super().on_start()

    async def on_stop(self) -> None:
        await super().on_stop()
        await self.receipts.stop()

    async def after_read(self) -> None:
        """Destroy the keys of each erasure in effect by now that has no receipt yet, and
        publish its receipt (`erasure_receipts.shred`)."""
        try:
            await self.receipts.read()
            now = datetime.now(UTC)
            for erasure in self.processor.clock.erasures.erasures:
                if erasure.at <= now and erasure.erasure_id not in self.receipts.receipts:
                    personal = self.processor.policies.in_force(erasure.at).personal_fields
                    issued = await shred(self.settings, erasure, personal)
                    self.receipts.receipts[erasure.erasure_id] = issued
        except Exception as exc:  # a broker hiccup: shredding is tried again after next read
            log.warning("erasures: shredding failed (%s); trying again", exc)
