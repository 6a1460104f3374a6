"""The nine fixture cases of seed 000 ("Testing disagreement paths") and the engine's other
rules."""

from __future__ import annotations

from datetime import timedelta

import pytest

from streams.core.admission.intake import admit, parse_claim
from streams.core.records.contracts import RejectReason
from streams.core.records.errors import ContractError
from streams.core.records.policy import Policy
from tests.support.builders import NOW, claim, decide, roles


def test_1_single_fresh_claim_resolves(policy: Policy) -> None:
    decision = decide(policy, claim(1)).decision
    assert (decision.outcome, decision.value, decision.action) == ("resolved", "paid", "continue")
    assert roles(decision) == {"c1": "winner"}
    assert decision.policy_version == "2026-11-29.1"


def test_2_single_stale_claim_is_insufficient(policy: Policy) -> None:
    decision = decide(policy, claim(1, observed_at=NOW - timedelta(seconds=61))).decision
    assert (decision.outcome, decision.value, decision.reason) == (
        "insufficient",
        None,
        "no_fresh_claims",
    )
    assert roles(decision) == {"c1": "stale"}
    assert decision.action == "block"


def test_3_higher_authority_wins_and_lower_is_contested(policy: Policy) -> None:
    decision = decide(
        policy,
        claim(1, value="paid"),
        claim(2, value="overdue", source="reporting-replica"),
    ).decision
    assert (decision.outcome, decision.value) == ("resolved", "paid")
    assert roles(decision) == {"c1": "winner", "c2": "contested"}
    assert decision.reason == "system_of_record_precedence"


def test_4_same_authority_different_values_conflict_without_fall_through(policy: Policy) -> None:
    decision = decide(
        policy,
        claim(1, value="paid"),
        claim(2, value="unpaid", source="crm"),
        # A weaker source agreeing with one side must not break the tie.
        claim(3, value="paid", source="reporting-replica"),
    ).decision
    assert (decision.outcome, decision.conflict_kind, decision.value) == ("conflict", "value", None)
    assert decision.action == "block"
    assert set(roles(decision).values()) == {"contested"}


def test_5_same_value_from_two_sources_is_corroborated(policy: Policy) -> None:
    decision = decide(policy, claim(1), claim(2, source="crm")).decision
    assert decision.outcome == "resolved"
    assert sorted(roles(decision).values()) == ["corroborating", "winner"]


def test_6_same_lineage_counts_once(policy: Policy) -> None:
    strict = policy.model_copy(
        update={
            "defaults": policy.defaults.model_copy(update={"min_independent_sources": 2}),
        }
    )
    # billing-api and ledger-service share the `ledger` lineage: one source with two names.
    same_lineage = decide(strict, claim(1), claim(2, source="ledger-service")).decision
    assert same_lineage.outcome == "insufficient"
    assert same_lineage.reason == "too_few_independent_sources"
    independent = decide(strict, claim(1), claim(2, source="crm")).decision
    assert independent.outcome == "resolved"


def test_7_missing_timestamp_is_rejected_at_the_contract_boundary() -> None:
    data = claim(1).model_dump(mode="json")
    del data["observed_at"]
    with pytest.raises(ContractError) as caught:
        parse_claim(data)
    assert caught.value.reason is RejectReason.MISSING_PROVENANCE


def test_8_unit_mismatch_is_rejected_by_normalization_not_arbitrated(policy: Policy) -> None:
    cents_as_dollars = claim(
        1, field="account.balance", value={"amount_minor": 1250, "currency": "EUR"}
    )
    with pytest.raises(ContractError) as caught:
        admit(cents_as_dollars, policy, NOW)
    assert caught.value.reason is RejectReason.UNIT_MISMATCH
    seconds_for_ms = claim(2, field="api.latency", value=0.2, unit="kg")
    with pytest.raises(ContractError) as caught:
        admit(seconds_for_ms, policy, NOW)
    assert caught.value.reason is RejectReason.UNIT_MISMATCH


def test_9_tool_error_disguised_as_empty_result_is_caught_by_schema(policy: Policy) -> None:
    for empty in (None, "", "   "):
        with pytest.raises(ContractError) as caught:
            admit(claim(1, value=empty), policy, NOW)
        assert caught.value.reason is RejectReason.EMPTY_VALUE
