"""Per-key state and its transitions: what a worker keeps for one subject and field.

Pure: the stream shell loads a KeyState, calls one transition, stores the new state and sends what
the transition says to send. A decision is emitted only when the belief (its id) changes; a claim
delivered again re-emits the current decision unchanged, so a crash between storing state and
sending a decision can repeat a decision but never lose one.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from functools import cached_property
from json.encoder import encode_basestring_ascii
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from streams.core.arbitration import Arbitration
from streams.core.contracts import (
    OPEN_OUTCOMES,
    Authority,
    Claim,
    ClaimStatus,
    ConflictKind,
    Decision,
    EvidenceRole,
    Money,
    Outcome,
    RejectReason,
    Resolution,
    Value,
    constructed,
)
from streams.core.engine import arbitrate
from streams.core.errors import ContractError
from streams.core.incremental import extend
from streams.core.intake import AdmittedClaim
from streams.core.normalize import canonical_value
from streams.core.policy import FieldRules

KEY_SEPARATOR = "|"
_EVICT_FIRST = (EvidenceRole.STALE, EvidenceRole.SUPERSEDED, EvidenceRole.EXCLUDED)


def state_key(subject: str, field: str) -> str:
    """`subject|field`; policy field names never contain the separator, so it splits on the last."""
    return f"{subject}{KEY_SEPARATOR}{field}"


def split_key(key: str) -> tuple[str, str]:
    subject, _, field = key.rpartition(KEY_SEPARATOR)
    return subject, field


class DecisionSummary(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    decision_id: str
    outcome: Outcome
    conflict_kind: ConflictKind | None = None
    value: Value = None
    reason: str
    decided_at: datetime
    supersedes: str | None = None

    @cached_property
    def journaled(self) -> str:
        """Its stored form (JSON), made once: a key's state is journaled again on every change,
        and the decisions in its history never change (pydantic leaves this out of equality)."""
        return _COMPACT_JSON.encode(_SUMMARY_FORM.dump(self))

    def model_copy(
        self, *, update: Mapping[str, Any] | None = None, deep: bool = False
    ) -> DecisionSummary:
        copied = super().model_copy(update=update, deep=deep)
        copied.__dict__.pop("journaled", None)  # the stored form of what it was copied from
        return copied


@dataclass(frozen=True, slots=True)
class KeyState:
    """One key's claims (as admitted, so re-deciding re-uses their precomputed orderings), the
    resolutions for it and the decisions emitted so far."""

    subject: str
    field: str
    claims: tuple[AdmittedClaim, ...] = ()
    resolutions: tuple[Resolution, ...] = ()
    history: tuple[DecisionSummary, ...] = ()
    conflict_since: datetime | None = None
    escalated: bool = False
    next_check_at: datetime | None = None
    disputed: tuple[str, ...] = ()
    """Claim ids seen with different content: no version of them counts (kept to refuse any
    later version too, whichever order they arrive in)."""
    arbitration: Arbitration | None = dataclasses.field(default=None, compare=False, repr=False)
    """The last arbitration, in memory only (never journaled): lets a claim that cannot change
    the belief be placed without running the rules again."""

    @property
    def current(self) -> DecisionSummary | None:
        return self.history[-1] if self.history else None


# The stored form (version 3) of a claim, a resolution and a decision summary: the model's own
# fields under short names, without the subject and field that the key already holds and without
# the fields at their defaults, times in microseconds since the epoch. A claim adds what admission
# gave it under capitals (A: authority, V: normalized value when it differs from the claim's own,
# L: lineage when not the default). Version 2 stored resolutions and summaries as `model_dump`
# wrote them, and all times outside claims as ISO text; version 1, claims as nested records.
_STATE_VERSION = 3
_SUMMARIES_DUMPED = 2
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_COMPACT_JSON = json.JSONEncoder(separators=(",", ":"))


class _StoredForm:
    """How one record model is stored: the short name of each field, which are times, and the
    values left out (None, a default, the key's fields). Read through `vars`, as `model_dump`
    costs more than the rest of journaling a key."""

    def __init__(
        self,
        model: type[BaseModel],
        short_names: dict[str, str],
        times: frozenset[str],
        usual: dict[str, object] | None = None,
    ) -> None:
        unnamed = model.model_fields.keys() - short_names.keys() - {"subject", "field"}
        if unnamed:
            raise TypeError(f"{model.__name__}: no stored name for {sorted(unnamed)}")
        self.names = {short: name for name, short in short_names.items()}
        self.times = times
        defaults: dict[str, object] = {
            name: default
            for name, info in model.model_fields.items()
            if not info.is_required()
            and (default := info.get_default(call_default_factory=True)) is not None
        } | (usual or {})
        self.plan = tuple(
            (name, short, defaults.get(name), _micros if name in times else _json_value)
            for name, short in short_names.items()
        )
        """Per field: its name, stored name, the value left out besides None, its conversion."""

    def dump(self, record: BaseModel) -> dict[str, Any]:
        stored: dict[str, Any] = {}
        fields = vars(record)
        for name, short, usual, convert in self.plan:
            value = fields[name]
            if value is None or (usual is not None and value == usual):
                continue
            stored[short] = convert(value)
        return stored

    def fields(self, stored: dict[str, Any]) -> dict[str, Any]:
        """The model's fields (those stored) from a stored form; capitals are left to the caller."""
        own = {self.names[short]: value for short, value in stored.items() if short.islower()}
        for name in self.times.intersection(own):
            own[name] = _EPOCH + own[name] * _MICROSECOND
        return own


def _micros(moment: datetime) -> int:
    return (moment - _EPOCH) // _MICROSECOND


def _json_value(value: Value) -> object:
    return value.model_dump() if isinstance(value, Money) else value


_CLAIM_FORM = _StoredForm(
    Claim,
    {
        "claim_id": "id",
        "status": "st",
        "value": "v",
        "unit": "u",
        "source": "src",
        "replica": "rep",
        "source_class": "cls",
        "observed_at": "at",
        "valid_from": "from",
        "valid_to": "to",
        "epoch": "ep",
        "lineage": "lin",
        "scope": "sc",
        "confidence": "cf",
        "trace_id": "tr",
        "producer": "pr",
        "attributes": "attr",
    },
    frozenset({"observed_at", "valid_from", "valid_to"}),
    {"status": ClaimStatus.PRESENT},
)
_RESOLUTION_FORM = _StoredForm(
    Resolution,
    {
        "resolution_id": "id",
        "status": "st",
        "value": "v",
        "unit": "u",
        "decided_by": "by",
        "note": "n",
        "decided_at": "at",
        "resolves_decision_id": "dec",
    },
    frozenset({"decided_at"}),
)
_SUMMARY_FORM = _StoredForm(
    DecisionSummary,
    {
        "decision_id": "id",
        "outcome": "o",
        "conflict_kind": "k",
        "value": "v",
        "reason": "r",
        "decided_at": "at",
        "supersedes": "sup",
    },
    frozenset({"decided_at"}),
)


def encode_state(state: KeyState) -> bytes:
    """Compact JSON for the changelog, written out part by part: the claims and decisions in it
    are stored forms made once (`AdmittedClaim.journaled`, `DecisionSummary.journaled`)."""
    parts = [
        f'{{"version":{_STATE_VERSION},"subject":{encode_basestring_ascii(state.subject)},'
        f'"field":{encode_basestring_ascii(state.field)}'
    ]
    if state.resolutions:
        resolutions = [_RESOLUTION_FORM.dump(r) for r in state.resolutions]
        parts.append(f',"resolutions":{_COMPACT_JSON.encode(resolutions)}')
    if state.history:
        parts.append(f',"history":[{",".join(s.journaled for s in state.history)}]')
    if state.conflict_since is not None:
        parts.append(f',"conflict_since":{_micros(state.conflict_since)}')
    if state.escalated:
        parts.append(',"escalated":true')
    if state.next_check_at is not None:
        parts.append(f',"next_check_at":{_micros(state.next_check_at)}')
    if state.disputed:
        parts.append(f',"disputed":{_COMPACT_JSON.encode(list(state.disputed))}')
    if state.claims:
        parts.append(f',"claims":[{",".join(_claim_json(a) for a in state.claims)}]')
    parts.append("}")
    return "".join(parts).encode()


def decode_state(data: bytes) -> KeyState:
    """Reads this encoding and the earlier ones (see `_STATE_VERSION`)."""
    raw = json.loads(data)
    subject, field = raw["subject"], raw["field"]
    version = raw.get("version")
    decode_claim = _decode_v1_claim if version is None else _decode_claim
    if version is None or version == _SUMMARIES_DUMPED:
        resolutions = tuple(
            Resolution.model_validate({**r, "subject": subject, "field": field})
            for r in raw.get("resolutions", ())
        )
        history = tuple(DecisionSummary.model_validate(s) for s in raw.get("history", ()))
    else:
        resolutions = tuple(
            Resolution.model_validate(
                {**_RESOLUTION_FORM.fields(r), "subject": subject, "field": field}
            )
            for r in raw.get("resolutions", ())
        )
        history = tuple(
            DecisionSummary.model_validate(_SUMMARY_FORM.fields(s)) for s in raw.get("history", ())
        )
    return KeyState(
        subject=subject,
        field=field,
        claims=tuple(decode_claim(stored, subject, field) for stored in raw.get("claims", ())),
        resolutions=resolutions,
        history=history,
        conflict_since=_timestamp(raw.get("conflict_since")),
        escalated=raw.get("escalated", False),
        next_check_at=_timestamp(raw.get("next_check_at")),
        disputed=tuple(raw.get("disputed", ())),
    )


def _claim_json(admitted: AdmittedClaim) -> str:
    if admitted.journaled is None:
        # Frozen: set the way the dataclass sets its own fields.
        object.__setattr__(admitted, "journaled", _COMPACT_JSON.encode(_encode_claim(admitted)))
    assert admitted.journaled is not None
    return admitted.journaled


def _encode_claim(admitted: AdmittedClaim) -> dict[str, Any]:
    claim = admitted.claim
    stored = _CLAIM_FORM.dump(claim)
    stored["A"] = admitted.authority  # StrEnums: JSON writes their values
    if not _same_value(admitted.value, claim.value):
        stored["V"] = _json_value(admitted.value)
    if admitted.lineage != _default_lineage(claim):
        stored["L"] = admitted.lineage
    return stored


def _decode_claim(stored: dict[str, Any], subject: str, field: str) -> AdmittedClaim:
    own = _CLAIM_FORM.fields(stored)
    own.setdefault("status", ClaimStatus.PRESENT)
    claim = Claim.model_validate({**own, "subject": subject, "field": field})
    value = _value(stored["V"]) if "V" in stored else claim.value
    return AdmittedClaim(
        claim,
        Authority(stored["A"]),
        value,
        stored["L"] if "L" in stored else _default_lineage(claim),
    )


def _decode_v1_claim(stored: dict[str, Any], subject: str, field: str) -> AdmittedClaim:
    claim = Claim.model_validate({**stored["claim"], "subject": subject, "field": field})
    return AdmittedClaim(
        claim, Authority(stored["authority"]), _value(stored.get("value")), stored["lineage"]
    )


def _default_lineage(claim: Claim) -> str:
    """The lineage a claim has unless the policy names one for its source."""
    return claim.lineage or f"source:{claim.source}"


def _same_value(a: Value, b: Value) -> bool:
    """Equal and of one type, floats to the bit (their repr): what makes V safe to leave out."""
    return type(a) is type(b) and canonical_value(a) == canonical_value(b)


def _value(data: object) -> Value:
    if isinstance(data, dict):
        return Money.model_validate(data)
    assert data is None or isinstance(data, bool | int | float | str)
    return data


def _timestamp(stored: int | str | None) -> datetime | None:
    """A time as stored: microseconds since the epoch, or ISO text (before version 3)."""
    if stored is None:
        return None
    if isinstance(stored, int):
        return _EPOCH + stored * _MICROSECOND
    return datetime.fromisoformat(stored)


@dataclass(frozen=True, slots=True)
class Limits:
    max_claims: int = 16
    max_history: int = 10
    max_disputed: int = 64


@dataclass(frozen=True, slots=True)
class Step:
    """The new state and what to send: a decision (with its events) and/or an escalation.
    `arbitration` is what the key decided this step, emitted or not (the belief may not change)."""

    state: KeyState
    arbitration: Arbitration
    emitted: Arbitration | None = None
    escalation: Decision | None = None
    refused: ContractError | None = None
    """The input was refused (a reused claim_id): dead-letter it, and still apply the step."""


Trigger = Literal["claim", "duplicate", "resolution", "time"]


def add_claim(
    state: KeyState | None,
    admitted: AdmittedClaim,
    rules: FieldRules,
    policy_version: str,
    now: datetime,
    limits: Limits = Limits(),
) -> Step:
    """Add one admitted claim and re-decide.

    A claim_id identifies one claim within its key (subject and field). Seen again with the same
    normalized content it is a redelivery. Seen with different content, neither version counts:
    the earlier one leaves the evidence, this one is refused, and so is any later version, the
    same final state whatever order the versions arrive in (as `agreement.distinct` in replay)."""
    claim = admitted.claim
    state = state or KeyState(subject=claim.subject, field=claim.field)
    claim_id = claim.claim_id
    if claim_id in state.disputed:
        step = _decide(state, rules, policy_version, now, "claim", limits)
        return replace(step, refused=_conflicting_duplicate(claim_id))
    seen = next((s for s in state.claims if s.claim.claim_id == claim_id), None)
    if seen is None:
        grown = _with_claims(state, (*state.claims, admitted))
        return _decide(grown, rules, policy_version, now, "claim", limits, added=admitted)
    if seen.same_content(admitted):
        return _decide(state, rules, policy_version, now, "duplicate", limits)
    withdrawn = replace(
        state,
        claims=tuple(s for s in state.claims if s is not seen),
        disputed=(*state.disputed, claim_id)[-limits.max_disputed :],
    )
    step = _decide(withdrawn, rules, policy_version, now, "claim", limits)
    return replace(step, refused=_conflicting_duplicate(claim_id))


def _with_claims(state: KeyState, claims: tuple[AdmittedClaim, ...]) -> KeyState:
    """`replace(state, claims=...)` spelled out: this runs for every new claim, and
    `dataclasses.replace` costs several times a constructor call."""
    return KeyState(
        state.subject,
        state.field,
        claims,
        state.resolutions,
        state.history,
        state.conflict_since,
        state.escalated,
        state.next_check_at,
        state.disputed,
        state.arbitration,
    )


def _conflicting_duplicate(claim_id: str) -> ContractError:
    return ContractError(
        RejectReason.CONFLICTING_DUPLICATE,
        f"claim_id {claim_id!r} is used for claims that say different things; "
        "no version of it counts as evidence",
    )


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
        replace(state, resolutions=kept), rules, policy_version, now, "resolution", limits
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
    """What the worker believes about this key at `now` (for the web API). When that is the
    belief last emitted, it names what that decision superseded, not itself."""
    arbitration = _arbitrate(state, rules, policy_version, now)
    last = state.current
    if last is not None and arbitration.decision_id == last.decision_id:
        arbitration = arbitration.restated(now, last.supersedes)
    return arbitration.decision


def _arbitrate(
    state: KeyState, rules: FieldRules, policy_version: str, now: datetime
) -> Arbitration:
    last = state.current
    return arbitrate(
        state.subject,
        state.field,
        state.claims,
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
    added: AdmittedClaim | None = None,
) -> Step:
    last = state.current
    if last is not None and now < last.decided_at:
        now = last.decided_at  # a key's clock never runs backwards
    arbitration = _extended(state, added, rules, policy_version, now, limits)
    if arbitration is not None:
        # Nothing the rules look at moved: the belief, history and timers stand.
        assert added is not None
        expires = _expiry(added, rules)
        next_check_at = state.next_check_at
        if (
            expires is not None
            and expires > now
            and (next_check_at is None or expires < next_check_at)
        ):
            next_check_at = expires
        return Step(
            state=KeyState(
                state.subject,
                state.field,
                state.claims,
                state.resolutions,
                state.history,
                state.conflict_since,
                state.escalated,
                next_check_at,
                state.disputed,
                arbitration,
            ),
            arbitration=arbitration,
        )
    arbitration = _arbitrate(state, rules, policy_version, now)
    claims = _evicted(state.claims, arbitration.roles, limits)
    history, conflict_since, escalated = state.history, state.conflict_since, state.escalated

    emitted: Arbitration | None = None
    if last is None or arbitration.decision_id != last.decision_id:
        history = (*history, _summary(arbitration, now))[-limits.max_history :]
        was_open = last is not None and last.outcome in OPEN_OUTCOMES
        is_open = arbitration.outcome in OPEN_OUTCOMES
        conflict_since = (conflict_since if was_open else now) if is_open else None
        escalated = escalated and was_open and is_open
        emitted = arbitration
    elif trigger == "duplicate":
        # The same input again (a redelivery): repeat the decision exactly as first emitted.
        emitted = arbitration.restated(last.decided_at, last.supersedes)

    escalation = None
    if (
        conflict_since is not None
        and not escalated
        and now - conflict_since >= rules.escalate_after
    ):
        escalation = arbitration.decision
        escalated = True
    next_check_at = _next_check(claims, conflict_since, escalated, rules, now)
    state = KeyState(
        state.subject,
        state.field,
        claims,
        state.resolutions,
        history,
        conflict_since,
        escalated,
        next_check_at,
        state.disputed,
        # Kept only where `extend` can use it, and as a copy without the records built for
        # sending: what deciding needs stays in memory, the evidence records do not.
        arbitration.restated(now, None) if arbitration.belief is not None else None,
    )
    return Step(state=state, arbitration=arbitration, emitted=emitted, escalation=escalation)


def _extended(
    state: KeyState,
    added: AdmittedClaim | None,
    rules: FieldRules,
    policy_version: str,
    now: datetime,
    limits: Limits,
) -> Arbitration | None:
    """The incremental path (`incremental.extend`), where its preconditions hold: the last
    arbitration is at hand and was made under these rules, no timer of the key has come due since
    (so time alone changed nothing), and the new claim needs no eviction."""
    previous, last = state.arbitration, state.current
    if (
        added is None
        or previous is None
        or previous.belief is None
        or previous.belief.rules is not rules
        or previous.belief.policy_version != policy_version
        or last is None
        or previous.decision_id != last.decision_id
        or (state.next_check_at is not None and now >= state.next_check_at)
        or len(state.claims) > limits.max_claims
    ):
        return None
    return extend(previous, added, now, last.decision_id)


def _expiry(admitted: AdmittedClaim, rules: FieldRules) -> datetime | None:
    """When a plain claim goes stale: one tick after it is exactly as old as the budget."""
    if rules.freshness is None:
        return None
    return admitted.claim.observed_at + rules.freshness + _MICROSECOND


def _summary(arbitration: Arbitration, decided_at: datetime) -> DecisionSummary:
    """Read from the arbitration, not its Decision: the evidence records are built only for
    what is sent."""
    verdict = arbitration.verdict
    return constructed(
        DecisionSummary,
        {
            "decision_id": arbitration.decision_id,
            "outcome": verdict.outcome,
            "conflict_kind": verdict.kind,
            "value": verdict.value,
            "reason": verdict.reason,
            "decided_at": decided_at,
            "supersedes": arbitration.supersedes,
        },
    )


def _evicted(
    claims: tuple[AdmittedClaim, ...], roles: dict[str, EvidenceRole], limits: Limits
) -> tuple[AdmittedClaim, ...]:
    """Bound the per-key history: drop claims that no longer count (oldest first), then the oldest.

    Dropped claims stay in the decisions that cited them and in the input topics."""
    excess = len(claims) - limits.max_claims
    if excess <= 0:
        return claims
    ranked = sorted(
        claims,
        key=lambda a: (roles.get(a.claim.claim_id) not in _EVICT_FIRST, a.claim.observed_at),
    )
    dropped = {a.claim.claim_id for a in ranked[:excess]}
    return tuple(a for a in claims if a.claim.claim_id not in dropped)


def _next_check(
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
        expires = _expiry(admitted, rules)
        if expires is not None:
            moments.append(expires)
        moments += [m for m in (claim.valid_from, claim.valid_to) if m is not None]
    if conflict_since is not None and not escalated:
        moments.append(conflict_since + rules.escalate_after)
    future = [m for m in moments if m > now]
    return min(future, default=None)
