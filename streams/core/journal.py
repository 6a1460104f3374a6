"""The journal codec: how a key's state is stored in the changelog and read back.

Where it sits: the stream shell journals the `KeyState` a transition (keystate.py) returns, with
`encode_state`, and restores it with `decode_state` when a partition is assigned. Pure, and apart
from the transitions: this module knows the stored forms and their versions, keystate knows what a
state means. Every version ever written stays readable, and a version this release does not know
(written by a newer one) is refused rather than misread; the bytes of version 3 are held by
tests/core/test_journal_golden.py.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from json.encoder import encode_basestring_ascii
from typing import Any

from pydantic import BaseModel

from streams.core.contracts import Authority, Claim, ClaimStatus, Money, Resolution, Value
from streams.core.errors import ClaimstreamError
from streams.core.intake import AdmittedClaim
from streams.core.keystate import DecisionSummary, KeyState
from streams.core.normalize import canonical_value

# The stored form (version 3) of a claim, a resolution and a decision summary: the model's own
# fields under short names, without the subject and field that the key already holds and without
# the fields at their defaults, times in microseconds since the epoch. A claim adds what admission
# gave it under capitals (A: authority, V: normalized value when it differs from the claim's own,
# L: lineage when not the default). Version 2 stored resolutions and summaries as `model_dump`
# wrote them, and all times outside claims as ISO text; version 1, claims as nested records.
_VERSION = 3
_RECORDS_DUMPED_VERSION = 2
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_COMPACT_JSON = json.JSONEncoder(separators=(",", ":"))


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


def _json_value(value: object) -> object:  # a Value, or a claim's attributes (a dict)
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
    are stored forms made once (`AdmittedClaim.journaled`, `stored_summary`)."""
    parts = [
        f'{{"version":{_VERSION},"subject":{encode_basestring_ascii(state.subject)},'
        f'"field":{encode_basestring_ascii(state.field)}'
    ]
    if state.resolutions:
        resolutions = [_RESOLUTION_FORM.dump(r) for r in state.resolutions]
        parts.append(f',"resolutions":{_COMPACT_JSON.encode(resolutions)}')
    if state.history:
        parts.append(f',"history":[{",".join(map(stored_summary, state.history))}]')
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
    """Reads this encoding and the earlier ones (see `_VERSION`); refuses any other version
    with `UnknownStateFormat`, as a newer form read as this one would be misread."""
    raw = json.loads(data)
    version = raw.get("version")
    if version is not None and (type(version) is not int or not 1 <= version <= _VERSION):
        raise UnknownStateFormat(version)
    subject, field = raw["subject"], raw["field"]
    dumped = version is None or version == _RECORDS_DUMPED_VERSION
    read_records = _dumped_records if dumped else _stored_records
    resolutions, history = read_records(raw, subject, field)
    decode_claim = _decode_v1_claim if version is None else _decode_claim
    return KeyState(
        subject=subject,
        field=field,
        claims=tuple(decode_claim(stored, subject, field) for stored in raw.get("claims", ())),
        resolutions=resolutions,
        history=history,
        conflict_since=_decoded_time(raw.get("conflict_since")),
        escalated=raw.get("escalated", False),
        next_check_at=_decoded_time(raw.get("next_check_at")),
        disputed=tuple(raw.get("disputed", ())),
    )


_Records = tuple[tuple[Resolution, ...], tuple[DecisionSummary, ...]]


def _stored_records(raw: dict[str, Any], subject: str, field: str) -> _Records:
    """Resolutions and decision summaries in their stored forms (version 3)."""
    resolutions = tuple(
        Resolution.model_validate(
            {**_RESOLUTION_FORM.fields(r), "subject": subject, "field": field}
        )
        for r in raw.get("resolutions", ())
    )
    history = tuple(
        DecisionSummary.model_validate(_SUMMARY_FORM.fields(s)) for s in raw.get("history", ())
    )
    return resolutions, history


def _dumped_records(raw: dict[str, Any], subject: str, field: str) -> _Records:
    """Resolutions and decision summaries as `model_dump` wrote them (versions 1 and 2)."""
    resolutions = tuple(
        Resolution.model_validate({**r, "subject": subject, "field": field})
        for r in raw.get("resolutions", ())
    )
    history = tuple(DecisionSummary.model_validate(s) for s in raw.get("history", ()))
    return resolutions, history


def stored_summary(summary: DecisionSummary) -> str:
    """A decision summary's stored form (JSON), kept on it once made (as a claim's): a key's
    state is journaled again on every change, and the decisions in its history never change."""
    stored: str | None = getattr(summary, "journaled", None)
    if stored is None:
        stored = _COMPACT_JSON.encode(_SUMMARY_FORM.dump(summary))
        object.__setattr__(summary, "journaled", stored)  # a slot, past the frozen model's guard
    return stored


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
    value = _decoded_value(stored["V"]) if "V" in stored else claim.value
    return AdmittedClaim(
        claim,
        Authority(stored["A"]),
        value,
        stored["L"] if "L" in stored else _default_lineage(claim),
    )


def _decode_v1_claim(stored: dict[str, Any], subject: str, field: str) -> AdmittedClaim:
    claim = Claim.model_validate({**stored["claim"], "subject": subject, "field": field})
    return AdmittedClaim(
        claim,
        Authority(stored["authority"]),
        _decoded_value(stored.get("value")),
        stored["lineage"],
    )


def _default_lineage(claim: Claim) -> str:
    """The lineage a claim has unless the policy names one for its source."""
    return claim.lineage or f"source:{claim.source}"


def _same_value(a: Value, b: Value) -> bool:
    """Equal and of one type, floats to the bit (their repr): what makes V safe to leave out."""
    return type(a) is type(b) and canonical_value(a) == canonical_value(b)


def _decoded_value(data: object) -> Value:
    if isinstance(data, dict):
        return Money.model_validate(data)
    assert data is None or isinstance(data, bool | int | float | str)
    return data


def _decoded_time(stored: int | str | None) -> datetime | None:
    """A time as stored: microseconds since the epoch, or ISO text (before version 3)."""
    if stored is None:
        return None
    if isinstance(stored, int):
        return _EPOCH + stored * _MICROSECOND
    return datetime.fromisoformat(stored)
