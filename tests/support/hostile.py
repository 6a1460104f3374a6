"""Hostile input for a worker: valid, extreme and broken records over the Avro Claim and
Resolution schemas, drawn by hypothesis (`drawn`) and made into the Kafka records a producer
would send (`materialize`).

A batch (`batches`) holds one record of every kind in `KINDS`, in three categories:
- valid: claims keyed right, with no key, an empty key, another subject's key, the claim id as
  key or bytes that are not UTF-8; one written with the first published Claim schema; a
  redelivery; a resolution;
- extreme: Avro that decodes, with contents at or past what the contract means: every string
  field empty and 100 KB+ (replica, scope, lineage, an attribute's key and value included);
  1e308, -0.0, NaN, the infinities, 5e-324, 2^63 and the int64 ends as values, amounts,
  confidences and epochs; instants at year 1, 9999, before 1970 and at the int64 ends; unknown
  fields (bytes after the record; a schema with a field more); units the policy does not know;
  statuses with values; headers the pipeline sets on its own hops; 20,000 attributes; odd
  subjects; and resolutions as extreme;
- broken: random bytes, truncated bodies, a wrong magic byte, unknown schema ids, another record
  type's id, length prefixes of 2^40, -5, -1, 2^62 and the int64 ends, a map block count of
  2^40, enum and union indexes out of range, an eleven-byte varint, invalid UTF-8, tombstones.
Hypothesis draws what each kind leaves open: the topic (the tools' claims, the users', or the
resolutions topic), the field, source, values, instants, key, lengths and bytes.

A draw is a `Draft` with no id or subject of its own where its kind sets none: `materialize`
gives each record its own id (`h<n>`) and subject (`h:<n % SUBJECTS>`; a record with a 100 KB+
string its own subject `hx:<n>`, so no key holds two), and its instants relative to `now`. Each
record says what it must come to (`expect`): decided (admitted and kept), dead-lettered for one
of `reasons`, or either, where the README leaves it to the policy or to the intake bounds.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from dataclasses import field as dataclass_field
from datetime import UTC, datetime
from functools import cache
from typing import Any

import fastavro
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from streams.core.keys.state import state_key
from streams.packaged import schema_dir
from streams.wire.codec import expanded_schema, load_expanded, parsed_schema
from streams.wire.registry import FolderRegistry, schema_id

DECIDED, DEAD, EITHER = "decided", "dead", "either"
CLAIMS, USER_CLAIMS, RESOLUTIONS = "claims", "user_claims", "resolutions"
SUBJECTS = 12
"""Hostile records share these subjects (h:0 .. h:11), round robin, so keys see several claims."""
ID, SUBJECT = "\x00id", "\x00subject"
"""Placeholders `materialize` replaces with the record's own id and subject."""
MARK = "\x1bmark\x1b"
"""A string a broken draft puts in the field whose bytes it then breaks."""
US = 1_000_000
YEAR_1 = -62135596800 * US
YEAR_9999 = 253402300799 * US + 999_999
INT64 = (-(2**63), 2**63 - 1)
TOO_LARGE = "too_large"
"""The reason intake bounds give a text past its bound: allowed wherever a 100 KB+ string may
be refused, so that the test holds with and without such bounds."""

# -- what the example policy's fields take ---------------------------------------------------------

SOURCES = [
    "billing-api",
    "ledger-service",
    "reporting-replica",
    "search-index",
    "billing-cache",
    "config-service",
    "deploy-tool",
    "crm",
    "order-form",
    "apm-agent",
    "chat",
]
NUMBER_FIELDS = {"api.latency": "ms", "service.retry_timeout": "s"}
_words = st.text(
    alphabet=st.characters(categories=("L", "N")), min_size=1, max_size=12
) | st.sampled_from(["1 Main St", "2  Side Rd", "Straße 5", "日本 東京"])
_instants = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)
VALUES: dict[str, st.SearchStrategy[Any]] = {
    "order.payment_status": st.sampled_from(["paid", "unpaid", "overdue", "refunded", "PAID"]),
    "account.balance": st.fixed_dictionaries(
        {"amount_minor": st.integers(-(10**9), 10**9), "currency": st.just("USD")}
    ),
    "api.latency": st.floats(0, 10_000, allow_nan=False) | st.integers(0, 10_000),
    "service.retry_timeout": st.floats(0, 600, allow_nan=False),
    "contract.seats": st.integers(0, 10**6),
    "customer.shipping_address": _words,
    "customer.email_verified": st.booleans(),
    "subscription.renews_at": _instants.map(lambda moment: moment.isoformat()),
}
FIELDS = sorted(VALUES)
STRING_FIELDS = ["claim_id", "subject", "field", "unit", "source", "replica", "lineage", "scope"]
STRING_FIELDS += ["trace_id", "producer", "attribute_key", "attribute_value", "value"]
_STATUSES = ["not_found", "forbidden", "unavailable", "error"]
CLAIM_TIMES = ("observed_at", "valid_from", "valid_to")
RESOLUTION_TIMES = ("decided_at",)


