"""The hand-written Claim reader (streams.wire.claim_reader) reads what fastavro reads: every field
to the bit and the type, every optional field present or absent, maps in any block layout, longs in
any valid encoding; and bad bytes reach the dead-letter topic with fastavro's reason and
message, as it defers them to fastavro."""

from __future__ import annotations

import re
import struct
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from streams.core.records.contracts import Money
from streams.core.records.errors import RejectedInput
from streams.core.records.lean import LEAN_FIELDS, LeanClaim
from streams.wire.claim_reader import LAYOUT, layout, read_claim
from streams.wire.codec import (
    _claim_reader,
    decode_claim,
    expanded_schema,
    fastavro_claim,
)
from tests.support.avro import avro_body

INT64 = (-(2**63), 2**63 - 1)
longs = st.integers(*INT64) | st.sampled_from([0, 1, -1, 63, 64, -64, -65, *INT64])
texts = st.text(max_size=16) | st.sampled_from(["", "paid", "é", "日本", "🦀", "a\x00b"])
optional_texts = st.none() | texts
values = st.one_of(
    st.none(),
    st.booleans(),
    longs,
    st.floats(),  # NaN and the infinities included: compared bit for bit
    texts,
    st.fixed_dictionaries({"amount_minor": longs, "currency": texts}),
)
DATETIMES = (-62135596800_000000, 253402300799_999999)  # years 1 to 9999 in microseconds
instants = longs | st.integers(*DATETIMES)
claims = st.fixed_dictionaries(
    {
        "claim_id": texts,
        "subject": texts,
        "field": texts,
        "status": st.sampled_from(["present", "not_found", "forbidden", "unavailable", "error"]),
        "value": values,
        "unit": optional_texts,
        "source": texts,
        "replica": optional_texts,
        "source_class": st.sampled_from(["observation", "user", "inference"]),
        "observed_at": instants,
        "valid_from": st.none() | instants,
        "valid_to": st.none() | instants,
        "epoch": st.none() | longs,
        "lineage": optional_texts,
        "scope": optional_texts,
        "confidence": st.none() | st.floats(),
        "trace_id": optional_texts,
        "producer": optional_texts,
        "attributes": st.dictionaries(texts, texts, max_size=4),
    }
)


def exact(value: object) -> object:
    """A value with its type, floats as their bits (NaN equals itself), maps in order."""
    if isinstance(value, float):
        return float, struct.pack("<d", value)
    if isinstance(value, datetime):
        return datetime, value, value.tzinfo
    if isinstance(value, Money):
        return Money, exact(value.amount_minor), value.currency
    if isinstance(value, dict):
        return dict, [(exact(k), exact(v)) for k, v in value.items()]
    return type(value), value


def slots(claim: LeanClaim) -> tuple[object, ...]:
    return tuple(exact(getattr(claim, name)) for name in LEAN_FIELDS)


def outcome(read: Any, body: bytes) -> tuple[object, ...]:
    try:
        return "read", slots(read(body))
    except RejectedInput as exc:
        return "refused", exc.reason, re.sub(" at 0x[0-9a-f]+", "", str(exc))  # no addresses


def same_as_fastavro(body: bytes) -> None:
    """The hot path decides as fastavro; and where the reader itself reads, it reads as fastavro
    (not by deferring)."""
    assert outcome(decode_claim, body) == outcome(fastavro_claim, body)
    lean = read_claim(body)
    if lean is not None:
        assert slots(lean) == slots(fastavro_claim(body))


@settings(max_examples=500, deadline=None)
@given(data=claims)
def test_the_reader_reads_every_claim_as_fastavro(data: dict[str, Any]) -> None:
    body = avro_body(data)
    same_as_fastavro(body)
    assert (read_claim(body) is not None) == readable(data)


NAMES = ("field", "unit", "source", "replica", "lineage", "producer")
"""What claims repeat: the reader holds each once in memory (a decoded state keeps every claim
of its key)."""


@settings(max_examples=100, deadline=None)
@given(data=claims, other_id=texts)
def test_names_claims_repeat_are_held_once(data: dict[str, Any], other_id: str) -> None:
    data |= {"observed_at": datetime(2026, 1, 1, tzinfo=UTC), "valid_from": None, "valid_to": None}
    first, second = (
        read_claim(avro_body(data)),
        read_claim(avro_body(data | {"claim_id": other_id})),
    )
    assert first is not None
    assert second is not None
    for name in NAMES:
        assert getattr(first, name) is getattr(second, name), name


def readable(data: dict[str, Any]) -> bool:
    """Whether the reader reads a claim itself: it defers only an instant beyond datetime's."""
    times = (data["observed_at"], data["valid_from"], data["valid_to"])
    return all(t is None or DATETIMES[0] <= t <= DATETIMES[1] for t in times)


