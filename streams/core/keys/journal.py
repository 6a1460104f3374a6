"""The journal codec: how a key's state is stored in the changelog and read back.

Where it sits: the stream shell journals the `KeyState` a transition (transitions.py) returns, with
`encode_state`, and the state store, a restore and a state-cache miss read it back with
`decode_state`. Pure, and apart from the transitions: this module knows the stored forms and their
versions, state.py and transitions.py know what a state means. The current form is a `StoredState`
(stored.py) in MessagePack, written by one msgspec encoder and read by a typed msgspec decoder; the
earlier forms are JSON (a record's first byte tells them apart: `{` opens every JSON one, never a
MessagePack map), version 3 read by the same Structs. Every version ever written stays readable, and
a version this release does not know (written by a newer one) is refused rather than misread; the
bytes of versions 3 and 4 are held by tests/core/keys/test_journal_golden.py.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from sys import intern
from typing import Any, Final, NamedTuple

import msgspec

from streams.core.admission.intake import AdmittedClaim
from streams.core.admission.normalize import canonical_value
from streams.core.decision.summary import DecisionSummary
from streams.core.keys.state import KeyState
from streams.core.keys.steward_log import StewardStep
from streams.core.keys.stored import (
    STEWARD_LOG_VERSION,
    EarlierSummary,
    StoredClaim,
    StoredMoney,
    StoredRefusal,
    StoredResolution,
    StoredState,
    StoredStep,
    StoredSummary,
    StoredValue,
)
from streams.core.keys.upkeep import RefusedClaim
from streams.core.records.contracts import (
    Authority,
    Claim,
    ClaimFields,
    Money,
    Resolution,
    Value,
    constructed,
)
from streams.core.records.errors import ClaimstreamError
from streams.core.records.lean import NO_ATTRIBUTES, LeanClaim

# Version 5 is version 4 with a steward log (written only where a key holds one).
# Version 4 holds version 3's records (stored.py) in MessagePack: a quarter fewer bytes than
# its JSON (the bench's keys: 954 against 1,274 on average; a key of one claim: 289 against
# 372), which the changelog carries on every change of a key and the state store holds for
# every key. Version 3 stores each record under short names, without the subject and field
# that the key already holds and without the fields at their defaults, times in microseconds
# since the epoch. Version 2 stored resolutions and summaries as `model_dump` wrote them, and
# all times outside claims as ISO text; version 1, claims as nested records.
_VERSION: Final = STEWARD_LOG_VERSION
_WITHOUT_STEWARD_LOG: Final = 4
_LAST_JSON_VERSION: Final = 3
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_ENCODER = msgspec.msgpack.Encoder()
_INT64_MIN, _UINT64_MAX = -(2**63), 2**64 - 1  # the integers MessagePack has a form for


_Amounts = dict[tuple[int, str], Money]
"""The amounts one state's decode has built, each one Money (a frozen model) for every claim,
decision and resolution of the key that holds it: the sources that agree on an amount are most
of a key's claims (the bench's states hold 19,251 amounts, 5,039 distinct within their keys),
and each Money built costs about 2 µs and 520 bytes."""


class _Reader(NamedTuple):
    """A stored form's typed decoders, and whether the bytes of each claim and summary read are
    the current form, so that they can be kept on it and copied into its next journal."""

    state: msgspec.json.Decoder[StoredState] | msgspec.msgpack.Decoder[StoredState]
    claim: msgspec.json.Decoder[StoredClaim] | msgspec.msgpack.Decoder[StoredClaim]
    summary: msgspec.json.Decoder[StoredSummary] | msgspec.msgpack.Decoder[StoredSummary]
    current: bool


_CURRENT = _Reader(
    msgspec.msgpack.Decoder(StoredState),
    msgspec.msgpack.Decoder(StoredClaim),
    msgspec.msgpack.Decoder(StoredSummary),
    current=True,
)
_JSON = _Reader(
    msgspec.json.Decoder(StoredState),
    msgspec.json.Decoder(StoredClaim),
    msgspec.json.Decoder(StoredSummary),
    current=False,
)


class UnknownStateFormat(ClaimstreamError):
    """A changelog record of a state format this release does not read: written by a newer
    release (a rollback), or not claimstream's key state at all."""

    def __init__(self, version: object, where: str = "") -> None:
        readable = f"v1-v{_VERSION}"
        if isinstance(version, int) and not isinstance(version, bool) and version > _VERSION:
            problem = f"key state format v{version} is newer than this release reads ({readable})"
            remedy = "upgrade, or restore from a changelog written by this release"
        else:
            problem = f"key state format {version!r} is not one this release reads ({readable})"
            remedy = "the record is not claimstream key state; check the changelog topic"
        place = f" ({where})" if where else ""
        super().__init__(f"{problem}{place}: {remedy} (runbook: Upgrades and rollbacks)")
        self.version = version


