"""Decision records assembled from parts (streams.wire.decision_bytes) are the bytes the codec
writes from the Decision model, for arbitrations of every kind, and read back as the same
Decision."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from streams.arbiter.tallies import OutcomeKeys
from streams.core.admission.intake import AdmittedClaim, admit, admit_resolution
from streams.core.decision.arbitration import Arbitration
from streams.core.keys.state import KeyState, Limits, state_key
from streams.core.keys.transitions import add_claim, advance
from streams.core.records.contracts import (
    Claim,
    ConflictKind,
    Decision,
    EvidenceRole,
    Outcome,
    Resolution,
)
from streams.core.records.errors import ContractError
from streams.core.records.policy import Policy, load_policy
from streams.core.rules.engine import arbitrate
from streams.ops.metrics import Metrics
from streams.packaged import example_path
from streams.pipeline.outputs import Outputs
from streams.pipeline.records import Incoming
from streams.settings import Settings
from streams.wire.codec import expanded_schema
from streams.wire.decision_bytes import DecisionWriter, SchemaLayoutError
from streams.wire.registry import FolderRegistry, WireCodec
from tests.support.builders import claim
from tests.support.strategies import INT64

POLICY: Policy = load_policy(example_path("policy.yaml"))
CODEC = WireCodec(FolderRegistry())
SETTINGS = Settings()
TOPIC = SETTINGS.topics.decisions
WRITER = DecisionWriter(lambda: CODEC.framing(TOPIC, Decision))
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
SOURCES = [
    "billing-api",
    "ledger-service",
    "crm",
    "reporting-replica",
    "search-index",
    "billing-cache",
    "apm-agent",
    "chat",
]
# Each field type the policy has, with values of its kind (some refused by the policy: skipped).
VALUES: dict[str, st.SearchStrategy[Any]] = {
    "order.payment_status": st.sampled_from(["paid", "unpaid", "overdue", "PAID", " Paid"]),
    "account.balance": st.builds(
        lambda amount, currency: {"amount_minor": amount, "currency": currency},
        st.integers(-(2**62), 2**62) | st.sampled_from([0, 1250, 99900]),
        st.sampled_from(["USD", "USD", "EUR"]),
    ),
    "api.latency": st.floats(0, 1e9, allow_nan=False) | st.sampled_from([120.0, 120.2, 480.0]),
    "service.retry_timeout": st.sampled_from([5, 30, 30.0]),
    "contract.seats": INT64 | st.sampled_from([25, 40]),
    "customer.shipping_address": st.text(max_size=16) | st.sampled_from(["1 Main St"]),
    "customer.email_verified": st.booleans(),
    "subscription.renews_at": st.sampled_from(
        ["2027-01-01T00:00:00Z", "2027-01-01T01:00:00+01:00", "2027-02-01T00:00:00.5Z"]
    ),
}
UNITS = {"api.latency": "ms", "service.retry_timeout": "s"}


def assembled_equals_codec(arbitration: Arbitration) -> bytes:
    """Assert the assembled record is the codec's record of the Decision, and reads back as it;
    the assembled one is written first, so it cannot lean on a Decision built before it."""
    written = WRITER(arbitration)
    decision = arbitration.decision
    assert written == CODEC.encode(TOPIC, decision)
    assert CODEC.decode(Decision, written) == decision
    return written


@st.composite
def claims_about(draw: st.DrawFn, field: str, subject: str) -> list[AdmittedClaim]:
    admitted = []
    for n in range(draw(st.integers(0, 6))):
        status = draw(st.sampled_from(["present"] * 5 + ["not_found", "unavailable", "error"]))
        period = draw(st.sampled_from([None] * 6 + [(-3, None), (-2, -1), (-1, 2)]))
        data: dict[str, Any] = {
            "claim_id": draw(st.sampled_from([f"c{n}", f"claim-{n}-ü"])),
            "subject": subject,
            "field": field,
            "status": status,
            "value": draw(VALUES[field]) if status == "present" else None,
            "unit": UNITS.get(field) if status == "present" else None,
            # Two independent sources of record, most often: they disagree as often as not.
            "source": draw(st.sampled_from(["billing-api", "crm"] * 3 + SOURCES)),
            "source_class": draw(st.sampled_from(["observation"] * 6 + ["user", "inference"])),
            "observed_at": NOW - timedelta(seconds=draw(st.integers(0, 50) | st.integers(0, 7200))),
            "replica": draw(st.sampled_from([None, "eu-1"])),
            "valid_from": None if period is None else NOW + timedelta(minutes=period[0]),
            "valid_to": None
            if period is None or period[1] is None
            else NOW + timedelta(minutes=period[1]),
            "epoch": draw(st.sampled_from([None] * 4 + [1, 2])),
            "lineage": draw(st.sampled_from([None, None, "l1"])),
            "scope": draw(st.sampled_from([None] * 6 + ["server", " Server", "client"])),
        }
        try:
            admitted.append(admit(Claim.model_validate(data), POLICY, NOW))
        except (ContractError, ValueError):
            continue  # refused by the contract: not evidence
    return admitted


@st.composite
def arbitrations(draw: st.DrawFn) -> tuple[list[AdmittedClaim], Arbitration]:
    """An arbitration of any outcome over claims of any field, maybe closed by a resolution,
    restated (as a redelivery repeats it) with another decided_at and supersedes, or not."""
    field = draw(st.sampled_from(sorted(VALUES)))
    rules = POLICY.rules_for(field)
    assert rules is not None
    subject = draw(st.sampled_from(["invoice:42", "sübject ✓", "s" * 130]))
    admitted = draw(claims_about(field, subject))
    resolutions: tuple[Resolution, ...] = ()
    if draw(st.integers(0, 4)) == 0:
        found = draw(st.booleans())
        try:
            resolution = Resolution(
                resolution_id="res-1",
                subject=subject,
                field=field,
                status="not_found" if found else "present",
                value=None if found else draw(VALUES[field]),
                unit=None if found else UNITS.get(field),
                decided_by="ops@example.test",
                decided_at=NOW - timedelta(minutes=1),
            )
            resolutions = (admit_resolution(resolution, POLICY, NOW),)
        except (ContractError, ValueError):
            pass
    supersedes = draw(st.sampled_from([None, "dec_0123456789abcdef01234567"]))
    arbitration = arbitrate(
        subject, field, admitted, rules, POLICY.version, NOW, resolutions, supersedes
    )
    if draw(st.booleans()):
        later = NOW + timedelta(microseconds=draw(st.integers(0, 10**12)))
        arbitration = arbitration.restated(later, draw(st.sampled_from([None, "dec_prev"])))
    return admitted, arbitration


@settings(max_examples=500, deadline=None)
@given(drawn=arbitrations())
def test_an_assembled_decision_is_the_codecs_record_of_it(
    drawn: tuple[list[AdmittedClaim], Arbitration],
) -> None:
    admitted, arbitration = drawn
    event(f"{arbitration.outcome.value}/{arbitration.verdict.kind}")
    assembled_equals_codec(arbitration)
    # Once the claims' parts are kept, a later decision over them (other roles: some gone
    # stale) is assembled from the kept parts.
    assert all(a.evidence_avro is not None for a in arbitration.claims)
    later = arbitrate(
        arbitration.subject,
        arbitration.field,
        admitted,
        POLICY.rules_for(arbitration.field),  # type: ignore[arg-type]
        POLICY.version,
        NOW + timedelta(hours=3),
        supersedes=arbitration.decision_id,
    )
    assembled_equals_codec(later)


def _claim(n: int, at: datetime = NOW, **fields: Any) -> AdmittedClaim:
    fields.setdefault("observed_at", at - timedelta(seconds=n + 1))
    return admit(claim(n, **fields), POLICY, at)


CASES: dict[str, tuple[Outcome, ConflictKind | None, list[AdmittedClaim]]] = {
    "resolved": (Outcome.RESOLVED, None, [_claim(0), _claim(1, source="crm")]),
    "resolved money": (
        Outcome.RESOLVED,
        None,
        [_claim(0, field="account.balance", value={"amount_minor": 1250, "currency": "USD"})],
    ),
    "resolved number": (
        Outcome.RESOLVED,
        None,
        [_claim(0, field="api.latency", value=120.2, unit="ms", source="apm-agent")],
    ),
    "resolved bool": (
        Outcome.RESOLVED,
        None,
        [_claim(0, field="customer.email_verified", value=False, source="crm")],
    ),
    "resolved not found": (Outcome.RESOLVED, None, [_claim(0, status="not_found", value=None)]),
    "value conflict": (
        Outcome.CONFLICT,
        ConflictKind.VALUE,
        [_claim(0), _claim(1, value="unpaid", source="crm")],
    ),
    "existence conflict": (
        Outcome.CONFLICT,
        ConflictKind.EXISTENCE,
        [_claim(0), _claim(1, status="not_found", value=None, source="crm")],
    ),
    "scope conflict": (
        Outcome.CONFLICT,
        ConflictKind.SEMANTIC,
        [_claim(0, scope="server"), _claim(1, scope="client", value="unpaid", source="crm")],
    ),
    "cross epoch": (
        Outcome.QUARANTINED,
        ConflictKind.CROSS_EPOCH,
        [_claim(0, epoch=2, value="unpaid"), _claim(1, epoch=1)],
    ),
    "missing epoch": (
        Outcome.QUARANTINED,
        ConflictKind.PROVENANCE,
        [_claim(0, epoch=2), _claim(1, value="unpaid", source="crm")],
    ),
    "insufficient": (Outcome.INSUFFICIENT, None, [_claim(0, source="chat", source_class="user")]),
    "no claims": (Outcome.INSUFFICIENT, None, []),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_outcome_and_conflict_kind_is_assembled_as_the_codec_writes_it(case: str) -> None:
    outcome, kind, admitted = CASES[case]
    field = admitted[0].claim.field if admitted else "order.payment_status"
    rules = POLICY.rules_for(field)
    assert rules is not None
    arbitration = arbitrate("invoice:42", field, admitted, rules, POLICY.version, NOW)
    assert (arbitration.outcome, arbitration.verdict.kind) == (outcome, kind)
    assembled_equals_codec(arbitration)
    assembled_equals_codec(arbitration.restated(NOW + timedelta(seconds=1), "dec_prev"))


def test_a_key_folded_claim_by_claim_emits_the_codecs_records_and_escalates() -> None:
    """Through `Outputs.emit`: every record a key's steps send (decisions, epoch changes,
    re-observation requests, the escalation) is the codec's record of the step's models."""
    outputs = Outputs(SETTINGS, CODEC, Metrics(POLICY), "g", lambda: NOW.timestamp())
    outcome_key = OutcomeKeys()
    rules = POLICY.rules_for("order.payment_status")
    assert rules is not None
    key = state_key("invoice:42", "order.payment_status").encode()
    record = Incoming(SETTINGS.topics.claims, 0, 0, key, b"")
    arriving = [
        (NOW, _claim(0, value="unpaid", source="reporting-replica")),
        (NOW, _claim(1)),
        (NOW, _claim(2, value="unpaid", source="crm")),
        (NOW, _claim(3, epoch=1)),
        (NOW, _claim(4, epoch=2, value="overdue")),
    ]
    # Then the conflict is kept fresh until it is open for longer than escalate_after (5m).
    for n in range(1, 10):
        later = NOW + timedelta(seconds=40 * n)
        seen = {"observed_at": later - timedelta(seconds=1)}
        arriving.append((later, _claim(10 * n, later, **seen)))
        arriving.append((later, _claim(10 * n + 1, later, value="unpaid", source="crm", **seen)))
    state: KeyState | None = None
    sent: list[tuple[str, bytes | None]] = []
    expected: list[tuple[str, bytes]] = []
    steps = []
    for at, admitted in arriving:
        steps.append(add_claim(state, admitted, rules, POLICY.version, at, Limits()))
        state = steps[-1].state
    assert state is not None
    steps.append(advance(state, rules, POLICY.version, later + timedelta(seconds=1), Limits()))
    for step in steps:
        handled = outputs.emit(key, step, record)
        sent += [(r.topic, r.value) for r in handled.outputs]
        if step.emitted is not None:
            assert handled.emitted == [step.emitted]
            d = step.emitted.decision
            kind = d.conflict_kind.value if d.conflict_kind else "none"
            assert outcome_key(step.emitted) == f"{d.field}|{d.outcome.value}|{kind}".encode()
            topics = SETTINGS.topics
            expected.append((TOPIC, CODEC.encode(TOPIC, step.emitted.decision)))
            for topic, event_record in (
                (topics.epoch_changes, step.emitted.epoch_change),
                (topics.reobserve, step.emitted.reobserve),
            ):
                if event_record is not None:
                    expected.append((topic, CODEC.encode(topic, event_record)))
        if step.escalation is not None:
            escalations = SETTINGS.topics.escalations
            expected.append((escalations, CODEC.encode(escalations, step.escalation)))
    assert sent == expected
    assert {topic for topic, _ in sent} >= {TOPIC, SETTINGS.topics.escalations}


def test_decided_tallies_what_the_decision_records_say() -> None:
    """`Metrics.decided` reads the arbitration: the same counts as read from its Decision."""
    metrics = Metrics(POLICY)
    decisions = []
    for _, _, admitted in CASES.values():
        field = admitted[0].claim.field if admitted else "order.payment_status"
        rules = POLICY.rules_for(field)
        assert rules is not None
        arbitration = arbitrate("invoice:42", field, admitted, rules, POLICY.version, NOW)
        metrics.decided(arbitration, 1.0)
        decisions.append(arbitration.decision)
    late = [_claim(0, value="unpaid", source="reporting-replica"), _claim(1)]
    rules = POLICY.rules_for("order.payment_status")
    assert rules is not None
    lost = arbitrate("invoice:42", rules.name, late, rules, POLICY.version, NOW)
    metrics.decided(lost, 2.0)
    decisions.append(lost.decision)
    metrics.flush()
    sample = metrics.registry.get_sample_value
    for decision in decisions:
        labels = {
            "field": decision.field,
            "outcome": decision.outcome.value,
            "conflict_kind": decision.conflict_kind.value if decision.conflict_kind else "none",
        }
        expected = sum(
            1
            for d in decisions
            if (d.field, d.outcome, d.conflict_kind)
            == (decision.field, decision.outcome, decision.conflict_kind)
        )
        assert sample("claimstream_decisions_total", labels) == expected
    losers = [
        e.source
        for d in decisions
        if d.outcome is Outcome.RESOLVED
        for e in d.evidence
        if e.role is EvidenceRole.CONTESTED
    ]
    assert losers == ["reporting-replica"]
    losses = {"field": "order.payment_status", "source": "reporting-replica"}
    assert sample("claimstream_claim_losses_total", losses) == 1.0
    assert sample("claimstream_last_decision_timestamp_seconds") == 2.0


def test_a_schema_whose_fields_moved_stops_the_writer_at_start() -> None:
    schema = copy.deepcopy(expanded_schema("Decision"))
    fields = schema["fields"]
    fields[-1], fields[-2] = fields[-2], fields[-1]
    with pytest.raises(SchemaLayoutError, match="the Decision schema's fields are"):
        DecisionWriter(lambda: b"", schema)
    schema = copy.deepcopy(expanded_schema("Decision"))
    evidence = next(f for f in schema["fields"] if f["name"] == "evidence")["type"]["items"]
    evidence["fields"].insert(0, evidence["fields"].pop())  # role first
    with pytest.raises(SchemaLayoutError, match="'role' last"):
        DecisionWriter(lambda: b"", schema)