def varint(n: int, padding: int = 0) -> bytes:
    """A long's zigzag varint, with `padding` redundant continuation bytes (still valid: up to
    ten bytes in all, as fastavro reads them)."""
    z = ((n << 1) ^ (n >> 63)) & (2**64 - 1)
    groups = []
    while True:
        groups.append(z & 0x7F)
        z >>= 7
        if not z:
            break
    groups += [0] * padding
    return bytes([g | 0x80 for g in groups[:-1]] + [groups[-1]])


def string(text: str, padding: int = 0) -> bytes:
    data = text.encode()
    return varint(len(data), padding) + data


@settings(max_examples=300, deadline=None)
@given(
    data=claims,
    blocks=st.lists(
        st.tuples(st.lists(st.tuples(texts, texts), max_size=3), st.booleans()), max_size=3
    ),
    padding=st.integers(0, 9),
)
def test_maps_in_blocks_and_redundant_varints_read_as_fastavro(
    data: dict[str, Any], blocks: list[tuple[list[tuple[str, str]], bool]], padding: int
) -> None:
    """Other writers may send a map in several blocks, a block's count negated with its size
    after it, or longs with redundant bytes: a Claim's attributes are the map, the last field."""
    head = avro_body({**data, "attributes": {}})[:-1]
    attributes = b""
    for entries, sized in blocks:
        if not entries:
            continue
        items = b"".join(string(k, padding % 2) + string(v) for k, v in entries)
        if sized:
            attributes += varint(-len(entries), padding) + varint(len(items)) + items
        else:
            attributes += varint(len(entries), padding) + items
    body = head + attributes + varint(0, padding)
    same_as_fastavro(body)
    assert (read_claim(body) is not None) == readable(data)


@settings(max_examples=300, deadline=None)
@given(
    data=claims,
    at=st.integers(0, 400),
    junk=st.binary(min_size=1, max_size=8),
    flip=st.integers(1, 255),
)
@example(data={}, at=0, junk=b"\x01", flip=1)  # a body of one byte: a string length of -1
def test_broken_bytes_are_refused_as_fastavro_refuses_them(
    data: dict[str, Any], at: int, junk: bytes, flip: int
) -> None:
    body = avro_body(data) if data else b""
    at %= len(body) + 1
    flipped = body[:at] + bytes([body[at] ^ flip]) + body[at + 1 :] if at < len(body) else body
    # Spliced, cut, appended, flipped: bad UTF-8, indexes out of range, negative lengths, short.
    for broken in (body[:at] + junk + body[at:], body[:at], junk, junk + body, flipped):
        same_as_fastavro(broken)


# The hand-built claim's own bytes, to steer the cases fastavro reads but the reader defers.
PLAIN = avro_body(
    {
        "claim_id": "c",
        "subject": "s",
        "field": "f",
        "status": "present",
        "source": "x",
        "observed_at": 0,
        "attributes": {},
    }
)


@pytest.mark.parametrize(
    "body",
    [
        PLAIN,
        PLAIN[:6] + varint(-1) + PLAIN[7:],  # status index -1: fastavro reads the last symbol
        PLAIN[:7] + varint(6) + PLAIN[8:],  # value branch out of range
        PLAIN[:2] + b"\xff" + PLAIN[3:],  # subject's length garbled
        PLAIN[:-1] + b"\x80" * 10 + b"\x00",  # an eleven-byte varint
        b"\x02\xff" + PLAIN[2:],  # claim_id not UTF-8
    ],
    ids=["plain", "negative-enum-index", "union-index", "garbled-length", "long-varint", "utf8"],
)
def test_what_the_reader_defers_is_decided_by_fastavro(body: bytes) -> None:
    same_as_fastavro(body)


def test_the_packaged_claim_schema_is_the_layout_the_reader_reads() -> None:
    assert layout(expanded_schema("Claim")) == LAYOUT
    assert _claim_reader() is read_claim
    assert read_claim(PLAIN) is not None


def test_a_schema_laid_out_otherwise_is_read_by_fastavro(caplog: pytest.LogCaptureFixture) -> None:
    schema = expanded_schema("Claim")
    moved = {**schema, "fields": [schema["fields"][1], schema["fields"][0], *schema["fields"][2:]]}
    assert layout(moved) != LAYOUT
    wider = {**schema, "fields": [*schema["fields"], {"name": "extra", "type": "string"}]}
    assert layout(wider) != LAYOUT
    _claim_reader.cache_clear()
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("streams.wire.codec.expanded_schema", lambda name: moved)
            assert _claim_reader()(PLAIN) is None
            assert slots(decode_claim(PLAIN)) == slots(fastavro_claim(PLAIN))
        assert "claims are read by fastavro until the reader is changed" in caplog.text
    finally:
        _claim_reader.cache_clear()
