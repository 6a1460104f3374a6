"""A policy rollout: a key moved to a policy by `catch_up` decides as a key that grew under it.

The policies are the example policy with edits an operator makes (two sources' authorities
swapped, a field's `on_conflict` changed, a unit changed, a freshness shortened, a source
demoted, a field no longer decided, a source dropped so its claims are refused), any set of
them: a policy is the example with a set of edits, its version naming them. Keys hold claims
about a payment status or a latency, and perhaps a steward's resolution.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.admission.intake import AdmittedClaim, admit, admit_resolution
from streams.core.keys.belief import current_decision
from streams.core.keys.state import KeyState, Limits
from streams.core.keys.transitions import Transition, add_claim, add_resolution
from streams.core.reading.replay import replay_with_clock
from streams.core.records.contracts import Claim, Decision, Outcome, Resolution, SourceClass
from streams.core.records.errors import ContractError
from streams.core.records.policy import Policy, parse_policy
from streams.core.timeline.rollout import InForce, PolicyHistory, catch_up, readmitted
from tests.support.builders import REPO, WIDE
from tests.support.examples import examples

T0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
_RAW = yaml.safe_load((REPO / "examples" / "policy.yaml").read_text())


def _swap(raw: dict[str, Any]) -> None:
    crm, cache = raw["sources"]["crm"], raw["sources"]["billing-cache"]
    crm["authority"], cache["authority"] = cache["authority"], crm["authority"]


def _most_recent(raw: dict[str, Any]) -> None:
    raw["fields"]["order.payment_status"]["on_conflict"] = "most_recent"


def _seconds(raw: dict[str, Any]) -> None:
    raw["fields"]["api.latency"].update(unit="s", tolerance=0.0005)


def _fresher(raw: dict[str, Any]) -> None:
    raw["fields"]["order.payment_status"]["freshness"] = "20s"


def _demote(raw: dict[str, Any]) -> None:
    raw["sources"]["ledger-service"] = {"authority": "derived"}


def _forget(raw: dict[str, Any]) -> None:
    del raw["fields"]["api.latency"]


def _drop(raw: dict[str, Any]) -> None:
    del raw["sources"]["billing-cache"]


EDITS = {  # made in this order (the one dropping a source last)
    "swap": _swap,
    "most_recent": _most_recent,
    "seconds": _seconds,
    "fresher": _fresher,
    "demote": _demote,
    "forget": _forget,
    "drop": _drop,
}


Edits = frozenset[str]
"""A policy, as the edits that make it (drawn as such: a failing example prints them)."""


@cache
def variant(edits: Edits) -> Policy:
    """The example policy with `edits` made (the example itself for none)."""
    raw = json.loads(json.dumps(_RAW))
    for name, edit in EDITS.items():
        if name in edits:
            edit(raw)
    if edits:
        raw["version"] = "edited:" + "+".join(sorted(edits))
    return parse_policy(raw)


_EDIT_SETS = [
    frozenset(n for n in EDITS if mask >> list(EDITS).index(n) & 1) for mask in range(128)
]
ANY_EDITS = st.sampled_from(_EDIT_SETS)  # each edit in half of them


@st.composite
def two_policies(draw: st.DrawFn) -> tuple[Edits, Edits]:
    """Two different policies."""
    first = draw(st.integers(0, len(_EDIT_SETS) - 1))
    second = (first + draw(st.integers(1, len(_EDIT_SETS) - 1))) % len(_EDIT_SETS)
    return _EDIT_SETS[first], _EDIT_SETS[second]


# -- claims arriving at one key ------------------------------------------------------------------


@dataclass(frozen=True)
class Arrival:
    """A claim as the worker receives it: when, on which topic's class (`channel`)."""

    at: datetime
    claim: Claim
    channel: SourceClass | None


