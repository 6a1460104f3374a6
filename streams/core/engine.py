"""The arbitration engine: a pure function of (one key's claims, the field's rules, now).

The rules run in a fixed order, each narrowing the claims that may still decide:

1. duplicates (same claim_id) collapse to one claim;
2. forbidden / unavailable / error are never evidence of absence: `excluded`; a period that starts
   after `now` is not evidence about now either: `excluded`;
3. claims as old as the field's freshness budget or older, or whose period ended, are `stale`
   (the budget is the instant a claim stops counting, so expiry timers fire exactly then);
4. where some claims carry an epoch, claims without one are `quarantined` (missing provenance);
5. only the newest epoch decides; a value that changed across the boundary is quarantined until a
   second observation in the new epoch confirms it (or the field accepts epoch changes);
6. the highest authority among what is left decides; nothing falls through to a weaker class;
7. a later validity period supersedes an earlier, open-ended one; within a lineage the latest
   observation supersedes earlier ones, and a lineage counts once;
8. at the top authority: different declared scopes are a semantic conflict, present against
   not_found an existence conflict, two values a value conflict (unless the field takes recency
   as its tiebreak);
9. a person's Resolution dated after every live claim closes a conflict or quarantine.

Every claim stays in the evidence with its role. The result depends only on the set of claims.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from operator import attrgetter

from streams.core.contracts import (
    Action,
    Authority,
    ClaimStatus,
    ConflictKind,
    Decision,
    EpochChange,
    Evidence,
    EvidenceRole,
    Outcome,
    ReobserveRequest,
    Resolution,
    Value,
)
from streams.core.intake import AdmittedClaim
from streams.core.normalize import canonical_value, values_agree
from streams.core.policy import EpochChangeRule, FieldRules, OnConflict

_NO_EVIDENCE_STATUSES = frozenset(
    {ClaimStatus.FORBIDDEN, ClaimStatus.UNAVAILABLE, ClaimStatus.ERROR}
)

_RECENCY = attrgetter("recency")
_STATEMENT = attrgetter("statement")
# sort_keys: the id must not depend on how the belief was put together.
_BELIEF_JSON = json.JSONEncoder(sort_keys=True)

_ASSERTED_RANK = Authority.ASSERTED.rank

_CONFLICT_ACTIONS = {
    OnConflict.BLOCK: Action.BLOCK,
    OnConflict.DEGRADE: Action.DEGRADE,
    OnConflict.SURFACE: Action.CONTINUE,
    OnConflict.MOST_RECENT: Action.BLOCK,
}


class Arbitration:
    """What the engine decided: the decision id and roles at once, the full records on demand.

    Building a Decision with its evidence costs more than deciding; a stream emits only when the
    belief changes, so the records are built only when someone reads them."""

    def __init__(
        self,
        subject: str,
        field: str,
        claims: list[AdmittedClaim],
        roles: dict[str, EvidenceRole],
        verdict: _Verdict,
        rules: FieldRules,
        policy_version: str,
        now: datetime,
        supersedes: str | None,
        change: _EpochShift | None,
    ) -> None:
        self.subject, self.field = subject, field
        self.roles = roles
        self.outcome = verdict.outcome
        self._claims, self._verdict, self._rules = claims, verdict, rules
        self._policy_version, self._now, self._supersedes = policy_version, now, supersedes
        self._change = change
        self.action = _action(verdict, rules)
        resolved = verdict.outcome is Outcome.RESOLVED
        self.unit = rules.unit or rules.currency if resolved and verdict.value is not None else None
        # The enums are StrEnums: JSON writes them as their values.
        self.decision_id = decision_id(
            {
                "subject": subject,
                "field": field,
                "outcome": verdict.outcome,
                "conflict_kind": verdict.kind,
                "status": verdict.status,
                "value": canonical_value(verdict.value),
                "unit": self.unit,
                "action": self.action,
                "policy_version": policy_version,
                "reason": verdict.reason,
                "tiebreak": verdict.tiebreak,
                "resolution_id": verdict.resolution_id,
            }
        )

    @cached_property
    def decision(self) -> Decision:
        """Built without re-validation (`model_construct`): every part comes from validated
        claims and the policy. Tests round-trip decisions through Avro and `model_validate`."""
        verdict = self._verdict
        return Decision.model_construct(
            decision_id=self.decision_id,
            subject=self.subject,
            field=self.field,
            outcome=verdict.outcome,
            conflict_kind=verdict.kind,
            status=verdict.status,
            value=verdict.value,
            unit=self.unit,
            action=self.action,
            policy_version=self._policy_version,
            reason=verdict.reason,
            tiebreak=verdict.tiebreak,
            resolution_id=verdict.resolution_id,
            evidence=tuple(_evidence(a, self.roles[a.claim.claim_id]) for a in self._claims),
            decided_at=self._now,
            supersedes=self._supersedes,
        )

    def restated(self, decided_at: datetime, supersedes: str | None) -> Arbitration:
        """The same decision as first emitted (for a redelivered input)."""
        return Arbitration(
            self.subject,
            self.field,
            self._claims,
            self.roles,
            self._verdict,
            self._rules,
            self._policy_version,
            decided_at,
            supersedes,
            self._change,
        )

    @cached_property
    def epoch_change(self) -> EpochChange | None:
        return _epoch_event(self.decision, self._change)

    @cached_property
    def reobserve(self) -> ReobserveRequest | None:
        return _reobserve_request(self.decision, self._claims, self.roles)


@dataclass(frozen=True, slots=True)
class _EpochShift:
    from_epoch: int
    to_epoch: int
    previous_value: Value
    new_value: Value
    claim_ids: list[str]


@dataclass(frozen=True, slots=True)
class _Verdict:
    outcome: Outcome
    reason: str
    kind: ConflictKind | None = None
    status: ClaimStatus | None = None
    value: Value = None
    tiebreak: str | None = None
    resolution_id: str | None = None


def arbitrate(
    subject: str,
    field: str,
    claims: Iterable[AdmittedClaim],
    rules: FieldRules,
    policy_version: str,
    now: datetime,
    resolutions: Iterable[Resolution] = (),
    supersedes: str | None = None,
) -> Arbitration:
    """Decide what is believed about `field` of `subject` at `now`."""
    unique = _deduplicated(claims)
    roles: dict[str, EvidenceRole] = {}
    live = _usable_now(unique, rules, now, roles)
    epoch_change: _EpochShift | None = None
    unanchored: list[AdmittedClaim] = []

    if not live:
        verdict = _nothing_usable(unique, roles)
    else:
        quarantined = False
        if any(a.claim.epoch is not None for a in live):
            live, unanchored = _split_unanchored(live, roles)
            live, epoch_change, quarantined = _newest_epoch(live, rules, roles)
        if quarantined:
            verdict = _Verdict(Outcome.QUARANTINED, "cross_epoch_change", ConflictKind.CROSS_EPOCH)
        else:
            verdict = _by_authority(live, rules, now, roles)
            verdict = _check_unanchored(verdict, unanchored, rules)
        if verdict.outcome in (Outcome.CONFLICT, Outcome.QUARANTINED):
            verdict = _apply_resolution(verdict, live + unanchored, resolutions, rules, roles)

    return Arbitration(
        subject, field, unique, roles, verdict, rules, policy_version, now, supersedes, epoch_change
    )


def _deduplicated(claims: Iterable[AdmittedClaim]) -> list[AdmittedClaim]:
    by_id: dict[str, AdmittedClaim] = {}
    for admitted in claims:
        seen = by_id.get(admitted.claim.claim_id)
        # A reused id with another payload is refused at ingest; should two reach the engine,
        # the choice must still not depend on arrival order.
        if seen is None or (seen != admitted and _fingerprint(admitted) < _fingerprint(seen)):
            by_id[admitted.claim.claim_id] = admitted
    return sorted(by_id.values(), key=_RECENCY)


def _fingerprint(admitted: AdmittedClaim) -> str:
    return json.dumps(admitted.claim.model_dump(mode="json"), sort_keys=True)


def _usable_now(
    claims: list[AdmittedClaim],
    rules: FieldRules,
    now: datetime,
    roles: dict[str, EvidenceRole],
) -> list[AdmittedClaim]:
    live = []
    # Observed at or before this instant means as old as the freshness budget or older.
    too_old = now - rules.freshness if rules.freshness is not None else None
    for admitted in claims:
        claim = admitted.claim
        if claim.status in _NO_EVIDENCE_STATUSES or (claim.valid_from and claim.valid_from > now):
            roles[claim.claim_id] = EvidenceRole.EXCLUDED
        elif (too_old is not None and claim.observed_at <= too_old) or (
            claim.valid_to is not None and claim.valid_to <= now
        ):
            roles[claim.claim_id] = EvidenceRole.STALE
        else:
            live.append(admitted)
    return live


def _nothing_usable(claims: list[AdmittedClaim], roles: dict[str, EvidenceRole]) -> _Verdict:
    if not claims:
        return _Verdict(Outcome.INSUFFICIENT, "no_claims")
    if EvidenceRole.STALE in roles.values():
        return _Verdict(Outcome.INSUFFICIENT, "no_fresh_claims")
    return _Verdict(Outcome.INSUFFICIENT, "no_usable_claims")


def _split_unanchored(
    live: list[AdmittedClaim], roles: dict[str, EvidenceRole]
) -> tuple[list[AdmittedClaim], list[AdmittedClaim]]:
    anchored = [a for a in live if a.claim.epoch is not None]
    if not anchored or len(anchored) == len(live):
        return live, []
    unanchored = [a for a in live if a.claim.epoch is None]
    for admitted in unanchored:
        roles[admitted.claim.claim_id] = EvidenceRole.QUARANTINED
    return anchored, unanchored


def _newest_epoch(
    live: list[AdmittedClaim], rules: FieldRules, roles: dict[str, EvidenceRole]
) -> tuple[list[AdmittedClaim], _EpochShift | None, bool]:
    epochs = sorted({a.claim.epoch for a in live if a.claim.epoch is not None})
    if len(epochs) < 2:
        return live, None, False
    newest, previous = epochs[-1], epochs[-2]
    current = [a for a in live if a.claim.epoch == newest]
    before = [a for a in live if a.claim.epoch == previous]
    older = [a for a in live if a.claim.epoch != newest]
    changed = _stated(current, rules.tolerance) != _stated(before, rules.tolerance)
    change = None
    if changed:
        change = _EpochShift(
            previous,
            newest,
            _representative(before),
            _representative(current),
            [a.claim.claim_id for a in before + current],
        )
    if (
        changed
        and rules.epoch_change is EpochChangeRule.REOBSERVE
        and not _confirmed(current, rules.tolerance)
    ):
        for admitted in current + older:
            roles[admitted.claim.claim_id] = EvidenceRole.QUARANTINED
        return current, change, True
    for admitted in older:
        roles[admitted.claim.claim_id] = EvidenceRole.SUPERSEDED
    return current, change, False


def _stated(claims: Sequence[AdmittedClaim], tolerance: float) -> list[object]:
    """What a group of claims says: its distinct (status, value) statements, canonically."""
    return [
        (group[0].claim.status, canonical_value(group[0].value))
        for group in _clusters(claims, tolerance)
    ]


def _representative(claims: Sequence[AdmittedClaim]) -> Value:
    return max(claims, key=_RECENCY).value


def _confirmed(current: list[AdmittedClaim], tolerance: float) -> bool:
    """A change is confirmed by a second, later observation of the same value in the new epoch."""
    observed = {a.claim.observed_at for a in current}
    return len(_stated(current, tolerance)) == 1 and len(observed) >= 2


def _by_authority(
    live: list[AdmittedClaim],
    rules: FieldRules,
    now: datetime,
    roles: dict[str, EvidenceRole],
) -> _Verdict:
    top_rank = min(a.rank for a in live)
    if top_rank >= _ASSERTED_RANK:
        # Assertions and inferences are evidence, never proof of state.
        for admitted in live:
            roles[admitted.claim.claim_id] = EvidenceRole.CONTESTED
        return _Verdict(Outcome.INSUFFICIENT, "no_authoritative_claims")
    top = [a for a in live if a.rank == top_rank]
    top, live = _supersede_periods(top, live, now, roles)
    top = _latest_per_lineage(top, rules.tolerance, roles)
    lower = [a for a in live if a.rank != top_rank]
    top_authority = top[0].authority

    scopes = {a.claim.scope for a in top if a.claim.scope is not None}
    if len(scopes) > 1:
        return _conflict(top, lower, roles, ConflictKind.SEMANTIC, "scope_conflict")
    statuses = {a.claim.status for a in top}
    if len(statuses) > 1:
        return _conflict(top, lower, roles, ConflictKind.EXISTENCE, "existence_conflict")

    groups = _clusters(top, rules.tolerance)
    tiebreak = None
    if len(groups) > 1:
        latest = max(a.claim.observed_at for a in top)
        latest_groups = [g for g in groups if any(a.claim.observed_at == latest for a in g)]
        if rules.on_conflict is not OnConflict.MOST_RECENT or len(latest_groups) > 1:
            return _conflict(top, lower, roles, ConflictKind.VALUE, "authority_conflict")
        tiebreak = OnConflict.MOST_RECENT.value
        groups = latest_groups
    agreeing = groups[0]
    winner = max(agreeing, key=_RECENCY)
    if len(agreeing) < len(top):
        # Claim ids are unique here (deduplicated), and cheaper to compare than claims.
        agreeing_ids = {a.claim.claim_id for a in agreeing}
        for admitted in top:
            if admitted.claim.claim_id not in agreeing_ids:
                roles[admitted.claim.claim_id] = EvidenceRole.CONTESTED
    corroborating = _assign_agreement(
        [a for a in top + lower if a is not winner], winner, rules.tolerance, roles
    )
    roles[winner.claim.claim_id] = EvidenceRole.WINNER

    independent = {a.lineage for a in [winner, *corroborating]}
    if len(independent) < rules.min_independent_sources:
        roles[winner.claim.claim_id] = EvidenceRole.CORROBORATING
        return _Verdict(Outcome.INSUFFICIENT, "too_few_independent_sources")
    reason = "most_recent" if tiebreak else f"{top_authority.value}_precedence"
    return _Verdict(
        Outcome.RESOLVED,
        reason,
        status=winner.claim.status,
        value=winner.value,
        tiebreak=tiebreak,
    )


def _supersede_periods(
    top: list[AdmittedClaim],
    live: list[AdmittedClaim],
    now: datetime,
    roles: dict[str, EvidenceRole],
) -> tuple[list[AdmittedClaim], list[AdmittedClaim]]:
    """A statement about a later period describes a change: it closes earlier open periods."""
    starts = [a.claim.valid_from for a in top if a.claim.valid_from is not None]
    if not starts:
        return top, live
    current_start = max(starts)

    def superseded(admitted: AdmittedClaim) -> bool:
        claim = admitted.claim
        begins = claim.valid_from or claim.observed_at
        still_claimed = claim.valid_to is not None and claim.valid_to > current_start
        return begins < current_start and not still_claimed

    for admitted in live:
        if superseded(admitted):
            roles[admitted.claim.claim_id] = EvidenceRole.SUPERSEDED
    return [a for a in top if not superseded(a)], [a for a in live if not superseded(a)]


def _latest_per_lineage(
    top: list[AdmittedClaim], tolerance: float, roles: dict[str, EvidenceRole]
) -> list[AdmittedClaim]:
    """Within one lineage a newer observation replaces an older one that says otherwise."""
    lineages: dict[str, list[AdmittedClaim]] = {}
    for admitted in top:
        lineages.setdefault(admitted.lineage, []).append(admitted)
    if len(lineages) == len(top):
        return top  # one claim per lineage: nothing to supersede
    kept = []
    for members in lineages.values():
        if len(members) == 1:
            kept.append(members[0])
            continue
        latest = max(a.claim.observed_at for a in members)
        newest = [a for a in members if a.claim.observed_at == latest]
        for admitted in members:
            if admitted.claim.observed_at == latest or any(
                _agrees(admitted, n, tolerance) for n in newest
            ):
                kept.append(admitted)
            else:
                roles[admitted.claim.claim_id] = EvidenceRole.SUPERSEDED
    return kept


def _conflict(
    top: list[AdmittedClaim],
    lower: list[AdmittedClaim],
    roles: dict[str, EvidenceRole],
    kind: ConflictKind,
    reason: str,
) -> _Verdict:
    for admitted in top + lower:
        roles[admitted.claim.claim_id] = EvidenceRole.CONTESTED
    return _Verdict(Outcome.CONFLICT, reason, kind)


def _assign_agreement(
    claims: list[AdmittedClaim],
    reference: AdmittedClaim,
    tolerance: float,
    roles: dict[str, EvidenceRole],
) -> list[AdmittedClaim]:
    corroborating = []
    for admitted in claims:
        if roles.get(admitted.claim.claim_id) == EvidenceRole.CONTESTED:
            continue
        if _agrees(admitted, reference, tolerance):
            roles[admitted.claim.claim_id] = EvidenceRole.CORROBORATING
            corroborating.append(admitted)
        else:
            roles[admitted.claim.claim_id] = EvidenceRole.CONTESTED
    return corroborating


def _check_unanchored(
    verdict: _Verdict, unanchored: list[AdmittedClaim], rules: FieldRules
) -> _Verdict:
    """A claim without an epoch cannot take part in resolving a contradiction."""
    if verdict.outcome is not Outcome.RESOLVED or not unanchored:
        return verdict
    if all(
        a.claim.status == verdict.status and values_agree(a.value, verdict.value, rules.tolerance)
        for a in unanchored
    ):
        return verdict
    return _Verdict(Outcome.QUARANTINED, "missing_epoch", ConflictKind.PROVENANCE)


def _apply_resolution(
    verdict: _Verdict,
    live: list[AdmittedClaim],
    resolutions: Iterable[Resolution],
    rules: FieldRules,
    roles: dict[str, EvidenceRole],
) -> _Verdict:
    """A person's decision covers the claims observed before it; newer evidence reopens it."""
    newest_claim = max(a.claim.observed_at for a in live)
    applicable = [r for r in resolutions if r.decided_at >= newest_claim]
    if not applicable:
        return verdict
    chosen = max(applicable, key=lambda r: (r.decided_at, r.resolution_id))
    for admitted in live:
        agrees = admitted.claim.status == chosen.status and values_agree(
            admitted.value, chosen.value, rules.tolerance
        )
        roles[admitted.claim.claim_id] = (
            EvidenceRole.CORROBORATING if agrees else EvidenceRole.CONTESTED
        )
    return _Verdict(
        Outcome.RESOLVED,
        "manual",
        status=chosen.status,
        value=chosen.value,
        resolution_id=chosen.resolution_id,
    )


