"""A policy previewed against keys' state: per field, what would flip, examples, keys not judged
and claims refused; the key's "after" is the decision the worker's own move to the policy gives.

The policies are the example policy with edits an operator makes (contract.seats' authorities
swapped, a source dropped so its claims are refused, a field no longer decided, a field's
`on_conflict` changed, a freshness shortened, a unit changed).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.admission.intake import admit, admit_resolution
from streams.core.keys.belief import current_decision
from streams.core.keys.journal import encode_state
from streams.core.keys.state import KeyState, Limits
from streams.core.keys.transitions import add_claim, add_resolution
from streams.core.reading.policy_preview import Previewer, preview
from streams.core.reading.preview_report import (
    MAX_EXAMPLES,
    NO_DECISION,
    Gist,
    Preview,
    Tally,
    merged,
    render_answer,
)
from streams.core.records.contracts import Claim, Outcome, Resolution, SourceClass
from streams.core.records.errors import ContractError, PolicyError
from streams.core.records.policy import Policy
from streams.core.timeline.rollout import InForce, PolicyHistory, catch_up
from tests.support.builders import WIDE
from tests.support.examples import examples
from tests.support.previews import (
    EDITS,
    LATENCY,
    NOW,
    SEATS,
    STATUS,
    T0,
    A,
    B,
    preview_keys,
    variant,
)


def test_the_preview_counts_flips_refusals_and_keys_not_judged_per_field() -> None:
    result = preview(preview_keys(), PolicyHistory.of(A, T0), B, NOW, WIDE)
    assert result.policy_version == B.version
    by_field = {f.field: f for f in result.fields}
    assert sorted(by_field) == [LATENCY, SEATS, STATUS]

    seats = by_field[SEATS]
    assert (seats.looked_at, seats.not_judged, seats.flipped) == (13, 0, 11)
    assert dict(seats.flips) == {
        "resolved (continue): value changes": 10,
        "resolved (continue) -> insufficient (block)": 1,
    }
    # The first keys by key, each with what it says now and would say under B.
    assert [e.key for e in seats.examples] == [f"contract:{n}|{SEATS}" for n in range(MAX_EXAMPLES)]
    first = seats.examples[0]
    assert first.before is not None
    assert first.after is not None
    assert (first.before.value, first.after.value) == (12, 15)
    # Three of chat's claims kept, all refused by B (it no longer has the source), and the key
    # only chat spoke for decides insufficient: judged, not skipped.
    assert seats.refused_claims == 3
    ((reason, claims),) = seats.refusals
    assert claims == 3
    assert reason.startswith("unknown_source: source 'chat' is not in policy")

    latency = by_field[LATENCY]
    assert (latency.looked_at, latency.not_judged, latency.flipped, latency.examples) == (
        2,
        2,
        0,
        (),
    )
    status = by_field[STATUS]
    assert (status.looked_at, status.not_judged, status.flipped) == (2, 0, 0)
    assert (result.looked_at, result.not_judged, result.flipped) == (17, 2, 11)


def test_a_key_whose_claims_the_policy_all_refuses_decides_insufficient_naming_them() -> None:
    keys = dict(preview_keys())
    judged = Previewer(A, B, NOW, WIDE).judge("k", keys[f"contract:onlychat|{SEATS}"])
    assert judged.judged
    assert judged.flipped
    assert judged.after is not None
    assert judged.after.outcome == Outcome.INSUFFICIENT.value
    assert "kept claims policy" in judged.after.reason
    assert len(judged.refused) == 1


def test_previewing_changes_no_state() -> None:
    keys = preview_keys()
    before = [encode_state(state) for _, state in keys]
    preview(keys, PolicyHistory.of(A, T0), B, NOW + timedelta(days=2), WIDE)
    assert [encode_state(state) for _, state in keys] == before


def test_the_policy_in_force_previewed_flips_nothing() -> None:
    result = preview(preview_keys(), PolicyHistory.of(A, T0), A, NOW, WIDE)
    assert (result.looked_at, result.flipped, result.not_judged) == (17, 0, 0)


def test_a_version_the_history_holds_with_other_content_is_refused() -> None:
    other = B.model_copy(update={"version": A.version})
    with pytest.raises(PolicyError, match="a version of its own"):
        Previewer(PolicyHistory.of(A, T0), other, NOW)


def test_a_key_no_policy_in_force_decides_has_no_decision_before() -> None:
    history = PolicyHistory.of(A, T0).then(InForce(T0 + timedelta(seconds=10), B))
    latency = dict(preview_keys())[f"service:0|{LATENCY}"]
    judged = Previewer(history, A, NOW, WIDE).judge("k", latency)
    assert judged.before is None
    assert judged.after is not None
    assert judged.flip.startswith(f"{NO_DECISION} -> resolved")


def test_previews_of_split_keys_merge_into_the_whole_and_survive_json() -> None:
    keys = preview_keys()
    history = PolicyHistory.of(A, T0)
    whole = preview(keys, history, B, NOW, WIDE)
    parts = [preview(keys[n::3], history, B, NOW, WIDE) for n in range(3)]
    through_json = [Preview.from_json(json.loads(json.dumps(p.as_json()))) for p in parts]
    assert through_json == parts
    assert merged(B.version, through_json) == whole
    tally = Tally()
    tally.add_preview(whole)
    tally.not_judged(SEATS)
    seats = {f.field: f for f in tally.result(B.version).fields}[SEATS]
    assert (seats.looked_at, seats.not_judged) == (14, 1)


def test_the_preview_reads_as_a_table_then_each_fields_flips_examples_and_refusals() -> None:
    found = preview(preview_keys(), PolicyHistory.of(A, T0), B, NOW, WIDE)
    answer = {
        **found.as_json(),
        "workers": ["http://w0", "http://w1"],
        "unanswered": ["http://w2"],
        "in_force": ["A"],
        "not_looked_at": 4,
        "limit": 10,
        "by_worker": [{"worker": "http://w1", "incomplete_tasks": [3]}],
    }
    lines = render_answer(answer)
    assert lines == render_answer(json.loads(json.dumps(answer)))
    assert lines[:4] == [
        f"policy preview: policy {B.version} against 17 keys held by 2 workers (in force: A): "
        "11 would flip, 2 not judged, 3 kept claims refused",
        "  1 workers did not answer: http://w2",
        "  about 4 keys not looked at: past 10 keys per worker (--limit)",
        "  http://w1: tasks [3] moved away meanwhile, their keys not all looked at",
    ]
    table = lines[4:8]
    assert table[0].split() == [
        "field",
        "keys",
        "not",
        "judged",
        "would",
        "flip",
        "claims",
        "refused",
    ]
    assert [row.split() for row in table[1:]] == [
        [LATENCY, "2", "2", "0", "0"],
        [SEATS, "13", "0", "11", "3"],
        [STATUS, "2", "0", "0", "0"],
    ]
    assert (
        f"{LATENCY}: its 2 keys not judged (policy {B.version} does not decide the field)" in lines
    )
    assert f"{SEATS}: 11 of 13 keys judged would flip" in lines
    assert "      10  resolved (continue): value changes" in lines
    assert "       1  resolved (continue) -> insufficient (block)" in lines
    assert f"  e.g. contract:0|{SEATS}: resolved 12 (continue) -> resolved 15 (continue)" in lines
    assert any(line.startswith("       3  unknown_source: source 'chat'") for line in lines)
    assert lines[-1].startswith("nothing was sent or changed")


# -- the preview's "after" is the worker's own move ------------------------------------------------


@dataclass(frozen=True)
class Arrival:
    at: datetime
    claim: Claim
    channel: SourceClass | None


_FIELDS = {
    STATUS: (["paid", "paid", "unpaid", "overdue"], None),
    LATENCY: ([120.0, 120.0, 120.3, 121.5, 0.12], "ms"),
    SEATS: ([12, 12, 15], None),
}
_SOURCES = ["billing-api", "ledger-service", "crm", "order-form", "chat", "apm-agent", "chat"]
_EDIT_SETS = [frozenset(n for n in EDITS if mask >> list(EDITS).index(n) & 1) for mask in range(64)]
_POLICIES = st.sampled_from(_EDIT_SETS).map(variant)


@st.composite
def arrivals(draw: st.DrawFn) -> list[Arrival]:
    """Claims about one key arriving within 300 s of T0, each seen up to 90 s after observed."""
    field = draw(st.sampled_from(sorted(_FIELDS)))
    values, unit = _FIELDS[field]
    moments = sorted(draw(st.lists(st.integers(0, 300), min_size=1, max_size=6)))
    out = []
    for n, moment in enumerate(moments):
        at = T0 + timedelta(seconds=moment)
        status = draw(st.sampled_from(["present"] * 5 + ["not_found", "unavailable"]))
        value = draw(st.sampled_from(values)) if status == "present" else None
        said_unit = None if value is None or unit is None else ("s" if value < 1 else unit)
        claim = Claim.model_validate(
            {
                "claim_id": f"c{n}",
                "subject": "key:1",
                "field": field,
                "status": status,
                "value": value,
                "unit": said_unit,
                "source": draw(st.sampled_from(_SOURCES)),
                "observed_at": at - timedelta(seconds=draw(st.sampled_from([0, 1, 30, 61, 90]))),
            }
        )
        out.append(Arrival(at, claim, draw(st.sampled_from([None, None, SourceClass.USER]))))
    return out


_RESOLVED = {STATUS: ("paid", None), LATENCY: (0.1213, "s"), SEATS: (15, None)}


def _resolution(received: list[Arrival]) -> Resolution:
    """A steward's resolution of the key, 5 s after its last claim."""
    field = received[0].claim.field
    value, unit = _RESOLVED[field]
    return Resolution.model_validate(
        {
            "resolution_id": "r1",
            "subject": "key:1",
            "field": field,
            "status": "present",
            "value": value,
            "unit": unit,
            "decided_by": "steward",
            "decided_at": received[-1].at + timedelta(seconds=5),
        }
    )


