"""The journal against its format, for states of every shape: generated key states (claims with
every field, money, floats and integers of any magnitude, text in any script, epochs, periods,
scopes, resolutions, decision histories, disputed ids) read back equal, and encode to the bytes
the version 4 format defines (`_written`, the reference here: the version 3 record, as json
writes it, in MessagePack, integers past 64 bits as their digits). Earlier forms of the same
states (versions 1 to 3, JSON) read back equal too.

The golden test holds the bytes of fixed states; these properties hold them for any state, for
states encoded fresh and for states read back (whose stored forms the decoder keeps).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from streams.core.contracts import (
    Authority,
    Claim,
    ClaimStatus,
    ConflictKind,
    LeanClaim,
    Money,
    Outcome,
    Resolution,
    SourceClass,
    Value,
)
from streams.core.intake import AdmittedClaim
from streams.core.journal import decode_state, encode_state
from streams.core.keystate import KeyState
from streams.core.normalize import canonical_value
from streams.core.summary import DecisionSummary

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_TEXT = st.text(max_size=12)  # any script, controls, DEL, astral characters
_SHORT = st.text(max_size=4) | st.sampled_from(["paid", "billing-api", "ms", ""])
_FLOATS = st.floats(allow_nan=False, allow_infinity=False)
_VALUES: st.SearchStrategy[Value] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    _FLOATS,
    _SHORT,
    st.builds(Money, amount_minor=st.integers(-(2**63), 2**63 - 1), currency=_SHORT),
)
_TIMES = st.datetimes(
    min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
)


def _maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | strategy


@st.composite
def _admitted(draw: st.DrawFn, subject: str, field: str) -> AdmittedClaim:
    said = draw(_VALUES)
    claim = Claim(
        claim_id=draw(_SHORT),
        subject=subject,
        field=field,
        status=draw(st.sampled_from(ClaimStatus)),
        value=said,
        unit=draw(_maybe(_SHORT)),
        source=draw(_SHORT),
        replica=draw(_maybe(_TEXT)),
        source_class=draw(st.sampled_from(SourceClass)),
        observed_at=draw(_TIMES),
        valid_from=draw(_maybe(_TIMES)),
        valid_to=draw(_maybe(_TIMES)),
        epoch=draw(_maybe(st.integers(-(2**40), 2**40))),
        lineage=draw(_maybe(_SHORT)),
        scope=draw(_maybe(_TEXT)),
        confidence=draw(_maybe(_FLOATS)),
        trace_id=draw(_maybe(_TEXT)),
        producer=draw(_maybe(_TEXT)),
        attributes=draw(st.dictionaries(_SHORT, _TEXT, max_size=3)),
    )
    value = draw(st.just(said) | _VALUES)  # normalized: mostly as said, or anything else
    lineage = draw(st.just(claim.lineage or f"source:{claim.source}") | _SHORT)
    return AdmittedClaim(claim, draw(st.sampled_from(Authority)), value, lineage)


@st.composite
def _resolution(draw: st.DrawFn, subject: str, field: str) -> Resolution:
    return Resolution(
        resolution_id=draw(_SHORT),
        subject=subject,
        field=field,
        status=draw(st.sampled_from(ClaimStatus)),
        value=draw(_VALUES),
        unit=draw(_maybe(_SHORT)),
        decided_by=draw(_TEXT),
        note=draw(_TEXT),
        decided_at=draw(_TIMES),
        resolves_decision_id=draw(_maybe(_SHORT)),
    )


_SUMMARIES = st.builds(
    DecisionSummary,
    decision_id=_SHORT,
    outcome=st.sampled_from(Outcome),
    conflict_kind=_maybe(st.sampled_from(ConflictKind)),
    value=_VALUES,
    reason=_TEXT,
    decided_at=_TIMES,
    supersedes=_maybe(_SHORT),
)


@st.composite
def _states(draw: st.DrawFn) -> KeyState:
    subject, field = draw(_TEXT), draw(_SHORT)
    return KeyState(
        subject=subject,
        field=field,
        claims=tuple(draw(st.lists(_admitted(subject, field), max_size=4))),
        resolutions=tuple(draw(st.lists(_resolution(subject, field), max_size=2))),
        history=tuple(draw(st.lists(_SUMMARIES, max_size=3))),
        conflict_since=draw(_maybe(_TIMES)),
        escalated=draw(st.booleans()),
        next_check_at=draw(_maybe(_TIMES)),
        disputed=tuple(draw(st.lists(_SHORT, max_size=3))),
    )


def _copy(state: KeyState) -> KeyState:
    """An equal state whose claims and summaries carry no stored form yet."""
    return KeyState(
        state.subject,
        state.field,
        tuple(AdmittedClaim(a.claim, a.authority, a.value, a.lineage) for a in state.claims),
        state.resolutions,
        tuple(
            DecisionSummary(
                s.decision_id,
                s.outcome,
                s.conflict_kind,
                s.value,
                s.reason,
                s.decided_at,
                s.supersedes,
            )
            for s in state.history
        ),
        state.conflict_since,
        state.escalated,
        state.next_check_at,
        state.disputed,
    )


@settings(max_examples=300, deadline=None)
@given(state=_states())
@example(state=KeyState("", "", conflict_since=_EPOCH, next_check_at=_EPOCH))  # times of 0 µs
def test_any_state_reads_back_equal_and_as_the_format_writes_it(state: KeyState) -> None:
    data = encode_state(state)
    assert _canonical(data) == _written(state)
    assert encode_state(state) == data  # again, from the stored forms kept
    read = decode_state(data)
    assert read == state
    assert encode_state(read) == data  # from the stored forms read
    assert encode_state(_copy(read)) == data  # and from none


@settings(max_examples=150, deadline=None)
@given(state=_states())
@example(state=KeyState("", "", conflict_since=_EPOCH, next_check_at=_EPOCH))
def test_the_earlier_forms_of_any_state_read_back_equal(state: KeyState) -> None:
    for version in (1, 2, 3):
        read = decode_state(_written(state, version))
        assert read == state
        assert _canonical(encode_state(read)) == _written(state)


def _canonical(data: bytes) -> bytes:
    """MessagePack written again from what it decodes to: msgspec writes a Struct's map under a
    16-bit length, where a dict's as small as it fits."""
    return msgspec.msgpack.encode(msgspec.msgpack.decode(data))


