"""Existence, semantic, validity-period, epoch, provenance and resolution rules (seeds 001-003)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from streams.core.admission.intake import admit
from streams.core.records.contracts import Resolution, SourceClass
from streams.core.records.policy import Policy
from tests.support.builders import NOW, claim, decide, roles


def test_not_found_against_present_at_top_authority_is_an_existence_conflict(
    policy: Policy,
) -> None:
    decision = decide(policy, claim(1), claim(2, source="crm", status="not_found", value=None))
    assert (decision.decision.outcome, decision.decision.conflict_kind) == ("conflict", "existence")


def test_forbidden_unavailable_and_error_are_never_evidence_of_absence(policy: Policy) -> None:
    decision = decide(
        policy,
        claim(1, source="crm", status="forbidden", value=None),
        claim(2, source="crm", status="unavailable", value=None),
        claim(3, source="crm", status="error", value=None),
        claim(4, source="reporting-replica", value="overdue"),
    ).decision
    assert (decision.outcome, decision.value) == ("resolved", "overdue")
    assert roles(decision) == {"c1": "excluded", "c2": "excluded", "c3": "excluded", "c4": "winner"}


def test_only_errors_is_insufficient(policy: Policy) -> None:
    decision = decide(policy, claim(1, status="error", value=None)).decision
    assert (decision.outcome, decision.reason) == ("insufficient", "no_usable_claims")


def test_not_found_alone_resolves_to_absence(policy: Policy) -> None:
    decision = decide(policy, claim(1, status="not_found", value=None)).decision
    assert (decision.outcome, decision.status, decision.value) == ("resolved", "not_found", None)


def test_different_declared_scopes_are_a_semantic_conflict(policy: Policy) -> None:
    decision = decide(
        policy,
        claim(1, field="api.latency", source="apm-agent", value=200, unit="ms", scope="end_to_end"),
        claim(
            2, field="api.latency", source="synthetic-probe", value=0.2, unit="s", scope="server"
        ),
    ).decision
    assert (decision.outcome, decision.conflict_kind) == ("conflict", "semantic")
    # api.latency surfaces conflicts rather than blocking readers.
    assert decision.action == "continue"


def test_numbers_agree_within_tolerance_after_unit_conversion(policy: Policy) -> None:
    decision = decide(
        policy,
        claim(1, field="api.latency", source="apm-agent", value=200.3, unit="ms"),
        claim(2, field="api.latency", source="synthetic-probe", value=0.2, unit="s"),
    ).decision
    assert decision.outcome == "resolved"
    assert decision.unit == "ms"


def test_user_assertion_is_held_as_contested_evidence_beside_the_ledger(policy: Policy) -> None:
    ledger = claim(1, value="unpaid")
    user = claim(2, value="paid", source="chat", source_class=SourceClass.USER)
    decision = decide(policy, ledger, user).decision
    assert (decision.outcome, decision.value) == ("resolved", "unpaid")
    assert roles(decision) == {"c1": "winner", "c2": "contested"}
    assert {e.claim_id: e.authority.value for e in decision.evidence}["c2"] == "asserted"


def test_user_topic_overrides_a_payload_that_poses_as_an_observation(policy: Policy) -> None:
    admitted = admit(claim(1, source="billing-api"), policy, NOW, source_class=SourceClass.USER)
    assert admitted.authority.value == "asserted"


# Seed 002: the Acme renewal. A later period is a change; the same period is a disagreement.
MARCH_12 = datetime(2026, 3, 12, tzinfo=UTC)


def seats(n: int, value: int, source: str, **extra: object) -> object:
    return claim(n, subject="acme", field="contract.seats", value=value, source=source, **extra)


def test_control_a_later_period_is_a_change_not_a_conflict(policy: Policy) -> None:
    old = seats(1, 40, "crm", valid_from=datetime(2025, 3, 12, tzinfo=UTC), observed_at=MARCH_12)
    new = seats(2, 25, "crm", valid_from=MARCH_12, observed_at=MARCH_12 + timedelta(days=1))
    for order in ((old, new), (new, old)):
        decision = decide(policy, *order).decision
        assert (decision.outcome, decision.value) == ("resolved", 25)
        assert roles(decision) == {"c1": "superseded", "c2": "winner"}


def test_same_period_different_values_is_a_disagreement_in_any_order(policy: Policy) -> None:
    order_form = seats(1, 40, "order-form", valid_from=MARCH_12, observed_at=MARCH_12)
    export = seats(
        2, 25, "billing-export", valid_from=MARCH_12, observed_at=MARCH_12 + timedelta(days=1)
    )
    first = decide(policy, order_form, export).decision
    second = decide(policy, export, order_form).decision
    assert first == second
    assert (first.outcome, first.conflict_kind) == ("conflict", "value")
    assert set(roles(first).values()) == {"contested"}


def test_an_explicitly_overlapping_older_period_still_disagrees(policy: Policy) -> None:
    old = seats(
        1, 40, "crm", valid_from=datetime(2026, 1, 1, tzinfo=UTC), valid_to=NOW + timedelta(days=30)
    )
    new = seats(2, 25, "order-form", valid_from=MARCH_12)
    assert decide(policy, old, new).decision.outcome == "conflict"


def test_resolution_closes_a_conflict_and_stays_linked(policy: Policy) -> None:
    order_form = seats(1, 40, "order-form", valid_from=MARCH_12, observed_at=MARCH_12)
    export = seats(2, 25, "billing-export", valid_from=MARCH_12, observed_at=MARCH_12)
    conflict = decide(policy, order_form, export).decision
    resolution = Resolution(
        resolution_id="res-1",
        subject="acme",
        field="contract.seats",
        value=40,
        decided_by="ops@example.com",
        note="signed order form is authoritative",
        decided_at=MARCH_12 + timedelta(days=2),
        resolves_decision_id=conflict.decision_id,
    )
    decision = decide(policy, order_form, export, resolutions=(resolution,)).decision
    assert (decision.outcome, decision.value, decision.reason) == ("resolved", 40, "manual")
    assert decision.resolution_id == "res-1"
    assert roles(decision) == {"c1": "corroborating", "c2": "contested"}
    # Evidence observed after the person decided reopens the question.
    later = seats(
        3, 25, "billing-export", valid_from=MARCH_12, observed_at=MARCH_12 + timedelta(days=3)
    )
    reopened = decide(policy, order_form, export, later, resolutions=(resolution,)).decision
    assert reopened.outcome == "conflict"


# Seed 001: retry_timeout was 30 s at epoch 4, a tool says 5 s at epoch 7 after a deploy.
def timeout(
    n: int, value: float, epoch: int | None, minutes_ago: int, source: str = "config-service"
) -> object:
    return claim(
        n,
        subject="svc:checkout",
        field="service.retry_timeout",
        value=value,
        unit="s",
        source=source,
        epoch=epoch,
        observed_at=NOW - timedelta(minutes=minutes_ago),
    )


def test_cross_epoch_change_is_quarantined_with_events(policy: Policy) -> None:
    result = decide(policy, timeout(1, 30, 4, 600), timeout(2, 5, 7, 5))
    decision = result.decision
    assert (decision.outcome, decision.conflict_kind, decision.action) == (
        "quarantined",
        "cross_epoch",
        "block",
    )
    assert roles(decision) == {"c1": "quarantined", "c2": "quarantined"}
    assert result.epoch_change is not None
    assert (result.epoch_change.from_epoch, result.epoch_change.to_epoch) == (4, 7)
    assert (result.epoch_change.previous_value, result.epoch_change.new_value) == (30.0, 5.0)
    assert result.reobserve is not None
    assert result.reobserve.epoch == 7
    assert result.reobserve.decision_id == decision.decision_id


def test_a_later_observation_in_the_new_epoch_confirms_the_change(policy: Policy) -> None:
    decision = decide(
        policy, timeout(1, 30, 4, 600), timeout(2, 5, 7, 5), timeout(3, 5, 7, 1)
    ).decision
    assert (decision.outcome, decision.value) == ("resolved", 5.0)
    assert roles(decision) == {"c1": "superseded", "c2": "corroborating", "c3": "winner"}


def test_epoch_change_accept_lets_the_newer_epoch_win_at_once(policy: Policy) -> None:
    accepting = policy.model_copy(
        update={"defaults": policy.defaults.model_copy(update={"epoch_change": "accept"})}
    )
    fields = dict(accepting.fields)
    fields["service.retry_timeout"] = fields["service.retry_timeout"].model_copy(
        update={"epoch_change": None}
    )
    accepting = accepting.model_copy(update={"fields": fields})
    result = decide(accepting, timeout(1, 30, 4, 600), timeout(2, 5, 7, 5))
    assert (result.decision.outcome, result.decision.value) == ("resolved", 5.0)
    assert result.epoch_change is not None
    assert result.reobserve is None


def test_unchanged_value_across_epochs_is_not_quarantined(policy: Policy) -> None:
    decision = decide(policy, timeout(1, 30, 4, 600), timeout(2, 30, 7, 5)).decision
    assert (decision.outcome, decision.value) == ("resolved", 30.0)


def test_a_claim_missing_its_epoch_where_others_carry_one_is_quarantined(policy: Policy) -> None:
    result = decide(policy, timeout(1, 30, 7, 10), timeout(2, 5, None, 1, source="deploy-tool"))
    decision = result.decision
    assert (decision.outcome, decision.conflict_kind) == ("quarantined", "provenance")
    assert roles(decision)["c2"] == "quarantined"
    assert result.reobserve is not None
    # An epoch-less claim that agrees cannot win, but it does not block either.
    agreeing = decide(policy, timeout(1, 30, 7, 10), timeout(2, 30, None, 1, source="deploy-tool"))
    assert agreeing.decision.outcome == "resolved"
    assert roles(agreeing.decision)["c2"] == "quarantined"


def test_recency_breaks_ties_only_where_the_field_allows_it_and_says_so(policy: Policy) -> None:
    def address(n: int, value: str, minutes_ago: int, source: str) -> object:
        return claim(
            n,
            subject="cust:7",
            field="customer.shipping_address",
            value=value,
            source=source,
            observed_at=NOW - timedelta(minutes=minutes_ago),
        )

    decision = decide(
        policy, address(1, "1 Old Road", 60, "crm"), address(2, "2 New Street", 1, "order-form")
    ).decision
    assert (decision.outcome, decision.value, decision.tiebreak) == (
        "resolved",
        "2 New Street",
        "most_recent",
    )
    blocking = decide(
        policy,
        claim(1, value="paid", source="crm"),
        claim(2, value="unpaid", source="billing-export", observed_at=NOW),
    ).decision
    assert blocking.outcome == "conflict"


def test_same_source_newer_observation_supersedes_its_older_one(policy: Policy) -> None:
    decision = decide(
        policy,
        claim(1, value="unpaid", observed_at=NOW - timedelta(seconds=30)),
        claim(2, value="paid", observed_at=NOW - timedelta(seconds=2)),
    ).decision
    assert (decision.outcome, decision.value) == ("resolved", "paid")
    assert roles(decision) == {"c1": "superseded", "c2": "winner"}


def test_a_period_starting_in_the_future_is_not_evidence_about_now(policy: Policy) -> None:
    future = seats(1, 30, "crm", valid_from=NOW + timedelta(days=10))
    current = seats(2, 25, "crm", valid_from=MARCH_12)
    decision = decide(policy, future, current).decision
    assert (decision.outcome, decision.value) == ("resolved", 25)
    assert roles(decision)["c1"] == "excluded"


def test_duplicated_claims_count_once(policy: Policy) -> None:
    once = decide(policy, claim(1)).decision
    thrice = decide(policy, claim(1), claim(1), claim(1)).decision
    assert once == thrice


def test_a_user_assertion_alone_is_never_proof_of_state(policy: Policy) -> None:
    decision = decide(policy, claim(1, source="chat", source_class=SourceClass.USER)).decision
    assert (decision.outcome, decision.reason, decision.value) == (
        "insufficient",
        "no_authoritative_claims",
        None,
    )
    assert decision.action == "block"
