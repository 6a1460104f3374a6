"""Normalization, one type at a time: a value either normalizes or is rejected with a reason."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.admission.normalize import (
    canonical_value,
    normalize_string,
    normalize_value,
    statement_order,
    values_agree,
)
from streams.core.records.contracts import Money, RejectReason, Value
from streams.core.records.errors import ContractError
from streams.core.records.policy import FieldRules, Policy, StringCase, load_policy
from tests.support.builders import REPO

EXAMPLE: Policy = load_policy(REPO / "examples" / "policy.yaml")


def rules(policy: Policy, field: str) -> FieldRules:
    found = policy.rules_for(field)
    assert found is not None
    return found


def rejected(value: Value, unit: str | None, field_rules: FieldRules) -> RejectReason:
    with pytest.raises(ContractError) as caught:
        normalize_value(value, unit, field_rules)
    return caught.value.reason


def test_money_in_minor_units_with_explicit_currency(policy: Policy) -> None:
    balance = rules(policy, "account.balance")
    assert normalize_value(Money(amount_minor=1250, currency=" usd "), None, balance) == Money(
        amount_minor=1250, currency="USD"
    )
    assert (
        rejected(Money(amount_minor=1250, currency="EUR"), None, balance)
        is RejectReason.UNIT_MISMATCH
    )
    assert rejected(12.50, None, balance) is RejectReason.TYPE_MISMATCH
    assert (
        rejected(Money(amount_minor=1, currency="USD"), "EUR", balance)
        is RejectReason.UNIT_MISMATCH
    )


def test_numbers_convert_units_and_compare_with_tolerance(policy: Policy) -> None:
    latency = rules(policy, "api.latency")
    assert normalize_value(0.25, "s", latency) == 250.0
    assert normalize_value(250, "milliseconds", latency) == 250.0
    assert rejected(250, None, latency) is RejectReason.UNIT_MISMATCH
    assert rejected(250, "MB", latency) is RejectReason.UNIT_MISMATCH
    assert rejected(float("nan"), "ms", latency) is RejectReason.INVALID_VALUE
    assert rejected(float("inf"), "ms", latency) is RejectReason.INVALID_VALUE
    assert rejected(True, "ms", latency) is RejectReason.TYPE_MISMATCH
    assert rejected("250", "ms", latency) is RejectReason.TYPE_MISMATCH
    assert values_agree(250.0, 250.5, latency.tolerance)
    assert not values_agree(250.0, 250.6, latency.tolerance)


def test_point_one_plus_point_two_equals_point_three() -> None:
    assert values_agree(0.1 + 0.2, 0.3, 0.0)
    assert not values_agree(0.3, 0.31, 0.0)


def test_integers(policy: Policy) -> None:
    seats = rules(policy, "contract.seats")
    assert normalize_value(25, None, seats) == 25
    assert normalize_value(25.0, None, seats) == 25
    assert rejected(25.5, None, seats) is RejectReason.INVALID_VALUE
    assert rejected(2**70, None, seats) is RejectReason.INVALID_VALUE
    assert rejected("25", None, seats) is RejectReason.TYPE_MISMATCH
    assert rejected(25, "ms", seats) is RejectReason.UNIT_MISMATCH


def test_strings_follow_the_documented_whitespace_and_case_rule(policy: Policy) -> None:
    address = rules(policy, "customer.shipping_address")
    assert normalize_value("  1  Main\tStreet\n", None, address) == "1 Main Street"
    assert normalize_value("Cafe\u0301", None, address) == "Caf\u00e9"  # NFC
    assert normalize_value("Main Street", None, address) != normalize_value(
        "main street", None, address
    )
    assert rejected("x" * 5000, None, address) is RejectReason.TOO_LARGE


def test_a_personal_fields_values_arrive_sealed_and_compare_as_sent(policy: Policy) -> None:
    fields = {**policy.fields}
    fields["customer.shipping_address"] = fields["customer.shipping_address"].model_copy(
        update={"personal": True}
    )
    personal = Policy.model_validate({**policy.model_dump(), "fields": fields})
    address = rules(personal, "customer.shipping_address")
    sealed = "csp1:k1:AJl2BuvPh1JKrezs3R7rQG6EEWKmipX8A6ShycLxqRBuv"
    assert normalize_value(sealed, None, address) == sealed
    assert rejected("1 Main Street", None, address) is RejectReason.INVALID_VALUE
    assert rejected(7, None, address) is RejectReason.TYPE_MISMATCH
    with pytest.raises(ValueError, match="a personal field is a string whose case is preserved"):
        Policy.model_validate(
            {**policy.model_dump(), "fields": {"x": {"type": "integer", "personal": True}}}
        )


def test_enums_fold_case_and_report_the_policy_spelling(policy: Policy) -> None:
    status = rules(policy, "order.payment_status")
    assert normalize_value(" PAID ", None, status) == "paid"
    assert rejected("settled", None, status) is RejectReason.INVALID_VALUE
    assert rejected(1, None, status) is RejectReason.TYPE_MISMATCH


def test_booleans_are_true_or_false_only(policy: Policy) -> None:
    verified = rules(policy, "customer.email_verified")
    assert normalize_value(False, None, verified) is False
    assert rejected("yes", None, verified) is RejectReason.TYPE_MISMATCH
    assert rejected(1, None, verified) is RejectReason.TYPE_MISMATCH


def test_timestamps_become_utc(policy: Policy) -> None:
    renews = rules(policy, "subscription.renews_at")
    assert (
        normalize_value("2026-12-01T09:00:00+02:00", None, renews) == "2026-12-01T07:00:00.000000Z"
    )
    assert normalize_value("2026-12-01T07:00:00Z", None, renews) == "2026-12-01T07:00:00.000000Z"
    assert rejected("2026-12-01T07:00:00", None, renews) is RejectReason.INVALID_VALUE
    assert rejected("next tuesday", None, renews) is RejectReason.INVALID_VALUE


def test_empty_values_are_tool_errors(policy: Policy) -> None:
    assert rejected(None, None, rules(policy, "contract.seats")) is RejectReason.EMPTY_VALUE
    assert (
        rejected("  ", None, rules(policy, "customer.shipping_address")) is RejectReason.EMPTY_VALUE
    )


_spellings = st.text(alphabet=" aAbBéÉ\u0065\u0301\t", max_size=4)


@settings(max_examples=300, deadline=None)
@given(
    allowed=st.lists(_spellings.filter(str.strip), min_size=1, max_size=4),
    raw=_spellings,
    case=st.sampled_from(list(StringCase)),
)
def test_a_compiled_enum_accepts_and_spells_as_comparing_every_allowed_value(
    allowed: list[str], raw: str, case: StringCase
) -> None:
    """The enum's spellings are normalized once per field; the answer is the first allowed
    value that normalizes like the claim's, as comparing them one by one gives."""
    payment = rules(EXAMPLE, "order.payment_status")
    assert normalize_value("PAID", None, payment) == "paid"  # compiled before the copy below
    enum_rules = payment.model_copy(update={"values": tuple(allowed), "case": case})
    wanted = normalize_string(raw, case)
    expected = next((a for a in allowed if normalize_string(a, case) == wanted), None)
    if not raw.strip():
        assert rejected(raw, None, enum_rules) is RejectReason.EMPTY_VALUE
    elif expected is None:
        assert rejected(raw, None, enum_rules) is RejectReason.INVALID_VALUE
    else:
        assert normalize_value(raw, None, enum_rules) == expected


class _Label(str):
    """A str subclass, as a value may be."""


_ANY_VALUE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(),
    st.text().map(_Label),
    st.builds(Money, amount_minor=st.integers(), currency=st.text()),
)


@given(st.sampled_from(["present", "absent", "unknown"]), _ANY_VALUE)
def test_statement_order_spells_a_value_as_the_sorted_json_encoder_does(
    status: str, value: Value
) -> None:
    """The order's text is the canonical value's `json.dumps(..., sort_keys=True)`, written
    without the encoder; numbers sort by their float instead."""
    order = statement_order(status, value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        status_of, kind, number, text = order
        assert (status_of, kind, text) == (status, "number", "")
        assert number == float(value) or (math.isnan(number) and math.isnan(value))
    else:
        text = json.dumps(canonical_value(value), sort_keys=True)
        assert order == (status, type(value).__name__, 0.0, text)
