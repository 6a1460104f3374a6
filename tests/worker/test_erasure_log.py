"""The erasures topic as a worker reads it: a statement that does not read, or that its proof
refuses (where stewards sign), is passed over with why and never applied; and an erasure's
receipt says, for each topic, what it may still hold and until when, naming no value."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

from streams.core.records.contracts import RejectReason
from streams.core.records.errors import ContractError
from streams.core.records.policy import Review
from streams.core.timeline.erasures import REQUEST, Erasure, ErasureStatement
from streams.pipeline.records import Incoming
from streams.settings import Settings
from streams.worker.erasure_log import ErasureLog
from streams.worker.erasure_receipts import receipt

AT = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


def _record(offset: int, key: bytes | None, value: bytes | None) -> Any:
    return SimpleNamespace(
        key=key, value=value, headers=[], partition=0, offset=offset, timestamp=1_765_000_000_000
    )


def _request(erasure_id: str, by: str) -> Any:
    key, value = ErasureStatement(erasure_id, REQUEST, by, AT, "user:1", "Art. 17").record()
    return key, value


def test_a_statement_not_proven_or_not_read_is_passed_over_with_why() -> None:
    def proof(record: Incoming, steward: str, at: datetime) -> None:
        if steward != "dpo":
            raise ContractError(RejectReason.UNAUTHENTICATED, f"{steward}: no valid signature")

    log = ErasureLog(Settings(), proof)
    assert log.take(_record(0, *_request("e1", "dpo")))
    assert not log.take(_record(1, *_request("e2", "mallory")))
    assert not log.take(_record(2, b"e3", b"{not json"))
    assert [s.erasure_id for s in log.statements] == ["e1"]
    assert [(u["record"], "mallory" in u["error"]) for u in log.unread] == [
        ("claims.erasures[0]@1", True),
        ("claims.erasures[0]@2", False),
    ]
    assert [e.erasure_id for e in log.in_effect(lambda at: Review())] == ["e1"]


def test_a_receipt_names_where_copies_remain_and_when_they_age_out() -> None:
    settings = Settings(audit_retention_days=30, subject_key_compaction_lag_hours=24)
    erasure = Erasure("e1", "user:1", AT, AT - timedelta(hours=1), "dpo", "Art. 17", ("ana",))
    issued = receipt(erasure, settings, frozenset({"customer.email"}), ["user:1|k1"])
    copies = {c["topic"]: c for c in issued["copies"]}
    assert copies["claims.tools"]["ages_out_by"] == "2027-01-06T12:00:00Z"
    assert copies["claims.subject-keys"]["ages_out_by"] == "2026-12-08T12:00:00Z"
    assert copies["claims.decisions"]["ages_out_by"] is None  # compacted: no bound by time
    assert (issued["approved_by"], issued["keys_destroyed"]) == (["ana"], ["user:1|k1"])
    forever = receipt(erasure, Settings(audit_retention_days=-1), frozenset(), [])
    assert {c["topic"]: c["ages_out_by"] for c in forever["copies"]}["claims.tools"] is None