_FIELDS = {
    "order.payment_status": (["paid", "paid", "unpaid", "PAID", "overdue"], None),
    "api.latency": ([120.0, 120.0, 120.3, 121.5, 0.12], "ms"),
}
_SOURCES = [  # the edits' sources (swapped, demoted, dropped) thrice as likely as the others
    *["billing-api", "ledger-service", "crm", "billing-cache"] * 3,
    "reporting-replica",
    "chat",
    "apm-agent",
    "config-service",
]
_ONE_IN_FOUR = st.integers(0, 3)
_AGE = st.sampled_from([0, 0, 1, 5, 30, 59, 61, 90])  # seconds: either side of a 60 s freshness
_STATUS = st.sampled_from(["present"] * 6 + ["not_found", "unavailable", "error"])
_CHANNEL = st.sampled_from([None] * 6 + [SourceClass.USER])
_SPECIAL: st.SearchStrategy[dict[str, Any]] = st.sampled_from(
    [{}] * 8 + [{"epoch": 1}, {"epoch": 2}, {"scope": "server"}, {"lineage": "l1"}]
)


@st.composite
def arrivals(
    draw: st.DrawFn, within: int = 300, reuse: bool = False, max_size: int = 8
) -> list[Arrival]:
    """Claims about one key arriving within `within` seconds of T0, in time order, each seen up
    to 90 s after it was observed; with `reuse`, some redelivered or their ids said again."""
    field = draw(st.sampled_from(sorted(_FIELDS)))
    values, unit = _FIELDS[field]
    moments = sorted(draw(st.lists(st.integers(0, within), min_size=1, max_size=max_size)))
    out: list[Arrival] = []
    for n, moment in enumerate(moments):
        at = T0 + timedelta(seconds=moment)
        if reuse and out and draw(_ONE_IN_FOUR) == 0:  # a redelivery
            prior = draw(st.sampled_from(out))
            out.append(Arrival(at, prior.claim, prior.channel))
            continue
        status = draw(_STATUS)
        value = draw(st.sampled_from(values)) if status == "present" else None
        said_unit = None if value is None or unit is None else ("s" if value < 1 else unit)
        reused = reuse and n > 0 and draw(_ONE_IN_FOUR) == 0
        claim = Claim.model_validate(
            {
                "claim_id": f"c{draw(st.integers(0, n - 1)) if reused else n}",
                "subject": "invoice:42",
                "field": field,
                "status": status,
                "value": value,
                "unit": said_unit,
                "source": draw(st.sampled_from(_SOURCES)),
                "source_class": "user" if draw(st.integers(0, 7)) == 0 else "observation",
                "observed_at": at - timedelta(seconds=draw(_AGE)),
                **draw(_SPECIAL),
            }
        )
        out.append(Arrival(at, claim, draw(_CHANNEL)))
    return out


_RESOLVED = {
    "order.payment_status": [("present", "paid", None), ("present", "unpaid", None)],
    "api.latency": [("present", 120, "ms"), ("present", 0.1213, "s"), ("not_found", None, None)],
}


@st.composite
def resolutions(draw: st.DrawFn, received: list[Arrival]) -> list[Resolution]:
    """None, or a steward's resolution of the key, mostly after its claims so far."""
    if draw(st.booleans()):
        return []
    field = received[0].claim.field
    status, value, unit = draw(st.sampled_from(_RESOLVED[field]))
    after = draw(st.sampled_from(received)).at if draw(_ONE_IN_FOUR) == 0 else received[-1].at
    at = after + timedelta(seconds=draw(st.integers(0, 20)))
    said = {"status": status, "value": value, "unit": unit, "decided_at": at}
    return [
        Resolution.model_validate(
            {"resolution_id": "r1", "subject": "invoice:42", "field": field, **said}
            | {"decided_by": "steward", "note": "checked the ledger"}
        )
    ]


@st.composite
def keys(draw: st.DrawFn, within: int = 300) -> tuple[list[Arrival], list[Resolution]]:
    """Claims arriving at one key (`arrivals`), and perhaps a resolution."""
    received = draw(arrivals(within=within))
    return received, draw(resolutions(received))


