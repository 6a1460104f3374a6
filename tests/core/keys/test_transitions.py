"""Per-key state transitions and the compact state encoding."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

import msgspec
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from streams.core.admission.intake import AdmittedClaim, admit
from streams.core.decision.arbitration import Arbitration
from streams.core.decision.summary import DecisionSummary
from streams.core.keys.journal import decode_state, encode_state, stored_summary
from streams.core.keys.state import KeyState, Limits, split_key, state_key
from streams.core.keys.transitions import add_claim, add_resolution, adopt_policy, advance
from streams.core.records.contracts import Claim, Money, RejectReason, Resolution
from streams.core.records.policy import Policy, load_policy, parse_policy
from streams.core.rules.engine import arbitrate
from streams.core.timeline.rollout import readmitted
from tests.support.builders import NOW, REPO, claim, claim_with_every_field

POLICY: Policy = load_policy(REPO / "examples" / "policy.yaml")
RULES = POLICY.rules_for("order.payment_status")
assert RULES is not None


def grow(*claims: object, limits: Limits | None = None) -> tuple[KeyState | None, list[str]]:
    limits = limits or Limits()
    state: KeyState | None = None
    emitted = []
    for c in claims:
        step = add_claim(state, admit(c, POLICY, NOW), RULES, POLICY.version, NOW, limits)  # type: ignore[arg-type]
        state = step.state
        if step.emitted is not None:
            emitted.append(step.emitted.decision.outcome.value)
    return state, emitted


def test_a_decision_is_emitted_only_when_the_belief_changes() -> None:
    state, emitted = grow(
        claim(1), claim(2, source="crm"), claim(3, source="billing-export", value="overdue")
    )
    assert emitted == ["resolved", "conflict"]
    assert state is not None
    assert [s.outcome for s in state.history] == ["resolved", "conflict"]
    assert state.history[1].supersedes == state.history[0].decision_id
    assert state.conflict_since == NOW


def test_a_redelivered_claim_repeats_the_decision_exactly_as_first_emitted() -> None:
    state, _ = grow(claim(1))
    assert state is not None
    first = state.history[-1]
    again = add_claim(
        state, admit(claim(1), POLICY, NOW), RULES, POLICY.version, NOW + timedelta(seconds=5)
    )
    assert again.emitted is not None
    assert again.emitted.decision.decision_id == first.decision_id
    assert again.emitted.decision.decided_at == first.decided_at
    assert again.state.history == state.history


def test_a_reused_claim_id_with_another_payload_is_refused_and_neither_version_counts() -> None:
    state, _ = grow(claim(1), claim(2, source="crm"))
    assert state is not None
    step = add_claim(
        state, admit(claim(1, value="overdue"), POLICY, NOW), RULES, POLICY.version, NOW
    )
    assert step.refused is not None
    assert step.refused.reason is RejectReason.CONFLICTING_DUPLICATE
    assert [a.claim.claim_id for a in step.state.claims] == ["c2"]
    assert step.state.disputed == ("c1",)
    # Any later version, the first one included, is refused too and changes nothing.
    again = add_claim(step.state, admit(claim(1), POLICY, NOW), RULES, POLICY.version, NOW)
    assert again.refused is not None
    assert again.state.claims == step.state.claims
    assert decode_state(encode_state(again.state)).disputed == ("c1",)


def test_disputed_ids_are_refused_within_their_bound_and_forgotten_past_it() -> None:
    limits = Limits(max_disputed=2)
    state, _ = grow(claim(1), claim(2), claim(3), claim(4, source="crm"), limits=limits)
    assert state is not None
    for n in (1, 2, 3):  # each reused with another payload: disputed, oldest trimmed first
        step = add_claim(
            state, admit(claim(n, value="overdue"), POLICY, NOW), RULES, POLICY.version, NOW, limits
        )
        assert step.refused is not None
        state = step.state
    assert state.disputed == ("c2", "c3")
    for n in (2, 3):  # within the bound: any later version is refused
        again = add_claim(state, admit(claim(n), POLICY, NOW), RULES, POLICY.version, NOW, limits)
        assert again.refused is not None
        assert again.state.claims == state.claims
    # Past it, the id is forgotten: a later version counts as a new claim.
    forgotten = add_claim(state, admit(claim(1), POLICY, NOW), RULES, POLICY.version, NOW, limits)
    assert forgotten.refused is None
    assert "c1" in [a.claim.claim_id for a in forgotten.state.claims]


def test_a_reused_claim_id_with_the_same_normalized_content_is_one_claim() -> None:
    state, _ = grow(claim(1, value="paid"))
    step = add_claim(
        state, admit(claim(1, value=" PAID "), POLICY, NOW), RULES, POLICY.version, NOW
    )
    assert step.refused is None
    assert len(step.state.claims) == 1


def test_time_alone_expires_and_the_next_check_is_the_expiry_instant() -> None:
    state, _ = grow(claim(1))
    assert state is not None
    # Exactly as old as the budget is fresh; one microsecond older is stale.
    budget_ends = NOW - timedelta(seconds=1) + timedelta(seconds=60)
    assert state.next_check_at == budget_ends + timedelta(microseconds=1)
    assert advance(state, RULES, POLICY.version, budget_ends).emitted is None
    step = advance(state, RULES, POLICY.version, state.next_check_at)
    assert step.emitted is not None
    assert step.emitted.decision.outcome == "insufficient"
    assert step.emitted.decision.decided_at == state.next_check_at


def test_history_is_bounded_and_counting_claims_are_kept_first() -> None:
    old = [claim(n, observed_at=NOW - timedelta(minutes=10), value="unpaid") for n in range(5)]
    fresh = [claim(10 + n, source="crm") for n in range(3)]
    state, _ = grow(*old, *fresh, limits=Limits(max_claims=4, max_history=2))
    assert state is not None
    assert len(state.claims) == 4
    assert {s.claim.claim_id for s in state.claims} >= {"c10", "c11", "c12"}
    assert len(state.history) <= 2


def test_keys_split_on_the_last_separator() -> None:
    assert split_key(state_key("a|b", "order.payment_status")) == ("a|b", "order.payment_status")


@settings(max_examples=100, deadline=None)
@given(
    values=st.lists(st.sampled_from(["paid", "unpaid", "overdue"]), min_size=1, max_size=6),
    sources=st.lists(st.sampled_from(["billing-api", "crm", "chat"]), min_size=6, max_size=6),
)
def test_state_encoding_round_trips(values: list[str], sources: list[str]) -> None:
    claims = [
        claim(n, value=v, source=sources[n], epoch=n % 2 or None) for n, v in enumerate(values)
    ]
    state, _ = grow(*claims)
    assert state is not None
    assert decode_state(encode_state(state)) == state
    # The first encoding did not record the key's policy version.
    assert decode_state(_first_encoding(state)) == replace(state, policy_version=None)
    assert len(encode_state(state)) < len(_first_encoding(state))


def _first_encoding(state: KeyState) -> bytes:
    """The state as the first encoding wrote it (claims as nested records, no version): stores
    written by earlier workers must still load."""

    def dump(model: BaseModel, exclude: set[str] | None = None) -> Any:
        return model.model_dump(mode="json", exclude_defaults=True, exclude=exclude)

    encoded = {
        "subject": state.subject,
        "field": state.field,
        "claims": [
            {
                "claim": dump(a.claim, {"subject", "field"}),
                "authority": a.authority.value,
                "value": a.value.model_dump() if isinstance(a.value, Money) else a.value,
                "lineage": a.lineage,
            }
            for a in state.claims
        ],
        "history": [_dumped_summary(s) for s in state.history],
        "conflict_since": state.conflict_since and state.conflict_since.isoformat(),
        "next_check_at": state.next_check_at and state.next_check_at.isoformat(),
    }
    return json.dumps({k: v for k, v in encoded.items() if v}, separators=(",", ":")).encode()


def _dumped_summary(summary: DecisionSummary) -> dict[str, Any]:
    """A decision summary as versions 1 and 2 wrote it: `model_dump(mode="json",
    exclude_defaults=True)` of the model it then was (its defaults are the three None fields)."""
    return {name: value for name, value in summary.as_json().items() if value is not None}


# Per field: values its claims and resolutions may carry (money and floats, enums, booleans).
_SAID = {
    "order.payment_status": st.sampled_from(["paid", "unpaid", "Overdue"]),
    "account.balance": st.builds(
        dict, amount_minor=st.integers(-(10**12), 10**12), currency=st.just("USD")
    ),
    "api.latency": st.floats(0, 1e6, allow_nan=False) | st.integers(0, 10**6),
    "customer.email_verified": st.booleans(),
}
_UNITS = {"api.latency": "ms"}


@st.composite
def _histories(draw: st.DrawFn) -> KeyState:
    """A key grown by claims and resolutions arriving over time: a history of summaries (with
    values, conflict kinds and supersedes) and resolutions to encode."""
    field = draw(st.sampled_from(sorted(_SAID)))
    rules = POLICY.rules_for(field)
    assert rules is not None
    state: KeyState | None = None
    now = NOW
    for n in range(draw(st.integers(1, 8))):
        now += timedelta(seconds=draw(st.integers(0, 90)), microseconds=draw(st.integers(0, 9)))
        status = draw(st.sampled_from(["present", "present", "not_found"]))
        value = draw(_SAID[field]) if status == "present" else None
        if draw(st.integers(0, 4)) == 0:
            resolution = Resolution.model_validate(
                {
                    "resolution_id": f"r{n}",
                    "subject": "invoice:42",
                    "field": field,
                    "status": status,
                    "value": value,
                    "unit": _UNITS.get(field) if value is not None else None,
                    "decided_by": draw(st.sampled_from(["ann", "bo"])),
                    "note": draw(st.sampled_from(["", "the ledger is right"])),
                    "decided_at": now,
                }
            )
            step = add_resolution(state, resolution, rules, POLICY.version, now)
        else:
            said = claim(
                n,
                field=field,
                status=status,
                value=value,
                unit=_UNITS.get(field) if value is not None else None,
                source=draw(st.sampled_from(["billing-api", "crm", "chat"])),
                observed_at=now - timedelta(seconds=1),
            )
            step = add_claim(state, admit(said, POLICY, now), rules, POLICY.version, now)
        state = step.state
    assert state is not None
    return state


@settings(max_examples=200, deadline=None)
@given(state=_histories())
def test_history_and_resolutions_round_trip_through_this_and_the_earlier_encoding(
    state: KeyState,
) -> None:
    assert decode_state(encode_state(state)) == state
    assert decode_state(_second_encoding(state)) == replace(state, policy_version=None)


def test_a_copied_decision_summary_is_stored_as_the_copy() -> None:
    state, _ = grow(claim(1))
    assert state is not None
    summary = state.current
    assert summary is not None
    made = msgspec.msgpack.decode(bytes(stored_summary(summary)))
    assert made["r"] == summary.reason  # made, and kept
    copied = DecisionSummary(
        summary.decision_id,
        summary.outcome,
        summary.conflict_kind,
        summary.value,
        "another_reason",
        summary.decided_at,
        summary.supersedes,
    )
    assert msgspec.msgpack.decode(bytes(stored_summary(copied)))["r"] == "another_reason"


def _second_encoding(state: KeyState) -> bytes:
    """The state as version 2 wrote it: claims as now, resolutions and decision summaries as
    `model_dump` wrote them, and the key's own times as ISO text."""
    written = msgspec.msgpack.decode(encode_state(state))
    written["version"] = 2
    for name in ("conflict_since", "next_check_at"):
        moment = getattr(state, name)
        if moment is not None:
            written[name] = moment.isoformat()
    if state.resolutions:
        written["resolutions"] = [
            r.model_dump(mode="json", exclude_defaults=True, exclude={"subject", "field"})
            for r in state.resolutions
        ]
    if state.history:
        written["history"] = [_dumped_summary(s) for s in state.history]
    return json.dumps(written, separators=(",", ":")).encode()


