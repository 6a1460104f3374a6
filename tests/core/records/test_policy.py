"""Policy files: validated with errors that name the file, the key and the problem."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from streams.core.admission.intake import admit
from streams.core.records.contracts import Authority, RejectReason
from streams.core.records.errors import ContractError, PolicyError
from streams.core.records.policy import OnConflict, Policy, load_policy
from tests.support.builders import NOW, claim

MINIMAL = """
version: "t1"
sources:
  billing-api: {authority: system_of_record}
fields:
  order.payment_status: {type: enum, values: [paid, unpaid], freshness: 60s}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    return path


def test_the_shipped_policy_is_valid_and_defaults_fill_in(policy: Policy) -> None:
    seats = policy.rules_for("contract.seats")
    assert seats is not None
    assert seats.freshness is None  # `freshness: none` is never stale
    balance = policy.rules_for("account.balance")
    assert balance is not None
    assert (balance.freshness, balance.on_conflict) == (timedelta(seconds=60), OnConflict.BLOCK)
    assert policy.rules_for("no.such.field") is None


@pytest.mark.parametrize(
    ("text", "key", "problem"),
    [
        (MINIMAL.replace("60s", "soon"), "fields.order.payment_status.freshness", "not a duration"),
        (
            MINIMAL.replace("values: [paid, unpaid], ", ""),
            "fields.order.payment_status",
            "enum field needs",
        ),
        (
            MINIMAL.replace("system_of_record", "supreme"),
            "sources.billing-api.authority",
            "Input should be",
        ),
        (MINIMAL.replace('version: "t1"', ""), "version", "Field required"),
        (MINIMAL + "colour: blue\n", "colour", "Extra inputs"),
        (
            MINIMAL.replace("freshness: 60s", "freshness: 60s, authorities: {nobody: cached}"),
            "(top)",
            "unknown source 'nobody'",
        ),
        (MINIMAL.replace("system_of_record", "asserted"), "sources.billing-api", "source_class"),
    ],
)
def test_errors_name_file_key_and_problem(
    tmp_path: Path, text: str, key: str, problem: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(PolicyError) as caught:
        load_policy(path)
    message = str(caught.value)
    assert str(path) in message
    assert key in message
    assert problem in message


def test_unreadable_and_non_mapping_files(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="cannot read"):
        load_policy(tmp_path / "missing.yaml")
    with pytest.raises(PolicyError, match="not valid YAML"):
        load_policy(write(tmp_path, "version: [unclosed"))
    with pytest.raises(PolicyError, match="a policy is a mapping"):
        load_policy(write(tmp_path, "- just a list"))


def test_authority_comes_from_the_policy_and_per_field_overrides(tmp_path: Path) -> None:
    policy = load_policy(
        write(
            tmp_path,
            MINIMAL + "  account.balance: {type: money, currency: USD,"
            " authorities: {billing-api: cached}}\n",
        )
    )
    assert admit(claim(1), policy, NOW).authority is Authority.SYSTEM_OF_RECORD
    money = claim(2, field="account.balance", value={"amount_minor": 5, "currency": "USD"})
    assert admit(money, policy, NOW).authority is Authority.CACHED


def test_unknown_sources_are_rejected_unless_there_is_a_catch_all(tmp_path: Path) -> None:
    policy = load_policy(write(tmp_path, MINIMAL))
    with pytest.raises(ContractError) as caught:
        admit(claim(1, source="mystery"), policy, NOW)
    assert caught.value.reason is RejectReason.UNKNOWN_SOURCE
    catch_all = load_policy(
        write(tmp_path, MINIMAL.replace("sources:\n", 'sources:\n  "*": {authority: derived}\n'))
    )
    assert admit(claim(1, source="mystery"), catch_all, NOW).authority is Authority.DERIVED


def test_intake_rejects_future_observations_and_unknown_fields(policy: Policy) -> None:
    with pytest.raises(ContractError) as caught:
        admit(claim(1, observed_at=NOW + timedelta(minutes=5)), policy, NOW)
    assert caught.value.reason is RejectReason.FUTURE_OBSERVATION
    admit(claim(2, observed_at=NOW + timedelta(seconds=10)), policy, NOW)  # within the skew
    with pytest.raises(ContractError) as caught:
        admit(claim(3, field="order.colour"), policy, NOW)
    assert caught.value.reason is RejectReason.UNKNOWN_FIELD
    with pytest.raises(ContractError) as caught:
        admit(claim(4, status="not_found", value="paid"), policy, NOW)
    assert caught.value.reason is RejectReason.INVALID_VALUE
