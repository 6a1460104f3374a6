"""The Claim record's Avro body read straight into a `LeanClaim`: the decode stage's fast path.

Where it sits: `WireCodec.decode_claim` frames, `codec.decode_claim` hands a body written with
the current Claim schema to `read_claim` here, and the claim goes on to admission. The reader is
written for one layout of the schema, `LAYOUT`; codec compares it with the packaged schema's
`layout` before the first read, and reads every claim with fastavro (saying so) should a changed
schema not match it: slower, never misread.

fastavro stays the reference, and the judge of bad bytes: whatever this reader does not read
cleanly (a short body, invalid UTF-8, an enum or union index out of range, a varint longer than
ten bytes, a negative length, an instant beyond datetime's range) makes `read_claim` return
None, and codec reads the body again with fastavro, whose claim or error is then the answer, so
a record is dead-lettered with the same reason either way. Bytes read cleanly give what fastavro
gives (tests/wire/test_claim_reader.py's `test_the_reader_reads_every_claim_as_fastavro` holds
the two equal), with no dict per record and no interpretation of the schema per field. Bytes
after the record are ignored, as fastavro ignores them.

No fastavro or pydantic import here: build_backend/compiled.py lists this module for mypyc, and
interpreted it is the same code.
"""

from __future__ import annotations

import struct
from sys import intern
from typing import Any

from streams.core.records.contracts import (
    ClaimStatus,
    Money,
    SourceClass,
    constructed,
)
from streams.core.records.instants import checked_micros
from streams.core.records.lean import NO_ATTRIBUTES, LeanClaim

STATUS_SYMBOLS = ("present", "not_found", "forbidden", "unavailable", "error")
SOURCE_CLASS_SYMBOLS = ("observation", "user", "inference")
_TEXT = "[null,string]"
LAYOUT = (
    ("claim_id", "string"),
    ("subject", "string"),
    ("field", "string"),
    ("status", f"enum({','.join(STATUS_SYMBOLS)})"),
    ("value", "[null,boolean,long,double,string,record(amount_minor:long,currency:string)]"),
    ("unit", _TEXT),
    ("source", "string"),
    ("replica", _TEXT),
    ("source_class", f"enum({','.join(SOURCE_CLASS_SYMBOLS)})"),
    ("observed_at", "long/timestamp-micros"),
    ("valid_from", "[null,long/timestamp-micros]"),
    ("valid_to", "[null,long/timestamp-micros]"),
    ("epoch", "[null,long]"),
    ("lineage", _TEXT),
    ("scope", _TEXT),
    ("confidence", "[null,double]"),
    ("trace_id", _TEXT),
    ("producer", _TEXT),
    ("attributes", "map(string)"),
)
"""The Claim schema's fields, each with the signature (`signature`) of its type, in the order
`read_claim` reads them."""

_STATUSES = tuple(ClaimStatus(symbol) for symbol in STATUS_SYMBOLS)
_SOURCE_CLASSES = tuple(SourceClass(symbol) for symbol in SOURCE_CLASS_SYMBOLS)
_DOUBLE = struct.Struct("<d")
_LONG_MASK = (1 << 64) - 1
_LONGEST_SHIFT = 63  # a long's tenth byte starts at bit 63: an eleventh is refused


