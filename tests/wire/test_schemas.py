"""schemas/ is the one source of truth: the pydantic models must mirror it, and it must evolve
compatibly (data written with an older version reads with the current one)."""

from __future__ import annotations

import io
import json
import types
import typing
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

import fastavro
import pytest
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType
from avro.schema import parse as parse_avro
from pydantic import BaseModel

from streams.core.records.contracts import RECORD_MODELS, Claim, Rejection
from streams.packaged import schema_dir
from streams.wire.codec import decode, encode, expanded_schema

HISTORY = Path(schema_dir()) / "history"
_PRIMITIVES = {
    "string": "string",
    "long": "int",
    "int": "int",
    "double": "float",
    "boolean": "bool",
    "bytes": "bytes",
}
_PY = {
    str: "string",
    int: "int",
    float: "float",
    bool: "bool",
    bytes: "bytes",
    datetime: "datetime",
}


def avro_shape(schema: Any) -> Any:
    if isinstance(schema, str):
        return _PRIMITIVES.get(schema, f"named:{schema.rsplit('.', 1)[-1]}")
    if isinstance(schema, list):
        members = [m for m in schema if m != "null"]
        inner = (
            avro_shape(members[0])
            if len(members) == 1
            else ("union", sorted(map(str, map(avro_shape, members))))
        )
        return ("optional", inner) if "null" in schema else inner
    kind = schema["type"]
    if schema.get("logicalType") == "timestamp-micros":
        return "datetime"
    if kind == "record":
        return f"named:{schema['name'].rsplit('.', 1)[-1]}"
    if kind == "enum":
        return ("enum", schema["name"].rsplit(".", 1)[-1], tuple(schema["symbols"]))
    if kind == "array":
        return ("array", avro_shape(schema["items"]))
    if kind == "map":
        return ("map", avro_shape(schema["values"]))
    return avro_shape(kind)


def python_shape(annotation: Any) -> Any:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return python_shape(typing.get_args(annotation)[0])
    if origin in (types.UnionType, typing.Union):
        args = typing.get_args(annotation)
        members = [a for a in args if a is not type(None)]
        inner = (
            python_shape(members[0])
            if len(members) == 1
            else ("union", sorted(map(str, map(python_shape, members))))
        )
        return ("optional", inner) if type(None) in args else inner
    if origin is tuple:
        return ("array", python_shape(typing.get_args(annotation)[0]))
    if origin is dict:
        return ("map", python_shape(typing.get_args(annotation)[1]))
    if isinstance(annotation, type) and issubclass(annotation, StrEnum):
        return ("enum", annotation.__name__, tuple(e.value for e in annotation))
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"named:{annotation.__name__}"
    return _PY[annotation]


def _named_enums(schema: Any, found: dict[str, Any]) -> None:
    if isinstance(schema, dict):
        if schema.get("type") == "enum":
            found[schema["name"].rsplit(".", 1)[-1]] = (
                "enum",
                schema["name"].rsplit(".", 1)[-1],
                tuple(schema["symbols"]),
            )
        for value in schema.values():
            _named_enums(value, found)
    elif isinstance(schema, list):
        for value in schema:
            _named_enums(value, found)


@pytest.mark.parametrize("name", sorted(RECORD_MODELS))
def test_pydantic_model_mirrors_the_avro_schema(name: str) -> None:
    schema = expanded_schema(name)
    enums: dict[str, Any] = {}
    _named_enums(schema, enums)
    model = RECORD_MODELS[name]
    avro_fields = {f["name"]: f for f in schema["fields"]}
    assert list(avro_fields) == list(model.model_fields), "same fields in the same order"
    for field_name, avro_field in avro_fields.items():
        info = model.model_fields[field_name]
        expected = avro_shape(avro_field["type"])
        # An enum defined earlier in the schema is referenced by name afterwards.
        if isinstance(expected, str) and expected.startswith("named:") and expected[6:] in enums:
            expected = enums[expected[6:]]
        if (
            isinstance(expected, tuple)
            and expected[0] == "optional"
            and isinstance(expected[1], str)
            and expected[1][6:] in enums
        ):
            expected = ("optional", enums[expected[1][6:]])
        assert python_shape(info.annotation) == expected, field_name
        assert ("default" in avro_field) == (not info.is_required()), f"{field_name} optionality"
        assert avro_field.get("doc"), f"{name}.{field_name} has no doc"


def test_every_schema_file_is_documented() -> None:
    for path in sorted(Path(schema_dir()).glob("*.avsc")):
        assert json.loads(path.read_text()).get("doc"), path.name


@pytest.mark.parametrize("old", sorted(HISTORY.glob("*.avsc")), ids=lambda p: p.name)
def test_current_schema_reads_every_published_version(old: Path) -> None:
    name = old.name.split(".")[1]
    current = parse_avro(json.dumps(expanded_schema(name)))
    writer = parse_avro(old.read_text())
    result = ReaderWriterCompatibilityChecker().get_compatibility(reader=current, writer=writer)
    assert result.compatibility is SchemaCompatibilityType.compatible, result.messages


def test_claim_written_with_version_1_reads_with_the_current_schema() -> None:
    v1 = fastavro.parse_schema(json.loads((HISTORY / "claimstream.Claim.v1.avsc").read_text()))
    old_record = {
        "claim_id": "c-1",
        "subject": "invoice:42",
        "field": "order.payment_status",
        "status": "present",
        "value": "paid",
        "unit": None,
        "source": "billing-api",
        "replica": "eu-1",
        "source_class": "observation",
        "observed_at": datetime(2026, 11, 29, 12, tzinfo=UTC),
        "valid_from": None,
        "valid_to": None,
        "epoch": 3,
        "lineage": None,
    }
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, v1, old_record)
    claim = decode(Claim, buffer.getvalue(), writer_schema=v1)
    assert claim.replica == "eu-1"
    assert claim.epoch == 3
    assert (claim.scope, claim.trace_id, claim.attributes) == (None, None, {})


def test_rejection_reasons_added_later_still_read_with_an_old_reader() -> None:
    old = fastavro.parse_schema(json.loads((HISTORY / "claimstream.Rejection.v1.avsc").read_text()))
    body = encode(Rejection(reason="unauthenticated", detail="x", rejected_at=datetime.now(UTC)))
    data = fastavro.schemaless_reader(
        io.BytesIO(body), fastavro.parse_schema(expanded_schema("Rejection")), old
    )
    assert data["reason"] == "malformed"  # the enum's declared default for unknown symbols
