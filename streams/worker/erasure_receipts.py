"""What an erasure did, as a record that proves it: the subject's keys destroyed and a receipt
on the receipts topic (`claims.erasure-receipts`, kept for ever), which `claimstream erase
status ID` shows beside a check, made as it runs, that the subject's sealed values no longer
open.

A worker shreds an erasure once it is in effect (`ErasureFollower`): it publishes a tombstone for
every key of every spelling the erasure covers on the subject keys topic (`wire.subject_keys`),
then the receipt. Several workers may both shred one erasure: tombstones and receipts written
twice say the same. The receipt names the subject's identifier, never a value: what was erased
(spellings, the fields the policy marks personal, the key ids destroyed), when, by whom and who
approved, and for each topic what it may still hold and until when it ages out.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from aiokafka import AIOKafkaProducer

from streams.core.timeline.erasures import Erasure
from streams.settings import Settings
from streams.wire.history_topic import HistoryTopic
from streams.wire.kafka import client_options
from streams.wire.subject_keys import SubjectKeys
from streams.worker.retention import INTERNAL_RETENTION_MS, audit_retention_ms

log = logging.getLogger(__name__)

SEALED, PLAIN = "personal fields sealed (unreadable once the key is destroyed)", "plain text"


def receipt(
    erasure: Erasure, settings: Settings, personal: frozenset[str], destroyed: list[str]
) -> dict[str, Any]:
    """The receipt of `erasure`, its keys `destroyed` (`spelling|key_id`), under `settings`."""
    return {
        "erasure_id": erasure.erasure_id,
        "subject": erasure.subject,
        "reason": erasure.reason,
        "requested_by": erasure.by,
        "requested_at": _moment(erasure.requested_at),
        "approved_by": list(erasure.approvals),
        "erased_at": _moment(erasure.at),
        "spellings": sorted(erasure.spellings),
        "personal_fields": sorted(personal),
        "keys_destroyed": destroyed,
        "copies": copies(erasure.at, settings),
    }


def copies(at: datetime, settings: Settings) -> list[dict[str, str | None]]:
    """Each topic that may still hold the subject's records after `at`, what it holds of them,
    and the latest instant that copy ages out (None: it does not by time)."""
    topics = settings.topics
    audited = _aged(at, audit_retention_ms(settings))
    lag_ms = settings.subject_key_compaction_lag_hours * 3600 * 1000
    as_sent = f"the records as sent: {SEALED}; the other fields and the subject's id in {PLAIN}"
    compacted = (
        "superseded by the erased record of each key; earlier records are removed at the "
        "topic's next compaction (bounded only where the topic sets max.compaction.lag.ms)"
    )
    held = [
        (topics.claims, as_sent, audited),
        (topics.user_claims, as_sent, audited),
        (topics.dead_letters, as_sent, audited),
        (topics.epoch_changes, f"values across epochs: {SEALED}", audited),
        (topics.reobserve, f"requests naming values: {SEALED}", audited),
        (topics.escalations, f"escalated decisions: {SEALED}", audited),
        (topics.decisions, f"decisions: {SEALED}; {compacted}", None),
        (settings.changelog_topic, f"key states: {SEALED}; {compacted}", None),
        (
            topics.rekeyed,
            f"claims on their way to their key: {SEALED}",
            _aged(at, INTERNAL_RETENTION_MS),
        ),
        (
            topics.subject_keys,
            "the destroyed keys' wrapped copies, until compacted",
            _aged(at, lag_ms),
        ),
    ]
    return [{"topic": topic, "holds": holds, "ages_out_by": by} for topic, holds, by in held]


def _aged(at: datetime, retention_ms: int) -> str | None:
    return None if retention_ms < 0 else _moment(at + timedelta(milliseconds=retention_ms))


def _moment(at: datetime) -> str:
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


class ReceiptLog(HistoryTopic):
    """The receipts topic read from its start: the last receipt of each erasure."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings, settings.topics.erasure_receipts)
        self.receipts: dict[str, dict[str, Any]] = {}

    def take(self, record: Any) -> bool:
        try:
            found = json.loads(record.value)
            self.receipts[found["erasure_id"]] = found
        except (TypeError, ValueError, KeyError) as exc:
            log.error("receipts topic: %s@%d passed over: %s", self.topic, record.offset, exc)
            return False
        return True


async def shred(settings: Settings, erasure: Erasure, personal: frozenset[str]) -> dict[str, Any]:
    """Destroy every key of the spellings `erasure` covers, then publish its receipt."""
    keys = SubjectKeys(settings, None)
    await keys.start()
    try:
        destroyed = await keys.destroy(sorted(erasure.spellings))
    finally:
        await keys.stop()
    issued = receipt(erasure, settings, personal, destroyed)
    producer = AIOKafkaProducer(**client_options(settings), acks="all")
    await producer.start()
    try:
        value = json.dumps(issued, sort_keys=True).encode()
        topic = settings.topics.erasure_receipts
        await producer.send_and_wait(topic, value, key=erasure.erasure_id.encode())
    finally:
        await producer.stop()
    log.info(
        "erasure %s: %d subject keys destroyed, receipt published",
        erasure.erasure_id,
        len(destroyed),
    )
    return issued