def test_a_claim_with_every_field_set_round_trips_through_the_state_encoding() -> None:
    rules = POLICY.rules_for("api.latency")
    assert rules is not None
    full = claim_with_every_field(1)
    admitted = admit(full, POLICY, NOW)
    assert admitted.value != full.value  # the normalized value is stored beside the claim's own
    absent = admit(claim(2, field="api.latency", status="not_found", value=None), POLICY, NOW)
    state = add_claim(None, admitted, rules, POLICY.version, NOW).state
    state = add_claim(state, absent, rules, POLICY.version, NOW).state
    assert decode_state(encode_state(state)) == state
    assert decode_state(encode_state(state)).claims[0].value == admitted.value


def test_a_claim_that_cannot_change_the_belief_skips_the_rules() -> None:
    state, _ = grow(claim(1), claim(2, source="reporting-replica", value="overdue"))
    assert state is not None
    assert state.arbitration is not None
    assert state.arbitration.belief is not None
    weaker = admit(claim(3, source="billing-cache"), POLICY, NOW)
    newer_same = admit(claim(4, source="crm", observed_at=NOW), POLICY, NOW)
    stronger_disagreeing = admit(claim(5, source="crm", value="unpaid"), POLICY, NOW)
    placed = _shortcut(state, weaker)
    assert placed is not None
    assert placed.roles["c3"] == "corroborating"
    won = _shortcut(state, newer_same)
    assert won is not None
    assert (won.roles["c4"], won.roles["c1"]) == ("winner", "corroborating")
    assert won.decision_id == state.arbitration.decision_id
    assert _shortcut(state, stronger_disagreeing) is None
    # A state read back from the changelog has no arbitration: the rules run again.
    assert decode_state(encode_state(state)).arbitration is None


