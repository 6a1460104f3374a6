"""Resolutions on a key: which it keeps (the latest by decided_at), which it refuses (made
against a decision no longer current), and the audit trail explain renders from them."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.admission.intake import admit
from streams.core.keys.state import KeyState, Limits
from streams.core.keys.transitions import add_claim, add_resolution
from streams.core.reading.explain import explain
from streams.core.records.contracts import RejectReason, Resolution
from streams.core.records.policy import Policy, load_policy
from streams.core.rules.engine import arbitrate
from tests.support.builders import NOW, REPO, claim

POLICY: Policy = load_policy(REPO / "examples" / "policy.yaml")
_rules = POLICY.rules_for("order.payment_status")
assert _rules is not None
RULES = _rules
CLAIMS = (claim(1), claim(2, source="crm"), claim(3, source="billing-export", value="overdue"))


def conflicted() -> KeyState:
    state: KeyState | None = None
    for c in CLAIMS:
        state = add_claim(state, admit(c, POLICY, NOW), RULES, POLICY.version, NOW).state
    assert state is not None
    assert state.current is not None
    assert state.current.outcome == "conflict"
    return state


def resolution(n: int, seconds: int, **overrides: Any) -> Resolution:
    data: dict[str, Any] = {
        "resolution_id": f"r{n}",
        "subject": "invoice:42",
        "field": "order.payment_status",
        "value": "paid" if n % 2 else "overdue",
        "decided_by": f"steward-{n}",
        "note": f"checked the ledger ({n})",
        "decided_at": NOW + timedelta(seconds=seconds),
    }
    data.update(overrides)
    return Resolution.model_validate(data)


def test_a_late_arriving_older_resolution_never_pushes_out_the_deciding_one() -> None:
    state = conflicted()
    deciding = resolution(1, 30)
    later_arrivals = [resolution(n, n) for n in range(2, 6)]  # all decided before r1
    at = NOW + timedelta(seconds=55)
    for r in (deciding, *later_arrivals):
        state = add_resolution(state, r, RULES, POLICY.version, at, Limits(max_resolutions=2)).state
    assert len(state.resolutions) == 2
    assert "r1" in {r.resolution_id for r in state.resolutions}
    assert state.current is not None
    assert state.current.value == "paid"


@settings(max_examples=150, deadline=None)
@given(
    seconds=st.lists(st.integers(min_value=0, max_value=50), min_size=1, max_size=8, unique=True),
    bound=st.integers(min_value=1, max_value=4),
    data=st.data(),
)
def test_the_kept_resolutions_decide_as_replay_over_all_of_them(
    seconds: list[int], bound: int, data: st.DataObject
) -> None:
    """Stream = replay: whatever the arrival order and the bound, a key decides as if it had
    kept every resolution."""
    made = [resolution(n, m) for n, m in enumerate(seconds)]
    arrival = data.draw(st.permutations(made))
    at = NOW + timedelta(seconds=55)
    state = conflicted()
    for r in arrival:
        step = add_resolution(state, r, RULES, POLICY.version, at, Limits(max_resolutions=bound))
        state = step.state
    assert len(state.resolutions) == min(bound, len(made))
    admitted = [admit(c, POLICY, NOW) for c in CLAIMS]
    replayed = arbitrate(
        "invoice:42", "order.payment_status", admitted, RULES, POLICY.version, at, made
    )
    assert state.current is not None
    assert (state.current.outcome, state.current.value) == (
        replayed.outcome,
        replayed.verdict.value,
    )


def test_explain_names_who_resolved_when_and_why() -> None:
    state = conflicted()
    chosen = resolution(1, 5)
    step = add_resolution(state, chosen, RULES, POLICY.version, NOW + timedelta(seconds=6))
    assert step.emitted is not None
    text = explain(step.emitted.decision, step.state.resolutions)
    assert f"resolved by steward-1 at {chosen.decided_at.isoformat()}: checked the ledger (1)" in (
        text
    )
    assert "resolved by" not in explain(step.emitted.decision)  # without the key's resolutions


def test_a_resolution_of_the_current_decision_applies() -> None:
    state = conflicted()
    assert state.current is not None
    made = resolution(1, 5, resolves_decision_id=state.current.decision_id)
    step = add_resolution(state, made, RULES, POLICY.version, NOW + timedelta(seconds=6))
    assert step.refused is None
    assert step.emitted is not None
    assert step.emitted.decision.resolution_id == "r1"
    # Delivered again, it is a redelivery, not a resolution of a decision since replaced.
    again = add_resolution(step.state, made, RULES, POLICY.version, NOW + timedelta(seconds=7))
    assert again.refused is None


def test_a_resolution_of_a_decision_no_longer_current_is_refused_and_not_applied() -> None:
    state = conflicted()
    viewed = state.history[0].decision_id  # the belief before the conflict opened
    made = resolution(1, 5, resolves_decision_id=viewed)
    step = add_resolution(state, made, RULES, POLICY.version, NOW + timedelta(seconds=6))
    assert step.refused is not None
    assert step.refused.reason is RejectReason.STALE_DECISION
    assert viewed in str(step.refused)
    assert state.history[-1].decision_id in str(step.refused)
    assert step.emitted is None
    assert step.state.resolutions == ()
    assert step.state.current == state.current
