"""Policy rollouts: which policy is in force when, and a key moved from one policy to the next.

A policy takes effect at an instant, its `since`; the versions with their instants (a
`PolicyHistory`) are what every worker of a cluster shares (the policy topic) and what replay is
given. A key's state records the policy it was last decided under. Before anything applies to a
key at an instant (a claim, a resolution, a tick, the rollout sweep), `catch_up` fires the key's
timers and moves it through every policy that took effect since, each at its own instant, its
kept claims admitted afresh by that policy (and its resolutions: a value in the field's new
unit): replay calls it between recorded events. So a
key's belief is a function of its claims, the policy history and the clock, whichever path moves
it and whichever worker owns it.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime

from streams.core.admission.intake import AdmittedClaim, admit_resolution, readmit
from streams.core.decision.agreement import RECENCY
from streams.core.keys.state import KeyState, Limits
from streams.core.keys.transitions import Transition, adopt_policy
from streams.core.keys.upkeep import RefusedClaim
from streams.core.records.bounds import REFUSAL_CHARS, cut
from streams.core.records.contracts import Resolution
from streams.core.records.errors import ContractError
from streams.core.records.instants import EPOCH
from streams.core.records.policy import Policy
from streams.core.timeline.timers import due_by


@dataclass(frozen=True, slots=True)
class InForce:
    """A policy and the instant it took effect."""

    since: datetime
    policy: Policy


class PolicyHistory:
    """The policies in force over time, in the order they took effect (a later entry with the
    same instant wins). Before the first entry's instant, the first is in force."""

    __slots__ = ("_sinces", "entries")

    def __init__(self, entries: Iterable[InForce]) -> None:
        self.entries = tuple(sorted(entries, key=lambda entry: entry.since))
        if not self.entries:
            raise ValueError("a policy history holds at least one policy")
        self._sinces = [entry.since for entry in self.entries]

    @classmethod
    def of(cls, policy: Policy, since: datetime = EPOCH) -> PolicyHistory:
        return cls([InForce(since, policy)])

    def then(self, entry: InForce) -> PolicyHistory:
        """This history with `entry` added."""
        return PolicyHistory([*self.entries, entry])

    def position(self, at: datetime) -> int:
        """The index of the entry in force at `at`."""
        return max(0, bisect_right(self._sinces, at) - 1)

    def in_force(self, at: datetime) -> Policy:
        latest = self.entries[-1]
        if at >= latest.since:  # nearly every claim: the last entry holds from its since on
            return latest.policy
        return self.entries[self.position(at)].policy

    @property
    def latest(self) -> InForce:
        return self.entries[-1]

    def versions(self) -> dict[str, Policy]:
        return {entry.policy.version: entry.policy for entry in self.entries}


def readmitted(
    state: KeyState, policy: Policy
) -> tuple[tuple[AdmittedClaim, ...], tuple[RefusedClaim, ...]]:
    """The key's kept claims (those its policy admitted and those it refused) as `policy`
    admits them afresh, oldest first, and the ones it refuses with why."""
    kept = sorted([*state.claims, *(r.claim for r in state.refused)], key=RECENCY)
    admitted: list[AdmittedClaim] = []
    refused: list[RefusedClaim] = []
    for claim in kept:
        try:
            admitted.append(readmit(claim, policy))
        except ContractError as exc:
            why = cut(f"{exc.reason.value}: {exc.detail}", REFUSAL_CHARS)
            refused.append(RefusedClaim(claim, why))
    return tuple(admitted), tuple(refused)


def readmitted_resolutions(state: KeyState, policy: Policy) -> tuple[Resolution, ...]:
    """The key's resolutions as `policy` admits them afresh: each value normalized from the unit
    it was kept in to the field's unit under `policy` (a unit or currency that changed would
    otherwise decide the key on a number in the old unit). One `policy` refuses (its value no
    longer of the field's type) no longer decides the key, and is not kept."""
    kept: list[Resolution] = []
    for resolution in state.resolutions:
        try:
            kept.append(admit_resolution(resolution, policy, resolution.decided_at))
        except ContractError:
            continue
    return tuple(kept)