def _shortcut(state: KeyState, added: AdmittedClaim) -> Arbitration | None:
    """What `add_claim` decides with `added`, where it placed the claim in the key's own
    arbitration without running the rules (`Transition.arbitration` is then the state's own);
    None where the rules ran."""
    rules = POLICY.rules_for(state.field)
    assert rules is not None
    step = add_claim(state, added, rules, POLICY.version, NOW)
    return step.arbitration if step.arbitration is step.state.arbitration else None


def placed(policy: Policy, *claims: Claim) -> list[tuple[str, bool]]:
    """Add the claims one by one; each step's outcome and whether the rules were skipped, after
    checking the step decided what the full engine decides over the key's claims."""
    field = claims[0].field
    rules = policy.rules_for(field)
    assert rules is not None
    state: KeyState | None = None
    steps = []
    for c in claims:
        step = add_claim(state, admit(c, policy, NOW), rules, policy.version, NOW, Limits())
        state = step.state
        full = arbitrate("invoice:42", field, state.claims, rules, policy.version, NOW)
        assert (step.arbitration.decision_id, step.arbitration.roles) == (
            full.decision_id,
            full.roles,
        )
        # The shortcut places the claim in the state's own arbitration; the rules' result is
        # a new one, of which the state keeps a copy.
        skipped = step.arbitration is state.arbitration
        steps.append((f"{full.outcome.value}/{full.verdict.reason}", skipped))
    return steps


