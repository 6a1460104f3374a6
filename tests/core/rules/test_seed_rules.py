"""The brief's arbitration rules, each held exactly (issue 10), in the engine and a key's state."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest

from streams.core.admission.intake import admit, admit_resolution
from streams.core.admission.normalize import normalize_value
from streams.core.keys.belief import current_decision
from streams.core.keys.state import KeyState
from streams.core.keys.transitions import add_claim
from streams.core.reading.replay import replay
from streams.core.records.contracts import Claim, RejectReason, Resolution
from streams.core.records.errors import ContractError
from streams.core.records.policy import Policy
from streams.core.rules.engine import RULES
from tests.support.builders import NOW, REPO, claim, decide, roles

HOUR = timedelta(hours=1)


def timeout(n: int, value: float, unit: str = "s", **overrides: Any) -> Claim:
    """A claim about service.retry_timeout (seconds, never stale, re-observe epoch changes)."""
    data: dict[str, Any] = {
        "field": "service.retry_timeout",
        "source": "config-service",
        "value": value,
        "unit": unit,
    }
    return claim(n, **(data | overrides))


def with_defaults(policy: Policy, **fields: Any) -> Policy:
    return policy.model_copy(update={"defaults": policy.defaults.model_copy(update=fields)})


# 1. Tolerance and units across an epoch boundary ---------------------------------------------


def test_the_same_value_in_another_unit_across_epochs_is_no_change(policy: Policy) -> None:
    decided = decide(
        policy,
        timeout(1, 0.7, epoch=1, observed_at=NOW - HOUR),
        timeout(2, 700, unit="ms", epoch=2),
    )
    assert decided.decision.outcome == "resolved"
    assert (decided.epoch_change, decided.reobserve) == (None, None)
    assert roles(decided.decision) == {"c1": "superseded", "c2": "winner"}


def test_a_value_within_tolerance_across_epochs_is_no_change(policy: Policy) -> None:
    def latency(n: int, value: float, epoch: int) -> Claim:
        return claim(
            n, field="api.latency", source="apm-agent", value=value, unit="ms", epoch=epoch
        )

    decided = decide(policy, latency(1, 200.0, 1), latency(2, 200.4, 2))
    assert decided.decision.outcome == "resolved"
    assert (decided.epoch_change, decided.reobserve) == (None, None)


# 2. No float noise ---------------------------------------------------------------------------


def test_unit_noise_never_reaches_the_value_or_the_id(policy: Policy) -> None:
    seconds = decide(policy, claim(1, field="api.latency", source="apm-agent", value=0.7, unit="s"))
    millis = decide(policy, claim(1, field="api.latency", source="apm-agent", value=700, unit="ms"))
    assert seconds.decision.value == 700.0
    assert repr(seconds.decision.value) == "700.0"
    assert seconds.decision_id == millis.decision_id


def test_an_integer_field_accepts_a_whole_number_after_conversion(policy: Policy) -> None:
    rules = policy.rules_for("contract.seats")
    assert rules is not None
    ms_rules = rules.model_copy(update={"unit": "ms"})
    assert normalize_value(0.7, "s", ms_rules) == 700
    with pytest.raises(ContractError):
        normalize_value(0.7, None, rules)


# 3. A later period closes an older one, for good ---------------------------------------------


def seats(n: int, value: int, **overrides: Any) -> Claim:
    return claim(n, **({"field": "contract.seats", "source": "crm", "value": value} | overrides))


def test_an_ended_period_followed_by_a_later_one_is_superseded_not_stale(policy: Policy) -> None:
    decision = decide(
        policy,
        seats(1, 20, valid_from=NOW - 3 * HOUR, valid_to=NOW - 2 * HOUR),
        seats(2, 25, valid_from=NOW - 2 * HOUR),
    ).decision
    assert (decision.outcome, decision.value) == ("resolved", 25)
    assert roles(decision) == {"c1": "superseded", "c2": "winner"}


def test_when_the_latest_period_ended_the_older_value_never_comes_back(policy: Policy) -> None:
    decision = decide(
        policy,
        seats(1, 20, valid_from=NOW - 3 * HOUR),
        seats(2, 25, valid_from=NOW - 2 * HOUR, valid_to=NOW - HOUR),
    ).decision
    assert (decision.outcome, decision.reason) == ("insufficient", "no_fresh_claims")
    assert roles(decision) == {"c1": "superseded", "c2": "stale"}


def test_a_period_reaching_into_the_later_one_is_a_disagreement(policy: Policy) -> None:
    decision = decide(
        policy,
        seats(1, 20, valid_from=NOW - 3 * HOUR, valid_to=NOW + HOUR),
        seats(2, 25, valid_from=NOW - 2 * HOUR),
    ).decision
    assert (decision.outcome, decision.conflict_kind) == ("conflict", "value")


def test_a_weaker_later_period_never_closes_a_stronger_statement(policy: Policy) -> None:
    decision = decide(
        policy,
        seats(1, 20, valid_from=NOW - 3 * HOUR),
        seats(2, 25, source="reporting-replica", valid_from=NOW - 2 * HOUR),
    ).decision
    assert (decision.outcome, decision.value) == ("resolved", 20)
    assert roles(decision) == {"c1": "winner", "c2": "contested"}


# 4. Freshness boundary -----------------------------------------------------------------------


def test_a_claim_exactly_as_old_as_the_budget_is_fresh(policy: Policy) -> None:
    budget = timedelta(seconds=60)
    fresh = decide(policy, claim(1, observed_at=NOW - budget)).decision
    stale = decide(policy, claim(1, observed_at=NOW - budget - timedelta(microseconds=1))).decision
    assert (fresh.outcome, roles(fresh)) == ("resolved", {"c1": "winner"})
    assert (stale.outcome, roles(stale)) == ("insufficient", {"c1": "stale"})


# 5. Conflicting duplicates decide the same in stream and replay ------------------------------


def fold(policy: Policy, claims: list[Claim]) -> tuple[KeyState, list[RejectReason]]:
    state: KeyState | None = None
    refused = []
    for c in claims:
        rules = policy.rules_for(c.field)
        assert rules is not None
        step = add_claim(state, admit(c, policy, NOW), rules, policy.version, NOW)
        state = step.state
        if step.refused is not None:
            refused.append(step.refused.reason)
    assert state is not None
    return state, refused


def test_a_reused_claim_id_counts_for_nothing_whatever_the_order(policy: Policy) -> None:
    first = claim(1, value="paid")
    second = claim(1, value="unpaid")
    other = claim(2, source="reporting-replica", value="overdue")
    replayed = replay([c.model_dump_json() for c in (first, second, other)], policy, NOW)
    assert [r.reason for r in replayed.rejections] == [RejectReason.CONFLICTING_DUPLICATE] * 2
    (expected,) = replayed.decisions
    assert (expected.value, roles(expected)) == ("overdue", {"c2": "winner"})
    rules = policy.rules_for("order.payment_status")
    assert rules is not None
    for order in ([first, second, other], [second, other, first], [other, first, second, first]):
        state, refused = fold(policy, order)
        assert refused == [RejectReason.CONFLICTING_DUPLICATE] * (len(order) - 2)
        streamed = current_decision(state, rules, policy.version, NOW)
        assert streamed.decision_id == expected.decision_id
        assert streamed.evidence == expected.evidence


def test_the_same_content_spelled_differently_is_one_claim(policy: Policy) -> None:
    replayed = replay(
        [claim(1, value="PAID").model_dump_json(), claim(1, value=" paid ").model_dump_json()],
        policy,
        NOW,
    )
    assert replayed.rejections == []
    assert roles(replayed.decisions[0]) == {"c1": "winner"}


# 6. A user's assertion is evidence, never proof of state -------------------------------------


def test_an_assertion_never_counts_toward_independent_sources(policy: Policy) -> None:
    strict = with_defaults(policy, min_independent_sources=2)
    decision = decide(
        strict, claim(1), claim(2, source="chat", source_class="user", observed_at=NOW)
    ).decision
    assert (decision.outcome, decision.reason) == ("insufficient", "too_few_independent_sources")


def test_an_assertion_never_confirms_a_cross_epoch_change(policy: Policy) -> None:
    decided = decide(
        policy,
        timeout(1, 5, epoch=1, observed_at=NOW - HOUR),
        timeout(2, 7, epoch=2, observed_at=NOW - timedelta(minutes=2)),
        timeout(3, 7, epoch=2, source="chat", source_class="user"),
    )
    assert decided.decision.outcome == "quarantined"
    assert decided.reobserve is not None


def test_an_assertion_without_an_epoch_does_not_quarantine_an_epoch_field(policy: Policy) -> None:
    decision = decide(
        policy,
        timeout(1, 5, epoch=1),
        timeout(2, 7, source="chat", source_class="user"),
    ).decision
    assert (decision.outcome, decision.value) == ("resolved", 5.0)
    assert roles(decision) == {"c1": "winner", "c2": "contested"}


def test_an_observation_without_an_epoch_still_lacks_provenance(policy: Policy) -> None:
    decision = decide(policy, timeout(1, 5, epoch=1), timeout(2, 7, source="deploy-tool")).decision
    assert (decision.outcome, decision.conflict_kind) == ("quarantined", "provenance")


# 7. Lineage belongs to the operator ----------------------------------------------------------


def test_the_policy_lineage_wins_over_the_payload(policy: Policy) -> None:
    assert admit(claim(1, lineage="my-own"), policy, NOW).lineage == "ledger"
    assert admit(claim(1, source="crm", lineage="crm-db"), policy, NOW).lineage == "crm-db"


def test_a_payload_lineage_cannot_split_a_source(policy: Policy) -> None:
    strict = with_defaults(policy, min_independent_sources=2)
    split = decide(
        strict, claim(1, source="crm", lineage="a"), claim(2, source="crm", lineage="b")
    ).decision
    assert split.reason == "too_few_independent_sources"
    joined = decide(
        strict, claim(1, source="crm", lineage="db"), claim(2, source="order-form", lineage="db")
    ).decision
    assert joined.reason == "too_few_independent_sources"
    independent = decide(strict, claim(1, source="crm"), claim(2, source="order-form")).decision
    assert independent.outcome == "resolved"


# 8. Re-observation by independent sources ----------------------------------------------------


def test_two_independent_observers_confirm_a_change_at_the_same_instant(policy: Policy) -> None:
    decided = decide(
        policy,
        timeout(1, 5, epoch=1, observed_at=NOW - HOUR),
        timeout(2, 7, epoch=2),
        timeout(3, 7, epoch=2, source="crm"),
    )
    assert (decided.decision.outcome, decided.decision.value) == ("resolved", 7.0)
    assert decided.epoch_change is not None
    assert decided.reobserve is None


def test_one_observer_alone_does_not_confirm_a_change(policy: Policy) -> None:
    decided = decide(policy, timeout(1, 5, epoch=1, observed_at=NOW - HOUR), timeout(2, 7, epoch=2))
    assert decided.decision.outcome == "quarantined"


# 9. Resolutions ------------------------------------------------------------------------------


def resolution(value: str, decided_at: Any = NOW - timedelta(seconds=30)) -> Resolution:
    return Resolution(
        resolution_id="r1",
        subject="invoice:42",
        field="order.payment_status",
        value=value,
        decided_by="ana",
        decided_at=decided_at,
    )


CONFLICT = (
    claim(1, observed_at=NOW - timedelta(seconds=40)),
    claim(2, source="crm", value="unpaid", observed_at=NOW - timedelta(seconds=40)),
)


def test_a_newer_agreeing_claim_keeps_the_resolution(policy: Policy) -> None:
    decision = decide(
        policy,
        *CONFLICT,
        claim(3, source="billing-export", value="paid"),
        resolutions=(resolution("paid"),),
    ).decision
    assert (decision.outcome, decision.reason, decision.value) == ("resolved", "manual", "paid")


def test_a_newer_disagreeing_claim_reopens_the_conflict(policy: Policy) -> None:
    decision = decide(
        policy,
        *CONFLICT,
        claim(3, source="billing-export", value="unpaid"),
        resolutions=(resolution("paid"),),
    ).decision
    assert decision.outcome == "conflict"


def test_a_resolution_covers_claims_observed_at_its_instant(policy: Policy) -> None:
    decision = decide(
        policy, *CONFLICT, resolutions=(resolution("paid", NOW - timedelta(seconds=40)),)
    ).decision
    assert decision.reason == "manual"


def test_a_resolution_from_the_future_is_refused(policy: Policy) -> None:
    skew = policy.defaults.max_clock_skew
    assert admit_resolution(resolution("paid", NOW + skew), policy, NOW).value == "paid"
    with pytest.raises(ContractError) as refused:
        admit_resolution(resolution("paid", NOW + skew + timedelta(seconds=1)), policy, NOW)
    assert refused.value.reason is RejectReason.FUTURE_OBSERVATION


# 10. Scope labels ----------------------------------------------------------------------------


def test_scopes_are_compared_normalized(policy: Policy) -> None:
    def latency(n: int, scope: str) -> Claim:
        return claim(n, field="api.latency", source="apm-agent", value=200, unit="ms", scope=scope)

    decision = decide(policy, latency(1, "Server"), latency(2, " server ")).decision
    assert decision.outcome == "resolved"
    assert decide(policy, latency(1, "server"), latency(2, "end to end")).decision.outcome == (
        "conflict"
    )


# 11. Actions ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "action"),
    [
        ("order.payment_status", "block"),  # on_conflict: block
        ("customer.email_verified", "degrade"),  # degrade
        ("api.latency", "degrade"),  # surface
        ("customer.shipping_address", "degrade"),  # most_recent
    ],
)
def test_insufficient_blocks_only_blocking_fields(policy: Policy, field: str, action: str) -> None:
    decision = decide(policy, claim(1, field=field, status="error", value=None)).decision
    assert (decision.outcome, decision.action) == ("insufficient", action)


# The engine reads as its rules ---------------------------------------------------------------


def test_the_explanation_lists_the_engine_rules_in_order() -> None:
    page = REPO / "docs" / "explanation" / "how-a-decision-is-made.md"
    text = page.read_text(encoding="utf-8")
    section = text.split("\n## The rules, in order\n", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^\d+\. \*\*([a-z_]+)\*\*", section, flags=re.MULTILINE)
    assert listed == [rule.name for rule in RULES]


def test_the_web_answer_names_the_previous_decision_not_itself(policy: Policy) -> None:
    state, _ = fold(policy, [claim(1), claim(2, source="crm", value="unpaid")])
    rules = policy.rules_for("order.payment_status")
    assert rules is not None
    answered = current_decision(state, rules, policy.version, NOW + timedelta(seconds=1))
    last = state.history[-1]
    assert answered.decision_id == last.decision_id
    assert answered.supersedes == last.supersedes == state.history[0].decision_id
