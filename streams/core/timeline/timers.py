"""A key's timers fired in time order: what makes a belief a function of the claims and the clock.

A key's state says when it may next change by time alone (`KeyState.next_check_at`: a claim's
freshness runs out, a conflict is due to escalate, a quarantine ends). `due_by` fires every timer
that came due by an instant, each at its own instant, in order. The worker calls it before it
applies a record to the key (a claim or resolution at its timestamp, a tick at its due instant),
so the decisions it emits are the same whether the ticks went out on time or a late one finds
the key already moved on (a catch-up, a restart); replay with the clock (`replay.py`) calls it
between the recorded events and at `now`, so both reach the same decisions in the same order.
"""

from __future__ import annotations

from datetime import datetime

from streams.core.keys.state import KeyState, Limits
from streams.core.keys.transitions import Transition, advance
from streams.core.records.policy import FieldRules


def due_by(
    state: KeyState | None,
    rules: FieldRules,
    policy_version: str,
    until: datetime,
    limits: Limits,
) -> list[tuple[datetime, Transition]]:
    """The key's re-decisions by time alone up to `until` (inclusive), each with the instant its
    timer came due, the next one from the state the last left (`state` is not changed)."""
    steps: list[tuple[datetime, Transition]] = []
    while state is not None and (due := state.next_check_at) is not None and due <= until:
        step = advance(state, rules, policy_version, due, limits)
        steps.append((due, step))
        if step.state.next_check_at == due:  # a timer that does not move fires once
            break
        state = step.state
    return steps
