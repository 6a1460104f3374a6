"""A key's transitions: how a KeyState (state.py) changes with a claim, a resolution, the clock
or a policy put in force.

Where it sits: the stream shell loads a KeyState (journal.py reads it from the changelog), calls
one transition here (add_claim, add_resolution, advance, adopt_policy), which decides through the
engine (or its incremental shortcut), stores the new state and sends what the `Transition` says.
Pure, and only the transitions: how a state is stored is the journal's. A decision is emitted
only when the belief (its id) changes; a claim delivered again re-emits it unchanged, so a crash
between storing state and sending can repeat a decision, never lose one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, replace
from datetime import datetime
from functools import partial
from operator import attrgetter
from typing import Literal

from streams.core.admission.intake import AdmittedClaim
from streams.core.decision.arbitration import Arbitration
from streams.core.keys import stewardship, upkeep
from streams.core.keys.belief import basis_now, stale_view
from streams.core.keys.emission import emitted_by, escalation_of
from streams.core.keys.state import KeyState, Limits
from streams.core.keys.steward_log import StewardStep
from streams.core.keys.upkeep import (
    RefusedClaim,
    evicted,
    expiry,
    fits,
    next_check,
)
from streams.core.records.contracts import (
    OPEN_OUTCOMES,
    PROPOSALS,
    Decision,
    RejectReason,
    Resolution,
    instant,
    micros,
)
from streams.core.records.errors import ContractError
from streams.core.records.policy import FieldRules
from streams.core.rules.engine import arbitrate
from streams.core.rules.shortcuts.incremental import Placement, placement


@dataclass(slots=True)  # not frozen: one per claim, and a frozen init sets each field by hand
class Transition:
    """The new state and what to send: a decision (with its events) and/or an escalation.
    `arbitration` is what the key decided this time, emitted or not (the belief may not change)."""

    state: KeyState
    arbitration: Arbitration
    """After `apply_claim`, possibly the state's own (`KeyState.arbitration`), which its next
    transition changes: read it (and build what is sent from `emitted`) before that."""
    emitted: Arbitration | None = None
    escalation: Decision | None = None
    refused: ContractError | None = None
    """The input was refused (a reused claim_id): dead-letter it, and still apply the transition."""
    opened: KeyState | None = None
    """The key as it stood before this transition, when its decision was open (a conflict or a
    quarantine): what a settlement is judged against. A copy, as the state changes in place."""


Trigger = Literal["claim", "duplicate", "resolution", "time", "policy", "alias"]


def add_claim(
    state: KeyState | None,
    admitted: AdmittedClaim,
    rules: FieldRules,
    policy_version: str,
    now: datetime,
    limits: Limits = Limits(),
) -> Transition:
    """`apply_claim` on a copy of `state`: the pure transition replay and the properties fold."""
    copy = _copied(state) if state is not None else None
    return apply_claim(copy, admitted, rules, policy_version, now, limits)


def apply_claim(
    state: KeyState | None,
    admitted: AdmittedClaim,
    rules: FieldRules,
    policy_version: str,
    now: datetime,
    limits: Limits = Limits(),
) -> Transition:
    """Add one admitted claim and re-decide, changing `state` in place. All that can fail runs
    before `state` changes: an attempt that raises leaves it as it was, for its retry.

    A claim_id identifies one claim within its key (subject and field). Seen again with the same
    normalized content it is a redelivery. Seen with different content, neither version counts:
    the earlier one leaves the evidence, this one is refused, and so is any later version while
    the id is among the key's `limits.max_disputed` latest disputed ids, the same final state
    whatever order the versions arrive in (as `agreement.distinct` in replay)."""
    claim = admitted.claim
    state = state or KeyState(subject=claim.subject, field=claim.field)
    opened = _opened(state)
    transition = _claimed(state, admitted, rules, policy_version, now, limits)
    transition.opened = opened
    return transition


def _claimed(
    state: KeyState,
    admitted: AdmittedClaim,
    rules: FieldRules,
    policy_version: str,
    now: datetime,
    limits: Limits,
) -> Transition:
    claim_id = admitted.claim_id
    if claim_id in state.disputed:
        transition = _decide(state, rules, policy_version, now, "claim", limits)
        return replace(transition, refused=_conflicting_duplicate(claim_id))
    seen = _with_id(state.claims, claim_id)
    if seen is None and state.refused:
        kept = next((r for r in state.refused if r.claim.claim_id == claim_id), None)
        if kept is not None:
            return _against_refused(state, kept, admitted, rules, policy_version, now, limits)
    if seen is None:
        grown = (*state.claims, admitted)
        return _decide(state, rules, policy_version, now, "claim", limits, admitted, claims=grown)
    if seen.same_content(admitted):
        return _decide(state, rules, policy_version, now, "duplicate", limits)
    withdrawn = tuple(s for s in state.claims if s is not seen)
    disputed = (*state.disputed, claim_id)[-limits.max_disputed :]
    transition = _decide(
        state, rules, policy_version, now, "claim", limits, claims=withdrawn, disputed=disputed
    )
    return replace(transition, refused=_conflicting_duplicate(claim_id))


def _with_id(claims: tuple[AdmittedClaim, ...], claim_id: str) -> AdmittedClaim | None:
    """The key's claim of that id, if it holds one: run for every claim a key takes, over the
    admitted claims' own ids (through each `claim.claim_id` in a generator, it took 2.7% of the
    shell bench's CPU under `perf`, 1.5% so)."""
    for held in claims:
        if held.claim_id == claim_id:
            return held
    return None


