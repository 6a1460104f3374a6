"""Avro bodies written by writers compiled once from the schemas in schemas/.

fastavro's writer interprets the schema for every record: for a decision with two pieces of
evidence that is about 40 µs, 2 µs a timestamp and most of a microsecond a union or an enum. A
writer compiled from the same schema (a closure per field, the union branches and enum indexes
worked out once) writes the same bytes in about half the time. fastavro stays the reader and
the reference: tests/wire/test_avro_writer.py holds the bytes equal to fastavro's for data
generated from every schema in schemas/.

Only what the schemas use is compiled (records, enums, arrays, maps, unions, the primitives and
timestamp-micros); anything else is refused when compiling, not when writing. `record_fields`
gives a record's compiled field writers, for writers that assemble a record from parts
(streams.wire.decision_bytes).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

Writer = Callable[[bytearray, Any], None]
Check = Callable[[Any], bool]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_LONG = (-(2**63), 2**63 - 1)
_INT = (-(2**31), 2**31 - 1)
_DOUBLE = struct.Struct("<d").pack
_FLOAT = struct.Struct("<f").pack


def compile_writer(schema: Any) -> Callable[[Any], bytes]:
    """The Avro body writer of `schema` (a schema as loaded from schemas/, named types inlined
    where first used): `datum` as fastavro would take it, in the bytes fastavro would write."""
    write = _Compiler().compile(schema, "")

    def written(datum: Any) -> bytes:
        out = bytearray()
        write(out, datum)
        return bytes(out)

    return written


Fields = list[tuple[str, Any, Writer]]
"""A record's fields in schema order: name, default, and the writer of its value."""


def record_fields(schema: Any) -> dict[str, Fields]:
    """The fields of every record in `schema`, by full name, compiled as `compile_writer`
    compiles them (named types resolved where the schema first defines them): for writers that
    assemble a record from parts written apart."""
    compiler = _Compiler()
    compiler.compile(schema, "")
    return compiler.records


def _groups(number: int) -> bytes:
    # A list of ints then bytes(): 40% faster than appending to a bytearray.
    groups = []
    while number >> 7:
        groups.append((number & 0x7F) | 0x80)
        number >>= 7
    groups.append(number)
    return bytes(groups)


# The groups above the lowest three of recent large numbers: timestamps (decided_at, observed_at)
# share them for seconds at a time. Bounded: cleared when full.
_HIGH_GROUPS: dict[int, bytes] = {}
_HIGH_GROUPS_KEPT = 4096


def _varint(number: int) -> bytes:
    """A non-negative int as a base-128 varint, low groups first."""
    high = number >> 21
    if not high:
        return _groups(number)
    rest = _HIGH_GROUPS.get(high)
    if rest is None:
        if len(_HIGH_GROUPS) >= _HIGH_GROUPS_KEPT:
            _HIGH_GROUPS.clear()
        rest = _HIGH_GROUPS[high] = _groups(high)
    low = ((number & 0x7F) | 0x80, (number >> 7 & 0x7F) | 0x80, (number >> 14 & 0x7F) | 0x80)
    return bytes(low) + rest


_SMALL = {number: _varint((number << 1) ^ (number >> 63)) for number in range(-64, 64)}


def long_bytes(number: int) -> bytes:
    """A long as Avro writes it: zig-zag, then a base-128 varint."""
    small = _SMALL.get(number)
    if small is not None:
        return small
    if not _LONG[0] <= number <= _LONG[1]:
        raise OverflowError(f"{number} is outside Avro's 64-bit long")
    return _varint((number << 1) ^ (number >> 63))  # zig-zag


def _null(out: bytearray, datum: Any) -> None:
    if datum is not None:
        raise TypeError(f"{datum!r} is not null")


def _boolean(out: bytearray, datum: Any) -> None:
    out += b"\x01" if datum else b"\x00"


def _long(out: bytearray, datum: Any) -> None:
    out += long_bytes(datum)


def _double(out: bytearray, datum: Any) -> None:
    out += _DOUBLE(datum)


def _float(out: bytearray, datum: Any) -> None:
    out += _FLOAT(datum)


def _string(out: bytearray, datum: Any) -> None:
    encoded = datum.encode()
    out += long_bytes(len(encoded))
    out += encoded


def _bytes(out: bytearray, datum: Any) -> None:
    out += long_bytes(len(datum))
    out += datum


def _timestamp_micros(out: bytearray, datum: Any) -> None:
    """An int as given (to_avro passes microseconds), a datetime converted as fastavro does."""
    if isinstance(datum, datetime):
        datum = (datum - _EPOCH) // _MICROSECOND
    out += long_bytes(datum)


_PRIMITIVES: dict[str, Writer] = {
    "null": _null,
    "boolean": _boolean,
    "int": _long,
    "long": _long,
    "float": _float,
    "double": _double,
    "string": _string,
    "bytes": _bytes,
}


def _integer_in(bounds: tuple[int, int]) -> Check:
    low, high = bounds
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and low <= v <= high


# Which union branch a datum takes: the first whose check passes, as fastavro validates them.
_PRIMITIVE_CHECKS: dict[str, Check] = {
    "null": lambda v: v is None,
    "boolean": lambda v: isinstance(v, bool),
    "int": _integer_in(_INT),
    "long": _integer_in(_LONG),
    "float": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "double": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "string": lambda v: isinstance(v, str),
    "bytes": lambda v: isinstance(v, bytes | bytearray),
}
# For each check, the types of datum for which its answer depends on the value, not the type
# alone (an int's range): a union remembers by type which branch a datum of any other type
# leads to. A check not listed depends on the value for every type.
_VALUE_DEPENDENT: dict[Check, tuple[type, ...]] = {
    _PRIMITIVE_CHECKS[kind]: (int,) if kind in ("int", "long") else () for kind in _PRIMITIVE_CHECKS
}