def _action(verdict: _Verdict, rules: FieldRules) -> Action:
    if verdict.outcome is Outcome.RESOLVED:
        return Action.CONTINUE
    if verdict.outcome is Outcome.QUARANTINED:
        return Action.BLOCK
    action = _CONFLICT_ACTIONS[rules.on_conflict]
    if verdict.outcome is Outcome.INSUFFICIENT and action is Action.CONTINUE:
        return Action.DEGRADE
    return action


def decision_id(belief: dict[str, object]) -> str:
    """Hash of what was decided (not when, nor the evidence list, which grows as claims agree)."""
    digest = hashlib.sha256(_BELIEF_JSON.encode(belief).encode()).hexdigest()
    return f"dec_{digest[:24]}"


def _evidence(admitted: AdmittedClaim, role: EvidenceRole) -> Evidence:
    claim = admitted.claim
    return Evidence.model_construct(
        claim_id=claim.claim_id,
        source=claim.source,
        replica=claim.replica,
        authority=admitted.authority,
        status=claim.status,
        value=admitted.value,
        observed_at=claim.observed_at,
        valid_from=claim.valid_from,
        valid_to=claim.valid_to,
        epoch=claim.epoch,
        lineage=admitted.lineage,
        scope=claim.scope,
        role=role,
    )


