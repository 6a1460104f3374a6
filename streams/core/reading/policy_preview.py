"""A policy previewed against keys' state: what each key would decide were the policy put in force
now, beside what it decides now, with nothing moved, sent or stored.

For each key, the decision now, as the web API answers it (`catch_up` to `now` on the policy
history, then `current_decision` under the policy in force), and the decision it would take
were the new policy to take effect at `now` (`moved_to`: its kept claims and resolutions admitted
afresh by that policy, then `adopt_policy` at `now`; the move `catch_up` makes for a history that
adds the policy at `now`), tallied into a `preview_report.Preview`.

A key of a field the new policy does not decide is not judged (it would not be moved). A key
whose kept claims the new policy all refuses is judged: it would decide `insufficient`, naming
each refused claim. Pure: states in, a `Preview` out; no state is changed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime

from streams.core.keys.belief import current_decision
from streams.core.keys.state import KeyState, Limits
from streams.core.keys.transitions import Transition, adopt_policy
from streams.core.reading.preview_report import Gist, KeyPreview, Preview, Tally
from streams.core.records.errors import PolicyError
from streams.core.records.policy import Policy
from streams.core.timeline.rollout import (
    PolicyHistory,
    catch_up,
    readmitted,
    readmitted_resolutions,
)
from streams.core.timeline.timers import due_by

DEFAULT_LIMITS = Limits()


def moved_to(
    state: KeyState, history: PolicyHistory, policy: Policy, now: datetime, limits: Limits
) -> tuple[Transition, tuple[str, ...]] | None:
    """`state` (caught up to `now` on `history`) moved to `policy` at `now`, as `catch_up`
    moves it through a history adding `policy` at `now`: the timers due by `now` under the
    policy it is on, then its kept claims and resolutions admitted afresh by `policy` and the
    key re-decided; with the reasons `policy` refuses its kept claims for. None when `policy`
    does not decide its field. `state` is not changed."""
    rules = policy.rules_for(state.field)
    if rules is None:
        return None
    own = history.versions().get(state.policy_version or "")
    own_rules = own.rules_for(state.field) if own is not None else None
    if own is not None and own_rules is not None:
        timed = due_by(state, own_rules, own.version, now, limits)
        state = timed[-1][1].state if timed else state
    claims, refused = readmitted(state, policy)
    if state.resolutions:
        state = replace(state, resolutions=readmitted_resolutions(state, policy))
    step = adopt_policy(state, claims, refused, rules, policy.version, now, limits)
    return step, tuple(r.reason for r in refused)


class Previewer:
    """Judges keys under `policy` beside the worker's `history`, at `now`."""

    __slots__ = ("history", "limits", "now", "policy")

    def __init__(
        self,
        history: PolicyHistory | Policy,
        policy: Policy,
        now: datetime,
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        """PolicyError when `policy`'s version is one `history` holds with other content: no
        key on that version would move to it (a version names one policy)."""
        history = history if isinstance(history, PolicyHistory) else PolicyHistory.of(history)
        known = history.versions().get(policy.version)
        if known is not None and known != policy:
            raise PolicyError(
                f"policy version {policy.version!r} is already in the policy history with other "
                "content: give the new policy a version of its own (keys on that version would "
                "not move to it)"
            )
        self.history, self.policy, self.now, self.limits = history, policy, now, limits

    def judge(self, key: str, state: KeyState) -> KeyPreview:
        history, now, limits = self.history, self.now, self.limits
        moved = catch_up(state, history, now, limits)
        caught = moved[-1][1].state if moved else state
        in_force = history.in_force(now)
        rules = in_force.rules_for(caught.field)
        before = None
        if rules is not None:
            before = Gist.of(current_decision(caught, rules, in_force.version, now))
        after = moved_to(caught, history, self.policy, now, limits)
        if after is None:
            return KeyPreview(key, caught.field, before, None)
        step, refused = after
        return KeyPreview(key, caught.field, before, Gist.of(step.arbitration.decision), refused)


def preview(
    states: Iterable[tuple[str, KeyState]],
    history: PolicyHistory | Policy,
    policy: Policy,
    now: datetime,
    limits: Limits = DEFAULT_LIMITS,
) -> Preview:
    """`policy` against the keys of `states`, as `history` in force decides them at `now`."""
    previewer = Previewer(history, policy, now, limits)
    tally = Tally()
    for key, state in states:
        tally.add(previewer.judge(key, state))
    return tally.result(policy.version)
