"""The belief in force at an earlier instant, with the evidence it had (explicit instants only)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from streams.core.admission.intake import admit
from streams.core.keys.state import KeyState, Limits
from streams.core.keys.transitions import add_claim, add_resolution
from streams.core.reading.asof import Basis, NoBeliefAsOf, belief_as_of
from streams.core.records.contracts import Claim, Resolution
from streams.core.records.policy import Policy, load_policy
from tests.support.builders import NOW, REPO, claim

POLICY: Policy = load_policy(REPO / "examples" / "policy.yaml")
RULES = POLICY.rules_for("order.payment_status")
assert RULES is not None
SKEW = POLICY.defaults.max_clock_skew


def at(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def said(n: int, source: str, value: str, observed: float) -> Claim:
    return claim(n, source=source, value=value, observed_at=at(observed))


def arrive(
    state: KeyState | None, item: Claim | Resolution, when: float, limits: Limits
) -> KeyState:
    """What the worker does when `item` arrives at `when` (its record's timestamp)."""
    assert RULES is not None
    if isinstance(item, Resolution):
        return add_resolution(state, item, RULES, POLICY.version, at(when), limits).state
    admitted = admit(item, POLICY, at(when))
    return add_claim(state, admitted, RULES, POLICY.version, at(when), limits).state


def resolution(value: str, decided: float) -> Resolution:
    return Resolution(
        resolution_id="r1",
        subject="invoice:42",
        field="order.payment_status",
        value=value,
        decided_by="ann",
        note="the ledger is right",
        decided_at=at(decided),
    )


def history(limits: Limits | None = None) -> KeyState:
    """paid (t=0), then a second system of record says overdue (t=10: conflict), then a person
    dated t=25 resolves it, but the resolution arrives at t=30."""
    limits = limits or Limits()
    state = arrive(None, said(1, "billing-api", "paid", -1), 0, limits)
    state = arrive(state, said(2, "billing-export", "overdue", 9), 10, limits)
    return arrive(state, resolution("paid", 25), 30, limits)


def test_no_belief_before_the_first_decision() -> None:
    assert RULES is not None
    with pytest.raises(NoBeliefAsOf, match="earliest one retained"):
        belief_as_of(history(), RULES, POLICY.version, at(-0.5), SKEW)


def test_each_instant_answers_the_decision_then_in_force_with_its_evidence() -> None:
    assert RULES is not None
    state = history()
    first = belief_as_of(state, RULES, POLICY.version, at(5), SKEW)
    assert (first.belief.outcome.value, first.belief.value) == ("resolved", "paid")
    assert first.basis is Basis.REBUILT
    assert first.decision is not None
    assert [(e.claim_id, e.role.value) for e in first.decision.evidence] == [("c1", "winner")]
    assert first.decision.decided_at == at(0)

    conflict = belief_as_of(state, RULES, POLICY.version, at(15), SKEW)
    assert conflict.belief.outcome.value == "conflict"
    assert conflict.decision is not None
    assert conflict.decision.decision_id == conflict.belief.decision_id
    assert {e.claim_id: e.role.value for e in conflict.decision.evidence} == {
        "c1": "contested",
        "c2": "contested",
    }

    settled = belief_as_of(state, RULES, POLICY.version, at(40), SKEW)
    assert settled.decision is not None
    assert (settled.decision.reason, settled.decision.resolution_id) == ("manual", "r1")


def test_a_resolution_dated_before_it_arrived_does_not_rewrite_what_was_believed() -> None:
    """At t=26 the resolution existed on paper (dated t=25) but the worker had not seen it."""
    assert RULES is not None
    found = belief_as_of(history(), RULES, POLICY.version, at(26), SKEW)
    assert found.belief.outcome.value == "conflict"
    assert found.basis is Basis.REBUILT
    assert found.decision is not None
    assert found.decision.resolution_id is None


def test_evicted_claims_are_reported_not_guessed() -> None:
    """With room for two claims, the newer ledger statement pushes the first one out: the first
    belief can no longer be shown with its evidence, and the answer says so."""
    assert RULES is not None
    limits = Limits(max_claims=2)
    state = arrive(None, said(1, "billing-api", "paid", -1), 0, limits)
    state = arrive(state, said(2, "billing-export", "overdue", 9), 10, limits)
    state = arrive(state, said(3, "billing-api", "overdue", 19), 20, limits)
    assert [a.claim.claim_id for a in state.claims] == ["c2", "c3"]
    early = belief_as_of(state, RULES, POLICY.version, at(5), SKEW)
    assert (early.belief.value, early.basis, early.decision) == ("paid", Basis.NOT_RETAINED, None)
    latest = belief_as_of(state, RULES, POLICY.version, at(25), SKEW)
    assert latest.basis is Basis.REBUILT
    assert latest.belief.value == "overdue"


def test_a_claim_observed_just_after_its_record_was_stamped_still_counts() -> None:
    """Record timestamps have millisecond precision; observations may be finer (or skewed)."""
    assert RULES is not None
    state = arrive(None, said(1, "billing-api", "paid", 0.0004), 0, Limits())
    found = belief_as_of(state, RULES, POLICY.version, at(0), SKEW)
    assert found.basis is Basis.REBUILT
    assert found.decision is not None
    assert [e.claim_id for e in found.decision.evidence] == ["c1"]
