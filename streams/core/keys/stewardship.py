"""How a steward's statement changes what a key holds of its stewards: which resolutions are in
force (what the engine applies) and the steward log (steward_log.py).

Where it sits: `transitions.add_resolution` calls `take` with the key's state and re-decides
over what it returns; the key's own clock orders the statements as it orders claims, so a
worker, a restart and replay take each at the same instant and reach the same standing.

- A resolution (or an undo) of a field whose policy asks for no review counts at once; a
  `propose` (an agent's resolution) waits for one approval even there.
- Where the policy's `review.approvals` is N, it is a proposal until N stewards approve it;
  its author's approval counts only where `review.author_may_approve` says so.
- An approval names the basis it saw: the key's decision and the digest of its evidence. If
  the key has been decided again since (the approval's basis, or the proposal's, is not the key's
  decision now), the approval is refused as stale and the proposal is sent back to its author.
- A reviewer may reject a proposal, or send it back to its author, with a note.
- An undo takes a resolution in force back: the key returns to the policy's own decision, the
  undone resolution kept in the log.
- A key's task (its open conflict, its proposals) is held by the steward an `assign` names,
  until their lease lapses (`review.lease` after their last statement on the key): anyone takes
  a task nobody holds; only its holder hands it on or releases it (`task_of`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from streams.core.keys.state import KeyState, Limits
from streams.core.keys.steward_log import Standing, StewardStep
from streams.core.keys.upkeep import latest_resolutions
from streams.core.records.contracts import (
    OPEN_OUTCOMES,
    PROPOSALS,
    Decision,
    RejectReason,
    Resolution,
    StewardAct,
)
from streams.core.records.errors import ContractError
from streams.core.records.policy import FieldRules

Basis = Callable[[], tuple[str, str] | None]
"""The key's decision now, as (decision id, evidence digest); None before it has one."""


@dataclass(frozen=True, slots=True)
class Stewarded:
    """What the key holds of its stewards after a statement, and what to say about it."""

    resolutions: tuple[Resolution, ...]
    log: tuple[StewardStep, ...]
    refused: ContractError | None = None


def basis_digest(decision: Decision) -> str:
    """A digest of a decision's evidence as a person saw it: each claim's id, source, status,
    value, observed instant and role. Two decisions over the same evidence share it."""
    seen = sorted(
        (
            e.claim_id,
            e.source,
            e.status.value,
            repr(e.value),
            e.observed_at.isoformat(),
            e.role.value,
        )
        for e in decision.evidence
    )
    return hashlib.sha256(json.dumps(seen).encode()).hexdigest()[:32]


def known(state: KeyState, statement_id: str) -> bool:
    """Whether the key holds a statement of this id already (a redelivery)."""
    return any(r.resolution_id == statement_id for r in state.resolutions) or any(
        s.statement.resolution_id == statement_id for s in state.steward_log
    )


@dataclass(frozen=True, slots=True)
class Task:
    """A key's task for its stewards at an instant: who holds it (None: nobody, or a lease that
    lapsed), until when, and how many proposals on it wait for review."""

    assignee: str | None
    lease_until: datetime | None
    waiting_for_review: int


def task_of(state: KeyState, rules: FieldRules, now: datetime) -> Task:
    """The key's task at `now`: held by the last `assign`'s assignee until `review.lease` after
    that steward's last statement on the key, and no longer once it has lapsed."""
    waiting = sum(s.standing is Standing.PENDING for s in state.steward_log)
    assigned = next(
        (s.statement for s in reversed(state.steward_log) if s.statement.act is StewardAct.ASSIGN),
        None,
    )
    if assigned is None or assigned.assignee is None:
        return Task(None, None, waiting)
    holder = assigned.assignee
    said = [s.statement for s in state.steward_log] + list(state.resolutions)
    active = max([assigned.decided_at] + [r.decided_at for r in said if r.decided_by == holder])
    until = active + rules.review.lease
    return Task(holder, until, waiting) if now < until else Task(None, None, waiting)


def take(
    state: KeyState, said: Resolution, rules: FieldRules, basis: Basis | None, limits: Limits
) -> Stewarded:
    """The key's resolutions in force and steward log once `said` is taken (a statement the key
    does not hold yet; a resolution or undo has passed `belief.stale_view`). `basis`: the
    key's decision to judge an approval's basis by; None judges none (replay at once takes
    every claim at once, so it cannot tell what a steward saw when; `replay_with_clock` can)."""
    act = said.act
    if act in PROPOSALS:
        return _proposed(state, said, rules, limits)
    if act is StewardAct.ASSIGN:
        return _assigned(state, said, rules, limits)
    target = _pending(state.steward_log, said.target_id)
    if target is None:
        return _refused(state, _no_proposal(state, said))
    if act is StewardAct.APPROVE:
        return _approved(state, said, target, rules, basis, limits)
    standing = Standing.REJECTED if act is StewardAct.REJECT else Standing.SENT_BACK
    closed = StewardStep(target.statement, standing, target.needs)
    log = _replaced(state.steward_log, target, closed)
    return bounded(state.resolutions, (*log, _recorded(said)), limits)