def _against_refused(
    state: KeyState,
    kept: RefusedClaim,
    admitted: AdmittedClaim,
    rules: FieldRules,
    policy_version: str,
    now: datetime,
    limits: Limits,
) -> Transition:
    """A claim with the id of a kept claim the policy refuses (`kept`): the same claim (a
    redelivery) or, saying something else, a dispute of the id as a kept claim's reuse is
    (neither counts, the kept one withdrawn)."""
    claim_id = admitted.claim_id
    if kept.claim.same_content(admitted):
        return _decide(state, rules, policy_version, now, "duplicate", limits)
    withdrawn = tuple(r for r in state.refused if r is not kept)
    disputed = (*state.disputed, claim_id)[-limits.max_disputed :]
    transition = _decide(
        state, rules, policy_version, now, "claim", limits, refused=withdrawn, disputed=disputed
    )
    return replace(transition, refused=_conflicting_duplicate(claim_id))


def _copied(state: KeyState) -> KeyState:
    """A state to change in place with `state` left as it was: the fields are immutable values,
    so only the arbitration is copied."""
    arbitration = state.arbitration
    if arbitration is not None:
        arbitration = arbitration.owned(arbitration.decided_at, arbitration.supersedes)
    return _with_arbitration(state, arbitration)


def _opened(state: KeyState) -> KeyState | None:
    """A copy of `state` kept for its transition when its decision is open (the claims, history
    and resolutions are immutable tuples: shared, not copied)."""
    current = state.current
    if current is None or current.outcome not in OPEN_OUTCOMES:
        return None
    return _with_arbitration(state, None)


_STATE_FIELDS = attrgetter(*[field.name for field in dataclasses.fields(KeyState)])


def _with_arbitration(state: KeyState, arbitration: Arbitration | None) -> KeyState:
    """`replace(state, arbitration=...)` at a sixth of its cost: made on every transition."""
    copy = KeyState(*_STATE_FIELDS(state))
    copy.arbitration = arbitration
    return copy


def _conflicting_duplicate(claim_id: str) -> ContractError:
    return ContractError(
        RejectReason.CONFLICTING_DUPLICATE,
        f"claim_id {claim_id!r} is used for claims that say different things; "
        "no version of it counts as evidence",
    )


def add_resolution(
    state: KeyState | None,
    resolution: Resolution,
    rules: FieldRules,
    policy_version: str,
    now: datetime,
    limits: Limits = Limits(),
) -> Transition:
    """Add a person's resolution and re-decide. One made against a decision that is no longer
    the key's (`resolves_decision_id`: new evidence arrived while the steward looked) is refused,
    not applied: the steward decided on evidence that has since changed."""
    opened = _opened(state) if state else None
    transition = _resolved(state, resolution, rules, policy_version, now, limits)
    transition.opened = opened
    return transition


