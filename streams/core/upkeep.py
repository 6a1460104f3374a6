"""A key's upkeep: what its state keeps within its bounds, and when time alone next changes it.

Where it sits: keystate's transitions call these after deciding, before they change the state
(the claims and resolutions a key keeps, its next check instant). Pure.
"""

from __future__ import annotations

from datetime import datetime

from streams.core.contracts import EvidenceRole, Resolution, instant, micros
from streams.core.intake import AdmittedClaim
from streams.core.policy import FieldRules, escalate_after_us, freshness_us

_TICK = 1  # the smallest step of a key's clock, in microseconds
_EVICT_FIRST = (EvidenceRole.STALE, EvidenceRole.SUPERSEDED, EvidenceRole.EXCLUDED)


def latest_resolutions(resolutions: tuple[Resolution, ...], bound: int) -> tuple[Resolution, ...]:
    """The `bound` latest by the order the engine chooses in (`decided_at`, then id), kept in
    arrival order so an existing state stores the same bytes."""
    if len(resolutions) <= bound:
        return resolutions
    ranked = sorted(resolutions, key=lambda r: (r.decided_at, r.resolution_id), reverse=True)
    kept = {r.resolution_id for r in ranked[:bound]}
    return tuple(r for r in resolutions if r.resolution_id in kept)


def expiry(admitted: AdmittedClaim, rules: FieldRules) -> int | None:
    """When a plain claim goes stale, in microseconds since the epoch: one tick after it is
    exactly as old as the budget."""
    budget = freshness_us(rules)
    if budget is None:
        return None
    return admitted.observed_us + budget + _TICK


def evicted(
    claims: tuple[AdmittedClaim, ...], roles: dict[str, EvidenceRole], max_claims: int
) -> tuple[AdmittedClaim, ...]:
    """Bound the per-key history: drop claims that no longer count (oldest first), then the oldest.

    Dropped claims stay in the decisions that cited them and in the input topics."""
    excess = len(claims) - max_claims
    if excess <= 0:
        return claims
    ranked = sorted(
        claims,
        key=lambda a: (roles.get(a.claim.claim_id) not in _EVICT_FIRST, a.observed_us),
    )
    dropped = {a.claim.claim_id for a in ranked[:excess]}
    return tuple(a for a in claims if a.claim.claim_id not in dropped)


def next_check(
    claims: tuple[AdmittedClaim, ...],
    conflict_since: datetime | None,
    escalated: bool,
    rules: FieldRules,
    now_us: int,
) -> datetime | None:
    """The earliest instant after `now_us` (microseconds since the epoch) at which time alone
    could change this key's decision."""
    earliest: int | None = None
    budget = freshness_us(rules)
    for admitted in claims:
        for moment in (
            None if budget is None else admitted.observed_us + budget + _TICK,
            admitted.valid_from_us,
            admitted.valid_to_us,
        ):
            if moment is not None and moment > now_us and (earliest is None or moment < earliest):
                earliest = moment
    if conflict_since is not None and not escalated:
        moment = micros(conflict_since) + escalate_after_us(rules)
        if moment > now_us and (earliest is None or moment < earliest):
            earliest = moment
    return None if earliest is None else instant(earliest)
