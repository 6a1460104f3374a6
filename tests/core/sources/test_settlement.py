"""Settled outcomes: a closed conflict judges its claims, the ledger sums the judgements in an
order-free way, and the dependence readings find copying sources and authorities to review."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.admission.intake import admit
from streams.core.keys.state import KeyState
from streams.core.keys.transitions import add_claim, advance
from streams.core.records.contracts import Authority
from streams.core.sources.dependence import binomial_tail, report
from streams.core.sources.settlement import (
    KEPT_DISAGREEMENTS,
    Ledger,
    Settlement,
    Settler,
    decode_ledger,
    encode_ledger,
    settlement_of,
)
from tests.support.builders import NOW, POLICY, claim
from tests.support.settlements import (
    AUTHORITIES,
    FIELD,
    RULES,
    VALUES,
    opened,
    resolved,
    synthetic,
)


def verdicts(settlement: Settlement | None) -> dict[str, bool]:
    assert settlement is not None
    return {j.source: j.agreed for j in settlement.judgements}


def test_a_resolution_judges_every_claim_of_the_open_conflict() -> None:
    state = opened(
        [claim(1), claim(2, source="crm"), claim(3, source="billing-export", value="overdue")]
    )
    settlement = resolved(state, "paid")
    assert settlement is not None
    assert settlement.by is Settler.RESOLUTION
    assert settlement.key == f"invoice:42|{FIELD}"
    assert verdicts(settlement) == {"billing-api": True, "crm": True, "billing-export": False}
    statements = {j.source: j.statement for j in settlement.judgements}
    assert statements["billing-api"] == statements["crm"] != statements["billing-export"]


def test_a_later_observation_that_wins_settles_and_judges_what_was_said_while_open() -> None:
    """The source that was wrong corrects itself: its earlier claim (now superseded) was what it
    said while the key was open, and that is what is judged."""
    state = opened([claim(1, source="crm"), claim(2, source="billing-export", value="overdue")])
    correction = claim(3, source="billing-export", observed_at=NOW)
    step = add_claim(state, admit(correction, POLICY, NOW), RULES, POLICY.version, NOW)
    assert step.emitted is not None
    settlement = settlement_of(state, step.emitted.decision, RULES.tolerance)
    assert settlement is not None
    assert settlement.by is Settler.OBSERVATION
    assert verdicts(settlement) == {"crm": True, "billing-export": False}
    assert [j.claim_id for j in settlement.judgements if j.source == "billing-export"] == ["c2"]


def test_nothing_settles_without_an_open_decision_or_by_time_alone() -> None:
    agreeing = opened([claim(1), claim(2, source="crm")])
    again = add_claim(
        agreeing, admit(claim(3, source="order-form"), POLICY, NOW), RULES, POLICY.version, NOW
    )
    assert again.emitted is None or settlement_of(agreeing, again.emitted.decision, 0.0) is None
    conflict = opened([claim(1, source="crm"), claim(2, source="billing-export", value="unpaid")])
    later = advance(conflict, RULES, POLICY.version, NOW + timedelta(hours=1))
    if later.emitted is not None:  # the claims went stale: no one settled anything
        assert settlement_of(conflict, later.emitted.decision, 0.0) is None
    assert settlement_of(None, _decision_of(conflict), 0.0) is None


def _decision_of(state: KeyState) -> Any:
    step = advance(state, RULES, POLICY.version, NOW)
    return step.arbitration.decision


def test_the_judgement_does_not_depend_on_the_order_claims_arrived_in() -> None:
    claims = [
        claim(1),
        claim(2, source="crm", value="unpaid"),
        claim(3, source="billing-export", value="overdue"),
        claim(4, source="order-form", value="unpaid"),
    ]
    seen = set()
    for order in (claims, claims[::-1], claims[1:] + claims[:1]):
        settlement = resolved(opened(list(order)), "unpaid")
        assert settlement is not None
        seen.add(settlement)
    assert len(seen) == 1


@settings(max_examples=60, deadline=None)
@given(
    said=st.lists(st.sampled_from(VALUES), min_size=2, max_size=5),
    settled_on=st.sampled_from(VALUES),
    data=st.data(),
)
def test_judging_is_the_same_for_any_arrival_order(
    said: list[str], settled_on: str, data: st.DataObject
) -> None:
    sources = ["billing-api", "crm", "billing-export", "order-form", "ledger-service"]
    claims = [claim(n, source=sources[n], value=value) for n, value in enumerate(said)]
    arrival = data.draw(st.permutations(claims))
    first, second = opened(claims), opened(list(arrival))
    assert first.current is not None
    if first.current.outcome != "conflict":
        return
    judged = resolved(first, settled_on)
    assert judged == resolved(second, settled_on)
    assert judged is not None
    assert {j.source: j.agreed for j in judged.judgements} == {
        c.source: c.value == settled_on for c in claims
    }


def test_two_sources_copying_one_upstream_are_a_candidate_lineage_an_independent_pair_is_not() -> (
    None
):
    ledger = Ledger()
    for settlement in synthetic(seed=7, subjects=160):
        ledger.add(settlement)
    found = report(ledger, AUTHORITIES, {})
    pairs = {(f["first"], f["second"]) for f in found["lineages"]}
    assert ("billing-export", "order-form") in pairs
    assert ("billing-api", "crm") not in pairs
    assert pairs == {("billing-export", "order-form")}
    lineage = found["lineages"][0]
    assert lineage["same"] == lineage["together"]
    assert lineage["same_wrong"] >= 2
    assert lineage["example_keys"]
    # Declared as one lineage in the policy, the pair is no longer a suggestion.
    declared = report(ledger, AUTHORITIES, {"order-form": "up", "billing-export": "up"})
    assert declared["lineages"] == []


def test_a_weaker_source_right_more_often_than_a_stronger_one_is_an_authority_to_review() -> None:
    ledger = Ledger()
    for settlement in synthetic(seed=3, subjects=160):
        ledger.add(settlement)
    authorities = {**AUTHORITIES, (FIELD, "crm"): Authority.CACHED}
    reviews = report(ledger, authorities, {})["authority_reviews"]
    weaker = {(r["weaker"], r["stronger"]) for r in reviews}
    assert ("crm", "order-form") in weaker
    assert all(r["weaker"] == "crm" for r in reviews)
    assert all(r["weaker_only_agreed"] > r["stronger_only_agreed"] for r in reviews)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(min_value=0, max_value=10_000), data=st.data())
def test_a_ledger_is_the_same_whatever_order_its_settlements_come_in(
    seed: int, data: st.DataObject
) -> None:
    settled = synthetic(seed, subjects=12)
    shuffled = data.draw(st.permutations(settled))
    first, second = Ledger(), Ledger()
    for settlement in settled:
        first.add(settlement)
    for settlement in shuffled:
        second.add(settlement)
    assert encode_ledger(first) == encode_ledger(second)
    assert encode_ledger(decode_ledger(encode_ledger(first))) == encode_ledger(first)
    # Merging halves (two tasks, or two workers) is adding them all.
    half = len(shuffled) // 2
    left, right = Ledger(), Ledger()
    for settlement in shuffled[:half]:
        left.add(settlement)
    for settlement in shuffled[half:]:
        right.add(settlement)
    right.merge(left)
    assert encode_ledger(right) == encode_ledger(first)
    assert report(first, AUTHORITIES, {}) == report(right, AUTHORITIES, {})


def test_the_ledger_keeps_the_latest_disagreements_and_reports_them_per_source() -> None:
    ledger = Ledger()
    for settlement in synthetic(seed=11, subjects=60):
        ledger.add(settlement)
    rows = {row["source"]: row for row in report(ledger, AUTHORITIES, {})["rows"]}
    for row in rows.values():
        assert row["settled"] == row["agreed"] + row["disagreed"]
        assert len(row["latest_disagreements"]) == min(row["disagreed"], KEPT_DISAGREEMENTS)
        instants = [d["settled_at"] for d in row["latest_disagreements"]]
        assert instants == sorted(instants, reverse=True)
    assert rows["crm"]["share"] > rows["order-form"]["share"]


def test_binomial_tail_is_exact() -> None:
    assert binomial_tail(0, 5, 0.3) == 1.0
    assert abs(binomial_tail(5, 5, 0.5) - 1 / 32) < 1e-12
    assert abs(binomial_tail(4, 5, 0.5) - 6 / 32) < 1e-12
