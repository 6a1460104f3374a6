"""Per-key state and its transitions: what a worker keeps for one subject and field.

Pure: the stream shell loads a KeyState, calls one transition, stores the new state and sends what
the transition says to send. A decision is emitted only when the belief (its id) changes; a claim
delivered again re-emits the current decision unchanged, so a crash between storing state and
sending a decision can repeat a decision but never lose one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

from streams.core.contracts import (
    Authority,
    Claim,
    ConflictKind,
    Decision,
    EvidenceRole,
    Outcome,
    RejectReason,
    Resolution,
    Value,
)
from streams.core.engine import Arbitration, arbitrate
from streams.core.errors import ContractError
from streams.core.intake import AdmittedClaim
from streams.core.policy import FieldRules

KEY_SEPARATOR = "|"
_EVICT_FIRST = (EvidenceRole.STALE, EvidenceRole.SUPERSEDED, EvidenceRole.EXCLUDED)
_OPEN = (Outcome.CONFLICT, Outcome.QUARANTINED)


def state_key(subject: str, field: str) -> str:
    """`subject|field`; policy field names never contain the separator, so it splits on the last."""
    return f"{subject}{KEY_SEPARATOR}{field}"


def split_key(key: str) -> tuple[str, str]:
    subject, _, field = key.rpartition(KEY_SEPARATOR)
    return subject, field


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class StoredClaim(_Frozen):
    claim: Claim
    authority: Authority
    value: Value = None
    lineage: str

    def admitted(self) -> AdmittedClaim:
        return AdmittedClaim(self.claim, self.authority, self.value, self.lineage)

    @classmethod
    def of(cls, admitted: AdmittedClaim) -> StoredClaim:
        return cls(
            claim=admitted.claim,
            authority=admitted.authority,
            value=admitted.value,
            lineage=admitted.lineage,
        )


class DecisionSummary(_Frozen):
    decision_id: str
    outcome: Outcome
    conflict_kind: ConflictKind | None = None
    value: Value = None
    reason: str
    decided_at: datetime
    supersedes: str | None = None


class KeyState(_Frozen):
    subject: str
    field: str
    claims: tuple[StoredClaim, ...] = ()
    resolutions: tuple[Resolution, ...] = ()
    history: tuple[DecisionSummary, ...] = ()
    conflict_since: datetime | None = None
    escalated: bool = False
    next_check_at: datetime | None = None

    @property
    def current(self) -> DecisionSummary | None:
        return self.history[-1] if self.history else None


# A stored claim's subject and field are the key's own: written once per state, not per claim.
_PER_CLAIM_REDUNDANT = {"claims": {"__all__": {"claim": {"subject", "field"}}}}


def encode_state(state: KeyState) -> bytes:
    """Compact JSON for the changelog and RocksDB: defaults and per-claim key fields left out."""
    return state.model_dump_json(exclude_defaults=True, exclude=_PER_CLAIM_REDUNDANT).encode()


def decode_state(data: bytes) -> KeyState:
    raw = json.loads(data)
    for stored in raw.get("claims", ()):
        stored["claim"]["subject"] = raw["subject"]
        stored["claim"]["field"] = raw["field"]
    return KeyState.model_validate(raw)


@dataclass(frozen=True, slots=True)
class Limits:
    max_claims: int = 16
    max_history: int = 10


@dataclass(frozen=True, slots=True)
class Step:
    """The new state and what to send: a decision (with its events) and/or an escalation."""

    state: KeyState
    emitted: Arbitration | None = None
    escalation: Decision | None = None


Trigger = Literal["claim", "duplicate", "resolution", "time"]


def add_claim(
    state: KeyState | None,
    admitted: AdmittedClaim,
    rules: FieldRules,
    policy_version: str,
    now: datetime,
    limits: Limits = Limits(),
) -> Step:
    """Add one admitted claim and re-decide. A reused claim_id with another payload is refused."""
    claim = admitted.claim
    state = state or KeyState(subject=claim.subject, field=claim.field)
    seen = next((s for s in state.claims if s.claim.claim_id == claim.claim_id), None)
    if seen is not None:
        if seen.claim != claim:
            raise ContractError(
                RejectReason.CONFLICTING_DUPLICATE,
                f"claim_id {claim.claim_id!r} was already used for a different claim",
            )
        return _decide(state, rules, policy_version, now, "duplicate", limits)
    grown = state.model_copy(update={"claims": (*state.claims, StoredClaim.of(admitted))})
    return _decide(grown, rules, policy_version, now, "claim", limits)


def add_resolution(
    state: KeyState | None,
    resolution: Resolution,
    rules: FieldRules,
    policy_version: str,
    now: datetime,
    limits: Limits = Limits(),
) -> Step:
    state = state or KeyState(subject=resolution.subject, field=resolution.field)
    if any(r.resolution_id == resolution.resolution_id for r in state.resolutions):
        return _decide(state, rules, policy_version, now, "duplicate", limits)
    kept = (*state.resolutions, resolution)[-limits.max_history :]
    return _decide(
        state.model_copy(update={"resolutions": kept}),
        rules,
        policy_version,
        now,
        "resolution",
        limits,
    )


def advance(
    state: KeyState,
    rules: FieldRules,
    policy_version: str,
    now: datetime,
    limits: Limits = Limits(),
) -> Step:
    """Time alone moved: claims may have gone stale, a conflict may need escalating."""
    return _decide(state, rules, policy_version, now, "time", limits)


def current_decision(
    state: KeyState, rules: FieldRules, policy_version: str, now: datetime
) -> Decision:
    """What the worker believes about this key at `now` (for the web API)."""
    return _arbitrate(state, rules, policy_version, now).decision


def _arbitrate(
    state: KeyState, rules: FieldRules, policy_version: str, now: datetime
) -> Arbitration:
    last = state.current
    return arbitrate(
        state.subject,
        state.field,
        [stored.admitted() for stored in state.claims],
        rules,
        policy_version,
        now,
        state.resolutions,
        supersedes=last.decision_id if last else None,
    )


def _decide(
    state: KeyState,
    rules: FieldRules,
    policy_version: str,
    now: datetime,
    trigger: Trigger,
    limits: Limits,
) -> Step:
    last = state.current
    if last is not None and now < last.decided_at:
        now = last.decided_at  # a key's clock never runs backwards
    arbitration = _arbitrate(state, rules, policy_version, now)
    state = _evict(state, arbitration.roles, limits)

    emitted: Arbitration | None = None
    if last is None or arbitration.decision_id != last.decision_id:
        state = _record(state, arbitration, now, limits)
        emitted = arbitration
    elif trigger == "duplicate":
        # The same input again (a redelivery): repeat the decision exactly as first emitted.
        emitted = arbitration.restated(last.decided_at, last.supersedes)

    escalation = None
    if (
        state.conflict_since is not None
        and not state.escalated
        and now - state.conflict_since >= rules.escalate_after
    ):
        escalation = arbitration.decision
        state = state.model_copy(update={"escalated": True})
    state = state.model_copy(update={"next_check_at": _next_check(state, rules, now)})
    return Step(state=state, emitted=emitted, escalation=escalation)


def _record(state: KeyState, arbitration: Arbitration, now: datetime, limits: Limits) -> KeyState:
    decision = arbitration.decision
    summary = DecisionSummary.model_construct(
        decision_id=decision.decision_id,
        outcome=decision.outcome,
        conflict_kind=decision.conflict_kind,
        value=decision.value,
        reason=decision.reason,
        decided_at=decision.decided_at,
        supersedes=decision.supersedes,
    )
    was_open = state.current is not None and state.current.outcome in _OPEN
    is_open = decision.outcome in _OPEN
    conflict_since = (state.conflict_since if was_open else now) if is_open else None
    return state.model_copy(
        update={
            "history": (*state.history, summary)[-limits.max_history :],
            "conflict_since": conflict_since,
            "escalated": state.escalated and was_open and is_open,
        }
    )


def _evict(state: KeyState, roles: dict[str, EvidenceRole], limits: Limits) -> KeyState:
    """Bound the per-key history: drop claims that no longer count (oldest first), then the oldest.

    Dropped claims stay in the decisions that cited them and in the input topics."""
    excess = len(state.claims) - limits.max_claims
    if excess <= 0:
        return state
    ranked = sorted(
        state.claims,
        key=lambda s: (roles.get(s.claim.claim_id) not in _EVICT_FIRST, s.claim.observed_at),
    )
    dropped = {s.claim.claim_id for s in ranked[:excess]}
    return state.model_copy(
        update={"claims": tuple(s for s in state.claims if s.claim.claim_id not in dropped)}
    )


def _next_check(state: KeyState, rules: FieldRules, now: datetime) -> datetime | None:
    """The earliest instant at which time alone could change this key's decision."""
    moments: list[datetime] = []
    for stored in state.claims:
        claim = stored.claim
        if rules.freshness is not None:
            moments.append(claim.observed_at + rules.freshness)
        moments += [m for m in (claim.valid_from, claim.valid_to) if m is not None]
    if state.conflict_since is not None and not state.escalated:
        moments.append(state.conflict_since + rules.escalate_after)
    future = [m for m in moments if m > now]
    return min(future, default=None)
