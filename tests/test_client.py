"""Building a person's resolution: checked against the policy before anything is published."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from streams.client import build_resolution
from streams.core.records.contracts import ClaimStatus, Money
from streams.core.records.errors import ClaimstreamError
from streams.core.records.policy import load_policy
from tests.support.builders import REPO

POLICY = load_policy(REPO / "examples" / "policy.yaml")
AT = datetime(2026, 11, 30, 9, 14, tzinfo=UTC)


def test_a_resolution_carries_its_author_note_and_the_fields_normalized_value() -> None:
    made = build_resolution(
        POLICY, "invoice:42", "order.payment_status", decided_by=" Ann ", decided_at=AT,
        value="PAID", note="the ledger is right", resolves_decision_id="dec_1",
    )  # fmt: skip
    assert (made.decided_by, made.note, made.decided_at) == ("Ann", "the ledger is right", AT)
    assert made.resolves_decision_id == "dec_1"
    assert made.resolution_id.startswith("res-")
    money = build_resolution(
        POLICY, "account:7", "account.balance", decided_by="Ann", decided_at=AT,
        value={"amount_minor": 1250, "currency": "USD"},
    )  # fmt: skip
    assert (money.value, money.unit) == (Money(amount_minor=1250, currency="USD"), "USD")
    absent = build_resolution(
        POLICY, "invoice:42", "order.payment_status", decided_by="Ann", decided_at=AT,
        status=ClaimStatus.NOT_FOUND,
    )  # fmt: skip
    assert (absent.status, absent.value) == (ClaimStatus.NOT_FOUND, None)


@pytest.mark.parametrize(
    ("field", "options", "problem"),
    [
        ("order.payment_status", {"value": "bogus"}, "not one of"),
        ("no.such_field", {"value": 1}, "not in the policy"),
        ("order.payment_status", {"value": "paid", "decided_by": "  "}, "decided_by"),
        ("order.payment_status", {"status": ClaimStatus.ERROR}, "present .* or not_found"),
    ],
)
def test_a_resolution_the_worker_would_refuse_is_refused_here(
    field: str, options: dict[str, object], problem: str
) -> None:
    arguments: dict[str, object] = {"decided_by": "Ann", "decided_at": AT, **options}
    with pytest.raises(ClaimstreamError, match=problem):
        build_resolution(POLICY, "invoice:42", field, **arguments)  # type: ignore[arg-type]
