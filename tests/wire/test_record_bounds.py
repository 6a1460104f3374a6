"""A key's records stay within the record limit (`max_record_bytes`, Kafka's `max.message.bytes`)
whatever claims the contract admits: `claim_bytes` bounds what a claim adds to the Avro decision
and to the key's changelog record, and a key holding `max_claims_per_key` of the largest claims,
with the rest of its state at its bounds, sends no decision and journals no state past the limit.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.admission.intake import AdmittedClaim, admit, admit_resolution
from streams.core.decision.side_records import evidence_fields
from streams.core.keys.journal import encode_state
from streams.core.keys.state import KeyState, state_key
from streams.core.keys.transitions import Transition, add_claim, add_resolution
from streams.core.keys.upkeep import held_bytes
from streams.core.records.bounds import (
    ATTRIBUTE_KEY_CHARS,
    ATTRIBUTE_VALUE_CHARS,
    ATTRIBUTES,
    ID_CHARS,
    NOTE_CHARS,
    RECORD_BYTES,
    SUBJECT_CHARS,
    VALUE_CHARS,
)
from streams.core.records.contracts import Claim, Decision, Evidence, EvidenceRole, Resolution
from streams.core.records.errors import ContractError
from streams.settings import Settings
from streams.wire import codec
from streams.wire.decision_bytes import DecisionWriter
from streams.wire.registry import FolderRegistry, WireCodec
from tests.support.builders import POLICY

CODEC = WireCodec(FolderRegistry())
SETTINGS = Settings()
LIMITS = SETTINGS.key_limits()
WRITER = DecisionWriter(lambda: CODEC.framing(SETTINGS.topics.decisions, Decision))
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
RECORD_OVERHEAD = 512  # a Kafka record's batch header, lengths and timestamps, at most
ASTRAL = "\U0001f600"  # four bytes in UTF-8
# A string of one character repeated (one to four bytes in UTF-8), or a short arbitrary one: the
# lengths reach the bounds without hypothesis drawing thousands of characters one by one.
_CHARACTERS = st.sampled_from(["a", "\u00e9", "\u20ac", ASTRAL, " "])


def _text(most: int, least: int = 0) -> st.SearchStrategy[str]:
    repeated = st.builds(lambda c, n: c * n, _CHARACTERS, st.integers(least, most))
    return repeated | st.text(min_size=least, max_size=min(most, 8))


def _maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | strategy


_FIELDS = {
    "customer.shipping_address": _text(VALUE_CHARS, 1),
    "order.payment_status": st.sampled_from(["paid", "PAID", " overdue "]),
    "account.balance": st.builds(
        lambda amount: {"amount_minor": amount, "currency": "usd"}, st.integers(-(2**63), 2**63 - 1)
    ),
    "contract.seats": st.integers(-(2**63), 2**63 - 1),
    "subscription.renews_at": st.sampled_from(
        ["0001-01-01T00:00:00Z", "2027-01-01T01:00:00+01:00"]
    ),
}


@st.composite
def claims(draw: st.DrawFn) -> dict[str, Any]:
    """A claim's data anywhere within the bounds, each text up to its bound."""
    field = draw(st.sampled_from(sorted(_FIELDS)))
    return {
        "claim_id": draw(_text(ID_CHARS - 4, 1)),
        "subject": draw(_text(SUBJECT_CHARS, 1)),
        "field": field,
        "status": "present",
        "value": draw(_FIELDS[field]),
        "unit": None,
        "source": draw(st.sampled_from(["crm", "billing-api", "chat"])),
        "replica": draw(_maybe(_text(ID_CHARS))),
        "observed_at": NOW - timedelta(seconds=draw(st.integers(0, 120))),
        "epoch": draw(_maybe(st.integers(-(2**63), 2**63 - 1))),
        "lineage": draw(_maybe(_text(ID_CHARS))),
        "scope": draw(_maybe(_text(ID_CHARS))),
        "confidence": draw(_maybe(st.floats(0, 1))),
        "trace_id": draw(_maybe(_text(ID_CHARS))),
        "producer": draw(_maybe(_text(ID_CHARS))),
        "attributes": draw(
            st.dictionaries(
                _text(ATTRIBUTE_KEY_CHARS, 1), _text(ATTRIBUTE_VALUE_CHARS), max_size=ATTRIBUTES
            )
        ),
    }


