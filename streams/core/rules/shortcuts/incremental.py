"""The rules' shortcut: one more claim placed into the last arbitration without running them.

Where it sits: a key's transitions try `placement` first for a new claim (when no timer of the key
has come due), and run the rules (`engine.arbitrate`) only when it returns None. It is a second
encoding of a part of `engine.RULES`, for the common case of a plain claim that cannot change the
belief; `tests/core/rules/test_shortcuts.py` holds it equal to the full engine, claim by claim, so a
change to the rules that this shortcut does not follow fails there.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from streams.core.admission.intake import AdmittedClaim
from streams.core.admission.normalize import values_agree
from streams.core.decision.agreement import agrees
from streams.core.decision.arbitration import Arbitration, Belief, Verdict
from streams.core.decision.side_records import Roles
from streams.core.records.contracts import (
    NO_EVIDENCE_STATUSES,
    ClaimStatus,
    Resolution,
)
from streams.core.records.members import (
    CONFLICT,
    CONTESTED,
    CORROBORATING,
    EXCLUDED,
    EXISTENCE_CONFLICT,
    MOST_RECENT,
    STALE,
    VALUE_CONFLICT,
    WINNER,
)
from streams.core.records.policy import FieldRules, freshness_us

_EXTENSIBLE_CONFLICTS = frozenset({VALUE_CONFLICT, EXISTENCE_CONFLICT})


class Decided(Protocol):
    """What the rules leave in their `rulebook.Context` that says whether `placement` may follow."""

    rules: FieldRules
    resolutions: Sequence[Resolution]
    evidence: list[AdmittedClaim]
    plain: bool
    winner: AdmittedClaim | None
    roles: Roles


def extensible_belief(context: Decided, verdict: Verdict, policy_version: str) -> Belief | None:
    """What `placement` may build on, after the rules ran: see `plain_belief`."""
    if not context.plain or context.resolutions:
        return None
    conflict_rank = None
    if verdict.outcome is CONFLICT and verdict.kind in _EXTENSIBLE_CONFLICTS:
        roles = context.roles
        conflict_rank = min(
            a.rank for a in context.evidence if roles[a.claim.claim_id] is CONTESTED
        )
    return plain_belief(verdict, context.winner, conflict_rank, context.rules, policy_version)


def plain_belief(
    verdict: Verdict,
    winner: AdmittedClaim | None,
    conflict_rank: int | None,
    rules: FieldRules,
    policy_version: str,
) -> Belief | None:
    """What `placement` may build on, for plain claims with no resolution in play: a resolved
    precedence decision (`winner`), or a value or existence conflict at authority
    `conflict_rank`, where no independence is counted (one more claim can join two sources into
    one lineage)."""
    if rules.min_independent_sources > 1:
        return None
    if verdict.by_precedence and winner is not None:
        return Belief(winner.rank, winner, rules, policy_version)
    if conflict_rank is not None and verdict.outcome is CONFLICT:
        return Belief(conflict_rank, None, rules, policy_version)
    return None


class Placement:
    """Where one more claim goes in a decision it cannot change: the roles to set (its own, and a
    winner's it takes over from) and the belief after it. A plain slotted class: one is built per
    placed claim, and a NamedTuple's `__new__` is Python code."""

    __slots__ = ("belief", "roles")

    roles: Roles
    belief: Belief

    def __init__(self, roles: Roles, belief: Belief) -> None:
        self.roles, self.belief = roles, belief


def placement(previous: Arbitration, added: AdmittedClaim, now_us: int) -> Placement | None:
    """How `arbitrate` over the previous claims plus `added` assigns roles at `now_us`
    (microseconds since the epoch), without running the rules, where `added` provably cannot
    change the belief; None where the rules must run again. (A key's state places it in its own
    arbitration in place, `Arbitration.place`.)

    The caller guarantees that time alone changed nothing since `previous` (no claim crossed a
    freshness or period boundary) and that `added` is a new claim_id. Then a plain claim that
    says nothing about existence is excluded, a stale one is stale, a fresh one weaker than the
    deciding authority agrees with the winner (by the field's tolerance) or is contested; one of
    the winner's own authority that says exactly the same joins the agreeing group, winning if
    newer; one of the conflicting authority that cannot settle the conflict is contested with
    the others."""
    belief = previous.belief
    if belief is None or not added.plain:
        return None
    rules, winner = belief.rules, belief.winner
    claim = added.claim
    claim_id = claim.claim_id
    if claim.status in NO_EVIDENCE_STATUSES:
        return Placement({claim_id: EXCLUDED}, belief)
    budget = freshness_us(rules)
    if budget is not None and added.observed_us < now_us - budget:
        return Placement({claim_id: STALE}, belief)
    if added.rank > belief.rank:
        agreeing = winner is not None and agrees(added, winner, rules.tolerance)
        return Placement({claim_id: CORROBORATING if agreeing else CONTESTED}, belief)
    if added.rank < belief.rank:
        return None
    if winner is None:
        if not _joins_conflict(added, previous, rules):
            return None
        return Placement({claim_id: CONTESTED}, belief)
    if claim.status is not winner.claim.status or not _same_statement(
        added, winner, previous.claims
    ):
        return None
    if added.recency > winner.recency:
        roles = {winner.claim.claim_id: CORROBORATING, claim_id: WINNER}
        return Placement(roles, Belief(belief.rank, added, rules, belief.policy_version))
    return Placement({claim_id: CORROBORATING}, belief)


def _same_statement(
    added: AdmittedClaim, winner: AdmittedClaim, claims: Iterable[AdmittedClaim]
) -> bool:
    """Whether `added` says exactly what the winner says, so that it joins the winner's group
    whatever the tolerance. A float must also say exactly what every claim of its lineage at
    that authority says: within a lineage, the newest observation decides which of the others
    agree, by a tolerance that is not transitive."""
    value = added.value
    if not isinstance(value, float):
        return values_agree(value, winner.value, 0.0)
    return value == winner.value and all(a.value == value for a in _kin(added, claims))


def _kin(added: AdmittedClaim, claims: Iterable[AdmittedClaim]) -> list[AdmittedClaim]:
    """The claims of `added`'s lineage at its authority: the ones the lineage rule weighs it
    against. A list: compiled, a returned generator would be built as one anyway."""
    return [a for a in claims if a.lineage == added.lineage and a.rank == added.rank]


def _joins_conflict(added: AdmittedClaim, previous: Arbitration, rules: FieldRules) -> bool:
    """Whether a claim of the conflicting authority leaves the conflict as it is: it comes from
    a lineage of its own there (so it supersedes nothing), and joins a value conflict (which only
    present claims make) where ties are not broken by recency."""
    if _kin(added, previous.claims):
        return False
    if previous.verdict.kind is EXISTENCE_CONFLICT:
        return True
    return added.claim.status is ClaimStatus.PRESENT and rules.on_conflict is not MOST_RECENT