def _written(state: KeyState, version: int = 4) -> bytes:
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
    written: dict[str, Any] = {"version": version, "subject": state.subject, "field": state.field}
    if version == 1:
        del written["version"]
    parts: dict[str, Any] = {
        "resolutions": resolutions or None,
        "history": history or None,
        "conflict_since": None if state.conflict_since is None else times(state.conflict_since),
        "escalated": state.escalated or None,
        "next_check_at": None if state.next_check_at is None else times(state.next_check_at),
        "disputed": list(state.disputed) or None,
        "claims": claims or None,
    }
    written |= {name: part for name, part in parts.items() if part is not None}
    if version == 4:
        return msgspec.msgpack.encode(_digits_past_64_bits(written))
    return json.dumps(written, separators=(",", ":")).encode()


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
    return (moment - _EPOCH) // timedelta(microseconds=1)


@settings(max_examples=150, deadline=None)
@given(state=_states())
def test_a_claim_read_back_is_the_lean_claim_and_admission_its_claim_makes(
    state: KeyState,
) -> None:
    """The journal builds each claim read without LeanClaim's `__init__` (and the admitted
    claim around it without re-admitting it): every slot as the constructor fills it."""
    read = decode_state(encode_state(state))
    for admitted, again in zip(state.claims, read.claims, strict=True):
        assert isinstance(admitted.claim, Claim)
        lean = LeanClaim.of(admitted.claim)
        assert [getattr(again.claim, name) for name in LeanClaim.__slots__] == [
            getattr(lean, name) for name in LeanClaim.__slots__
        ]
        assert [getattr(again, name) for name in _ORDERINGS] == [
            getattr(admitted, name) for name in _ORDERINGS
        ]


_ORDERINGS = (
    "authority",
    "value",
    "lineage",
    "rank",
    "recency",
    "statement",
    "observes",
    "scope_key",
    "plain",
    "observed_us",
    "valid_from_us",
    "valid_to_us",
)