Record = tuple[datetime, bool, dict[str, Any]]
"""What a key sends: at, whether an escalation, the decision."""


def _records(at: datetime, step: Transition) -> list[Record]:
    sent = [] if step.emitted is None else [(at, False, step.emitted.decision.model_dump())]
    if step.escalation is not None:
        sent.append((at, True, step.escalation.model_dump()))
    return sent


def run(
    history: PolicyHistory,
    received: list[Arrival],
    until: datetime,
    touches: Sequence[datetime] = (),
    limits: Limits = WIDE,
    resolved: Sequence[Resolution] = (),
) -> tuple[KeyState | None, list[Record]]:
    """A worker's key: before each claim or resolution (and each touch, and `until`)
    `catch_up`, then the record admitted and applied under the policy in force at its instant
    (dropped if it refuses it)."""
    moments: list[tuple[datetime, int, Arrival | Resolution | None]] = sorted(
        [(a.at, 0, a) for a in received]
        + [(r.decided_at, 1, r) for r in resolved]
        + [(t, 2, None) for t in [*touches, until]],
        key=lambda moment: (moment[0], moment[1]),
    )
    state: KeyState | None = None
    sent: list[Record] = []
    for at, _, arrival in moments:
        for due, step in catch_up(state, history, at, limits):
            sent += _records(due, step)
            state = step.state
        if arrival is None:
            continue
        try:
            step = _applied(state, arrival, history.in_force(at), at, limits)
        except ContractError:
            continue  # refused at intake
        sent += _records(at, step)
        state = step.state
    return state, sent


def _applied(
    state: KeyState | None,
    record: Arrival | Resolution,
    policy: Policy,
    at: datetime,
    limits: Limits,
) -> Transition:
    """`record` admitted by `policy` at `at` and applied to the key, or ContractError."""
    if isinstance(record, Resolution):
        resolution = admit_resolution(record, policy, at)
        rules = policy.rules_for(record.field)
        assert rules is not None
        return add_resolution(state, resolution, rules, policy.version, at, limits)
    admitted = admit(record.claim, policy, at, record.channel)
    rules = policy.rules_for(record.claim.field)
    assert rules is not None
    return add_claim(state, admitted, rules, policy.version, at, limits)


def _admitted(arrival: Arrival, policy: Policy) -> AdmittedClaim | ContractError:
    try:
        return admit(arrival.claim, policy, arrival.at, arrival.channel)
    except ContractError as exc:
        return exc


def _decided(decision: Decision) -> dict[str, Any]:
    """What a decision says, not when nor after which (nor its id, which hashes its reason)."""
    return decision.model_dump(exclude={"decided_at", "supersedes", "decision_id", "reason"})


def _by_id(admitted: AdmittedClaim) -> str:
    return admitted.claim_id


def _decide(state: KeyState, policy: Policy, at: datetime) -> Decision:
    rules = policy.rules_for(state.field)
    assert rules is not None
    return current_decision(state, rules, policy.version, at)


# -- a: readmission is admission -----------------------------------------------------------------


@settings(max_examples=examples(300), deadline=None)
@given(policies=two_policies(), received=arrivals(reuse=True))
def test_readmitting_a_keys_claims_admits_each_as_the_policy_would_afresh(
    policies: tuple[Edits, Edits], received: list[Arrival]
) -> None:
    """Under B, each claim the key kept under A is admitted with the authority, value, lineage
    and channel `admit` under B gives it (on arrival), or refused by B with `admit`'s reason."""
    a, b = variant(policies[0]), variant(policies[1])
    state, _ = run(PolicyHistory.of(a), received, received[-1].at)
    if state is None:
        return  # A refused every claim
    claims, refused = readmitted(state, b)
    arrived = {id(arrival.claim): arrival for arrival in received}
    kept = {c.claim_id: arrived[id(c.claim)] for c in state.claims}
    assert sorted(kept) == sorted(
        [c.claim_id for c in claims] + [r.claim.claim_id for r in refused]
    )
    for again in claims:
        fresh = _admitted(kept[again.claim_id], b)
        assert isinstance(fresh, AdmittedClaim)
        assert again == fresh
        assert (again.authority, again.value, again.lineage, again.channel) == (
            fresh.authority,
            fresh.value,
            fresh.lineage,
            fresh.channel,
        )
    for no in refused:
        fresh = _admitted(kept[no.claim.claim_id], b)
        assert isinstance(fresh, ContractError)
        assert no.reason == f"{fresh.reason.value}: {fresh.detail}"