def test_a_weaker_or_silent_claim_leaves_a_conflict_standing_without_the_rules() -> None:
    steps = placed(
        POLICY,
        claim(1, source="crm"),
        claim(2, source="config-service", value="unpaid"),
        claim(3, source="billing-cache"),  # weaker: contested
        claim(4, source="order-form", status="forbidden", value=None),  # says nothing: excluded
        claim(5, source="billing-export", value="overdue"),  # a lineage of its own: contested
    )
    assert steps[2:] == [("conflict/authority_conflict", True)] * 3


def test_a_claim_that_could_settle_or_change_a_conflict_runs_the_rules() -> None:
    """not_found against a value conflict makes it an existence conflict; on a field whose
    ties go to the newest, a newer claim settles it."""
    existence = placed(
        POLICY,
        claim(1, source="crm"),
        claim(2, source="config-service", value="unpaid"),
        claim(3, source="order-form", status="not_found", value=None),
    )
    assert existence[2] == ("conflict/existence_conflict", False)
    address = "customer.shipping_address"
    tied = NOW - timedelta(seconds=5)
    newest = placed(
        POLICY,
        claim(1, field=address, value="1 Main St", source="crm", observed_at=tied),
        claim(2, field=address, value="2 Side Rd", source="config-service", observed_at=tied),
        claim(3, field=address, value="1 Main St", source="order-form"),
    )
    assert [outcome for outcome, _ in newest] == [
        "resolved/system_of_record_precedence",
        "conflict/authority_conflict",
        "resolved/most_recent",
    ]