def encode_state(state: KeyState) -> bytes:
    """The state's MessagePack for the changelog, written by msgspec in one call: the claims and
    decisions in it are stored forms encoded once and kept (`AdmittedClaim.journaled`,
    `stored_summary`), which it copies."""
    subject = state.subject
    steward_log = state.steward_log
    return _ENCODER.encode(
        StoredState(
            # A state with no steward log is written as version 4, which a release before
            # reviews reads; one with a log as 5, which it refuses rather than misread.
            version=_VERSION if steward_log else _WITHOUT_STEWARD_LOG,
            subject=subject,
            field=state.field,
            resolutions=tuple(_stored_resolution(r, subject) for r in state.resolutions),
            history=tuple(map(stored_summary, state.history)),
            conflict_since=_micros_or_none(state.conflict_since),
            escalated=state.escalated,
            next_check_at=_micros_or_none(state.next_check_at),
            disputed=tuple(state.disputed),
            claims=tuple([a.journaled or _journaled(a, subject) for a in state.claims]),
            policy_version=state.policy_version,
            refused=tuple(
                StoredRefusal(
                    claim=r.claim.journaled or _journaled(r.claim, subject), reason=r.reason
                )
                for r in state.refused
            ),
            timer_waits=state.timer_waits,
            aliases_at=_micros_or_none(state.aliases_at),
            steward_log=_stored_log(steward_log, subject),
        )
    )


def _stored_log(log: tuple[StewardStep, ...], subject: str) -> tuple[StoredStep, ...]:
    return tuple([_stored_step(step, subject) for step in log]) if log else ()


def _stored_step(step: StewardStep, subject: str) -> StoredStep:
    statement = _stored_resolution(step.statement, subject)
    return StoredStep(statement=statement, standing=step.standing, needs=step.needs, why=step.why)


def decode_state(data: bytes) -> KeyState:
    """Reads this encoding and the earlier ones (see `_VERSION`); refuses any other version
    with `UnknownStateFormat`, as a newer form read as this one would be misread."""
    if data[:1] == b"{":
        try:
            stored = _JSON.state.decode(data)
        except msgspec.DecodeError as unread:
            return _earlier_state(json.loads(data), unread)
        if stored.version != _LAST_JSON_VERSION:
            raise UnknownStateFormat(stored.version)
        return _state(stored, _JSON)
    try:
        stored = _CURRENT.state.decode(data)
    except msgspec.DecodeError as unread:
        raw = msgspec.msgpack.decode(data)
        version = raw.get("version") if isinstance(raw, dict) else None
        if version in (_WITHOUT_STEWARD_LOG, _VERSION) and type(version) is int:
            raise  # a current form, but not a well-formed one
        raise UnknownStateFormat(version) from unread
    if stored.version != _VERSION and stored.version != _WITHOUT_STEWARD_LOG:
        raise UnknownStateFormat(stored.version)
    return _state(stored, _CURRENT)


