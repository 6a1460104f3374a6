"""The compiled Avro writer writes what fastavro writes, for data generated from every schema."""

from __future__ import annotations

import io
from datetime import UTC
from typing import Any

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.records.contracts import RECORD_MODELS
from streams.wire.avro_writer import compile_writer, long_bytes
from streams.wire.codec import expanded_schema, parsed_schema
from tests.support.strategies import INT64

_PRIMITIVE_DATA: dict[str, st.SearchStrategy[Any]] = {
    "null": st.none(),
    "boolean": st.booleans(),
    "int": st.integers(-(2**31), 2**31 - 1),
    "long": INT64,
    "float": st.floats(width=32),
    "double": st.floats(),
    "string": st.text(max_size=12),
    "bytes": st.binary(max_size=12),
}


class _Data:
    """A strategy for data of an Avro schema, named types resolved as the writer resolves them."""

    def __init__(self) -> None:
        self.named: dict[str, st.SearchStrategy[Any]] = {}

    def of(self, schema: Any, namespace: str) -> st.SearchStrategy[Any]:
        if isinstance(schema, str):
            for name in (schema, f"{namespace}.{schema}"):
                if name in self.named:
                    return self.named[name]
            return _PRIMITIVE_DATA[schema]
        if isinstance(schema, list):
            return st.one_of([self.of(branch, namespace) for branch in schema])
        kind = schema["type"]
        if schema.get("logicalType") == "timestamp-micros":
            # to_avro hands over microseconds; fastavro also takes aware datetimes.
            return _PRIMITIVE_DATA["long"] | st.datetimes(timezones=st.just(UTC))
        if kind in ("record", "enum"):
            name = schema["name"]
            space = name.rpartition(".")[0] if "." in name else schema.get("namespace", namespace)
            full_name = name if "." in name else f"{space}.{name}"
            if kind == "enum":
                self.named[full_name] = st.sampled_from(schema["symbols"])
            else:
                fields = {}
                for field in schema["fields"]:
                    fields[field["name"]] = self.of(field["type"], space)
                self.named[full_name] = st.fixed_dictionaries(fields)
            return self.named[full_name]
        if kind == "array":
            return st.lists(self.of(schema["items"], namespace), max_size=3)
        if kind == "map":
            return st.dictionaries(
                _PRIMITIVE_DATA["string"], self.of(schema["values"], namespace), max_size=3
            )
        return self.of(kind, namespace)


def _fastavro(name: str, datum: Any) -> bytes:
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, parsed_schema(name), datum)
    return buffer.getvalue()


@pytest.mark.parametrize("name", sorted(RECORD_MODELS))
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_compiled_writer_writes_fastavros_bytes_for_every_schema(
    name: str, data: st.DataObject
) -> None:
    schema = expanded_schema(name)
    datum = data.draw(_Data().of(schema, ""))
    assert compile_writer(schema)(datum) == _fastavro(name, datum)


_UNION_DATA = st.one_of(
    st.none(),
    st.booleans(),
    INT64,
    st.integers(2**63, 2**64),  # beyond a long: written as a double
    st.floats(),
    st.text(max_size=4),
    st.fixed_dictionaries({"amount_minor": st.integers(-5, 5), "currency": st.just("USD")}),
)


@settings(max_examples=150, deadline=None)
@given(values=st.lists(_UNION_DATA, min_size=2, max_size=12))
def test_one_writer_writes_fastavros_bytes_for_a_run_of_values_of_mixed_types(
    values: list[Any],
) -> None:
    """A union remembers by type the branch a datum takes: a writer used for many values, of
    types seen before and not, writes each as fastavro does."""
    schema = expanded_schema("Decision")
    value_type = next(f["type"] for f in schema["fields"] if f["name"] == "value")
    write = compile_writer(value_type)
    for value in values:
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, fastavro.parse_schema(value_type), value)
        assert write(value) == buffer.getvalue(), value


@settings(max_examples=300, deadline=None)
@given(number=INT64)
def test_longs_are_zigzag_varints_as_fastavro_writes_them(number: int) -> None:
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, "long", number)
    assert long_bytes(number) == buffer.getvalue()


def test_a_long_beyond_64_bits_is_refused_like_fastavro_refuses_it() -> None:
    with pytest.raises(OverflowError):
        long_bytes(2**63)
    with pytest.raises((OverflowError, ValueError)):
        _fastavro("Money", {"amount_minor": 2**63, "currency": "USD"})