def test_a_float_joins_its_lineage_only_when_it_says_exactly_what_the_lineage_says() -> None:
    """Tolerance is not transitive: 120.4 agrees with 120.2 but not with 120.0, so a newer
    120.0 of the same lineage supersedes 120.4 (the rules must run), while a newer 120.0 from
    a lineage where every claim says 120.0 just wins."""
    latency = "api.latency"

    def at(n: int, value: float, seconds: int, lineage: str) -> Claim:
        return claim(
            n,
            field=latency,
            value=value,
            unit="ms",
            source="apm-agent",
            lineage=lineage,
            observed_at=NOW - timedelta(seconds=seconds),
        )

    chained = placed(POLICY, at(1, 120.4, 30, "a"), at(2, 120.2, 20, "a"), at(3, 120.2, 10, "a"))
    assert chained[2] == ("resolved/derived_precedence", False)
    steps = placed(POLICY, at(1, 120.0, 30, "a"), at(2, 120.0, 20, "a"), at(3, 120.0, 10, "a"))
    assert steps[2] == ("resolved/derived_precedence", True)


def test_independence_is_counted_again_when_a_claim_joins_two_sources() -> None:
    """Where a field needs two independent sources, a claim from one source in the other's
    lineage makes them one observation: the rules must run, and the decision falls."""
    data = yaml.safe_load((REPO / "examples" / "policy.yaml").read_text())
    data["fields"]["order.payment_status"]["min_independent_sources"] = 2
    counted = parse_policy(data)
    steps = placed(
        counted,
        claim(1, source="crm"),
        claim(2, source="config-service", observed_at=NOW),
        claim(3, source="config-service", lineage="source:crm"),
    )
    assert [outcome for outcome, _ in steps[1:]] == [
        "resolved/system_of_record_precedence",
        "insufficient/too_few_independent_sources",
    ]


def _without_billing_export() -> Policy:
    raw = yaml.safe_load((REPO / "examples" / "policy.yaml").read_text())
    raw["version"] = "no-export"
    del raw["sources"]["billing-export"]
    return parse_policy(raw)


def _with_a_refused_claim() -> tuple[KeyState, Policy]:
    """invoice:42's status from billing-api (c1) and billing-export (c2), the key then moved to a
    policy without billing-export: c2 kept, refused."""
    state, _ = grow(claim(1), claim(2, source="billing-export"))
    assert state is not None
    policy = _without_billing_export()
    claims, refused = readmitted(state, policy)
    moved = adopt_policy(state, claims, refused, RULES, policy.version, NOW).state
    assert [r.claim.claim_id for r in moved.refused] == ["c2"]
    return moved, policy


def test_a_claim_reusing_the_id_of_a_refused_kept_claim_disputes_it_as_a_kept_one_would() -> None:
    state, policy = _with_a_refused_claim()
    other = admit(claim(2, value="overdue"), policy, NOW)
    step = add_claim(state, other, RULES, policy.version, NOW)
    assert step.refused is not None
    assert step.refused.reason is RejectReason.CONFLICTING_DUPLICATE
    assert (step.state.refused, step.state.disputed) == ((), ("c2",))
    assert [a.claim_id for a in step.state.claims] == ["c1"]
    assert [r.claim.claim_id for r in state.refused] == ["c2"]  # the pure transition copied it


def test_the_refused_kept_claim_delivered_again_is_a_redelivery() -> None:
    state, policy = _with_a_refused_claim()
    again = state.refused[0].claim
    step = add_claim(state, again, RULES, policy.version, NOW + timedelta(seconds=1))
    assert step.refused is None
    assert step.state.refused == state.refused
    assert step.state.disputed == ()
    assert [a.claim_id for a in step.state.claims] == ["c1"]  # not evidence twice over