def layout(record: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """A record schema (named types inlined) as its fields' names and type signatures."""
    return tuple((field["name"], signature(field["type"])) for field in record["fields"])


def signature(schema: Any) -> str:
    """What of an Avro type decides how its binary form is read, as text (names, docs and
    defaults left out)."""
    if isinstance(schema, list):
        return "[" + ",".join(signature(branch) for branch in schema) + "]"
    if isinstance(schema, str):
        return schema
    kind = schema["type"]
    if kind == "enum":
        return "enum(" + ",".join(schema["symbols"]) + ")"
    if kind == "record":
        fields = layout(schema)
        return "record(" + ",".join(f"{name}:{type_}" for name, type_ in fields) + ")"
    if kind == "map":
        return "map(" + signature(schema["values"]) + ")"
    if kind == "array":
        return "array(" + signature(schema["items"]) + ")"
    if isinstance(kind, str) and "logicalType" in schema:
        return f"{kind}/{schema['logicalType']}"
    return signature(kind)


def read_claim(body: bytes) -> LeanClaim | None:
    """The claim of a Claim body in the current schema, or None where fastavro must judge it."""
    try:
        return _Body(body).claim()
    except (IndexError, ValueError, OverflowError, struct.error):
        # Out of the body, bad UTF-8 or a refused encoding, an instant datetime cannot hold.
        return None


class _Body:
    """A cursor over one record's bytes."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def claim(self) -> LeanClaim | None:
        # The names claims repeat (a field, a source, a unit) are interned, as the journal's
        # decoder interns them: a key's state keeps its claims decoded, and each name is then
        # held once in memory, not once a claim. Not the subject: the interned strings' table
        # would hold every subject the worker holds, and its lookups cost a claim about 1 µs
        # more to decode.
        claim_id = self.string()
        subject = self.string()
        field = intern(self.string())
        status = _STATUSES[self.index(5)]
        value = self.value()
        unit = self.name()
        source = intern(self.string())
        replica = self.name()
        source_class = _SOURCE_CLASSES[self.index(3)]
        observed_us = self.instant()
        valid_from_us = self.instant() if self.index(2) else None
        valid_to_us = self.instant() if self.index(2) else None
        epoch = self.long() if self.index(2) else None
        lineage = self.name()
        scope = self.text()
        confidence = self.double() if self.index(2) else None
        trace_id = self.text()
        producer = self.name()
        attributes = self.attributes()
        return LeanClaim(
            claim_id,
            subject,
            field,
            status,
            value,
            unit,
            source,
            replica,
            source_class,
            epoch,
            lineage,
            scope,
            confidence,
            trace_id,
            producer,
            attributes,
            observed_us,
            valid_from_us,
            valid_to_us,
        )

    def long(self) -> int:
        """A zigzag varint, wrapped to 64 bits as fastavro's reader wraps it."""
        data = self.data
        pos = self.pos
        byte = data[pos]
        pos += 1
        if byte < 0x80:
            self.pos = pos
            return (byte >> 1) ^ -(byte & 1)
        n = byte & 0x7F
        shift = 7
        while byte & 0x80:
            if shift > _LONGEST_SHIFT:
                raise ValueError("varint longer than ten bytes")
            byte = data[pos]
            pos += 1
            n |= (byte & 0x7F) << shift
            shift += 7
        self.pos = pos
        n &= _LONG_MASK
        return (n >> 1) ^ -(n & 1)

    def instant(self) -> int:
        """A timestamp-micros: a long that a datetime can hold (OverflowError if not, as
        fastavro's reader raises for it)."""
        return checked_micros(self.long())

    def index(self, count: int) -> int:
        """An enum symbol's or a union branch's index, refused outside 0..count-1 (fastavro
        would index its list with it, negatives included)."""
        index = self.long()
        if not 0 <= index < count:
            raise ValueError(f"index {index} of {count}")
        return index

    def string(self) -> str:
        size = self.long()
        start = self.pos
        end = start + size
        if size < 0 or end > len(self.data):
            raise ValueError(f"string of {size} bytes at {start}")
        self.pos = end
        return self.data[start:end].decode()

    def text(self) -> str | None:
        """A ["null", "string"] union."""
        return self.string() if self.index(2) else None

    def name(self) -> str | None:
        """A ["null", "string"] union whose strings repeat across claims: interned."""
        return intern(self.string()) if self.index(2) else None

    def double(self) -> float:
        pos = self.pos
        number: float = _DOUBLE.unpack_from(self.data, pos)[0]
        self.pos = pos + 8
        return number

    def value(self) -> Any:
        branch = self.index(6)
        if branch == 0:
            return None
        if branch == 1:
            pos = self.pos
            flag = self.data[pos] != 0  # fastavro reads any byte but 0 as true
            self.pos = pos + 1
            return flag
        if branch == 2:
            return self.long()
        if branch == 3:
            return self.double()
        if branch == 4:
            return self.string()
        amount = self.long()
        return constructed(Money, {"amount_minor": amount, "currency": self.string()})

    def attributes(self) -> dict[str, str]:
        """A map of strings: blocks of entries up to an empty one; a negative count is followed
        by the block's size in bytes, which is not needed."""
        count = self.long()
        if count == 0:
            return NO_ATTRIBUTES
        entries: dict[str, str] = {}
        while count != 0:
            if count < 0:
                count = -count
                self.long()
            for _ in range(count):
                key = self.string()
                entries[key] = self.string()
            count = self.long()
        return entries