class _Compiler:
    def __init__(self) -> None:
        self.named: dict[str, tuple[Writer, Check]] = {}
        self.records: dict[str, Fields] = {}
        self.value_dependent = dict(_VALUE_DEPENDENT)

    def compile(self, schema: Any, namespace: str) -> Writer:
        return self._compiled(schema, namespace)[0]

    def _compiled(self, schema: Any, namespace: str) -> tuple[Writer, Check]:
        if isinstance(schema, str):
            known = self.named.get(schema) or self.named.get(f"{namespace}.{schema}")
            if known is not None:
                return known
            if schema in _PRIMITIVES:
                return _PRIMITIVES[schema], _PRIMITIVE_CHECKS[schema]
            raise ValueError(f"unknown Avro type {schema!r}")
        if isinstance(schema, list):
            return self._union([self._compiled(branch, namespace) for branch in schema])
        kind = schema["type"]
        if schema.get("logicalType") == "timestamp-micros" and kind == "long":
            return (
                _timestamp_micros,
                self._depends(
                    lambda v: isinstance(v, datetime) or _PRIMITIVE_CHECKS["long"](v), int
                ),
            )
        if schema.get("logicalType") is not None:
            raise ValueError(f"logical type {schema['logicalType']!r} is not compiled")
        if kind == "record":
            return self._record(schema, namespace)
        if kind == "enum":
            return self._enum(schema, namespace)
        if kind == "array":
            return self._array(schema, namespace)
        if kind == "map":
            return self._map(schema, namespace)
        return self._compiled(kind, namespace)

    def _full_name(self, schema: dict[str, Any], namespace: str) -> tuple[str, str]:
        name: str = schema["name"]
        if "." in name:
            return name, name.rpartition(".")[0]
        space = schema.get("namespace", namespace)
        return (f"{space}.{name}" if space else name), space

    def _record(self, schema: dict[str, Any], namespace: str) -> tuple[Writer, Check]:
        full_name, space = self._full_name(schema, namespace)
        fields: Fields = []
        self.records[full_name] = fields

        def record(out: bytearray, datum: Any) -> None:
            for name, default, write in fields:
                write(out, datum.get(name, default))

        self.named[full_name] = (record, self._depends(lambda v: isinstance(v, dict)))
        for field in schema["fields"]:
            fields.append((field["name"], field.get("default"), self.compile(field["type"], space)))
        return self.named[full_name]

    def _enum(self, schema: dict[str, Any], namespace: str) -> tuple[Writer, Check]:
        full_name, _ = self._full_name(schema, namespace)
        symbols: list[str] = schema["symbols"]
        indexes = {symbol: long_bytes(index) for index, symbol in enumerate(symbols)}

        def enum(out: bytearray, datum: Any) -> None:
            index = indexes.get(datum)
            if index is None:
                raise ValueError(f"{datum!r} is not a symbol of {full_name}")
            out += index

        self.named[full_name] = (
            enum,
            self._depends(lambda v: isinstance(v, str) and v in indexes, str),
        )
        return self.named[full_name]

    def _array(self, schema: dict[str, Any], namespace: str) -> tuple[Writer, Check]:
        write = self.compile(schema["items"], namespace)

        def array(out: bytearray, datum: Any) -> None:
            if datum:
                out += long_bytes(len(datum))
                for item in datum:
                    write(out, item)
            out += b"\x00"

        return array, self._depends(lambda v: isinstance(v, list | tuple))

    def _map(self, schema: dict[str, Any], namespace: str) -> tuple[Writer, Check]:
        write = self.compile(schema["values"], namespace)

        def mapping(out: bytearray, datum: Any) -> None:
            if datum:
                out += long_bytes(len(datum))
                for key, value in datum.items():
                    _string(out, key)
                    write(out, value)
            out += b"\x00"

        return mapping, self._depends(lambda v: isinstance(v, dict))

    def _depends(self, check: Check, *on_value_of: type) -> Check:
        """`check`, noted as depending on the value only for datums of the types given."""
        self.value_dependent[check] = on_value_of
        return check

    def _union(self, branches: list[tuple[Writer, Check]]) -> tuple[Writer, Check]:
        indexed = [(long_bytes(i), write, check) for i, (write, check) in enumerate(branches)]
        if len(indexed) == 2 and branches[0][0] is _null:
            # ["null", T], most unions: no branch search.
            present, write_present, check_present = indexed[1]

            def optional(out: bytearray, datum: Any) -> None:
                if datum is None:
                    out += b"\x00"
                else:
                    out += present
                    write_present(out, datum)

            return optional, lambda v: v is None or check_present(v)

        # A datum whose type alone decides every check up to the branch it takes: any datum of
        # that type takes that branch, so the search is skipped for the type from then on.
        dependent = [self.value_dependent.get(check, (object,)) for _, _, check in indexed]
        known: dict[type, tuple[bytes, Writer]] = {}
        searched: set[type] = set()  # the types for which the search stays

        def union(out: bytearray, datum: Any) -> None:
            kind = type(datum)
            branch = known.get(kind)
            if branch is not None:
                out += branch[0]
                branch[1](out, datum)
                return
            for position, (index, write, check) in enumerate(indexed):
                if check(datum):
                    if kind not in searched:
                        if any(issubclass(kind, dependent[p]) for p in range(position + 1)):
                            searched.add(kind)
                        else:
                            known[kind] = (index, write)
                    out += index
                    write(out, datum)
                    return
            raise ValueError(f"{datum!r} matches no branch of the union")

        return union, lambda v: any(check(v) for _, _, check in indexed)
