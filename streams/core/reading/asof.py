"""What a key's worker believed at an earlier instant, and on what evidence.

The belief comes from the key's emitted history: the last decision emitted at or before the
instant. A key keeps only decision summaries (ids, outcomes, values), so the evidence is rebuilt:
the retained claims and resolutions that could have arrived by then are arbitrated again, and the
result is trusted only when its decision id equals the emitted one (the id hashes everything that
was decided). A key keeps its claims in arrival order, so the claims known at any instant are a
prefix of them: the longest prefix that reproduces the id wins, skipping prefixes that already
reproduce the next emitted decision (those include claims that arrived after the instant). A
claim may be observed up to the policy's clock skew after the record that carried it was stamped,
so that much later observations still count as arrived. When no prefix reproduces the id, the
claims behind that decision are no longer retained (`max_claims_per_key`), and the answer says so
instead of guessing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from streams.core.decision.summary import DecisionSummary
from streams.core.keys.state import KeyState
from streams.core.records.contracts import Decision, micros
from streams.core.records.policy import FieldRules
from streams.core.rules.engine import arbitrate


class Basis(StrEnum):
    """How the evidence of an earlier belief was obtained."""

    REBUILT = "rebuilt"  # re-arbitrated from retained claims; the decision id matches
    NOT_RETAINED = "not_retained"  # the claims behind it were evicted; the belief stands alone


@dataclass(frozen=True, slots=True)
class BeliefAsOf:
    at: datetime
    belief: DecisionSummary
    basis: Basis
    decision: Decision | None  # with its evidence, when rebuilt


class NoBeliefAsOf(LookupError):
    """No emitted decision of the key was in force at the instant (or it is no longer retained)."""


def belief_as_of(
    state: KeyState, rules: FieldRules, policy_version: str, at: datetime, skew: timedelta
) -> BeliefAsOf:
    """The decision in force at `at`, with the evidence it had; raises NoBeliefAsOf.
    `skew` is the policy's max_clock_skew."""
    in_force = [summary for summary in state.history if summary.decided_at <= at]
    if not in_force:
        first = state.history[0].decided_at.isoformat() if state.history else None
        raise NoBeliefAsOf(
            f"no decision of {state.subject}|{state.field} was in force at {at.isoformat()}"
            + (f"; the earliest one retained was made at {first}" if first else "")
        )
    belief = in_force[-1]
    later = state.history[len(in_force) :]
    following = later[0].decision_id if later else None
    decision = _rebuilt(state, rules, policy_version, at, skew, belief, following)
    if decision is None:
        return BeliefAsOf(at, belief, Basis.NOT_RETAINED, None)
    return BeliefAsOf(at, belief, Basis.REBUILT, decision)


def _rebuilt(
    state: KeyState,
    rules: FieldRules,
    policy_version: str,
    at: datetime,
    skew: timedelta,
    belief: DecisionSummary,
    following: str | None,
) -> Decision | None:
    observed_by = micros(at + skew)
    claims = [a for a in state.claims if a.observed_us <= observed_by]
    resolutions = [r for r in state.resolutions if r.decided_at <= at]
    # The instant itself first (the roles as they stood then), then the emission instant (a
    # decision that time alone would have changed is replaced by a tick within a second).
    for now in dict.fromkeys((at, belief.decided_at)):
        for kept_resolutions in range(len(resolutions), -1, -1):
            for kept_claims in range(len(claims), 0, -1):
                arbitration = arbitrate(
                    state.subject,
                    state.field,
                    claims[:kept_claims],
                    rules,
                    policy_version,
                    now,
                    resolutions[:kept_resolutions],
                    supersedes=belief.supersedes,
                )
                if arbitration.decision_id == following:
                    continue  # this prefix holds claims that came after the instant
                if arbitration.decision_id == belief.decision_id:
                    return arbitration.restated(belief.decided_at, belief.supersedes).decision
    return None