def _worker_key(
    history: PolicyHistory, received: list[Arrival], limits: Limits, resolved: bool
) -> KeyState | None:
    """The key as a worker holds it: caught up before each claim (and the resolution, if
    `resolved`), each admitted by the policy in force then (dropped if refused)."""
    state: KeyState | None = None
    records: list[Arrival | Resolution] = [*received, *([_resolution(received)] * resolved)]
    for record in records:
        at = record.at if isinstance(record, Arrival) else record.decided_at
        for _, step in catch_up(state, history, at, limits):
            state = step.state
        policy = history.in_force(at)
        rules = policy.rules_for(received[0].claim.field)
        if rules is None:
            continue
        try:
            if isinstance(record, Resolution):
                resolution = admit_resolution(record, policy, at)
                state = add_resolution(state, resolution, rules, policy.version, at, limits).state
                continue
            admitted = admit(record.claim, policy, at, record.channel)
        except ContractError:
            continue
        state = add_claim(state, admitted, rules, policy.version, at, limits).state
    return state


@settings(max_examples=examples(300), deadline=None)
@given(
    first=_POLICIES,
    then=st.none() | st.tuples(st.integers(0, 400), _POLICIES),
    new=_POLICIES,
    received=arrivals(),
    gap=st.integers(0, 900),
    limits=st.sampled_from([WIDE, Limits(max_claims=3)]),
    resolved=st.booleans(),
)
def test_the_preview_decides_as_the_worker_would_once_the_policy_took_effect_now(
    first: Policy,
    then: tuple[int, Policy] | None,
    new: Policy,
    received: list[Arrival],
    gap: int,
    limits: Limits,
    resolved: bool,
) -> None:
    """A key grown under one policy (or two, the second from some instant), perhaps resolved by
    a steward, previewed under another at `now`: its "after" is what `catch_up` through the
    history with the new policy added at `now` decides (the move a worker makes), its "before"
    what the web API answers now; refused claims are those the moved key names; a field the
    new policy does not decide is not judged, and a key on the new policy's version already
    decides as the web API would answer under that history."""
    history = PolicyHistory.of(first, T0)
    if then is not None:
        history = history.then(InForce(T0 + timedelta(seconds=then[0]), then[1]))
    state = _worker_key(history, received, limits, resolved)
    if state is None:
        return  # every claim refused
    now = received[-1].at + timedelta(seconds=gap + 10 * resolved)
    judged = Previewer(history, new, now, limits).judge("k", state)

    moved = catch_up(state, history, now, limits)
    caught = moved[-1][1].state if moved else state
    in_force = history.in_force(now)
    rules = in_force.rules_for(state.field)
    if rules is None:
        assert judged.before is None
    else:
        decided = current_decision(caught, rules, in_force.version, now)
        assert judged.before is not None
        assert judged.before.reason == decided.reason

    new_rules = new.rules_for(state.field)
    if new_rules is None:
        assert not judged.judged
        assert not judged.flipped
        return
    assert judged.after is not None
    steps = catch_up(state, history.then(InForce(now, new)), now, limits)
    if caught.policy_version == new.version:
        # No move (the key is on that version already): the key as the web API would answer
        # under the new history, its timers fired.
        held = steps[-1][1].state if steps else state
        decision = current_decision(held, new_rules, new.version, now)
        assert judged.after == Gist.of(decision)
        assert judged.flipped == (judged.before != judged.after)
        return
    assert steps, "the worker moves the key"
    step = steps[-1][1]
    decision = step.arbitration.decision
    assert step.state.policy_version == new.version
    assert judged.after.as_json() == {
        "outcome": decision.outcome.value,
        "conflict_kind": decision.conflict_kind.value if decision.conflict_kind else None,
        "status": decision.status.value if decision.status else None,
        "value": decision.value,
        "unit": decision.unit,
        "action": decision.action.value,
        "reason": decision.reason,
    }
    assert judged.refused[-limits.max_claims :] == tuple(r.reason for r in step.state.refused)
    assert judged.flipped == (judged.before != judged.after)