def _admitted(data: dict[str, Any]) -> AdmittedClaim | None:
    try:
        return admit(Claim.model_validate(data), POLICY, NOW)
    except ContractError:
        return None


def _record_bytes(key: bytes, value: bytes) -> int:
    return RECORD_OVERHEAD + len(key) + len(value)


@settings(max_examples=60, deadline=None)
@given(data=claims())
def test_claim_bytes_bounds_its_stored_form_and_its_evidence(data: dict[str, Any]) -> None:
    admitted = _admitted(data)
    if admitted is None:
        return
    state = KeyState(subject=admitted.claim.subject, field=admitted.claim.field, claims=(admitted,))
    alone = len(encode_state(KeyState(subject=state.subject, field=state.field)))
    stored = len(encode_state(state)) - alone
    evidence = len(
        codec.encode(
            Evidence(**evidence_fields(admitted, EvidenceRole.CONTESTED, "another subject"))
        )
    )
    assert max(stored, evidence) <= held_bytes(admitted)


def _fold(
    state: KeyState | None, admitted: AdmittedClaim, sizes: list[tuple[int, int]]
) -> KeyState:
    """`admitted` added to the key; the sizes of the decision it sent and of the key's state."""
    step: Transition = add_claim(state, admitted, _rules(admitted), POLICY.version, NOW, LIMITS)
    _measure(step, sizes)
    return step.state


def _rules(admitted: AdmittedClaim) -> Any:
    return POLICY.rules_for(admitted.claim.field)


def _measure(step: Transition, sizes: list[tuple[int, int]]) -> None:
    state = step.state
    key = state_key(state.subject, state.field).encode()
    decision = 0 if step.emitted is None else _record_bytes(key, WRITER(step.emitted))
    sizes.append((decision, _record_bytes(key, encode_state(state))))


@settings(max_examples=25, deadline=None)
@given(data=claims(), ages=st.lists(st.integers(0, 120), min_size=17, max_size=17))
def test_a_key_of_the_largest_claims_admitted_stays_within_the_record_limit(
    data: dict[str, Any], ages: list[int]
) -> None:
    """Any claim the contract admits, held max_claims_per_key + 1 times (each with its own id
    and age) by one key: every decision's Avro record and every changelog record the key sends
    stays within `max_record_bytes`, and the kept claims within the key's byte budget."""
    first = _admitted(data)
    if first is None:
        return
    sizes: list[tuple[int, int]] = []
    state: KeyState | None = None
    for n, age in enumerate(ages):
        copy = {**data, "claim_id": f"{n:03d}{data['claim_id']}"}
        copy["observed_at"] = NOW - timedelta(seconds=age)
        admitted = _admitted(copy)
        assert admitted is not None
        state = _fold(state, admitted, sizes)
        assert sum(map(held_bytes, state.claims)) <= LIMITS.max_claim_bytes
        assert len(state.claims) <= LIMITS.max_claims
    assert max(max(pair) for pair in sizes) <= SETTINGS.max_record_bytes