@dataclass(frozen=True)
class Draft:
    """A drawn record before it has an id, a subject and its instants."""

    category: str  # valid, extreme, broken
    kind: str
    topic: str  # CLAIMS, USER_CLAIMS or RESOLUTIONS: the role; a deployment names the topic
    record: dict[str, Any] | None  # the Avro record, its `times` as offsets from now in µs
    model: str = "Claim"  # Claim or Resolution
    schema: str = "current"  # current, v1, extra_field, other_record, unknown_id:<id>
    wire: tuple[Any, ...] = ("plain",)  # what is done to the framed bytes
    key: str = "right"  # right, none, empty, other, id, bytes:<hex>
    headers: tuple[tuple[str, bytes], ...] = ()
    expect: str = EITHER
    reasons: frozenset[str] = frozenset()
    times: tuple[str, ...] = CLAIM_TIMES
    repeat: bool = False  # a redelivery: the last valid claim sent again as it was
    own_subject: bool = False  # a key of its own (a record with a 100 KB+ string)


@dataclass(frozen=True)
class Hostile:
    """A record ready to send, and what it must come to."""

    n: int
    category: str
    kind: str
    topic: str
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    expect: str
    reasons: frozenset[str]
    model: str
    subject: str | None = None  # what it is about, where it decodes
    field: str | None = None
    record_id: str | None = None  # its claim_id or resolution_id
    body: dict[str, Any] | None = dataclass_field(default=None, repr=False)


# -- records the example policy admits -------------------------------------------------------------


@st.composite
def claim_records(draw: st.DrawFn) -> dict[str, Any]:
    """A claim the example policy admits (times as offsets from now)."""
    name = draw(st.sampled_from(FIELDS))
    status = draw(st.sampled_from(["present"] * 6 + _STATUSES))
    value = draw(VALUES[name]) if status == "present" else None
    unit = NUMBER_FIELDS.get(name)
    if unit == "s" and value is not None and draw(st.booleans()):
        value, unit = value * 1000, "ms"
    observed = draw(st.integers(-50 * US, 0))
    period = draw(st.sampled_from([None, None, None, "open", "closed"]))
    return {
        "claim_id": ID,
        "subject": SUBJECT,
        "field": name,
        "status": status,
        "value": value,
        "unit": unit if status == "present" else None,
        "source": draw(st.sampled_from(SOURCES)),
        "replica": draw(st.none() | st.sampled_from(["eu-1", "us-2", "replica-3"])),
        "source_class": draw(st.sampled_from(["observation"] * 8 + ["user", "inference"])),
        "observed_at": observed,
        "valid_from": None if period is None else observed - 3600 * US,
        "valid_to": 86_400 * US if period == "closed" else None,
        "epoch": draw(st.none() | st.integers(1, 3)),
        "lineage": draw(st.none() | st.sampled_from(["upstream-a", "upstream-b"])),
        "scope": draw(st.none() | st.sampled_from(["server", "end_to_end", " Server"])),
        "confidence": draw(st.none() | st.floats(0, 1)),
        "trace_id": draw(st.none() | st.uuids().map(str)),
        "producer": draw(st.none() | st.just("hostile-test/1.0")),
        "attributes": draw(st.dictionaries(_words, _words, max_size=3)),
    }


@st.composite
def resolution_records(draw: st.DrawFn) -> dict[str, Any]:
    """A resolution the example policy admits (decided_at as an offset from now)."""
    name = draw(st.sampled_from(FIELDS))
    status = draw(st.sampled_from(["present", "present", "not_found"]))
    value = draw(VALUES[name]) if status == "present" else None
    return {
        "resolution_id": ID,
        "subject": SUBJECT,
        "field": name,
        "status": status,
        "value": value,
        "unit": NUMBER_FIELDS.get(name) if status == "present" else None,
        "decided_by": draw(st.sampled_from(["ann", "bob"])),
        "note": draw(st.sampled_from(["", "checked the ledger"])),
        "decided_at": draw(st.integers(-30 * US, 0)),
        "resolves_decision_id": None,
    }


