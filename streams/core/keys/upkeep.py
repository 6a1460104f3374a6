"""A key's upkeep: what its state keeps within its bounds, and when time alone next changes it.

Where it sits: a key's transitions call these after deciding, before they change the state
(the claims and resolutions a key keeps, its next check instant). Pure.
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from streams.core.admission.intake import AdmittedClaim
from streams.core.decision.arbitration import Arbitration
from streams.core.records.bounds import NOTE_CHARS, claim_bytes, cut
from streams.core.records.contracts import EvidenceRole, Resolution, instant, micros
from streams.core.records.policy import FieldRules, escalate_after_us, freshness_us

_TICK = 1  # the smallest step of a key's clock, in microseconds
_EVICT_FIRST = (EvidenceRole.STALE, EvidenceRole.SUPERSEDED, EvidenceRole.EXCLUDED)


class RefusedClaim(NamedTuple):
    """A kept claim the policy in force refuses, as last admitted, and why."""

    claim: AdmittedClaim
    reason: str


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


def held_bytes(admitted: AdmittedClaim) -> int:
    """What a kept claim adds to its key's records, at most (`bounds.claim_bytes`), worked out
    once per claim."""
    size = admitted.size
    if size < 0:
        claim = admitted.claim
        size = claim_bytes(claim, admitted.value, admitted.lineage, admitted.scope_key)
        admitted.size = size
    return size


def fits(claims: tuple[AdmittedClaim, ...], refused: tuple[RefusedClaim, ...], budget: int) -> bool:
    """Whether a key's kept claims, those the policy refuses included, take `budget` bytes at
    most."""
    total = 0
    for admitted in claims:
        size = admitted.size  # read here: a call per claim costs more than the sum
        total += size if size >= 0 else held_bytes(admitted)
    for refusal in refused:
        total += held_bytes(refusal.claim)
    return total <= budget


class Fitted(NamedTuple):
    """A key's kept claims within its byte budget, and the ids of those dropped to fit."""

    claims: tuple[AdmittedClaim, ...]
    refused: tuple[RefusedClaim, ...]
    dropped: tuple[str, ...]


def fitted(
    claims: tuple[AdmittedClaim, ...],
    refused: tuple[RefusedClaim, ...],
    roles: dict[str, EvidenceRole],
    budget: int,
    keep: AdmittedClaim | None,
) -> Fitted:
    """Bound the per-key history in bytes, as `evicted` bounds it in count: drop the claims the
    policy refuses (oldest first), then those that no longer count (by `roles`, oldest first),
    then the oldest, until the rest take `budget` bytes at most; never `keep`, the claim that
    just arrived. Dropped claims stay in the decisions that cited them and in the input topics."""
    total = sum(map(held_bytes, claims)) + sum(held_bytes(r.claim) for r in refused)
    ranked = sorted(
        [
            *((0, r.claim.observed_us, r.claim.claim_id, r.claim) for r in refused),
            *(
                (1 + (roles.get(a.claim_id) not in _EVICT_FIRST), a.observed_us, a.claim_id, a)
                for a in claims
                if a is not keep
            ),
        ],
        key=lambda entry: entry[:3],
    )
    gone: set[int] = set()
    dropped: list[str] = []
    for *_, admitted in ranked:
        if total <= budget:
            break
        total -= held_bytes(admitted)
        gone.add(id(admitted))
        dropped.append(admitted.claim_id)
    return Fitted(
        tuple(a for a in claims if id(a) not in gone),
        tuple(r for r in refused if id(r.claim) not in gone),
        tuple(dropped),
    )


def noting_dropped(arbitration: Arbitration, dropped: tuple[str, ...], budget: int) -> Arbitration:
    """The decision reached without the claims dropped for size, saying so in its reason."""
    named = ", ".join(dropped)
    return arbitration.noting(
        cut(f"claims dropped to keep the key within {budget:,} bytes: {named}", NOTE_CHARS)
    )


def noting_refusals(
    arbitration: Arbitration, refused: tuple[RefusedClaim, ...], policy_version: str
) -> Arbitration:
    """The decision reached without the kept claims the policy refuses, naming each with why."""
    if not refused:
        return arbitration
    named = "; ".join(f"{r.claim.claim_id} ({r.reason})" for r in refused)
    return arbitration.noting(
        cut(f"kept claims policy {policy_version} refuses: {named}", NOTE_CHARS)
    )


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