def switches(state: KeyState, history: PolicyHistory, until: datetime) -> list[InForce]:
    """The policies that took effect for the key after the one it was last decided under, by
    `until`: each a policy that decides its field and differs from the one before (one that does
    not decide it moves nothing: the key stays as it is until a policy decides it again). A key
    decided under a policy the history does not hold (or before policies were recorded on
    state) moves straight to the last policy by `until` that decides its field."""
    entries = history.entries
    field = state.field
    last, _ = _deciding(history, field, until)
    if last < 0:
        return []  # no policy by `until` decides its field
    start = _own_position(state, history)
    if start is None:
        target = entries[last]
        return [] if target.policy.version == state.policy_version else [target]
    found: list[InForce] = []
    version = state.policy_version
    for entry in entries[start + 1 : last + 1]:
        if entry.policy.version != version and entry.policy.rules_for(field) is not None:
            found.append(entry)
            version = entry.policy.version
    return found


def _deciding(history: PolicyHistory, field: str, until: datetime) -> tuple[int, datetime]:
    """The last entry by `until` that decides `field` (-1 if none), and the instant up to which
    time runs for a key on it: `until`, or when the policies after it that do not decide the
    field took effect (the key's timers wait there for a policy that decides it again)."""
    entries = history.entries
    n = history.position(until)
    end = until
    while n >= 0 and entries[n].policy.rules_for(field) is None:
        end = entries[n].since
        n -= 1
    return n, end


def _own_position(state: KeyState, history: PolicyHistory) -> int | None:
    """The entry the key is on: the last with its version in force by the key's clock (its
    last decision), else the first with its version; None if the history has none."""
    version = state.policy_version
    if version is None:
        return None
    last = state.current
    upto = history.position(last.decided_at) if last is not None else -1
    mine = [n for n, entry in enumerate(history.entries) if entry.policy.version == version]
    if not mine:
        return None
    earlier = [n for n in mine if n <= upto]
    return earlier[-1] if earlier else mine[0]


def catch_up(
    state: KeyState | None, history: PolicyHistory, until: datetime, limits: Limits
) -> list[tuple[datetime, Transition]]:
    """The key's re-decisions up to `until` (inclusive), in order, each with its instant: its
    timers as they came due under the policy it was on, and its move to each policy that took
    effect since (`switches`). While no policy decides its field, nothing moves it: its timers
    due meanwhile fire once one does again. `state` is not changed. Empty when nothing moves
    it. The same re-decisions whether it is called once up to `until` or at instants between."""
    steps: list[tuple[datetime, Transition]] = []
    if state is None:
        return steps
    versions = history.versions()
    for entry in switches(state, history, until):
        own = versions.get(state.policy_version or "")
        own_rules = own.rules_for(state.field) if own is not None else None
        if own_rules is not None and own is not None:
            timed = due_by(state, own_rules, own.version, entry.since, limits)
            steps += timed
            if timed:
                state = timed[-1][1].state
        policy = entry.policy
        rules = policy.rules_for(state.field)
        assert rules is not None  # `switches` passes over policies without the field
        claims, refused = readmitted(state, policy)
        if state.resolutions:
            state = replace(state, resolutions=readmitted_resolutions(state, policy))
        step = adopt_policy(state, claims, refused, rules, policy.version, entry.since, limits)
        steps.append((step.arbitration.decided_at, step))
        state = step.state
    last, end = _deciding(history, state.field, until)
    if last < 0:
        return steps
    policy = history.entries[last].policy
    rules = policy.rules_for(state.field)
    if rules is not None and state.policy_version == policy.version:
        steps += due_by(state, rules, policy.version, end, limits)
    return steps