_CLAIM_TOPICS = st.sampled_from([CLAIMS, CLAIMS, USER_CLAIMS])
_ANY_TOPIC = st.sampled_from([CLAIMS, CLAIMS, USER_CLAIMS, RESOLUTIONS])
KEYS = ["right", "none", "empty", "other", "id", "bytes:fffe00c3"]


# -- valid -----------------------------------------------------------------------------------------


def valid_claim(key: str) -> st.SearchStrategy[Draft]:
    return st.builds(
        lambda topic, record: Draft(
            "valid", f"key:{key.split(':')[0]}", topic, record, key=key, expect=DECIDED
        ),
        _CLAIM_TOPICS,
        claim_records(),
    )


def older_schema() -> st.SearchStrategy[Draft]:
    """Written with history/claimstream.Claim.v1.avsc, under its id."""
    return st.builds(
        lambda topic, record: Draft(
            "valid", "older_schema", topic, record, schema="v1", expect=DECIDED
        ),
        _CLAIM_TOPICS,
        claim_records(),
    )


def redelivery() -> st.SearchStrategy[Draft]:
    return st.just(Draft("valid", "redelivery", CLAIMS, None, expect=DECIDED, repeat=True))


def valid_resolution() -> st.SearchStrategy[Draft]:
    return st.builds(
        lambda key, record: Draft(
            "valid",
            "resolution",
            RESOLUTIONS,
            record,
            "Resolution",
            key=key,
            expect=DECIDED,
            times=RESOLUTION_TIMES,
        ),
        st.sampled_from(["right", "right", "none", "other"]),
        resolution_records(),
    )


# -- extreme ---------------------------------------------------------------------------------------


