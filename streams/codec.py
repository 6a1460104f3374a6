"""Avro at the edge: the packaged schemas (schemas/) encode and decode the core's records.

fastavro's errors are translated into CodecError here, so the rest of the code sees one error tree.
"""

from __future__ import annotations

import io
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

import fastavro
from pydantic import BaseModel, ValidationError

from streams.core.contracts import RejectReason
from streams.core.errors import CodecError
from streams.packaged import schema_dir

NAMESPACE = "claimstream"
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
    data: dict[str, Any] = record.model_dump(mode="python")
    return data


def encode(record: BaseModel) -> bytes:
    """The Avro body (no framing) of a core record."""
    buffer = io.BytesIO()
    try:
        fastavro.schemaless_writer(
            buffer, parsed_schema(record_name(type(record))), to_avro(record)
        )
    except (ValueError, TypeError, OverflowError) as exc:
        raise CodecError(
            RejectReason.MALFORMED, f"cannot encode {type(record).__name__}: {exc}"
        ) from exc
    return buffer.getvalue()


def decode_dict(name: str, body: bytes, writer_schema: Any | None = None) -> dict[str, Any]:
    """Decode an Avro body written with `writer_schema` (default: the current one) into a dict
    shaped by the current schema (schema resolution applies defaults for added fields)."""
    reader = parsed_schema(name)
    try:
        data = fastavro.schemaless_reader(
            io.BytesIO(body), writer_schema or reader, reader if writer_schema else None
        )
    except Exception as exc:  # fastavro raises anything from EOFError to UnicodeDecodeError
        raise CodecError(
            RejectReason.MALFORMED, f"{name} body is not valid Avro: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(data, dict):
        raise CodecError(RejectReason.MALFORMED, f"{name} body did not decode to a record")
    return data


def decode(model: type[M], body: bytes, writer_schema: Any | None = None) -> M:
    data = decode_dict(record_name(model), body, writer_schema)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise CodecError(RejectReason.MALFORMED, f"{model.__name__}: {exc}") from exc