def _resolved(
    state: KeyState | None,
    resolution: Resolution,
    rules: FieldRules,
    policy_version: str,
    now: datetime,
    limits: Limits,
) -> Transition:
    state = (
        _copied(state) if state else KeyState(subject=resolution.subject, field=resolution.field)
    )
    if stewardship.known(state, resolution.resolution_id):
        return _decide(state, rules, policy_version, now, "duplicate", limits)
    if resolution.act in PROPOSALS:
        stale = stale_view(state, resolution, rules, policy_version, now)
        if stale is not None:
            transition = _decide(state, rules, policy_version, now, "resolution", limits)
            return replace(transition, refused=stale)
    basis = partial(basis_now, state, rules, policy_version, now)
    taken = stewardship.take(state, resolution, rules, basis, limits)
    state.steward_log = taken.log
    transition = _decide(
        state,
        rules,
        policy_version,
        now,
        "resolution",
        limits,
        resolutions=taken.resolutions,
    )
    return replace(transition, refused=taken.refused) if taken.refused else transition


def advance(
    state: KeyState,
    rules: FieldRules,
    policy_version: str,
    now: datetime,
    limits: Limits = Limits(),
) -> Transition:
    """Time alone moved: claims may have gone stale, a conflict may need escalating. On a copy."""
    return _decide(_copied(state), rules, policy_version, now, "time", limits)


def adopt_policy(
    state: KeyState,
    claims: tuple[AdmittedClaim, ...],
    refused: tuple[RefusedClaim, ...],
    rules: FieldRules,
    policy_version: str,
    now: datetime,
    limits: Limits = Limits(),
) -> Transition:
    """The key re-decided under another policy, over its kept claims as that policy admits and
    refuses them (`rollout.readmitted`). On a copy."""
    copy = _copied(state)
    copy.refused = refused[-limits.max_claims :]
    return _decide(copy, rules, policy_version, now, "policy", limits, claims=claims)


def regroup(
    state: KeyState,
    claims: tuple[AdmittedClaim, ...],
    refused: tuple[RefusedClaim, ...],
    resolutions: tuple[Resolution, ...],
    rules: FieldRules,
    policy_version: str,
    now: datetime,
    limits: Limits = Limits(),
    *,
    steward_log: tuple[StewardStep, ...] = (),
    disputed: tuple[str, ...] | None = None,
    note: str | None = None,
) -> Transition:
    """The key re-decided over the evidence an alias change leaves it: what stays of its own and
    what arrives from the keys of its other spellings (`aliases.regrouped`), its stewards'
    statements with it. `note`: what the decision says of the move (a key left with nothing
    names where its evidence went). On a copy."""
    copy = _copied(state)
    kept = stewardship.bounded(resolutions, steward_log, limits)
    copy.steward_log = kept.log
    return _decide(
        copy,
        rules,
        policy_version,
        now,
        "alias",
        limits,
        claims=claims,
        resolutions=kept.resolutions,
        disputed=disputed,
        refused=refused[-limits.max_claims :],
        note=note,
    )