# -- b: moved to B, a key decides as one grown under B ------------------------------------------


@settings(max_examples=examples(300), deadline=None)
@given(policies=two_policies(), key=keys(), gap=st.integers(0, 30), later=st.integers(0, 600))
def test_a_key_moved_to_a_policy_decides_as_a_key_grown_under_it(
    policies: tuple[Edits, Edits],
    key: tuple[list[Arrival], list[Resolution]],
    gap: int,
    later: int,
) -> None:
    """A key grown under A, then moved to B at `since` (after its last claim and resolution),
    decides at and after the move as a key that took the same claims and resolution under B:
    same outcome, value, unit, conflict kind, status, action, resolution and evidence; its
    reason names each kept claim B refuses, with B's reason."""
    a, b = variant(policies[0]), variant(policies[1])
    received, resolved = key
    since = max([received[-1].at, *(r.decided_at for r in resolved)]) + timedelta(seconds=gap)
    until = since + timedelta(seconds=later)
    history = PolicyHistory([InForce(T0, a), InForce(since, b)])
    moved, sent = run(history, received, until, resolved=resolved)
    if moved is None:
        return
    if b.rules_for(moved.field) is None:  # B does not decide the field: the key stays on A
        assert moved.policy_version == a.version
        assert all(d["policy_version"] == a.version for _, _, d in sent)
        return
    assert moved.policy_version == b.version
    assert next(at for at, _, d in sent if d["policy_version"] == b.version) == since
    kept = {id(c.claim) for c in moved.claims} | {id(r.claim.claim) for r in moved.refused}
    took = [r for r in received if id(r.claim) in kept]
    grown, _ = run(PolicyHistory.of(b), took, until, resolved=resolved)
    refusals = "; ".join(f"{r.claim.claim_id} ({r.reason})" for r in moved.refused)
    for at in (since, until):
        decision = _decide(moved, b, at)
        if grown is None:  # B refuses every kept claim
            assert decision.outcome is Outcome.INSUFFICIENT
            assert decision.evidence == ()
        else:
            fresh = _decide(grown, b, at)
            assert _decided(decision) == _decided(fresh)
            if refusals:
                noted = f"{fresh.reason}; kept claims policy {b.version} refuses: {refusals}"
                assert decision.reason == noted
            else:
                assert (decision.reason, decision.decision_id) == (fresh.reason, fresh.decision_id)
        if refusals:
            assert decision.reason.endswith(f"; kept claims policy {b.version} refuses: {refusals}")


# -- c: rollback -----------------------------------------------------------------------------------


