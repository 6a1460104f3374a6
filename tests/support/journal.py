"""The journal's format written out by hand, from its definition (streams/core/keys/journal.py): the
reference the journal's tests hold `encode_state` and the restore's timer reading to.

`written(state, version)`: versions 1 to 3 as json wrote them, version 4 the record of version 3
in MessagePack, integers past 64 bits as their digits.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
from pydantic import BaseModel

from streams.core.admission.intake import AdmittedClaim
from streams.core.admission.normalize import canonical_value
from streams.core.decision.summary import DecisionSummary
from streams.core.keys.state import KeyState
from streams.core.records.contracts import ClaimStatus, Money

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def written(state: KeyState, version: int = 4) -> bytes:
    """The state as format `version` defines it (see journal.py): versions 1 to 3 written by
    json, version 4 the record of version 3 in MessagePack."""
    claims = [_claim_form(a, version) for a in state.claims]
    if version >= 3:
        resolutions = [_form(r, _RESOLUTION_NAMES) for r in state.resolutions]
        history = [_form(s, _SUMMARY_NAMES) for s in state.history]
        times: Any = _micros
    else:
        resolutions = [_dumped(r) for r in state.resolutions]
        history = [
            {name: value for name, value in s.as_json().items() if value is not None}
            for s in state.history
        ]
        times = datetime.isoformat
    record: dict[str, Any] = {"version": version, "subject": state.subject, "field": state.field}
    if version == 1:
        del record["version"]
    parts: dict[str, Any] = {
        "resolutions": resolutions or None,
        "history": history or None,
        "conflict_since": None if state.conflict_since is None else times(state.conflict_since),
        "escalated": state.escalated or None,
        "next_check_at": None if state.next_check_at is None else times(state.next_check_at),
        "disputed": list(state.disputed) or None,
        "claims": claims or None,
    }
    record |= {name: part for name, part in parts.items() if part is not None}
    if version == 4:
        return msgspec.msgpack.encode(_digits_past_64_bits(record))
    return json.dumps(record, separators=(",", ":")).encode()


def _digits_past_64_bits(form: Any) -> Any:
    """The integers MessagePack has no form for as the one-item arrays of their digits."""
    if isinstance(form, dict):
        return {name: _digits_past_64_bits(part) for name, part in form.items()}
    if isinstance(form, list):
        return [_digits_past_64_bits(part) for part in form]
    if type(form) is int and not -(2**63) <= form <= 2**64 - 1:
        return [str(form)]
    return form


_CLAIM_NAMES = {
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
}
_RESOLUTION_NAMES = {
    "resolution_id": "id",
    "status": "st",
    "value": "v",
    "unit": "u",
    "decided_by": "by",
    "note": "n",
    "decided_at": "at",
    "resolves_decision_id": "dec",
}
_SUMMARY_NAMES = {
    "decision_id": "id",
    "outcome": "o",
    "conflict_kind": "k",
    "value": "v",
    "reason": "r",
    "decided_at": "at",
    "supersedes": "sup",
}


def _claim_form(admitted: AdmittedClaim, version: int) -> dict[str, Any]:
    claim = admitted.claim
    if version == 1:
        return {
            "claim": _dumped(claim),
            "authority": admitted.authority.value,
            "value": _plain(admitted.value),
            "lineage": admitted.lineage,
        }
    stored = _form(claim, _CLAIM_NAMES, {"status": ClaimStatus.PRESENT})
    stored["A"] = admitted.authority.value
    value, said = admitted.value, claim.value
    if type(value) is not type(said) or canonical_value(value) != canonical_value(said):
        stored["V"] = _plain(value)
    if admitted.lineage != (claim.lineage or f"source:{claim.source}"):
        stored["L"] = admitted.lineage
    return stored


def _form(
    record: BaseModel | DecisionSummary,
    names: dict[str, str],
    usual: dict[str, object] | None = None,
) -> dict[str, Any]:
    """A record's short-named form: fields at None or their default left out, times in µs (a
    decision summary's defaults are all None)."""
    model = type(record).model_fields if isinstance(record, BaseModel) else {}
    left_out = {
        name: info.get_default(call_default_factory=True)
        for name, info in model.items()
        if not info.is_required()
    } | (usual or {})
    stored = {}
    for name, short in names.items():
        value = getattr(record, name)
        if value is None or (left_out.get(name) is not None and value == left_out[name]):
            continue
        stored[short] = _micros(value) if isinstance(value, datetime) else _plain(value)
    return stored


def _dumped(record: BaseModel) -> dict[str, Any]:
    """A record as `model_dump` wrote it before version 3."""
    return record.model_dump(mode="json", exclude_defaults=True, exclude={"subject", "field"})


def _plain(value: Any) -> Any:
    return value.model_dump() if isinstance(value, Money) else value


def _micros(moment: datetime) -> int:
    return (moment - EPOCH) // timedelta(microseconds=1)
