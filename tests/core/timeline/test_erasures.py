"""Erasures: which requests take effect when (reviewed as alias changes are), which spellings
each covers, and replay with them: a record about an erased subject stamped before the erasure
never counts, its key says once, at the instant, that it was erased, with no value and no
evidence, and a claim made after it is new data. Properties: the same whatever order the
records are read in."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.reading.replay import replay_with_clock
from streams.core.records.contracts import Decision, Outcome
from streams.core.records.errors import ErasureError
from streams.core.records.policy import Review
from streams.core.timeline.aliases import AliasChange, AliasHistory
from streams.core.timeline.erasures import (
    APPROVE,
    REQUEST,
    Erasure,
    ErasureHistory,
    ErasureStatement,
    reviewed,
)
from tests.support.builders import POLICY

T0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
SEATS = "contract.seats"
NOW = T0 + timedelta(hours=1)
ERASED_AT = T0 + timedelta(seconds=30)


def _line(n: int, subject: str, source: str, value: Any, seconds: float) -> str:
    return json.dumps(
        {
            "claim_id": f"c{n}",
            "subject": subject,
            "field": SEATS,
            "status": "present",
            "value": value,
            "source": source,
            "observed_at": (T0 + timedelta(seconds=seconds)).isoformat(),
        }
    )


def _request(at: datetime, by: str = "dpo", erasure_id: str = "e1") -> ErasureStatement:
    return ErasureStatement(erasure_id, REQUEST, by, at, "user:8812", "Art. 17 request")


def _erasure(subject: str = "user:8812", at: datetime = ERASED_AT) -> Erasure:
    return Erasure("e1", subject, at, at, "dpo", "Art. 17 request")


def test_a_request_takes_effect_at_once_where_no_review_is_asked() -> None:
    erasures, waiting = reviewed([_request(ERASED_AT)], lambda at: Review())
    assert [(e.erasure_id, e.at) for e in erasures] == [("e1", ERASED_AT)]
    assert waiting == []


def test_a_reviewed_request_waits_for_other_stewards_and_takes_effect_at_the_last_approval() -> (
    None
):
    two = Review(approvals=2)
    later = ERASED_AT + timedelta(minutes=5)
    statements = [
        _request(ERASED_AT),
        ErasureStatement("e1", APPROVE, "dpo", ERASED_AT),  # its author: not counted
        ErasureStatement("e1", APPROVE, "ana", ERASED_AT + timedelta(minutes=1)),
        ErasureStatement("e1", APPROVE, "ana", ERASED_AT + timedelta(minutes=2)),  # twice: once
        ErasureStatement("e2", APPROVE, "bo", later),  # an unknown request: nothing
    ]
    erasures, waiting = reviewed(statements, lambda at: two)
    assert erasures == []
    assert [(p.request.erasure_id, p.approvals) for p in waiting] == [("e1", ("ana",))]
    erasures, waiting = reviewed(
        [*statements, ErasureStatement("e1", APPROVE, "bo", later)], lambda at: two
    )
    assert [(e.at, e.approvals) for e in erasures] == [(later, ("ana", "bo"))]
    assert waiting == []


def test_records_that_are_no_erasure_statement_are_refused_naming_the_request() -> None:
    with pytest.raises(ErasureError, match="names the subject"):
        ErasureStatement("e1", REQUEST, "dpo", T0, "", "why")
    with pytest.raises(ErasureError, match="gives its reason"):
        ErasureStatement("e1", REQUEST, "dpo", T0, "user:1", " ")
    with pytest.raises(ErasureError, match="does not read"):
        ErasureStatement.from_record(b"e1", b"{not json")
    with pytest.raises(ErasureError, match="RFC 3339"):
        ErasureStatement.from_record(b"e1", b'{"action": "approve", "by": "a", "at": "soon"}')
    said = _request(T0)
    assert ErasureStatement.from_record(*said.record()) == said


def test_an_erasure_covers_every_spelling_naming_the_subject_at_its_instant() -> None:
    aliases = AliasHistory(
        [
            AliasChange("User 8812", "user:8812", T0),
            AliasChange("u-8812", "User 8812", T0),  # a chain
            AliasChange("late", "user:8812", ERASED_AT + timedelta(seconds=1)),  # after it
        ]
    )
    history = ErasureHistory([_erasure("U-8812")], aliases)  # asked by an alias's spelling
    (erasure,) = history.erasures
    assert erasure.spellings == {"user:8812", "user 8812", "u-8812"}
    assert history.erasing("USER  8812", ERASED_AT - timedelta(seconds=1)) is erasure
    assert history.erasing("user:8812", ERASED_AT) is None  # made at the instant: new data
    assert history.erasing("late", T0) is None
    assert history.erasing("user:9", T0) is None


def test_replay_says_once_that_the_key_was_erased_and_counts_what_came_after() -> None:
    lines = [
        _line(1, "user:8812", "crm", 40, 1),
        _line(2, "user:8812", "billing", 25, 2),  # a conflict
        _line(3, "user:9", "crm", 7, 3),  # another subject: untouched
        _line(4, "user:8812", "crm", 41, 60),  # after the erasure: new data
    ]
    timed = replay_with_clock(lines, POLICY, NOW, erasures=ErasureHistory([_erasure()]))
    erased = [e.decision for e in timed.emitted if e.decision.outcome is Outcome.ERASED]
    assert [(d.subject, d.field, d.decided_at, d.resolution_id) for d in erased] == [
        ("user:8812", SEATS, ERASED_AT, "e1")
    ]
    assert (erased[0].value, erased[0].evidence) == (None, ())
    mine = [e.decision for e in timed.emitted if e.decision.subject == "user:8812"]
    assert mine[0].outcome is Outcome.ERASED  # nothing from before it is ever told
    assert (mine[-1].outcome, mine[-1].value) == (Outcome.RESOLVED, 41)
    assert {c for d in mine for c in (e.claim_id for e in d.evidence)} == {"c4"}
    others = [e.decision for e in timed.emitted if e.decision.subject == "user:9"]
    assert [(d.outcome, d.value) for d in others] == [(Outcome.RESOLVED, 7)]


def _final(decisions: list[Decision]) -> dict[tuple[str, str], tuple[Any, ...]]:
    return {(d.subject, d.field): (d.outcome, d.value, d.decision_id) for d in decisions}


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**16))
def test_replay_with_erasures_does_not_depend_on_the_order_records_are_read(seed: int) -> None:
    lines = [_line(n, f"user:{n % 3}", ("crm", "billing")[n % 2], n, n * 7) for n in range(12)]
    history = ErasureHistory([_erasure("user:1")])
    shuffled = lines[:]
    random.Random(seed).shuffle(shuffled)
    first = replay_with_clock(lines, POLICY, NOW, erasures=history)
    again = replay_with_clock(shuffled, POLICY, NOW, erasures=history)
    assert _final([e.decision for e in first.emitted]) == _final(
        [e.decision for e in again.emitted]
    )
