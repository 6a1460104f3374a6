"""Properties: a key's decision depends only on the set of its claims."""

from __future__ import annotations

from datetime import datetime, timedelta

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.agreement import distinct
from streams.core.contracts import Claim
from streams.core.engine import arbitrate
from streams.core.intake import admit
from streams.core.keystate import KeyState, Limits, add_claim, advance, current_decision
from streams.core.policy import FieldRules, Policy, load_policy, parse_policy
from tests.core.conftest import NOW, REPO, decide

POLICY: Policy = load_policy(REPO / "examples" / "policy.yaml")
_rules = POLICY.rules_for("order.payment_status")
assert _rules is not None
RULES = _rules
WIDE = Limits(max_claims=64)  # no eviction: replay keeps every claim
SOURCES = ["billing-api", "crm", "ledger-service", "reporting-replica", "billing-cache", "chat"]


@st.composite
def payment_claims(draw: st.DrawFn) -> list[Claim]:
    """Claims of every kind the rules treat apart: statuses, classes, epochs, scopes spelled
    differently, validity periods, and claim ids reused with the same or other content."""
    count = draw(st.integers(min_value=1, max_value=7))
    claims = []
    for n in range(count):
        status = draw(st.sampled_from(["present"] * 6 + ["not_found", "unavailable", "error"]))
        period = draw(st.sampled_from([None, None, (-3, None), (-2, -1), (-2, None), (-1, 2)]))
        claims.append(
            Claim(
                claim_id=f"c{draw(st.integers(min_value=0, max_value=n))}",
                subject="invoice:42",
                field="order.payment_status",
                status=status,
                value=draw(st.sampled_from(["paid", "unpaid", "overdue", "PAID"]))
                if status == "present"
                else None,
                source=draw(st.sampled_from(SOURCES)),
                source_class="user" if draw(st.booleans()) and n == 0 else "observation",
                observed_at=NOW - timedelta(seconds=draw(st.integers(min_value=0, max_value=90))),
                valid_from=None if period is None else NOW + timedelta(minutes=period[0]),
                valid_to=None
                if period is None or period[1] is None
                else NOW + timedelta(minutes=period[1]),
                epoch=draw(st.sampled_from([None, 1, 2])),
                scope=draw(st.sampled_from([None, None, None, "server", " Server"])),
            )
        )
    return claims


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


# The incremental path's cases: an enum field whose conflicts block; a float field with a
# tolerance (agreement is not transitive there); a field whose conflicts the newest claims break;
# the enum field where independence is counted (two claims of one lineage are one observation).
_counted_policy = yaml.safe_load((REPO / "examples" / "policy.yaml").read_text())
_counted_policy["fields"]["order.payment_status"]["min_independent_sources"] = 2
_COUNTED = parse_policy(_counted_policy)
_MIXED = [*SOURCES, "apm-agent", "synthetic-probe", "config-service", "deploy-tool"]
_KEYS = {  # policy, field, values, sources, how old a claim may be on arrival (s)
    "enum": (POLICY, "order.payment_status", ["paid", "paid", "unpaid"], _MIXED, 70),
    "float": (POLICY, "api.latency", [120.0, 120.0, 120.3, 120.6, 121.5], _MIXED, 700),
    "recent": (POLICY, "customer.shipping_address", ["1 Main St", "2 Side Rd"], _MIXED, 2),
    "counted": (
        _COUNTED,
        "order.payment_status",
        ["paid", "paid", "paid", "unpaid"],
        ["crm", "config-service", "billing-cache"],
        70,
    ),
}


@st.composite
def arrivals(draw: st.DrawFn) -> tuple[Policy, list[tuple[int, Claim]]]:
    """A policy and claims about one key arriving one by one at non-decreasing instants
    (seconds after NOW): mostly plain claims the incremental path takes, some stale on arrival,
    some that force the rules to run again."""
    policy, field, values, sources, oldest_s = _KEYS[draw(st.sampled_from(sorted(_KEYS)))]
    moments = sorted(draw(st.lists(st.integers(0, 200), min_size=1, max_size=10)))
    out = []
    for n, moment in enumerate(moments):
        at = NOW + timedelta(seconds=moment)
        status = draw(st.sampled_from(["present"] * 8 + ["not_found", "error"]))
        special = draw(st.sampled_from([{}] * 6 + [{"epoch": 1}, {"scope": "server"}]))
        out.append(
            (
                moment,
                Claim(
                    claim_id=f"c{n}",
                    subject="invoice:42",
                    field=field,
                    status=status,
                    value=draw(st.sampled_from(values)) if status == "present" else None,
                    unit="ms" if field == "api.latency" and status == "present" else None,
                    source=draw(st.sampled_from(sources)),
                    source_class="user" if draw(st.integers(0, 5)) == 0 else "observation",
                    observed_at=at - timedelta(seconds=draw(st.integers(0, oldest_s))),
                    lineage=draw(
                        st.sampled_from([None, None, "l1", "source:crm", "source:config-service"])
                    ),
                    **special,
                ),
            )
        )
    return policy, out


@settings(max_examples=600, deadline=None)
@given(key=arrivals())
def test_incremental_arbitration_equals_the_full_engine_at_every_step(
    key: tuple[Policy, list[tuple[int, Claim]]],
) -> None:
    """Every step of a key, whether the incremental path placed the claim or the rules ran,
    decides and assigns roles exactly as the full engine over the key's claims at that instant."""
    policy, claims = key
    rules = policy.rules_for(claims[0][1].field)
    assert rules is not None
    state: KeyState | None = None
    for moment, c in claims:
        at = NOW + timedelta(seconds=moment)
        step = add_claim(state, admit(c, policy, at), rules, policy.version, at, WIDE)
        state = step.state
        full = arbitrate("invoice:42", rules.name, state.claims, rules, policy.version, at)
        assert step.arbitration.decision_id == full.decision_id
        assert step.arbitration.decision.evidence == full.decision.evidence
        assert state.current is not None
        assert state.current.decision_id == full.decision_id
        assert state.next_check_at == _next_moment(state, rules, at)


def _next_moment(state: KeyState, rules: FieldRules, now: datetime) -> datetime | None:
    """When time alone could next change the key, from its claims (as the full path computes)."""
    moments = [
        a.claim.observed_at + rules.freshness + timedelta(microseconds=1)
        for a in state.claims
        if rules.freshness is not None
    ]
    if state.conflict_since is not None and not state.escalated:
        moments.append(state.conflict_since + rules.escalate_after)
    moments += [m for a in state.claims for m in (a.claim.valid_from, a.claim.valid_to) if m]
    return min((m for m in moments if m > now), default=None)