def _decide(
    state: KeyState,
    rules: FieldRules,
    policy_version: str,
    now: datetime,
    trigger: Trigger,
    limits: Limits,
    added: AdmittedClaim | None = None,
    *,
    claims: tuple[AdmittedClaim, ...] | None = None,
    resolutions: tuple[Resolution, ...] | None = None,
    disputed: tuple[str, ...] | None = None,
    refused: tuple[RefusedClaim, ...] | None = None,
    note: str | None = None,
) -> Transition:
    """Re-decide the key over `claims`, `resolutions` and `refused` (where given, else the state's
    own): by the shortcut where it applies, else by the rules; then what to emit, whether to
    escalate, and when time alone could next change the decision. `note`: added to the decision's
    reason. All of it is worked out first; `state` changes last, by assignments that cannot fail."""
    claims = state.claims if claims is None else claims
    resolutions = state.resolutions if resolutions is None else resolutions
    last = state.current
    if last is not None and now < last.decided_at:
        now = last.decided_at  # a key's clock never runs backwards
    now_us = micros(now)
    placed = _placement(state, claims, added, rules, policy_version, now, now_us, limits)
    if placed is not None:
        assert added is not None
        assert last is not None
        return _placed(state, claims, added, placed, last.decision_id, rules, now, now_us)
    subject, field, previous = state.subject, state.field, state.arbitration
    supersedes = last.decision_id if last else None
    arbitration = arbitrate(
        subject, field, claims, rules, policy_version, now, resolutions, supersedes, previous
    )
    refused = state.refused if refused is None else refused
    budget = limits.max_claim_bytes
    if not fits(claims, refused, budget):  # decided again without the claims dropped for size
        claims, refused, dropped = upkeep.fitted(claims, refused, arbitration.roles, budget, added)
        arbitration = arbitrate(
            subject, field, claims, rules, policy_version, now, resolutions, supersedes, previous
        )
        arbitration = upkeep.noting_dropped(arbitration, dropped, budget)
    arbitration = upkeep.noting_refusals(arbitration, refused, policy_version)
    if note is not None:
        arbitration = arbitration.noting(note)
    emission = emitted_by(state, arbitration, trigger == "duplicate", now, limits)
    escalation = escalation_of(arbitration, emission, rules, now)
    escalated = emission.escalated or escalation is not None
    kept = evicted(claims, arbitration.roles, limits.max_claims)
    next_check_at = next_check(kept, emission.conflict_since, escalated, rules, now_us)
    # Kept (for the shortcut, and to lend its id to the next verdict that does not change) as a
    # copy of its own, without the records built for sending: the evidence records do not stay.
    owned = arbitration.owned(now, None)
    state.claims, state.resolutions, state.history = kept, resolutions, emission.history
    state.conflict_since, state.escalated = emission.conflict_since, escalated
    state.next_check_at, state.arbitration = next_check_at, owned
    state.policy_version, state.refused = policy_version, refused
    state.timer_waits = False
    if disputed is not None:
        state.disputed = disputed
    return Transition(
        state=state, arbitration=arbitration, emitted=emission.emitted, escalation=escalation
    )


def _placed(
    state: KeyState,
    claims: tuple[AdmittedClaim, ...],
    added: AdmittedClaim,
    placed: Placement,
    supersedes: str,
    rules: FieldRules,
    now: datetime,
    now_us: int,
) -> Transition:
    """The shortcut's result, placed in the state's own arbitration: nothing the rules look at
    moved, so the belief, history and timers stand, except the new claim's own expiry."""
    expires = expiry(added, rules)
    next_check_at = state.next_check_at
    if (
        expires is not None
        and expires > now_us
        and (next_check_at is None or expires < micros(next_check_at))
    ):
        next_check_at = instant(expires)
    arbitration = state.arbitration
    assert arbitration is not None  # `_placement` found one
    arbitration.place(added, placed.roles, placed.belief, now, supersedes)
    state.claims, state.next_check_at = claims, next_check_at
    return Transition(state=state, arbitration=arbitration)


def _placement(
    state: KeyState,
    claims: tuple[AdmittedClaim, ...],
    added: AdmittedClaim | None,
    rules: FieldRules,
    policy_version: str,
    now: datetime,
    now_us: int,
    limits: Limits,
) -> Placement | None:
    """The incremental path (`shortcuts.incremental.placement`), where its preconditions hold:
    the last arbitration is at hand and was made under these rules, no timer of the key has come
    due since (so time alone changed nothing), and the new claim needs no eviction (by count or
    by size)."""
    previous, last = state.arbitration, state.current
    if (
        added is None
        or previous is None
        or previous.belief is None
        or previous.belief.rules is not rules
        or previous.belief.policy_version != policy_version
        or last is None
        or previous.decision_id != last.decision_id
        or (state.next_check_at is not None and now >= state.next_check_at)
        or len(claims) > limits.max_claims
        or state.refused
        or not fits(claims, (), limits.max_claim_bytes)
    ):
        return None
    return placement(previous, added, now_us)
