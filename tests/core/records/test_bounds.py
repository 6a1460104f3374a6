"""The bounds of the contract (streams/core/records/bounds.py): every text a decision or a key's
state repeats is bounded at intake (`too_large` past it); a key's kept claims are bounded in bytes,
those that no longer count dropped first and the decision naming them; numbers stay finite through
unit conversion, and timestamp values keep a four-digit year."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.admission.intake import AdmittedClaim, admit, admit_resolution
from streams.core.admission.normalize import normalize_value
from streams.core.keys.state import KeyState, Limits
from streams.core.keys.transitions import add_claim, adopt_policy
from streams.core.keys.upkeep import RefusedClaim, held_bytes
from streams.core.records.bounds import (
    ATTRIBUTE_KEY_CHARS,
    ATTRIBUTE_VALUE_CHARS,
    ATTRIBUTES,
    ID_CHARS,
    MAX_CLAIM_BYTES,
    NOTE_CHARS,
    SUBJECT_CHARS,
    VALUE_CHARS,
    claim_bytes,
)
from streams.core.records.contracts import Claim, EvidenceRole, RejectReason, Resolution
from streams.core.records.errors import ContractError, PolicyError
from streams.core.records.policy import FieldRules, StringCase, parse_policy
from tests.support.builders import NOW, POLICY, REPO, claim

ASTRAL = "\U0001f600"  # four bytes in UTF-8
_RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


def _refused(data: Claim, now: datetime = NOW) -> ContractError:
    with pytest.raises(ContractError) as caught:
        admit(data, POLICY, now)
    return caught.value


def _rules(field: str) -> FieldRules:
    rules = POLICY.rules_for(field)
    assert rules is not None
    return rules


# -- the texts a decision repeats, bounded at intake ----------------------------------------------

_TEXTS = {
    "claim_id": ID_CHARS,
    "subject": SUBJECT_CHARS,
    "replica": ID_CHARS,
    "lineage": ID_CHARS,
    "scope": ID_CHARS,
    "trace_id": ID_CHARS,
    "producer": ID_CHARS,
}


@pytest.mark.parametrize(("name", "most"), sorted(_TEXTS.items()))
def test_a_text_at_its_bound_is_admitted_and_one_past_it_is_too_large(name: str, most: int) -> None:
    admit(claim(1, **{name: ASTRAL * most}), POLICY, NOW)
    error = _refused(claim(1, **{name: "r" * (most + 1)}))
    assert error.reason is RejectReason.TOO_LARGE
    assert error.detail == f"{name} is {most + 1:,} characters; the contract allows {most:,}"


@pytest.mark.parametrize("name", ["field", "source", "unit"])
def test_a_name_the_policy_must_know_is_too_large_before_it_is_unknown(name: str) -> None:
    """A field, source or unit past its bound is refused for its size, not looked up: the
    detail stays short, whatever was sent."""
    error = _refused(claim(1, **{name: "x" * 200_000}))
    assert error.reason is RejectReason.TOO_LARGE
    assert error.detail.startswith(f"{name} is 200,000 characters")


def test_attributes_are_bounded_in_count_key_and_value() -> None:
    most = {f"k{n}": "v" * ATTRIBUTE_VALUE_CHARS for n in range(ATTRIBUTES)}
    admit(claim(1, attributes=most), POLICY, NOW)
    assert _refused(claim(1, attributes={**most, "one-more": ""})).detail == (
        f"attributes is {ATTRIBUTES + 1} entries; the contract allows {ATTRIBUTES}"
    )
    key = _refused(claim(1, attributes={"k" * (ATTRIBUTE_KEY_CHARS + 1): "v"}))
    assert key.reason is RejectReason.TOO_LARGE
    assert "an attribute's key" in key.detail
    value = _refused(claim(1, attributes={"region": "v" * (ATTRIBUTE_VALUE_CHARS + 1)}))
    assert value.reason is RejectReason.TOO_LARGE
    assert value.detail.startswith("attribute 'region' is 1,025 characters")


def test_a_string_value_is_bounded_as_sent_and_as_normalized() -> None:
    address = _rules("customer.shipping_address")
    assert normalize_value(ASTRAL * VALUE_CHARS, None, address) == ASTRAL * VALUE_CHARS
    with pytest.raises(ContractError) as caught:
        normalize_value("x" * (VALUE_CHARS + 1), None, address)
    assert caught.value.reason is RejectReason.TOO_LARGE
    folded = address.model_copy(update={"case": StringCase.FOLD})
    with pytest.raises(ContractError) as caught:
        normalize_value("\u00df" * VALUE_CHARS, None, folded)  # ß folds to ss: twice as long
    assert caught.value.reason is RejectReason.TOO_LARGE
    assert "normalized" in caught.value.detail


def test_a_resolution_is_bounded_as_a_claim_is() -> None:
    base: dict[str, Any] = {
        "resolution_id": "r1",
        "subject": "invoice:42",
        "field": "order.payment_status",
        "value": "paid",
        "decided_by": "ann",
        "decided_at": NOW,
    }
    admit_resolution(Resolution(**{**base, "note": "n" * NOTE_CHARS}), POLICY, NOW)
    for name, most in (
        ("note", NOTE_CHARS),
        ("decided_by", ID_CHARS),
        ("resolution_id", ID_CHARS),
        ("resolves_decision_id", ID_CHARS),
    ):
        with pytest.raises(ContractError) as caught:
            admit_resolution(Resolution(**{**base, name: "x" * (most + 1)}), POLICY, NOW)
        assert caught.value.reason is RejectReason.TOO_LARGE, name


def test_the_policy_texts_a_decision_repeats_are_bounded_too() -> None:
    long = "x" * (ID_CHARS + 1)
    for edit in (
        lambda p: p.update(version=long),
        lambda p: p["sources"]["crm"].update(lineage=long),
        lambda p: p["fields"]["api.latency"].update(unit=long),
    ):
        data = yaml.safe_load((REPO / "examples" / "policy.yaml").read_text())
        edit(data)
        with pytest.raises(PolicyError, match="at most 256 characters"):
            parse_policy(data)


# -- numbers stay finite, timestamps keep four digits ---------------------------------------------


def test_a_number_that_overflows_in_conversion_is_invalid_not_infinite() -> None:
    timeout = _rules("service.retry_timeout")  # in s
    with pytest.raises(ContractError) as caught:
        normalize_value(1e308, "h", timeout)
    assert caught.value.reason is RejectReason.INVALID_VALUE
    assert "beyond the largest number a double holds" in caught.value.detail
    error = _refused(claim(1, field="service.retry_timeout", value=1e308, unit="hours"))
    assert error.reason is RejectReason.INVALID_VALUE
    # Rounding to 15 digits alone would round the largest double up past it.
    with pytest.raises(ContractError):
        normalize_value(1.7976931348623157e308, "s", timeout)
    # An integer past a double's range is refused, not an error while converting it.
    for field, unit in (("service.retry_timeout", "s"), ("contract.seats", None)):
        with pytest.raises(ContractError) as caught:
            normalize_value(10**400, unit, _rules(field))
        assert caught.value.reason is RejectReason.INVALID_VALUE, field
    # A product that overflows where the result does not (hours in days) still converts.
    days = timeout.model_copy(update={"unit": "d"})
    assert normalize_value(1e308, "h", days) == pytest.approx(1e308 / 24)


@settings(max_examples=300, deadline=None)
@given(
    number=st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(10**320), 10**320),
    unit=st.sampled_from(["ns", "ms", "s", "min", "h", "d", "B", "GiB", "%", "ratio"]),
    field_unit=st.sampled_from(["ns", "s", "d", "B", "GiB", "ratio", "%"]),
)
def test_no_number_normalizes_to_infinity(number: float, unit: str, field_unit: str) -> None:
    rules = _rules("service.retry_timeout").model_copy(update={"unit": field_unit})
    try:
        value = normalize_value(number, unit, rules)
    except ContractError as error:
        reason = error.reason
        assert reason in (RejectReason.INVALID_VALUE, RejectReason.UNIT_MISMATCH)
        return
    assert isinstance(value, float)
    assert abs(value) <= 1.7976931348623157e308


def test_an_epoch_past_64_bits_is_invalid() -> None:
    assert _refused(claim(1, epoch=2**63)).reason is RejectReason.INVALID_VALUE
    admit(claim(1, epoch=2**63 - 1), POLICY, NOW)


def test_a_timestamp_value_keeps_a_four_digit_year() -> None:
    renews = _rules("subscription.renews_at")
    assert normalize_value("0001-01-01T00:00:00Z", None, renews) == "0001-01-01T00:00:00.000000Z"
    assert normalize_value("0999-12-31T23:00:00-01:00", None, renews) == (
        "1000-01-01T00:00:00.000000Z"
    )
    for outside in ("0001-01-01T00:00:00+01:00", "9999-12-31T23:30:00-01:00", "0000-01-01T00:00Z"):
        with pytest.raises(ContractError) as caught:
            normalize_value(outside, None, renews)
        assert caught.value.reason is RejectReason.INVALID_VALUE, outside


@settings(max_examples=200, deadline=None)
@given(
    moment=st.datetimes(
        min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
    ),
    offset_minutes=st.integers(-23 * 60, 23 * 60),
)
def test_every_timestamp_value_is_rfc_3339_with_four_digits(
    moment: datetime, offset_minutes: int
) -> None:
    from datetime import timezone

    local = moment.astimezone(timezone(timedelta(minutes=offset_minutes)))
    value = normalize_value(local.isoformat(), None, _rules("subscription.renews_at"))
    assert isinstance(value, str)
    assert _RFC3339.match(value), value
    assert datetime.fromisoformat(value) == moment


# -- a key's kept claims, bounded in bytes --------------------------------------------------------


def _sized(n: int, seconds_ago: float, value: str = "paid") -> AdmittedClaim:
    """A claim that weighs about 40 KB: its attributes near their bound."""
    attributes = {f"a{i}": "v" * ATTRIBUTE_VALUE_CHARS for i in range(ATTRIBUTES)}
    return admit(
        claim(
            n, value=value, attributes=attributes, observed_at=NOW - timedelta(seconds=seconds_ago)
        ),
        POLICY,
        NOW,
    )


def test_claim_bytes_bounds_the_largest_claim_within_the_contract() -> None:
    admitted = admit(
        claim(
            1,
            claim_id=ASTRAL * ID_CHARS,
            field="customer.shipping_address",
            value=ASTRAL * VALUE_CHARS,
            replica=ASTRAL * ID_CHARS,
            lineage=ASTRAL * ID_CHARS,
            scope=ASTRAL * ID_CHARS,
            trace_id=ASTRAL * ID_CHARS,
            producer=ASTRAL * ID_CHARS,
            attributes={
                f"{n:03d}" + ASTRAL * (ATTRIBUTE_KEY_CHARS - 3): ASTRAL * ATTRIBUTE_VALUE_CHARS
                for n in range(ATTRIBUTES)
            },
        ),
        POLICY,
        NOW,
    )
    weight = claim_bytes(admitted.claim, admitted.value, admitted.lineage, admitted.scope_key)
    assert weight <= MAX_CLAIM_BYTES
    assert held_bytes(admitted) == weight


def test_a_key_past_its_byte_budget_drops_what_no_longer_counts_first_and_says_so() -> None:
    rules = _rules("order.payment_status")  # fresh for 60 s
    stale = _sized(0, seconds_ago=3600)
    budget = 3 * held_bytes(stale) + 100  # three such claims fit, four do not
    limits = Limits(max_claim_bytes=budget)
    state: KeyState | None = None
    for admitted in (stale, _sized(1, 3), _sized(2, 2)):
        state = add_claim(state, admitted, rules, POLICY.version, NOW, limits).state
    assert state is not None
    assert [a.claim_id for a in state.claims] == ["c0", "c1", "c2"]
    step = add_claim(state, _sized(3, 1), rules, POLICY.version, NOW, limits)
    kept = [a.claim_id for a in step.state.claims]
    assert kept == ["c1", "c2", "c3"]  # the stale one went, not the oldest fresh one
    assert sum(map(held_bytes, step.state.claims)) <= budget
    decision = step.arbitration.decision
    assert {e.claim_id for e in decision.evidence} == {"c1", "c2", "c3"}
    assert decision.reason.endswith(f"; claims dropped to keep the key within {budget:,} bytes: c0")
    # When every claim counts, the oldest goes; never the one that just arrived.
    step = add_claim(step.state, _sized(4, 30), rules, POLICY.version, NOW, limits)
    assert [a.claim_id for a in step.state.claims] == ["c2", "c3", "c4"]
    assert step.arbitration.roles["c4"] is not EvidenceRole.WINNER  # older: it does not win


def test_claims_the_policy_refuses_are_dropped_for_size_before_any_that_counts() -> None:
    rules = _rules("order.payment_status")
    kept = (_sized(1, 3), _sized(2, 2))
    refused = (RefusedClaim(_sized(0, 1), "unknown_source: source 'billing-api' ..."),)
    limits = Limits(max_claim_bytes=2 * held_bytes(kept[0]) + 100)
    state = KeyState(subject="invoice:42", field="order.payment_status", policy_version="old")
    step = adopt_policy(state, kept, refused, rules, POLICY.version, NOW, limits)
    assert step.state.refused == ()
    assert [a.claim_id for a in step.state.claims] == ["c1", "c2"]
    assert "claims dropped to keep the key within" in step.arbitration.verdict.reason
    assert "kept claims policy" not in step.arbitration.verdict.reason  # none is kept now


def test_a_key_within_its_budget_decides_as_before() -> None:
    rules = _rules("order.payment_status")
    state: KeyState | None = None
    for n in range(20):
        step = add_claim(state, admit(claim(n), POLICY, NOW), rules, POLICY.version, NOW)
        state = step.state
        assert "dropped" not in step.arbitration.verdict.reason
    assert state is not None
    assert len(state.claims) == Limits().max_claims