def _state(stored: StoredState, reader: _Reader) -> KeyState:
    subject, field = stored.subject, stored.field
    amounts: _Amounts = {}
    return KeyState(
        subject=subject,
        field=field,
        claims=tuple(_read_claim(raw, subject, field, reader, amounts) for raw in stored.claims),
        resolutions=tuple(_resolution(r, subject, field, amounts) for r in stored.resolutions),
        history=tuple(_read_summary(raw, reader, amounts) for raw in stored.history),
        conflict_since=_time(stored.conflict_since),
        escalated=stored.escalated,
        next_check_at=_time(stored.next_check_at),
        disputed=stored.disputed,
        policy_version=stored.policy_version,
        refused=tuple(
            RefusedClaim(_read_claim(r.claim, subject, field, reader, amounts), r.reason)
            for r in stored.refused
        ),
        timer_waits=stored.timer_waits,
        aliases_at=_time(stored.aliases_at),
        steward_log=_steps(stored.steward_log, subject, field, amounts),
    )


def _steps(
    log: tuple[StoredStep, ...], subject: str, field: str, amounts: _Amounts
) -> tuple[StewardStep, ...]:
    return tuple([_step(stored, subject, field, amounts) for stored in log]) if log else ()


def _step(stored: StoredStep, subject: str, field: str, amounts: _Amounts) -> StewardStep:
    statement = _resolution(stored.statement, subject, field, amounts)
    return StewardStep(statement, stored.standing, stored.needs, stored.why)


def stored_summary(summary: DecisionSummary) -> msgspec.Raw:
    """A decision summary's stored form (its bytes), kept on it once made (as a claim's): a key's
    state is journaled again on every change, and the decisions in its history never change."""
    kept = summary.journaled
    if kept is None:
        stored = StoredSummary(
            decision_id=summary.decision_id,
            outcome=summary.outcome,
            conflict_kind=summary.conflict_kind,
            value=_stored_value(summary.value),
            reason=summary.reason,
            decided_at=_micros(summary.decided_at),
            supersedes=summary.supersedes,
        )
        kept = msgspec.Raw(_ENCODER.encode(stored))
        summary.journaled = kept
    return kept


def _journaled(admitted: AdmittedClaim, key_subject: str) -> msgspec.Raw:
    """A claim's stored form (its bytes) on the key of `key_subject`, made and kept on it (its
    first journal); a claim that moves to another key drops it (`without_journal`)."""
    claim = admitted.claim
    value, said, lineage = admitted.value, claim.value, claim.lineage
    confidence = claim.confidence
    stored = StoredClaim(
        claim_id=claim.claim_id,
        status=claim.status,
        value=_stored_value(said),
        unit=claim.unit,
        source=claim.source,
        replica=claim.replica,
        source_class=claim.source_class,
        observed_at=claim.observed_us,
        valid_from=claim.valid_from_us,
        valid_to=claim.valid_to_us,
        epoch=claim.epoch,
        lineage=lineage,
        scope=claim.scope,
        confidence=confidence,
        trace_id=claim.trace_id,
        producer=claim.producer,
        attributes=claim.attributes,
        authority=admitted.authority,
        admitted_value=msgspec.UNSET if _same_value(value, said) else _stored_value(value),
        admitted_lineage=(
            msgspec.UNSET
            if admitted.lineage == (lineage or f"source:{claim.source}")
            else admitted.lineage
        ),
        channel=admitted.channel,
        sent_about=None if claim.subject == key_subject else claim.subject,
    )
    kept = msgspec.Raw(_ENCODER.encode(stored))
    admitted.journaled = kept
    return kept