@st.composite
def big_texts(draw: st.DrawFn) -> str:
    """100 KB+ of text (at most two UTF-8 bytes a character): a drawn piece repeated."""
    piece = draw(
        st.text(
            alphabet=st.characters(max_codepoint=0x7FF, exclude_categories=["Cs"]),
            min_size=1,
            max_size=8,
        )
    )
    size = draw(st.integers(100_001, 120_000))
    return (piece * (size // len(piece) + 1))[:size]


def _with_string(record: dict[str, Any], name: str, text: str) -> dict[str, Any]:
    record = dict(record)
    if name == "attribute_key":
        record["attributes"] = {text: "v"}
    elif name == "attribute_value":
        record["attributes"] = {"k": text}
    elif name == "value":
        record.update(field="customer.shipping_address", status="present", value=text, unit=None)
    else:
        record[name] = text
    return record


def _string_expectation(name: str, big: bool) -> tuple[str, frozenset[str]]:
    """What an empty or a 100 KB+ string in `name` must come to: the README names blank
    provenance, an unknown field or source and an oversized value; the rest is for intake
    bounds to refuse (too_large) or not."""
    bound = frozenset({TOO_LARGE}) if big else frozenset()
    if name in ("claim_id", "subject", "source") and not big:
        return DEAD, frozenset({"missing_provenance"})
    if name == "field":
        return DEAD, frozenset({"unknown_field"}) | bound
    if name == "source":
        return DEAD, frozenset({"unknown_source"}) | bound
    if name == "value":
        return DEAD, frozenset({"invalid_value", TOO_LARGE} if big else {"empty_value"})
    return EITHER, frozenset()


def extreme_string(name: str, big: bool) -> st.SearchStrategy[Draft]:
    def make(topic: str, record: dict[str, Any], text: str) -> Draft:
        expect, reasons = _string_expectation(name, big)
        return Draft(
            "extreme",
            f"string_{'100k' if big else '0'}:{name}",
            topic,
            _with_string(record, name, text),
            expect=expect,
            reasons=reasons,
            own_subject=big,
        )

    return st.builds(make, _CLAIM_TOPICS, claim_records(), big_texts() if big else st.just(""))


NUMBERS = [1e308, -1e308, -0.0, math.nan, math.inf, -math.inf, 5e-324, 2.0**63, *INT64]


@st.composite
def extreme_number(draw: st.DrawFn, number: float | int) -> Draft:
    """`number` as a value, an amount, a confidence or an epoch, where it can be one."""
    record = draw(claim_records())
    where = draw(st.sampled_from(["value", "value", "money", "confidence", "epoch"]))
    if isinstance(number, float) and where in ("money", "epoch"):  # integers only
        where = "value"
    expect, reasons = EITHER, frozenset[str]()
    if where == "value":
        name = draw(st.sampled_from([*NUMBER_FIELDS, "contract.seats", "customer.email_verified"]))
        record.update(field=name, status="present", value=number, unit=NUMBER_FIELDS.get(name))
        if isinstance(number, float) and not math.isfinite(number):
            expect, reasons = DEAD, frozenset({"invalid_value", "type_mismatch"})
        where = name
    elif where == "money":
        record.update(
            field="account.balance",
            status="present",
            unit=None,
            value={"amount_minor": number, "currency": "USD"},
        )
    elif where == "confidence":
        record["confidence"] = float(number)
        if not (math.isfinite(number) and 0 <= number <= 1):
            expect, reasons = DEAD, frozenset({"invalid_value"})
    else:
        record["epoch"] = number
    return Draft(
        "extreme",
        f"number:{where}:{number!r}",
        draw(_CLAIM_TOPICS),
        record,
        expect=expect,
        reasons=reasons,
    )


# what, the field, the instant (µs since the epoch), what it must come to
INSTANTS: list[tuple[str, str, int, str, frozenset[str]]] = [
    ("observed_year_1", "observed_at", YEAR_1, DEAD, frozenset({"invalid_value"})),
    ("observed_before_1970", "observed_at", -1, DEAD, frozenset({"invalid_value"})),
    ("observed_at_epoch", "observed_at", 0, EITHER, frozenset()),
    ("observed_year_9999", "observed_at", YEAR_9999, DEAD, frozenset({"future_observation"})),
    ("observed_int64_max", "observed_at", INT64[1], DEAD, frozenset({"malformed"})),
    ("observed_int64_min", "observed_at", INT64[0], DEAD, frozenset({"malformed"})),
    ("valid_from_year_1", "valid_from", YEAR_1, EITHER, frozenset()),
    ("valid_from_year_9999", "valid_from", YEAR_9999, EITHER, frozenset()),
    ("valid_to_year_9999", "valid_to", YEAR_9999, EITHER, frozenset()),
    ("valid_to_before_valid_from", "valid_to", 0, DEAD, frozenset({"invalid_value"})),
]


def extreme_instant(what: str, name: str, moment: int, expect: str, reasons: frozenset[str]):  # type: ignore[no-untyped-def]
    def make(topic: str, record: dict[str, Any]) -> Draft:
        record = {**record, name: moment}
        times = tuple(t for t in CLAIM_TIMES if t != name)
        if what == "valid_to_before_valid_from":
            record["valid_from"], times = 10 * US, ("observed_at",)
        elif name == "valid_from":
            record["valid_to"] = None
        return Draft(
            "extreme", f"time:{what}", topic, record, expect=expect, reasons=reasons, times=times
        )

    return st.builds(make, _CLAIM_TOPICS, claim_records())


UNITS = ["furlongs", "kg", "", "MS", " ms ", "seconds", "µs", "%", "USD", "h"]
_UNCONVERTED = {"furlongs", "kg", "", "MS", "USD", "%"}  # units are case-sensitive: MS is not ms


@st.composite
def extreme_unit(draw: st.DrawFn, unit: str) -> Draft:
    record = draw(claim_records())
    name = draw(st.sampled_from([*NUMBER_FIELDS, "contract.seats", "order.payment_status"]))
    record.update(field=name, status="present", value=draw(VALUES[name]), unit=unit)
    unconverted = name not in NUMBER_FIELDS or unit in _UNCONVERTED
    if name == "contract.seats" and not unit:  # an integer field takes an empty unit for none
        return Draft("extreme", f"unit:{unit!r}", draw(_CLAIM_TOPICS), record)
    return Draft(
        "extreme",
        f"unit:{unit!r}",
        draw(_CLAIM_TOPICS),
        record,
        expect=DEAD if unconverted else DECIDED,
        reasons=frozenset({"unit_mismatch"}) if unconverted else frozenset(),
    )


_SPOOFED = [  # headers the pipeline sets on its own hops, sent by a producer
    (("claimstream.kind", b"tick"), ("claimstream.due", b"not a time")),
    (("claimstream.kind", b"claim"),),
    (("claimstream.source_class", b"observation"),),
    (("claimstream.source_class", b"bogus"),),
    (("claimstream.error.reason", b"malformed"),),
]
_ODD_SUBJECTS = ["h:\x00nul", "h:\u202eltr", "h:e\u0301", "h:🦀", "h: spaced ", "h:|pipe|"]


@st.composite
def extreme_content(draw: st.DrawFn, what: str) -> Draft:
    """Unknown fields, statuses with values, a payload that says it is a user's, spoofed
    headers, a huge attributes map, odd subjects."""
    record = draw(claim_records())
    draft = Draft("extreme", what, draw(_CLAIM_TOPICS), record)
    if what == "trailing_bytes":  # bytes after the record: the codec ignores them, as fastavro
        return replace(
            draft, wire=("append", draw(st.binary(min_size=1, max_size=64))), expect=DECIDED
        )
    if what == "extra_field":  # a writer schema with a field the contract lacks: no id for it
        return replace(
            draft, schema="extra_field", expect=DEAD, reasons=frozenset({"unknown_schema"})
        )
    if what == "status_with_value":
        status = draw(st.sampled_from(_STATUSES))
        record.update(status=status, value=draw(VALUES[record["field"]]))
        return replace(draft, expect=DEAD, reasons=frozenset({"invalid_value"}))
    if what == "present_without_value":
        record.update(status="present", value=None)
        return replace(draft, expect=DEAD, reasons=frozenset({"empty_value"}))
    if what == "source_class":
        record["source_class"] = draw(st.sampled_from(["user", "inference"]))
        return replace(draft, expect=DECIDED)
    if what == "spoofed_headers":
        headers = draw(st.sampled_from(_SPOOFED))
        return replace(
            draft,
            kind=f"headers:{headers[0][0]}={headers[0][1].decode()}",
            headers=headers,
            expect=DECIDED,
        )
    if what == "attributes_20k":
        record["attributes"] = {f"a{i}": "x" for i in range(draw(st.integers(20_000, 25_000)))}
        return replace(draft, own_subject=True)
    record["subject"] = draw(st.sampled_from(_ODD_SUBJECTS))
    return replace(draft, expect=DECIDED)


CONTENTS = [
    "trailing_bytes",
    "extra_field",
    "status_with_value",
    "present_without_value",
    "source_class",
    "spoofed_headers",
    "attributes_20k",
    "odd_subject",
]


@st.composite
def extreme_resolution(draw: st.DrawFn, what: str) -> Draft:
    record = draw(resolution_records())
    draft = Draft(
        "extreme", f"resolution:{what}", RESOLUTIONS, record, "Resolution", times=RESOLUTION_TIMES
    )
    if what == "decided_year_9999":
        record["decided_at"] = YEAR_9999
        return replace(draft, times=(), expect=DEAD, reasons=frozenset({"future_observation"}))
    if what == "decided_year_1":
        record["decided_at"] = YEAR_1
        return replace(draft, times=())
    if what == "status_forbidden":
        record.update(status="forbidden", value=None, unit=None)
        return replace(draft, expect=DEAD, reasons=frozenset({"invalid_value"}))
    if what == "not_found_with_value":
        record.update(status="not_found", field="contract.seats", value=7, unit=None)
        return replace(draft, expect=DEAD, reasons=frozenset({"invalid_value"}))
    if what == "unknown_field":
        record["field"] = "order.colour"
        return replace(draft, expect=DEAD, reasons=frozenset({"unknown_field"}))
    if what == "nan_value":
        record.update(status="present", field="api.latency", value=math.nan, unit="ms")
        return replace(draft, expect=DEAD, reasons=frozenset({"invalid_value"}))
    if what.startswith("big_"):
        record[what.removeprefix("big_")] = draw(big_texts())
        return replace(draft, own_subject=True)
    if what == "stale_decision":
        record["resolves_decision_id"] = "not-a-decision"
        return draft
    record["decided_by"] = ""
    return draft


RESOLUTION_EXTREMES = [
    "decided_year_9999",
    "decided_year_1",
    "status_forbidden",
    "not_found_with_value",
    "unknown_field",
    "nan_value",
    "big_note",
    "big_decided_by",
    "big_resolution_id",
    "stale_decision",
    "empty_decided_by",
]


# -- broken ----------------------------------------------------------------------------------------


def zigzag(number: int) -> bytes:
    """An Avro long as written: zigzag, then a little-endian base-128 varint."""
    encoded = ((number << 1) ^ (number >> 63)) & (2**64 - 1)
    out = bytearray()
    while True:
        low, encoded = encoded & 0x7F, encoded >> 7
        if not encoded:
            out.append(low)
            return bytes(out)
        out.append(low | 0x80)


LENGTHS = [2**40, -5, -1, 2**62, INT64[1], INT64[0]]
BREAKS = [
    "random_bytes",
    "truncated",
    "magic",
    "unknown_id",
    "other_record",
    "length",
    "map_count",
    "status_index",
    "union_index",
    "overlong_varint",
    "bad_utf8",
    "tombstone",
]
_MALFORMED = frozenset({"malformed"})
_CLAIM_TEXTS = [
    "claim_id",
    "subject",
    "field",
    "source",
    "replica",
    "unit",
    "lineage",
    "scope",
    "trace_id",
    "producer",
    "attribute_key",
    "attribute_value",
    "value",
]
_RESOLUTION_TEXTS = ["resolution_id", "subject", "field", "decided_by", "note"]


@st.composite
def broken_record(draw: st.DrawFn, what: str) -> Draft:
    topic = draw(_ANY_TOPIC)
    model = "Resolution" if topic == RESOLUTIONS else "Claim"
    record = draw(resolution_records() if model == "Resolution" else claim_records())
    key = draw(st.sampled_from(["right", "right", "none", "other", "bytes:00ff"]))
    draft = Draft(
        "broken",
        what,
        topic,
        record,
        model,
        key=key,
        expect=DEAD,
        reasons=_MALFORMED,
        times=RESOLUTION_TIMES if model == "Resolution" else CLAIM_TIMES,
    )

    def marked(name: str) -> dict[str, Any]:
        return _with_string(record, name, MARK) if model == "Claim" else {**record, name: MARK}

    if what == "random_bytes":
        data = draw(st.binary(max_size=300))
        return replace(
            draft, wire=("raw", data), reasons=frozenset({"malformed", "unknown_schema"})
        )
    if what == "truncated":
        return replace(draft, wire=("truncate", draw(st.floats(0, 1, exclude_max=True))))
    if what == "magic":
        return replace(draft, wire=("magic", draw(st.integers(1, 255))))
    if what == "unknown_id":
        sid = draw(st.integers(0, 2**32 - 1))
        return replace(draft, schema=f"unknown_id:{sid}", reasons=frozenset({"unknown_schema"}))
    if what == "other_record":  # a Decision's id where claims are read, a Claim's for resolutions
        return replace(draft, schema="other_record", reasons=frozenset({"unknown_schema"}))
    if what == "length":
        name = draw(st.sampled_from(_CLAIM_TEXTS if model == "Claim" else _RESOLUTION_TEXTS))
        length = draw(st.sampled_from(LENGTHS))
        return replace(
            draft, kind=f"length:{name}:{length}", record=marked(name), wire=("length", length)
        )
    if what == "map_count" and model == "Claim":
        count = draw(st.sampled_from([2**40, -(2**40), 2**62]))
        return replace(
            draft,
            kind=f"map_count:{count}",
            record={**record, "attributes": {}},
            wire=("map_count", count),
        )
    if what in ("status_index", "union_index", "map_count"):  # a resolution has no map
        what = "union_index" if what == "map_count" else what
        # ClaimStatus has 5 symbols, the value's union 6 branches
        index = draw(st.sampled_from([5 + (what == "union_index"), 9, 2**40, -1, -(2**40)]))
        return replace(draft, kind=f"{what}:{index}", wire=(what, index))
    if what == "overlong_varint":
        return replace(draft, wire=("overlong",))
    if what == "bad_utf8":
        name = draw(st.sampled_from(_CLAIM_TEXTS if model == "Claim" else _RESOLUTION_TEXTS))
        return replace(draft, kind=f"bad_utf8:{name}", record=marked(name), wire=("bad_utf8",))
    return replace(draft, wire=("tombstone",))


# -- a batch: one record of every kind -------------------------------------------------------------

KINDS: list[tuple[str, Callable[[], st.SearchStrategy[Draft]]]] = [
    *((f"valid key:{key}", lambda key=key: valid_claim(key)) for key in ["right"] * 3 + KEYS),
    ("valid older_schema", older_schema),
    ("valid redelivery", redelivery),
    ("valid resolution", valid_resolution),
    ("valid resolution", valid_resolution),
    *(
        (f"extreme string_0:{name}", lambda name=name: extreme_string(name, False))
        for name in STRING_FIELDS
    ),
    *(
        (f"extreme string_100k:{name}", lambda name=name: extreme_string(name, True))
        for name in STRING_FIELDS
    ),
    *((f"extreme number:{n!r}", lambda n=n: extreme_number(n)) for n in NUMBERS),
    *((f"extreme time:{t[0]}", lambda t=t: extreme_instant(*t)) for t in INSTANTS),
    *((f"extreme unit:{u!r}", lambda u=u: extreme_unit(u)) for u in UNITS),
    *((f"extreme {what}", lambda what=what: extreme_content(what)) for what in CONTENTS),
    *(
        (f"extreme resolution:{what}", lambda what=what: extreme_resolution(what))
        for what in RESOLUTION_EXTREMES
    ),
    *(
        (f"broken {what}", lambda what=what: broken_record(what))
        for what in [*BREAKS, "random_bytes", "truncated", "length", "length", "unknown_id"]
    ),
]


def batches() -> st.SearchStrategy[list[Draft]]:
    """One record of every kind, in the order of `KINDS`."""
    return st.tuples(*(make() for _, make in KINDS)).map(list)


@contextmanager
def _literals_of_the_checkout_left_out() -> Iterator[None]:
    """Recent Hypothesis versions also draw literals it finds in the modules loaded from the
    checkout: what it draws would change with each edit to streams/ and with the test modules
    collected beside this one. Without them, the same batches on every run of a Hypothesis
    version; a version without this part of its internals draws as it does."""
    try:
        from hypothesis.internal.conjecture import providers

        local, cache, constants = (
            providers._get_local_constants,
            providers.CONSTANTS_CACHE.cache,
            type(providers._local_constants),
        )
    except (ImportError, AttributeError):
        yield
        return
    none = constants()
    cache.clear()
    providers._get_local_constants = lambda: none
    try:
        yield
    finally:
        providers._get_local_constants = local
        cache.clear()


def drawn(count: int) -> list[Draft]:
    """`count` batches, the same ones on every run: hypothesis draws them derandomized (its
    first is the simplest batch, the others random), generating only, with no database."""
    drafts: list[Draft] = []

    @settings(
        max_examples=count,
        derandomize=True,
        database=None,
        phases=[Phase.generate],
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(batches())
    def collect(batch: list[Draft]) -> None:
        drafts.extend(batch)

    with _literals_of_the_checkout_left_out():
        collect()
    return drafts


def fingerprint(drafts: list[Draft]) -> str:
    """A short digest of what was drawn: equal digests, equal records (but for their times)."""
    digest = hashlib.sha256()
    for draft in drafts:
        fields = {**asdict(draft), "reasons": sorted(draft.reasons)}
        digest.update(json.dumps(fields, sort_keys=True, default=repr).encode())
    return digest.hexdigest()[:12]


# -- on the wire -----------------------------------------------------------------------------------


@cache
def _schemas() -> dict[str, tuple[Any, int]]:
    """Parsed writer schemas with their ids: the current ones, Claim v1, Claim with a field
    more (an id no registry knows), and a Decision's (another record type)."""
    files = FolderRegistry().files()
    v1 = load_expanded(schema_dir() / "history" / "claimstream.Claim.v1.avsc")
    extra = json.loads(json.dumps(expanded_schema("Claim")))
    extra["fields"].append({"name": "colour", "type": "string", "default": ""})
    return {
        "Claim": (parsed_schema("Claim"), files["claimstream.Claim.avsc"]),
        "Resolution": (parsed_schema("Resolution"), files["claimstream.Resolution.avsc"]),
        "v1": (fastavro.parse_schema(v1), files["history/claimstream.Claim.v1.avsc"]),
        "extra_field": (fastavro.parse_schema(extra), schema_id(extra)),
        "Decision": (parsed_schema("Decision"), files["claimstream.Decision.avsc"]),
    }


def _avro(schema: Any, record: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, schema, record)
    return buffer.getvalue()


def _framed(draft: Draft, record: dict[str, Any]) -> bytes:
    schemas = _schemas()
    body_schema, sid = schemas[draft.model]
    if draft.schema in ("v1", "extra_field"):
        body_schema, sid = schemas[draft.schema]
        if draft.schema == "extra_field":
            record = {**record, "colour": "mauve"}
    elif draft.schema == "other_record":
        sid = schemas["Decision" if draft.model == "Claim" else "Claim"][1]
    elif draft.schema.startswith("unknown_id:"):
        sid = int(draft.schema.split(":")[1])
    return struct.pack(">BI", 0, sid) + _avro(body_schema, record)


def _wired(draft: Draft, record: dict[str, Any]) -> bytes | None:
    op = draft.wire
    if op[0] == "raw":
        return bytes(op[1])
    if op[0] == "tombstone":
        return None
    data = _framed(draft, record)
    head, body = data[:5], data[5:]
    if op[0] == "append":
        return data + bytes(op[1])
    if op[0] == "truncate":
        return data[: int(len(data) * op[1])]
    if op[0] == "magic":
        return bytes([op[1]]) + data[1:]
    if op[0] in ("length", "bad_utf8"):
        prefix, text = zigzag(len(MARK)), MARK.encode()
        at = body.index(prefix + text)
        rest = body[at + len(prefix) + len(text) :]
        if op[0] == "bad_utf8":  # the string's first two bytes are not UTF-8
            return head + body[:at] + prefix + b"\xff\xfe" + text[2:] + rest
        return head + body[:at] + zigzag(op[1]) + text + rest
    if op[0] == "map_count":  # an empty map is the body's last byte, the closing count 0
        assert body.endswith(b"\x00")
        return head + body[:-1] + zigzag(op[1]) + b"\x02k\x02v\x00"
    if op[0] in ("status_index", "union_index"):  # after the three leading strings
        names = ("claim_id" if draft.model == "Claim" else "resolution_id", "subject", "field")
        at = sum(len(zigzag(len(record[n].encode()))) + len(record[n].encode()) for n in names)
        at += op[0] == "union_index"
        return head + body[:at] + zigzag(op[1]) + body[at + 1 :]
    if op[0] == "overlong":  # the first string's length as eleven continuation bytes
        return head + b"\xff" * 11 + body[1:]
    return data


def _key(draft: Draft, subject: str, name: str, record_id: str) -> bytes | None:
    if draft.key == "right":
        return state_key(subject, name).encode()
    if draft.key == "none":
        return None
    if draft.key == "empty":
        return b""
    if draft.key == "other":
        return state_key("h:someone-else", name).encode()
    if draft.key == "id":
        return record_id.encode()
    return bytes.fromhex(draft.key.split(":")[1])


def materialize(drafts: list[Draft], now: datetime) -> list[Hostile]:
    """The records to send, numbered in order (header `hostile.n`), with their ids, subjects
    and instants filled in."""
    now_us = (now - datetime(1970, 1, 1, tzinfo=UTC)) // datetime.resolution
    out: list[Hostile] = []
    last_valid: Hostile | None = None
    for n, draft in enumerate(drafts):
        if draft.repeat and last_valid is not None:
            headers = (*last_valid.headers[:-1], ("hostile.n", str(n).encode()))
            out.append(replace(last_valid, n=n, kind="redelivery", headers=headers))
            continue
        record = dict(draft.record or {})
        id_name = "claim_id" if draft.model == "Claim" else "resolution_id"
        if record.get(id_name) == ID:
            record[id_name] = f"h{n}"
        if record.get("subject") == SUBJECT:
            record["subject"] = f"hx:{n}" if draft.own_subject else f"h:{n % SUBJECTS}"
        for name in draft.times:
            if record.get(name) is not None:
                record[name] += now_us
        decodes = draft.wire[0] in ("plain", "append") and draft.schema in ("current", "v1")
        item = Hostile(
            n=n,
            category=draft.category,
            kind=draft.kind,
            topic=draft.topic,
            key=_key(
                draft, record.get("subject", ""), record.get("field", ""), record.get(id_name, "")
            ),
            value=_wired(draft, record),
            headers=(*draft.headers, ("hostile.n", str(n).encode())),
            expect=draft.expect,
            reasons=draft.reasons,
            model=draft.model,
            subject=record.get("subject") if decodes else None,
            field=record.get("field") if decodes else None,
            record_id=record.get(id_name) if decodes else None,
            body=record if decodes else None,
        )
        out.append(item)
        if draft.category == "valid" and draft.model == "Claim":
            last_valid = item
    return out