def _largest_claim(n: int, value: str, seconds_ago: int) -> AdmittedClaim:
    """The largest claim of a string field the contract admits, with its own id and value."""
    tag = f"{n:04d}"
    data = {
        "claim_id": tag + ASTRAL * (ID_CHARS - 4),
        "subject": ASTRAL * SUBJECT_CHARS,
        "field": "customer.shipping_address",
        "status": "present",
        "value": value,
        "source": "crm",
        "replica": ASTRAL * ID_CHARS,
        "observed_at": NOW - timedelta(seconds=seconds_ago),
        "epoch": 2**63 - 1,
        "lineage": ASTRAL * ID_CHARS,
        "scope": ASTRAL * ID_CHARS,
        "confidence": 0.5,
        "trace_id": ASTRAL * ID_CHARS,
        "producer": ASTRAL * ID_CHARS,
        "attributes": {
            f"{i:03d}" + ASTRAL * (ATTRIBUTE_KEY_CHARS - 3): ASTRAL * ATTRIBUTE_VALUE_CHARS
            for i in range(ATTRIBUTES)
        },
    }
    return admit(Claim.model_validate(data), POLICY, NOW)


def _value(n: int, version: str = "") -> str:
    return f"{n:04d}{version}" + ASTRAL * (VALUE_CHARS - 4 - len(version))


def test_a_key_at_every_bound_at_once_stays_within_the_record_limit() -> None:
    """The worst a key can hold: resolutions, decisions, disputed ids and claims, each at its
    bound and each text in four-byte characters. Prints the largest records it sent."""
    sizes: list[tuple[int, int]] = []
    state: KeyState | None = None
    for n in range(LIMITS.max_disputed):  # each id seen with two contents: disputed
        for version in ("a", "b"):
            state = _fold(state, _largest_claim(n, _value(n, version), 200), sizes)
    assert state is not None
    assert len(state.disputed) == LIMITS.max_disputed
    rules = POLICY.rules_for("customer.shipping_address")
    assert rules is not None
    for n in range(LIMITS.max_resolutions):
        resolution = Resolution(
            resolution_id=f"{n:04d}" + ASTRAL * (ID_CHARS - 4),
            subject=state.subject,
            field=state.field,
            value=_value(5000 + n),
            decided_by=ASTRAL * ID_CHARS,
            note=ASTRAL * NOTE_CHARS,
            decided_at=NOW - timedelta(seconds=100 - n),
        )
        admitted = admit_resolution(resolution, POLICY, NOW)
        step = add_resolution(state, admitted, rules, POLICY.version, NOW, LIMITS)
        _measure(step, sizes)
        state = step.state
    assert len(state.resolutions) == LIMITS.max_resolutions
    for n in range(1000, 1000 + 2 * LIMITS.max_claims):  # each newer, with a new value
        state = _fold(state, _largest_claim(n, _value(n), 100 - (n - 1000)), sizes)
    assert len(state.history) == LIMITS.max_history
    decisions = max(decision for decision, _ in sizes)
    states = max(journal for _, journal in sizes)
    print(
        f"record bounds: largest decision {decisions:,} bytes, largest changelog record "
        f"{states:,} bytes (limit {RECORD_BYTES:,}); claims budget {LIMITS.max_claim_bytes:,} "
        f"bytes, largest claim {held_bytes(state.claims[-1]):,} bytes, "
        f"{len(state.claims)} kept"
    )
    assert max(decisions, states) <= RECORD_BYTES


def test_a_timestamp_value_of_year_one_keeps_four_digits_in_every_output() -> None:
    """In the decision's value and its evidence, as the decisions topic carries them (Avro) and
    as the web API serves them (JSON)."""
    data = {
        "claim_id": "renewal",
        "subject": "contract:1",
        "field": "subscription.renews_at",
        "status": "present",
        "value": "0001-01-01T00:30:00+00:30",
        "source": "crm",
        "observed_at": NOW,
    }
    admitted = _admitted(data)
    assert admitted is not None
    step = add_claim(None, admitted, _rules(admitted), POLICY.version, NOW, LIMITS)
    assert step.emitted is not None
    sent = CODEC.decode(Decision, WRITER(step.emitted))
    served = sent.model_dump(mode="json")
    assert sent.value == served["value"] == "0001-01-01T00:00:00.000000Z"
    assert served["evidence"][0]["value"] == "0001-01-01T00:00:00.000000Z"