def _stored_resolution(resolution: Resolution, key_subject: str) -> StoredResolution:
    subject = resolution.subject
    return StoredResolution(
        resolution_id=resolution.resolution_id,
        status=resolution.status,
        value=_stored_value(resolution.value),
        unit=resolution.unit,
        decided_by=resolution.decided_by,
        note=resolution.note,
        decided_at=_micros(resolution.decided_at),
        resolves_decision_id=resolution.resolves_decision_id,
        sent_about=None if subject == key_subject else subject,
        act=resolution.act,
        target_id=resolution.target_id,
        basis_digest=resolution.basis_digest,
        assignee=resolution.assignee,
    )


def _stored_value(value: Value) -> StoredValue:
    if type(value) is int and not _INT64_MIN <= value <= _UINT64_MAX:
        return (str(value),)
    if isinstance(value, Money):
        return StoredMoney(value.amount_minor, value.currency)
    return value


def _micros(moment: datetime) -> int:
    return (moment - _EPOCH) // _MICROSECOND


def _micros_or_none(moment: datetime | None) -> int | None:
    return None if moment is None else _micros(moment)


def _time(micros: int | None) -> datetime | None:
    return None if micros is None else _EPOCH + micros * _MICROSECOND


def _read_claim(
    raw: msgspec.Raw, subject: str, field: str, reader: _Reader, amounts: _Amounts
) -> AdmittedClaim:
    """A claim read, its stored form kept on it as read if current (a copy: what was read is a
    view of the whole state's bytes)."""
    admitted = _admitted(reader.claim.decode(raw), subject, field, amounts)
    if reader.current:
        admitted.journaled = raw.copy()
    return admitted


def _read_summary(raw: msgspec.Raw, reader: _Reader, amounts: _Amounts) -> DecisionSummary:
    """A decision summary read, its stored form kept on it as read if current (as a claim's)."""
    stored = reader.summary.decode(raw)
    return DecisionSummary(
        stored.decision_id,
        stored.outcome,
        stored.conflict_kind,
        _value(stored.value, amounts),
        intern(stored.reason),  # one of the engine's few reasons
        _EPOCH + stored.decided_at * _MICROSECOND,
        stored.supersedes,
        raw.copy() if reader.current else None,
    )


def _admitted(stored: StoredClaim, subject: str, field: str, amounts: _Amounts) -> AdmittedClaim:
    """The claim as admitted, built without validation (the typed decoder checked each field's
    type) as the hot path holds it: a LeanClaim, its instants kept as the microseconds read."""
    claim = _lean_claim(stored, subject, field, amounts)
    admitted_value = stored.admitted_value
    admitted_lineage = stored.admitted_lineage
    return AdmittedClaim(
        claim,
        stored.authority,
        claim.value if admitted_value is msgspec.UNSET else _value(admitted_value, amounts),
        _default_lineage(claim) if admitted_lineage is msgspec.UNSET else intern(admitted_lineage),
        stored.channel,
    )


def _lean_claim(stored: StoredClaim, subject: str, field: str, amounts: _Amounts) -> LeanClaim:
    """The claim from its stored fields, without a dict of them (a cache miss builds one per
    claim of the key), its instants as the microseconds read. Names a policy or a source
    repeats (the source, the lineage) are interned: held once in memory, not once per decoded
    claim."""
    observed, start, end = stored.observed_at, stored.valid_from, stored.valid_to
    lineage = stored.lineage
    return LeanClaim(
        stored.claim_id,
        stored.sent_about or subject,
        field,
        stored.status,
        _value(stored.value, amounts),
        stored.unit,
        intern(stored.source),
        stored.replica,
        stored.source_class,
        stored.epoch,
        None if lineage is None else intern(lineage),
        stored.scope,
        stored.confidence,
        stored.trace_id,
        stored.producer,
        stored.attributes or NO_ATTRIBUTES,
        observed,
        start,
        end,
    )


