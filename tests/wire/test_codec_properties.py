"""Avro round trips of random valid records are lossless."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta

import fastavro
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from streams.core.admission.intake import admit
from streams.core.keys.transitions import add_claim
from streams.core.records.contracts import Claim, Decision, Evidence, Money
from streams.core.records.policy import load_policy
from streams.settings import Settings
from streams.wire.codec import decode, encode, parsed_schema
from tests.support.strategies import INT64

texts = st.text(min_size=1, max_size=20)
moments = st.datetimes(
    min_value=datetime(1970, 1, 2), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
).map(lambda d: d.replace(microsecond=d.microsecond))
values = st.one_of(
    st.none(),
    st.booleans(),
    INT64,
    st.floats(allow_nan=False),
    texts,
    st.builds(Money, amount_minor=INT64, currency=st.sampled_from(["USD", "EUR"])),
)
claims = st.builds(
    Claim,
    claim_id=texts,
    subject=texts,
    field=texts,
    status=st.sampled_from(["present", "not_found", "forbidden", "unavailable", "error"]),
    value=values,
    unit=st.none() | texts,
    source=texts,
    replica=st.none() | texts,
    source_class=st.sampled_from(["observation", "user", "inference"]),
    observed_at=moments,
    valid_from=st.none() | moments,
    valid_to=st.none() | moments,
    epoch=st.none() | INT64,
    lineage=st.none() | texts,
    scope=st.none() | texts,
    confidence=st.none() | st.floats(min_value=0, max_value=1),
    trace_id=st.none() | texts,
    producer=st.none() | texts,
    attributes=st.dictionaries(texts, texts, max_size=3),
)


@settings(max_examples=300, deadline=None)
@given(claim=claims)
def test_claim_round_trip_is_lossless(claim: Claim) -> None:
    assert decode(Claim, encode(claim)) == claim


def dumped(record: BaseModel) -> bytes:
    """The Avro body written from `model_dump`, the encoding before the hot path read fields."""
    buffer = io.BytesIO()
    fastavro.schemaless_writer(
        buffer, parsed_schema(type(record).__name__), record.model_dump(mode="python")
    )
    return buffer.getvalue()


@settings(max_examples=100, deadline=None)
@given(claim=claims, role=st.sampled_from(["winner", "contested", "stale"]))
def test_decision_round_trip_is_lossless(claim: Claim, role: str) -> None:
    evidence = Evidence(
        claim_id=claim.claim_id,
        source=claim.source,
        authority="cached",
        status=claim.status,
        value=claim.value,
        observed_at=claim.observed_at,
        epoch=claim.epoch,
        role=role,
    )
    decision = Decision(
        decision_id="dec_x",
        subject=claim.subject,
        field=claim.field,
        outcome="conflict",
        conflict_kind="value",
        action="block",
        policy_version="v1",
        reason="authority_conflict",
        evidence=(evidence,),
        decided_at=claim.observed_at,
        supersedes="dec_y",
    )
    assert decode(Decision, encode(decision)) == decision
    assert encode(decision) == dumped(decision)
    assert encode(claim) == dumped(claim)


def test_engine_decisions_encode_as_model_dump_does() -> None:
    """Decisions as the engine builds them (model_construct, evidence tuples, Money values)."""
    policy = load_policy(Settings().policy)
    now = datetime(2026, 11, 30, 12, tzinfo=UTC)
    state = None
    for n, (source, value) in enumerate(
        [("billing-api", 1250), ("crm", 99900), ("billing-cache", 1250), ("crm", 1250)]
    ):
        claim = Claim(
            claim_id=f"c{n}",
            subject="acct:1",
            field="account.balance",
            status="present",
            value=Money(amount_minor=value, currency="USD"),
            source=source,
            observed_at=now - timedelta(seconds=10 - n),
        )
        rules = policy.rules_for(claim.field)
        assert rules is not None
        step = add_claim(state, admit(claim, policy, now), rules, policy.version, now)
        state = step.state
        decision = step.arbitration.decision
        assert encode(decision) == dumped(decision)
        assert decode(Decision, encode(decision)) == decision