def _assigned(state: KeyState, said: Resolution, rules: FieldRules, limits: Limits) -> Stewarded:
    """Who holds the task: anyone takes one nobody holds; only its holder hands it on or
    releases it while the lease runs."""
    current = state.current
    waiting = any(s.standing is Standing.PENDING for s in state.steward_log)
    what = f"assign {said.resolution_id!r}"
    if not waiting and (current is None or current.outcome not in OPEN_OUTCOMES):
        return _refused(state, f"{what}: {state.subject}|{state.field} has no open task")
    held = task_of(state, rules, said.decided_at)
    if held.assignee is not None and held.assignee != said.decided_by:
        assert held.lease_until is not None
        return _refused(
            state,
            f"{what}: the task is {held.assignee}'s until {held.lease_until.isoformat()} "
            "(its holder hands it on or releases it; its lease lapses without a statement)",
        )
    return bounded(state.resolutions, (*state.steward_log, _recorded(said)), limits)


def _proposed(state: KeyState, said: Resolution, rules: FieldRules, limits: Limits) -> Stewarded:
    if said.act is StewardAct.UNDO and _in_force(state, said.target_id) is None:
        return _refused(
            state,
            f"undo {said.resolution_id!r}: no resolution {said.target_id!r} is in force on "
            f"{state.subject}|{state.field}",
        )
    needs = rules.review.approvals
    if said.act is StewardAct.PROPOSE:
        needs = max(needs, 1)
    if needs == 0:
        return _applied(state, StewardStep(said, Standing.PENDING), state.steward_log, limits)
    waiting = sum(s.standing is Standing.PENDING for s in state.steward_log)
    if waiting >= limits.max_resolutions // 2:
        return _refused(
            state,
            f"{said.act.value} {said.resolution_id!r}: {waiting} proposals wait for review on "
            f"{state.subject}|{state.field} already (half of resolutions_per_key): review "
            "them first",
        )
    log = (*state.steward_log, StewardStep(said, Standing.PENDING, needs))
    return bounded(state.resolutions, log, limits)


def _approved(
    state: KeyState,
    said: Resolution,
    target: StewardStep,
    rules: FieldRules,
    basis: Basis | None,
    limits: Limits,
) -> Stewarded:
    proposal = target.statement
    if said.decided_by == proposal.decided_by and not rules.review.author_may_approve:
        return _refused(
            state,
            f"approve {said.resolution_id!r}: {said.decided_by!r} made {proposal.resolution_id!r};"
            " its author's approval does not count (review.author_may_approve)",
        )
    approvals = _approvals(state.steward_log, proposal.resolution_id)
    if said.decided_by in approvals:
        return _refused(
            state,
            f"approve {said.resolution_id!r}: {said.decided_by!r} approved "
            f"{proposal.resolution_id!r} already",
        )
    stale = None if basis is None else _stale(said, proposal, basis())
    if stale is not None:
        why, refusal = stale
        back = StewardStep(proposal, Standing.SENT_BACK, target.needs, why)
        return Stewarded(
            state.resolutions, _replaced(state.steward_log, target, back), refused=refusal
        )
    log = (*state.steward_log, _recorded(said))
    if len(approvals) + 1 < target.needs:
        return bounded(state.resolutions, log, limits)
    return _applied(state, target, log, limits)


def _stale(
    said: Resolution, proposal: Resolution, now: tuple[str, str] | None
) -> tuple[str, ContractError] | None:
    """Why the approval `said` of `proposal` comes too late, if the key has been decided again
    since either was made: what to tell the proposal's author, and the approval's refusal."""
    current = now[0] if now else None
    seen = (said.resolves_decision_id, said.basis_digest)
    if now is not None and seen == now and proposal.resolves_decision_id in (None, current):
        return None
    why = (
        f"the key was decided again since it was proposed: its decision is now {current}; "
        "look at the new evidence and propose again"
    )
    return why, ContractError(
        RejectReason.STALE_DECISION,
        f"approve {said.resolution_id!r} saw decision {said.resolves_decision_id!r} "
        f"(evidence {said.basis_digest}), but the key's decision is {current} "
        f"(evidence {now[1] if now else None}): {proposal.resolution_id!r} is sent back to "
        "its author",
    )


