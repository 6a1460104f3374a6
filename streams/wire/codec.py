"""Avro at the edge: the packaged schemas (schemas/) encode and decode the core's records.

In file order: the schemas, expanded and parsed (`expanded_schema`, `parsed_schema`); a record
to Avro (`to_avro`, `encode`, via the compiled writers of streams.wire.avro_writer); Avro back to a
record (`decode_dict`, `decode`); and the claim's fast path, Avro to a `LeanClaim` without
pydantic (`decode_claim`: streams.wire.claim_reader's reader, fastavro's in `fastavro_claim` and
`claim_from_avro`), which falls back to the contract's validation.
The wire framing around these bodies is streams.wire.registry's. fastavro's errors are translated
into CodecError here, so the rest of the code sees one error tree.
"""

from __future__ import annotations

import io
import logging
import struct
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any, TypeVar, get_args

import fastavro
from pydantic import BaseModel, ValidationError

from streams.core.admission.intake import parse_claim
from streams.core.records.contracts import (
    CLAIM_FIELDS,
    ClaimStatus,
    Money,
    RejectReason,
    SourceClass,
    constructed,
    instant,
    micros,
)
from streams.core.records.errors import CodecError
from streams.core.records.lean import LeanClaim, lean_claim
from streams.packaged import schema_dir
from streams.wire.avro_writer import compile_writer
from streams.wire.claim_reader import LAYOUT, layout, read_claim

log = logging.getLogger(__name__)

NAMESPACE = "claimstream"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
M = TypeVar("M", bound=BaseModel)


@cache
def expanded_schema(name: str) -> dict[str, Any]:
    """Schema of record `name` (e.g. "Claim") with the named types of sibling files inlined."""
    return load_expanded(schema_dir() / f"{NAMESPACE}.{name}.avsc")


def load_expanded(path: Path) -> dict[str, Any]:
    """One .avsc file with the named types it references (from sibling files) inlined."""
    try:
        schema = fastavro.schema.load_schema(str(path), _write_hint=False)
    except (OSError, fastavro.schema.SchemaParseException, ValueError) as exc:
        raise CodecError(RejectReason.UNKNOWN_SCHEMA, f"cannot load schema {path}: {exc}") from exc
    if not isinstance(schema, dict):
        raise CodecError(RejectReason.UNKNOWN_SCHEMA, f"{path} does not define a named type")
    return schema


@cache
def parsed_schema(name: str) -> Any:
    return fastavro.parse_schema(expanded_schema(name))


def record_name(model: type[BaseModel]) -> str:
    return model.__name__


def to_avro(record: BaseModel) -> dict[str, Any]:
    """The record's fields as fastavro writes them, read from the model's own `__dict__`, with
    only the fields that may hold models (a Money value, a decision's evidence) converted: a
    decision's records cost 8 µs through `model_dump` or a walk over every value. Enums are
    StrEnums, and times are given as the microseconds since the epoch that fastavro would
    compute from them (timestamp-micros), as its conversion costs 2 µs a time."""
    fields: dict[str, Any] = vars(record)
    nested, times = _conversions(type(record))
    if not nested and not times:
        return fields  # fastavro only reads it
    fields = dict(fields)
    for name in times:
        moment = fields[name]
        if moment is not None:
            fields[name] = (moment - _EPOCH) // _MICROSECOND
    for name in nested:
        value = fields[name]
        if isinstance(value, BaseModel):
            fields[name] = to_avro(value)
        elif isinstance(value, tuple | list):
            fields[name] = [to_avro(v) if isinstance(v, BaseModel) else v for v in value]
    return fields


