"""One bucket of a cut replayed (replaying.py): framed claims and statements decoded, admitted
at their instants and taken through their keys' transitions up to the cut, giving each key's
last belief, its evidence and its statements; bytes that do not decode and claims the policy
refuses are counted by reason, never as evidence; and the beliefs are the ones
`replay_with_clock` reaches for the same records at the same instants."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.audit.buckets import Spilled
from streams.audit.replaying import CLAIM, RESOLUTION, USER_CLAIM, BucketReplay, Rows
from streams.core.keys.state import Limits
from streams.core.reading.audit_rows import belief_row
from streams.core.reading.replay import replay_with_clock
from streams.core.records.contracts import Claim, Decision, RejectReason, Resolution, micros
from streams.core.timeline.aliases import AliasChange, AliasHistory
from streams.core.timeline.rollout import PolicyHistory
from streams.wire.registry import FolderRegistry, WireCodec
from tests.support.builders import POLICY

T0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
AS_OF = T0 + timedelta(minutes=1)
CODEC = WireCodec(FolderRegistry())
SEATS = "contract.seats"


def _claim(n: int, seconds: float, **fields: Any) -> Claim:
    data: dict[str, Any] = {
        "claim_id": f"c{n}",
        "subject": "initech",
        "field": SEATS,
        "status": "present",
        "value": 12,
        "source": "crm",
        "observed_at": T0 + timedelta(seconds=seconds),
    }
    return Claim.model_validate(data | fields)


def _resolution(statement_id: str, seconds: float, **fields: Any) -> Resolution:
    data: dict[str, Any] = {
        "resolution_id": statement_id,
        "subject": "initech",
        "field": SEATS,
        "value": 15,
        "decided_by": "alice",
        "decided_at": T0 + timedelta(seconds=seconds),
    }
    return Resolution.model_validate(data | fields)


def _spilled(
    records: list[Claim | Resolution], kinds: dict[int, int] | None = None
) -> list[Spilled]:
    """The records as the export spills them, each at its own instant (a claim's observed_at,
    a statement's decided_at), in the order given."""
    spilled = []
    for seq, record in enumerate(records):
        if isinstance(record, Resolution):
            at, kind, topic = record.decided_at, RESOLUTION, "resolutions"
        else:
            at, kind, topic = record.observed_at, CLAIM, "claims"
        kind = (kinds or {}).get(seq, kind)
        spilled.append(Spilled(micros(at), seq, kind, CODEC.encode(topic, record)))
    return spilled


def _replayed(
    spilled: list[Spilled], aliases: AliasHistory | None = None, as_of: datetime = AS_OF
) -> Rows:
    replay = BucketReplay(
        PolicyHistory.of(POLICY), aliases or AliasHistory(), as_of, Limits(), CODEC
    )
    return replay.rows(spilled)


def _conflict_resolved() -> list[Claim | Resolution]:
    return [
        _claim(1, 0),
        _claim(2, 2, source="order-form", value=15),
        _resolution("r1", 30),
    ]


def test_a_conflict_a_steward_resolved_is_believed_resolved_with_the_resolution() -> None:
    rows = _replayed(_spilled(_conflict_resolved()))
    assert rows.records == 3
    assert rows.refused == Counter()
    [belief] = rows.beliefs
    assert (belief["subject"], belief["field"]) == ("initech", SEATS)
    assert (belief["outcome"], belief["reason"]) == ("resolved", "manual")
    assert (belief["resolution_id"], belief["value"]) == ("r1", "15")
    assert belief["claims_held"] == 2
    assert belief["decided_at"] == micros(T0 + timedelta(seconds=30))
    assert belief["supersedes"] is not None  # the conflict it settled
    assert sorted(e["claim_id"] for e in rows.evidence) == ["c1", "c2"]
    assert {e["decision_id"] for e in rows.evidence} == {belief["decision_id"]}
    [statement] = rows.statements
    assert (statement["resolution_id"], statement["standing"]) == ("r1", "in_force")


def test_before_the_resolution_the_key_is_in_conflict() -> None:
    rows = _replayed(_spilled(_conflict_resolved()[:2]))
    [belief] = rows.beliefs
    assert (belief["outcome"], belief["conflict_kind"]) == ("conflict", "value")
    assert belief["resolution_id"] is None
    assert rows.statements == []


@pytest.mark.parametrize(
    "value",
    [
        b"",
        b'{"claim_id": "c9"}',  # JSON, not framed Avro
        b"\x00\x01",  # shorter than the header
        "header+junk",
        "truncated",
    ],
)
def test_bytes_that_do_not_decode_are_counted_malformed(value: bytes | str) -> None:
    framed = CODEC.encode("claims", _claim(9, 1))
    if value == "header+junk":
        value = framed[:5] + b"\xff\xff\xff\xff\xff"
    elif value == "truncated":
        value = framed[:-4]
    assert isinstance(value, bytes)
    spilled = [*_spilled(_conflict_resolved()), Spilled(micros(T0), 3, CLAIM, value)]
    rows = _replayed(spilled)
    assert RejectReason.MALFORMED.value == "malformed"
    assert rows.refused == Counter({"malformed": 1})
    assert rows.records == 4
    [belief] = rows.beliefs  # the others decided as without it
    assert belief == _replayed(_spilled(_conflict_resolved())).beliefs[0]
    assert "c9" not in {e["claim_id"] for e in rows.evidence}


def test_a_statement_that_does_not_decode_is_counted_malformed() -> None:
    spilled = [*_spilled(_conflict_resolved()[:2]), Spilled(micros(T0), 2, RESOLUTION, b"\x00")]
    rows = _replayed(spilled)
    assert rows.refused == Counter({"malformed": 1})
    assert rows.statements == []


def test_a_claim_of_a_field_the_policy_does_not_know_is_refused() -> None:
    records: list[Claim | Resolution] = [_claim(1, 0), _claim(2, 1, field="contract.colour")]
    rows = _replayed(_spilled(records))
    assert rows.refused == Counter({RejectReason.UNKNOWN_FIELD.value: 1})
    assert [(b["field"], b["claims_held"]) for b in rows.beliefs] == [(SEATS, 1)]
    assert [e["claim_id"] for e in rows.evidence] == ["c1"]


def test_a_framed_record_of_an_unknown_schema_is_refused() -> None:
    framed = CODEC.encode("claims", _claim(1, 0))
    unknown = b"\x00\x7f\xff\xff\xfe" + framed[5:]
    rows = _replayed([Spilled(micros(T0), 0, CLAIM, unknown)])
    assert rows.refused == Counter({RejectReason.UNKNOWN_SCHEMA.value: 1})
    assert rows.beliefs == rows.evidence == rows.statements == []


def test_a_claim_is_admitted_at_its_records_instant_not_at_the_cut() -> None:
    """Stamped an hour before it says it was observed: a worker refused it then as from the
    future, though the cut is later still."""
    early = _claim(2, 3600, source="order-form", value=15)
    spilled = [
        *_spilled([_claim(1, 0)]),
        Spilled(micros(T0 + timedelta(seconds=1)), 1, CLAIM, CODEC.encode("claims", early)),
    ]
    rows = _replayed(spilled, as_of=T0 + timedelta(hours=2))
    assert rows.refused == Counter({RejectReason.FUTURE_OBSERVATION.value: 1})
    assert [e["claim_id"] for e in rows.evidence] == ["c1"]


def test_a_user_claim_counts_as_a_users_assertion() -> None:
    records: list[Claim | Resolution] = [_claim(1, 0, source_class="observation")]
    [observed] = _replayed(_spilled(records)).evidence
    [asserted] = _replayed(_spilled(records, kinds={0: USER_CLAIM})).evidence
    assert observed["authority"] == "system_of_record"
    assert asserted["authority"] == "asserted"


def test_a_reused_claim_id_is_refused_as_the_stream_refuses_it() -> None:
    records: list[Claim | Resolution] = [_claim(1, 0), _claim(1, 1, value=13)]
    rows = _replayed(_spilled(records))
    assert rows.refused == Counter({RejectReason.CONFLICTING_DUPLICATE.value: 1})


def test_an_alias_counts_a_claim_on_its_canonical_subjects_key() -> None:
    aliases = AliasHistory([AliasChange("Initech Inc", "initech", T0 - timedelta(hours=1))])
    records: list[Claim | Resolution] = [
        _claim(1, 0),
        _claim(2, 1, subject="INITECH  inc", value=15, source="order-form"),
    ]
    rows = _replayed(_spilled(records), aliases)
    [belief] = rows.beliefs
    assert (belief["subject"], belief["outcome"], belief["claims_held"]) == (
        "initech",
        "conflict",
        2,
    )
    assert {e["claim_id"]: e["sent_about"] for e in rows.evidence} == {
        "c1": "initech",
        "c2": "INITECH  inc",
    }


def _mixed() -> list[Claim | Resolution]:
    """Several keys: a conflict resolved, a payment status that goes stale before the cut, a
    balance, a conflict left open, a reused claim id, a claim of an unknown field."""
    pay = {"subject": "invoice:42", "field": "order.payment_status", "source": "billing-api"}
    money = {"amount_minor": 1250, "currency": "USD"}
    return [
        *_conflict_resolved(),
        _claim(3, 1, value="paid", **pay),
        _claim(4, 5, value="paid", **pay | {"source": "ledger-service"}),
        _claim(5, 7, subject="acct:1", field="account.balance", value=money, source="billing-api"),
        _claim(6, 10, subject="globex", value=40),
        _claim(7, 11, subject="globex", value=41, source="order-form"),
        _claim(7, 12, subject="globex", value=42, source="order-form"),
        _claim(8, 13, field="contract.colour"),
        _claim(9, 14, subject="hooli", value=1),
        _claim(10, 15, subject="hooli", value=2, source="order-form"),
        _resolution("r2", 20, subject="globex", value=None, status="not_found"),
    ]


def test_the_beliefs_are_replay_with_the_clocks_for_the_same_instants() -> None:
    records = _mixed()
    as_of = T0 + timedelta(minutes=30)  # past the payment status's freshness, and escalations
    rows = _replayed(_spilled(records), as_of=as_of)
    claims = [r.model_dump_json() for r in records if isinstance(r, Claim)]
    statements = [r.model_dump_json() for r in records if isinstance(r, Resolution)]
    timed = replay_with_clock(claims, POLICY, as_of, statements, limits=Limits())
    last: dict[tuple[str, str], Decision] = {}
    for emitted in timed.emitted:
        if not emitted.escalation:
            last[(emitted.decision.subject, emitted.decision.field)] = emitted.decision
    assert len(last) == 5
    assert any(e.escalation for e in timed.emitted)  # hooli's, which changes no belief
    assert [b["decision_id"] for b in rows.beliefs] == [
        last[key].decision_id for key in sorted(last)
    ]
    held = {(b["subject"], b["field"]): b["claims_held"] for b in rows.beliefs}
    assert rows.beliefs == [belief_row(last[key], held[key]) for key in sorted(last)]
    outcomes = {(b["subject"], b["outcome"]) for b in rows.beliefs}
    assert ("invoice:42", "insufficient") in outcomes  # decided again when it went stale
    assert ("hooli", "conflict") in outcomes
    assert rows.refused == Counter(r.reason.value for r in timed.rejections)
    assert rows.refused == Counter({"conflicting_duplicate": 1, "unknown_field": 1})


_SOURCES = ("crm", "order-form", "billing-export", "chat")


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(("initech", "globex")),
            st.sampled_from(_SOURCES),
            st.integers(min_value=1, max_value=3),
            st.integers(min_value=0, max_value=1200),
        ),
        min_size=1,
        max_size=10,
    )
)
def test_any_claims_are_believed_as_replay_with_the_clock_believes_them(
    said: list[tuple[str, str, int, int]],
) -> None:
    records: list[Claim | Resolution] = [
        _claim(n, seconds, subject=subject, source=source, value=value)
        for n, (subject, source, value, seconds) in enumerate(said)
    ]
    as_of = T0 + timedelta(minutes=25)
    rows = _replayed(_spilled(records), as_of=as_of)
    timed = replay_with_clock([r.model_dump_json() for r in records], POLICY, as_of)
    last = {
        (e.decision.subject, e.decision.field): e.decision
        for e in timed.emitted
        if not e.escalation
    }
    assert [b["decision_id"] for b in rows.beliefs] == [last[k].decision_id for k in sorted(last)]
    assert rows.refused == Counter(r.reason.value for r in timed.rejections)