def _resolution(
    stored: StoredResolution, subject: str, field: str, amounts: _Amounts
) -> Resolution:
    return constructed(
        Resolution,
        {
            "resolution_id": stored.resolution_id,
            "subject": stored.sent_about or subject,
            "field": field,
            "status": stored.status,
            "value": _value(stored.value, amounts),
            "unit": stored.unit,
            "decided_by": stored.decided_by,
            "note": stored.note,
            "decided_at": _EPOCH + stored.decided_at * _MICROSECOND,
            "resolves_decision_id": stored.resolves_decision_id,
            "act": stored.act,
            "target_id": stored.target_id,
            "basis_digest": stored.basis_digest,
            "assignee": stored.assignee,
        },
    )


def _value(stored: StoredValue, amounts: _Amounts) -> Value:
    if isinstance(stored, StoredMoney):
        held = (stored.amount_minor, stored.currency)
        money = amounts.get(held)
        if money is None:
            money = amounts[held] = constructed(
                Money, {"amount_minor": stored.amount_minor, "currency": stored.currency}
            )
        return money
    if isinstance(stored, tuple):
        return int(stored[0])
    return stored


def _earlier_state(raw: dict[str, Any], unread: msgspec.DecodeError) -> KeyState:
    """A state in an earlier form (JSON read as such), or the reason it is none."""
    version = raw.get("version")
    if version == _LAST_JSON_VERSION and type(version) is int:
        raise unread  # the last JSON form, but not a well-formed one
    if version is not None and (type(version) is not int or not 1 <= version <= _LAST_JSON_VERSION):
        raise UnknownStateFormat(version)
    subject, field = raw["subject"], raw["field"]
    if version is None:
        claims = tuple(_decode_v1_claim(stored, subject, field) for stored in raw.get("claims", ()))
    else:  # claims as now
        stored_claims = msgspec.convert(raw.get("claims", ()), tuple[StoredClaim, ...])
        amounts: _Amounts = {}
        claims = tuple(_admitted(stored, subject, field, amounts) for stored in stored_claims)
    return KeyState(
        subject=subject,
        field=field,
        claims=claims,
        resolutions=tuple(
            Resolution.model_validate({**r, "subject": subject, "field": field})
            for r in raw.get("resolutions", ())
        ),
        history=tuple(_earlier_summary(s) for s in raw.get("history", ())),
        conflict_since=_iso_time(raw.get("conflict_since")),
        escalated=raw.get("escalated", False),
        next_check_at=_iso_time(raw.get("next_check_at")),
        disputed=tuple(raw.get("disputed", ())),
    )


def _decode_v1_claim(stored: dict[str, Any], subject: str, field: str) -> AdmittedClaim:
    claim = Claim.model_validate({**stored["claim"], "subject": subject, "field": field})
    return AdmittedClaim(
        claim,
        Authority(stored["authority"]),
        _decoded_value(stored.get("value")),
        stored["lineage"],
    )


def _earlier_summary(stored: object) -> DecisionSummary:
    """A decision summary as versions 1 and 2 stored it, validated as they were read."""
    valid = EarlierSummary.model_validate(stored)
    return DecisionSummary(
        valid.decision_id,
        valid.outcome,
        valid.conflict_kind,
        valid.value,
        valid.reason,
        valid.decided_at,
        valid.supersedes,
    )


def _default_lineage(claim: ClaimFields) -> str:
    """The lineage a claim has unless the policy names one for its source (interned, as
    `_lean_claim` interns the source)."""
    return claim.lineage or intern(f"source:{claim.source}")


def _same_value(a: Value, b: Value) -> bool:
    """Equal and of one type, floats to the bit (their repr): what makes V safe to leave out."""
    return a is b or (type(a) is type(b) and canonical_value(a) == canonical_value(b))


def _decoded_value(data: object) -> Value:
    if isinstance(data, dict):
        return Money.model_validate(data)
    assert data is None or isinstance(data, bool | int | float | str)
    return data


def _iso_time(stored: str | None) -> datetime | None:
    """A time outside claims as stored before version 3: ISO text."""
    return None if stored is None else datetime.fromisoformat(stored)