@cache
def _conversions(model: type[BaseModel]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The fields whose annotation names a model (alone, in a union or in a sequence), and the
    fields holding times."""
    fields = model.model_fields.items()
    return (
        tuple(name for name, info in fields if _names(info.annotation, BaseModel)),
        tuple(name for name, info in fields if _names(info.annotation, datetime)),
    )


def _names(annotation: Any, kind: type) -> bool:
    if isinstance(annotation, type) and issubclass(annotation, kind):
        return True
    return any(_names(arg, kind) for arg in get_args(annotation))


@cache
def _writer(name: str) -> Callable[[Any], bytes]:
    return compile_writer(expanded_schema(name))


def encode(record: BaseModel) -> bytes:
    """The Avro body (no framing) of a core record, written as fastavro would write it."""
    try:
        return _writer(record_name(type(record)))(to_avro(record))
    except (ValueError, TypeError, OverflowError, AttributeError, struct.error) as exc:
        raise CodecError(
            RejectReason.MALFORMED, f"cannot encode {type(record).__name__}: {exc}"
        ) from exc


def decode_dict(name: str, body: bytes, writer_schema: Any | None = None) -> dict[str, Any]:
    """Decode an Avro body written with `writer_schema` (default: the current one) into a dict
    shaped by the current schema (schema resolution applies defaults for added fields)."""
    reader = parsed_schema(name)
    return _read(name, body, writer_schema or reader, reader if writer_schema else None)


def _read(name: str, body: bytes, writer: Any, reader: Any | None) -> dict[str, Any]:
    try:
        data = fastavro.schemaless_reader(io.BytesIO(body), writer, reader)
    except Exception as exc:  # fastavro raises anything from EOFError to UnicodeDecodeError
        raise _not_avro(name, exc) from exc
    if not isinstance(data, dict):
        raise CodecError(RejectReason.MALFORMED, f"{name} body did not decode to a record")
    return data


def _not_avro(name: str, exc: Exception) -> CodecError:
    return CodecError(
        RejectReason.MALFORMED, f"{name} body is not valid Avro: {type(exc).__name__}: {exc}"
    )


def decode(model: type[M], body: bytes, writer_schema: Any | None = None) -> M:
    data = decode_dict(record_name(model), body, writer_schema)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise CodecError(RejectReason.MALFORMED, f"{model.__name__}: {exc}") from exc


# -- claims without pydantic ------------------------------------------------------------------
# A claim is decoded on every record; pydantic's validation of the Avro dict costs about as much
# as the Avro read itself. Avro already typed every field, so the hot path checks the types
# fastavro produces and builds a LeanClaim from them; anything else takes the validating path,
# which raises exactly as `decode` does (tests/wire/test_codec_lean.py holds the two paths equal).
# Written with the current schema, a claim is read with its timestamps as the longs they are
# on the wire: fastavro's logical-type conversion costs more than building the datetimes here,
# and the microseconds are what admission compares.


_STATUSES = {status.value: status for status in ClaimStatus}
_SOURCE_CLASSES = {kind.value: kind for kind in SourceClass}
_PLAIN_VALUES = frozenset({type(None), bool, int, float, str})
_MONEY_FIELDS = frozenset(Money.model_fields)
_CLAIM_FIELDS = frozenset(CLAIM_FIELDS)


@cache
def _raw_claim_schema() -> Any:
    """The current Claim schema with its timestamps read as plain longs (timestamp-micros)."""

    def raw(schema: Any) -> Any:
        if isinstance(schema, list):
            return [raw(branch) for branch in schema]
        if isinstance(schema, dict):
            return {k: raw(v) for k, v in schema.items() if k != "logicalType"}
        return schema

    return fastavro.parse_schema(raw(expanded_schema("Claim")))


def decode_claim(body: bytes, writer_schema: Any | None = None) -> LeanClaim:
    """`decode(Claim, body, writer_schema)` without pydantic (the same claim, or the same
    error). A body in the current schema (`writer_schema` None or the current parsed schema) is
    read by streams.wire.claim_reader, and by fastavro (`fastavro_claim`) only where that reader
    defers to it; other writer schemas are resolved by fastavro."""
    if writer_schema is not None and writer_schema is not parsed_schema("Claim"):
        return claim_from_avro(decode_dict("Claim", body, writer_schema))
    return _claim_reader()(body) or fastavro_claim(body)


@cache
def _claim_reader() -> Callable[[bytes], LeanClaim | None]:
    """`read_claim` when the Claim schema is laid out as it reads it; otherwise (said once)
    a reader that defers every body to fastavro: still right, only slower."""
    found = layout(expanded_schema("Claim"))
    if found == LAYOUT:
        return read_claim
    log.warning(
        "the Claim schema's fields are %s; streams/wire/claim_reader.py reads %s: claims are read "
        "by fastavro until the reader is changed with the schema",
        list(found),
        list(LAYOUT),
    )
    return _deferred


def _deferred(body: bytes) -> None:
    return None


def fastavro_claim(body: bytes) -> LeanClaim:
    """The claim of a body in the current schema as fastavro reads it, with its timestamps as
    the longs they are on the wire: the reference `read_claim` is held to."""
    data = _read("Claim", body, _raw_claim_schema(), None)
    observed, start, end = data["observed_at"], data["valid_from"], data["valid_to"]
    try:  # fastavro's own conversion, raising where it would
        data["observed_at"] = instant(observed)
        if start is not None:
            data["valid_from"] = instant(start)
        if end is not None:
            data["valid_to"] = instant(end)
    except OverflowError as exc:
        raise _not_avro("Claim", exc) from exc
    return _lean(data, observed, start, end) or LeanClaim.of(parse_claim(data))


def claim_from_avro(data: dict[str, Any]) -> LeanClaim:
    """The claim of a decoded Avro record (timestamps as datetimes; `data` is consumed): built
    from the checked fields when they have the types Avro gives them, else validated by the
    contract's own `parse_claim` (which raises for it)."""
    observed, start, end = data.get("observed_at"), data.get("valid_from"), data.get("valid_to")
    if (
        type(observed) is datetime
        and observed.tzinfo is UTC
        and (start is None or (type(start) is datetime and start.tzinfo is UTC))
        and (end is None or (type(end) is datetime and end.tzinfo is UTC))
    ):
        lean = _lean(
            data,
            micros(observed),
            None if start is None else micros(start),
            None if end is None else micros(end),
        )
        if lean is not None:
            return lean
    return LeanClaim.of(parse_claim(data))


def _lean(
    data: dict[str, Any], observed_us: int, from_us: int | None, to_us: int | None
) -> LeanClaim | None:
    """The LeanClaim of fields whose instants are aware UTC datetimes, or None where another
    field is not of the type Avro gives it."""
    if data.keys() == _CLAIM_FIELDS and _avro_typed(data):
        status, source_class = data["status"], data["source_class"]
        # Looked up only as strings: a dict lookup of an unhashable value raises.
        status = _STATUSES.get(status) if type(status) is str else None
        source_class = _SOURCE_CLASSES.get(source_class) if type(source_class) is str else None
        value = _lean_value(data["value"])
        if status is not None and source_class is not None and value is not _REFUSED:
            data["status"], data["source_class"], data["value"] = status, source_class, value
            return lean_claim(data, observed_us, from_us, to_us)
    return None


def _avro_typed(d: dict[str, Any]) -> bool:
    """Whether every field but the instants, status, source_class and value has the type the
    model holds. One expression: a check per field as a function call cost more than pydantic's
    validation."""
    attributes = d["attributes"]
    return (
        type(d["claim_id"]) is str
        and type(d["subject"]) is str
        and type(d["field"]) is str
        and type(d["source"]) is str
        and (d["unit"] is None or type(d["unit"]) is str)
        and (d["replica"] is None or type(d["replica"]) is str)
        and (d["lineage"] is None or type(d["lineage"]) is str)
        and (d["scope"] is None or type(d["scope"]) is str)
        and (d["trace_id"] is None or type(d["trace_id"]) is str)
        and (d["producer"] is None or type(d["producer"]) is str)
        and (d["epoch"] is None or type(d["epoch"]) is int)
        and (d["confidence"] is None or type(d["confidence"]) is float)
        and type(attributes) is dict
        and (
            not attributes or all(type(k) is str and type(v) is str for k, v in attributes.items())
        )
    )


_REFUSED = object()


def _lean_value(value: Any) -> Any:
    if type(value) in _PLAIN_VALUES:
        return value
    if (
        type(value) is dict
        and value.keys() == _MONEY_FIELDS
        and type(value["amount_minor"]) is int
        and type(value["currency"]) is str
    ):
        return constructed(Money, value)
    return _REFUSED
