"""Properties: a key's decision depends only on the set of its claims."""

from __future__ import annotations

from datetime import datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.admission.intake import admit
from streams.core.decision.agreement import distinct
from streams.core.keys.belief import current_decision
from streams.core.keys.state import KeyState
from streams.core.keys.transitions import add_claim, advance
from streams.core.records.contracts import Claim
from streams.core.rules.engine import arbitrate
from tests.support.builders import NOW, POLICY, WIDE, decide
from tests.support.strategies import payment_claims

_rules = POLICY.rules_for("order.payment_status")
assert _rules is not None
RULES = _rules


def fold(claims: list[Claim], now: datetime) -> KeyState:
    """What a worker's state becomes when the claims arrive one by one in this order."""
    state: KeyState | None = None
    for c in claims:
        step = add_claim(state, admit(c, POLICY, now), RULES, POLICY.version, now, WIDE)
        state = step.state
    assert state is not None
    return state


@settings(max_examples=300, deadline=None)
@given(claims=payment_claims(), data=st.data())
def test_permuting_and_duplicating_claims_never_changes_the_decision(
    claims: list[Claim], data: st.DataObject
) -> None:
    baseline = decide(POLICY, *claims)
    shuffled = data.draw(st.permutations(claims))
    duplicated = shuffled + data.draw(st.lists(st.sampled_from(claims), max_size=4))
    again = decide(POLICY, *duplicated)
    assert again.decision == baseline.decision
    assert (again.epoch_change, again.reobserve) == (baseline.epoch_change, baseline.reobserve)


@settings(max_examples=200, deadline=None)
@given(claims=payment_claims())
def test_decision_id_is_stable_and_hashes_what_was_decided(claims: list[Claim]) -> None:
    first = decide(POLICY, *claims).decision
    later = decide(POLICY, *claims, now=NOW + timedelta(milliseconds=1)).decision
    if (first.outcome, first.value, first.reason, first.action) == (
        later.outcome,
        later.value,
        later.reason,
        later.action,
    ):
        assert first.decision_id == later.decision_id
    assert first.decision_id == decide(POLICY, *reversed(claims)).decision.decision_id


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(
        st.floats(min_value=0, max_value=1000, allow_nan=False), min_size=2, max_size=6
    ),
    data=st.data(),
)
def test_tolerance_grouping_does_not_depend_on_order(
    values: list[float], data: st.DataObject
) -> None:
    sources = ["apm-agent", "synthetic-probe"]
    claims = [
        Claim(
            claim_id=f"l{n}",
            subject="api:checkout",
            field="api.latency",
            status="present",
            value=v,
            unit="ms",
            source=sources[n % 2],
            lineage=f"lin{n}",
            observed_at=NOW - timedelta(seconds=n),
        )
        for n, v in enumerate(values)
    ]
    shuffled = data.draw(st.permutations(claims))
    assert decide(POLICY, *claims).decision == decide(POLICY, *shuffled).decision


@settings(max_examples=300, deadline=None)
@given(claims=payment_claims(), data=st.data(), later_s=st.integers(min_value=0, max_value=400))
def test_a_key_folded_claim_by_claim_decides_as_replay_in_any_order(
    claims: list[Claim], data: st.DataObject, later_s: int
) -> None:
    """Stream = replay in the pure core: the state a worker reaches from any arrival order (with
    redeliveries) decides what the engine decides over the set, now and as time passes."""
    arrivals = data.draw(st.permutations(claims))
    arrivals += data.draw(st.lists(st.sampled_from(claims), max_size=3))
    state = fold(arrivals, NOW)
    kept, _ = distinct(admit(c, POLICY, NOW) for c in claims)

    def replayed(at: datetime) -> str:
        decided = arbitrate("invoice:42", RULES.name, kept, RULES, POLICY.version, at)
        return decided.decision_id

    assert current_decision(state, RULES, POLICY.version, NOW).decision_id == replayed(NOW)
    later = NOW + timedelta(seconds=later_s)
    moved = advance(state, RULES, POLICY.version, later, WIDE)
    assert moved.arbitration.decision_id == replayed(later)
    assert (
        moved.arbitration.decision.evidence
        == arbitrate("invoice:42", RULES.name, kept, RULES, POLICY.version, later).decision.evidence
    )
