"""What a key's new decision sends and keeps: a belief that changed is emitted and added to the
key's history (its open-conflict clock started when it opens), a redelivered input repeats the
decision as first emitted, and a key open for its field's `escalate_after` escalates, once.

Where it sits: every transition (transitions.py) decides, then asks here what to send, before
the state changes.
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from streams.core.decision.arbitration import Arbitration
from streams.core.decision.summary import DecisionSummary
from streams.core.keys.state import KeyState, Limits
from streams.core.records.contracts import OPEN_OUTCOMES, Decision
from streams.core.records.policy import FieldRules


class Emission(NamedTuple):
    """The history after deciding, with the open-conflict clock, and what to send."""

    history: tuple[DecisionSummary, ...]
    conflict_since: datetime | None
    escalated: bool
    emitted: Arbitration | None


def emitted_by(
    state: KeyState, arbitration: Arbitration, redelivered: bool, now: datetime, limits: Limits
) -> Emission:
    """A new belief is emitted and recorded (restarting the open-conflict clock when the key
    opens); the same input again (`redelivered`) repeats the decision exactly as first emitted,
    and anything else that leaves the belief as it was sends nothing."""
    last = state.current
    if last is None or arbitration.decision_id != last.decision_id:
        was_open = last is not None and last.outcome in OPEN_OUTCOMES
        is_open = arbitration.outcome in OPEN_OUTCOMES
        return Emission(
            history=(*state.history, arbitration.summarized(now))[-limits.max_history :],
            conflict_since=(state.conflict_since if was_open else now) if is_open else None,
            escalated=state.escalated and was_open and is_open,
            emitted=arbitration,
        )
    # The same input again (a redelivery): repeat the decision exactly as first emitted.
    return Emission(
        history=state.history,
        conflict_since=state.conflict_since,
        escalated=state.escalated,
        emitted=arbitration.restated(last.decided_at, last.supersedes) if redelivered else None,
    )


def escalation_of(
    arbitration: Arbitration, emission: Emission, rules: FieldRules, now: datetime
) -> Decision | None:
    """The decision to escalate, once, when the key has been open for `escalate_after`."""
    since = emission.conflict_since
    if since is None or emission.escalated or now - since < rules.escalate_after:
        return None
    return arbitration.decision
