"""A key's upkeep: what its state keeps within its bounds, and when time alone next changes it.

Where it sits: keystate's transitions call these after deciding, before they change the state
(the claims and resolutions a key keeps, its next check instant). Pure.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from streams.core.contracts import EvidenceRole, Resolution
from streams.core.intake import AdmittedClaim
from streams.core.policy import FieldRules

_TICK = timedelta(microseconds=1)  # the smallest step of a key's clock
_EVICT_FIRST = (EvidenceRole.STALE, EvidenceRole.SUPERSEDED, EvidenceRole.EXCLUDED)


def latest_resolutions(resolutions: tuple[Resolution, ...], bound: int) -> tuple[Resolution, ...]:
    """The `bound` latest by the order the engine chooses in (`decided_at`, then id), kept in
    arrival order so an existing state stores the same bytes."""
    if len(resolutions) <= bound:
        return resolutions
    ranked = sorted(resolutions, key=lambda r: (r.decided_at, r.resolution_id), reverse=True)
    kept = {r.resolution_id for r in ranked[:bound]}
    return tuple(r for r in resolutions if r.resolution_id in kept)


def expiry(admitted: AdmittedClaim, rules: FieldRules) -> datetime | None:
    """When a plain claim goes stale: one tick after it is exactly as old as the budget."""
    if rules.freshness is None:
        return None
    return admitted.claim.observed_at + rules.freshness + _TICK


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
        key=lambda a: (roles.get(a.claim.claim_id) not in _EVICT_FIRST, a.claim.observed_at),
    )
    dropped = {a.claim.claim_id for a in ranked[:excess]}
    return tuple(a for a in claims if a.claim.claim_id not in dropped)


def next_check(
    claims: tuple[AdmittedClaim, ...],
    conflict_since: datetime | None,
    escalated: bool,
    rules: FieldRules,
    now: datetime,
) -> datetime | None:
    """The earliest instant at which time alone could change this key's decision."""
    moments: list[datetime] = []
    for admitted in claims:
        claim = admitted.claim
        expires = expiry(admitted, rules)
        if expires is not None:
            moments.append(expires)
        moments += [m for m in (claim.valid_from, claim.valid_to) if m is not None]
    if conflict_since is not None and not escalated:
        moments.append(conflict_since + rules.escalate_after)
    future = [m for m in moments if m > now]
    return min(future, default=None)