@settings(max_examples=examples(200), deadline=None)
@given(
    policies=two_policies(),
    key=keys(),
    gaps=st.tuples(st.integers(1, 120), st.integers(0, 600), st.integers(0, 900)),
)
def test_rolling_back_leaves_the_key_deciding_as_under_the_first_policy(
    policies: tuple[Edits, Edits],
    key: tuple[list[Arrival], list[Resolution]],
    gaps: tuple[int, int, int],
) -> None:
    """A -> B -> A, B taking effect after the key's last record: the key holds the claims and
    resolution it held and decides as if B had never been (the same decision, id included)."""
    a, b = variant(policies[0]), variant(policies[1])
    received, resolved = key
    to_b = max([received[-1].at, *(r.decided_at for r in resolved)]) + timedelta(seconds=gaps[0])
    back = to_b + timedelta(seconds=gaps[1])
    until = back + timedelta(seconds=gaps[2])
    history = PolicyHistory([InForce(T0, a), InForce(to_b, b), InForce(back, a)])
    rolled, _ = run(history, received, until, resolved=resolved)
    stayed, _ = run(PolicyHistory.of(a), received, until, resolved=resolved)
    if stayed is None:
        assert rolled is None
        return
    assert rolled is not None
    assert (rolled.policy_version, rolled.refused) == (a.version, ())
    assert sorted(rolled.claims, key=_by_id) == sorted(stayed.claims, key=_by_id)
    assert rolled.resolutions == stayed.resolutions
    for at in (back, until):
        decision, under_a = _decide(rolled, a, at), _decide(stayed, a, at)
        assert decision.model_dump(exclude={"decided_at", "supersedes"}) == under_a.model_dump(
            exclude={"decided_at", "supersedes"}
        )


# -- d: how often a key is touched does not matter -------------------------------------------------


@st.composite
def histories(draw: st.DrawFn) -> list[tuple[int, Edits]]:
    """A policy from T0, then up to three more (one may be the first again: a rollback), each
    taking effect within 20 minutes of T0 (seconds after it)."""
    entries = [(0, draw(ANY_EDITS))]
    for _ in range(draw(st.integers(0, 3))):
        since = draw(st.integers(0, 1200))
        entries.append((since, draw(st.sampled_from([entries[0][1], draw(ANY_EDITS)]))))
    return entries


_MOMENTS = st.lists(st.integers(0, 1500), max_size=6)


@settings(max_examples=examples(300), deadline=None)
@given(
    entries=histories(),
    key=keys(within=900),
    touches=_MOMENTS,
    limits=st.sampled_from([WIDE, Limits(max_claims=3)]),
)
def test_a_key_sends_the_same_whether_or_not_it_is_touched_in_between(
    entries: list[tuple[int, Edits]],
    key: tuple[list[Arrival], list[Resolution]],
    touches: list[int],
    limits: Limits,
) -> None:
    """Claims arriving while policies take effect: catching the key up only when a claim comes
    (and at the end) sends the same decisions, at the same instants, as catching it up at any
    instants in between too (a tick, a rollout sweep, a restart), and leaves it the same."""
    until = T0 + timedelta(seconds=1500)
    moments = [T0 + timedelta(seconds=s) for s in touches]
    history = PolicyHistory(InForce(T0 + timedelta(seconds=s), variant(e)) for s, e in entries)
    received, resolved = key
    once, sent_once = run(history, received, until, limits=limits, resolved=resolved)
    often, sent_often = run(history, received, until, moments, limits, resolved)
    assert sent_often == sent_once
    assert often == once
    if once is not None and history.in_force(until).rules_for(once.field) is not None:
        assert once.policy_version == history.in_force(until).version


# -- e: replay with one policy is unchanged --------------------------------------------------------


def _line(arrival: Arrival) -> str:
    return arrival.claim.model_dump_json()


@settings(max_examples=examples(100), deadline=None)
@given(
    keys=st.lists(arrivals(reuse=True), min_size=1, max_size=3),
    edits=ANY_EDITS,
    since=st.integers(-(10**6), 10**6),
    later=st.integers(0, 1200),
)
def test_replay_with_a_one_policy_history_is_replay_with_the_policy(
    keys: list[list[Arrival]], edits: Edits, since: int, later: int
) -> None:
    """No history but one policy: replay as before histories, whenever the policy's `since`."""
    policy = variant(edits)
    lines = [
        _line(a).replace('"invoice:42"', f'"invoice:{k}"')
        for k, key in enumerate(keys)
        for a in key
    ]
    now = T0 + timedelta(seconds=later)
    history = PolicyHistory.of(policy, T0 + timedelta(seconds=since))
    assert replay_with_clock(lines, history, now) == replay_with_clock(lines, policy, now)