def _epoch_event(decision: Decision, change: _EpochShift | None) -> EpochChange | None:
    if change is None:
        return None
    return EpochChange(
        subject=decision.subject,
        field=decision.field,
        from_epoch=change.from_epoch,
        to_epoch=change.to_epoch,
        previous_value=change.previous_value,
        new_value=change.new_value,
        claim_ids=tuple(change.claim_ids),
        decision_id=decision.decision_id,
        detected_at=decision.decided_at,
    )


def _reobserve_request(
    decision: Decision, claims: list[AdmittedClaim], roles: dict[str, EvidenceRole]
) -> ReobserveRequest | None:
    if decision.outcome is not Outcome.QUARANTINED:
        return None
    held = [a for a in claims if roles[a.claim.claim_id] is EvidenceRole.QUARANTINED]
    epochs = [a.claim.epoch for a in held if a.claim.epoch is not None]
    return ReobserveRequest(
        request_id=f"reobs_{decision.decision_id.removeprefix('dec_')}",
        subject=decision.subject,
        field=decision.field,
        epoch=max(epochs) if epochs else None,
        sources=tuple(sorted({a.claim.source for a in held})),
        reason=decision.reason,
        decision_id=decision.decision_id,
        requested_at=decision.decided_at,
    )


def _agrees(a: AdmittedClaim, b: AdmittedClaim, tolerance: float) -> bool:
    return a.claim.status == b.claim.status and values_agree(a.value, b.value, tolerance)


def _clusters(claims: Sequence[AdmittedClaim], tolerance: float) -> list[list[AdmittedClaim]]:
    """Group claims by status and value; floats within `tolerance` of a group's smallest member
    join it. Sorting first makes the grouping independent of arrival order."""
    groups: list[list[AdmittedClaim]] = []
    for admitted in sorted(claims, key=_STATEMENT):
        if groups and _agrees(groups[-1][0], admitted, tolerance):
            groups[-1].append(admitted)
        else:
            groups.append([admitted])
    return groups