def _applied(
    state: KeyState, proposal: StewardStep, log: tuple[StewardStep, ...], limits: Limits
) -> Stewarded:
    """`proposal` (pending in `log`, or new) put in force."""
    said = proposal.statement
    if said.act is not StewardAct.UNDO:
        kept = tuple(s for s in log if s is not proposal)
        return bounded((*state.resolutions, said), kept, limits)
    undone = _in_force(state, said.target_id)
    if undone is None:  # taken back by another undo while this one waited
        closed = StewardStep(said, Standing.SENT_BACK, proposal.needs, "nothing left to undo")
        return bounded(state.resolutions, _with(log, proposal, closed), limits)
    applied = StewardStep(said, Standing.APPLIED, proposal.needs)
    log = (*_with(log, proposal, applied), StewardStep(undone, Standing.UNDONE))
    # The decision is then the policy's own, as it was before the resolution (the same id):
    # the undo and the undone resolution are in the log, not in its reason, where a note would
    # last only until the key is next decided.
    resolutions = tuple(r for r in state.resolutions if r is not undone)
    return bounded(resolutions, log, limits)


def _with(
    log: tuple[StewardStep, ...], proposal: StewardStep, step: StewardStep
) -> tuple[StewardStep, ...]:
    """`log` with `proposal` replaced by `step`, or `step` added where `proposal` is not in it."""
    return _replaced(log, proposal, step) if proposal in log else (*log, step)


def _replaced(
    log: tuple[StewardStep, ...], old: StewardStep, new: StewardStep
) -> tuple[StewardStep, ...]:
    return tuple(new if step is old else step for step in log)


def bounded(
    resolutions: tuple[Resolution, ...], log: tuple[StewardStep, ...], limits: Limits
) -> Stewarded:
    """At most `limits.max_resolutions` statements in all (as the changelog record's size bound
    reckons): the proposals waiting (at most half of them), then the resolutions in force (the
    latest by `decided_at`, which include the one the engine applies), then the latest of the
    closed statements that room is left for."""
    pending = sum(s.standing is Standing.PENDING for s in log)
    resolutions = latest_resolutions(resolutions, limits.max_resolutions - pending)
    room = limits.max_resolutions - pending - len(resolutions)
    closed = [s for s in log if s.standing is not Standing.PENDING]
    excess = len(closed) - room
    if excess > 0:
        dropped = {id(s) for s in closed[:excess]}
        log = tuple(s for s in log if id(s) not in dropped)
    return Stewarded(resolutions, log)


def _recorded(review: Resolution) -> StewardStep:
    return StewardStep(review, Standing.RECORDED)


def _pending(log: tuple[StewardStep, ...], statement_id: str | None) -> StewardStep | None:
    for step in log:
        if step.statement.resolution_id == statement_id and step.standing is Standing.PENDING:
            return step
    return None


def _in_force(state: KeyState, resolution_id: str | None) -> Resolution | None:
    return next((r for r in state.resolutions if r.resolution_id == resolution_id), None)


def _approvals(log: tuple[StewardStep, ...], proposal_id: str) -> set[str]:
    return {
        s.statement.decided_by
        for s in log
        if s.statement.act is StewardAct.APPROVE and s.statement.target_id == proposal_id
    }


def _no_proposal(state: KeyState, said: Resolution) -> str:
    found = next(
        (s for s in state.steward_log if s.statement.resolution_id == said.target_id), None
    )
    what = f"{said.act.value} {said.resolution_id!r}"
    if found is not None:
        return f"{what}: {said.target_id!r} is {found.standing.value}, not waiting for review"
    if _in_force(state, said.target_id) is not None:
        return f"{what}: {said.target_id!r} is in force already"
    return f"{what}: no proposal {said.target_id!r} on {state.subject}|{state.field}"


def _refused(state: KeyState, detail: str) -> Stewarded:
    return Stewarded(
        state.resolutions,
        state.steward_log,
        refused=ContractError(RejectReason.REVIEW_REFUSED, detail),
    )


def in_force_at_once(
    subject: str,
    field: str,
    statements: list[Resolution],
    rules: FieldRules,
    limits: Limits,
) -> tuple[tuple[Resolution, ...], list[ContractError]]:
    """The resolutions in force once a key's statements are taken in the order they were made,
    with no basis judged (replay at once), and the refusals among them."""
    state = KeyState(subject=subject, field=field)
    refusals = []
    for said in sorted(statements, key=lambda r: (r.decided_at, r.resolution_id)):
        if said.act is StewardAct.ASSIGN or known(state, said.resolution_id):
            continue  # who holds a task changes no belief
        taken = take(state, said, rules, None, limits)
        state.resolutions, state.steward_log = taken.resolutions, taken.log
        if taken.refused is not None:
            refusals.append(taken.refused)
    return state.resolutions, refusals
