"""The hot path's claims (Avro dict checked and built without pydantic validation) are the
contract's claims: the same accepted, the same refused for the same reason, equal when admitted."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from typing import Any

import fastavro
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.codec import claim_from_avro, parsed_schema
from streams.core.contracts import Claim
from streams.core.errors import RejectedInput
from streams.core.intake import AdmittedClaim, admit, parse_claim
from streams.core.journal import encode_state
from streams.core.keystate import KeyState
from streams.core.policy import load_policy
from streams.registry import FolderRegistry, WireCodec
from streams.settings import Settings

CODEC = WireCodec(FolderRegistry())
POLICY = load_policy(Settings().policy)
NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)
FRAME = CODEC.encode(
    "t", Claim(claim_id="c", subject="s", field="f", status="present", source="x", observed_at=NOW)
)[:5]  # the magic byte and the current Claim schema's id

texts = st.text(max_size=12) | st.sampled_from(["", " ", "paid", "PAID ", "billing-api", "crm"])
moments = st.datetimes(
    min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
)
int64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
doubles = st.floats(allow_nan=False)  # infinities included; NaN equals nothing, itself neither
values = st.one_of(
    st.none(),
    st.booleans(),
    int64,
    doubles,
    texts,
    st.fixed_dictionaries(
        {"amount_minor": int64, "currency": st.sampled_from(["USD", "usd", "EUR", ""])}
    ),
)
avro_claims = st.fixed_dictionaries(
    {
        "claim_id": texts,
        "subject": texts,
        "field": st.sampled_from(sorted(POLICY.fields)) | texts,
        "status": st.sampled_from(["present", "not_found", "forbidden", "unavailable", "error"]),
        "value": values,
        "unit": st.none() | st.sampled_from(["ms", "s", "kg", "USD", ""]),
        "source": st.sampled_from(["billing-api", "crm", "chat", "nobody", "", " "]),
        "replica": st.none() | texts,
        "source_class": st.sampled_from(["observation", "user", "inference"]),
        "observed_at": moments | st.just(NOW + timedelta(hours=1)),
        "valid_from": st.none() | moments,
        "valid_to": st.none() | moments,
        "epoch": st.none() | int64,
        "lineage": st.none() | texts,
        "scope": st.none() | texts,
        "confidence": st.none() | doubles,
        "trace_id": st.none() | texts,
        "producer": st.none() | texts,
        "attributes": st.dictionaries(texts, texts, max_size=2),
    }
)


def avro_body(data: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, parsed_schema("Claim"), data)
    return buffer.getvalue()


def outcome(decode: Any, data: bytes) -> tuple[str, object]:
    """What a path makes of a record: its claim and admission, or the reason it refused."""
    try:
        claim = decode(data)
        admitted = admit(claim, POLICY, NOW)
    except RejectedInput as exc:
        return "refused", exc.reason
    return "admitted", (claim, admitted, journaled(admitted))


def journaled(admitted: AdmittedClaim) -> bytes:
    """How the claim is stored: the key state encoding reads the model's fields directly."""
    return encode_state(KeyState(admitted.claim.subject, admitted.claim.field, (admitted,)))


def same_on(data: bytes) -> None:
    lean = outcome(CODEC.decode_claim, data)
    validated = outcome(lambda d: CODEC.decode(Claim, d), data)
    assert lean == validated


@settings(max_examples=500, deadline=None)
@given(data=avro_claims)
def test_the_lean_path_decides_every_avro_claim_as_the_pydantic_path(data: dict[str, Any]) -> None:
    same_on(FRAME + avro_body(data))


@settings(max_examples=300, deadline=None)
@given(data=avro_claims, at=st.integers(0, 400), junk=st.binary(min_size=1, max_size=8))
def test_the_lean_path_refuses_broken_bytes_as_the_pydantic_path(
    data: dict[str, Any], at: int, junk: bytes
) -> None:
    body = avro_body(data)
    at %= len(body) + 1
    # Bytes spliced in, cut off or appended: invalid UTF-8, bad enum indexes, short reads...
    for broken in (body[:at] + junk + body[at:], body[:at], junk, junk + body):
        same_on(FRAME + broken)
    same_on(junk)  # not even framed


odd_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=5),
    st.binary(max_size=5),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=12), st.integers() | st.text(max_size=3), max_size=3),
    st.just(NOW),
    st.just(datetime(2026, 1, 1)),  # no offset
)


@settings(max_examples=500, deadline=None)
@given(
    data=avro_claims,
    changes=st.dictionaries(
        st.sampled_from([*Claim.model_fields, "extra"]), odd_values, max_size=3
    ),
    dropped=st.sets(st.sampled_from(sorted(Claim.model_fields)), max_size=2),
)
def test_any_dict_is_built_or_refused_as_parse_claim_does(
    data: dict[str, Any], changes: dict[str, Any], dropped: set[str]
) -> None:
    mangled = {k: v for k, v in {**data, **changes}.items() if k not in dropped}
    try:
        expected: object = parse_claim(mangled)
    except RejectedInput as exc:
        expected = exc.reason
    try:
        lean: object = claim_from_avro(dict(mangled))
    except RejectedInput as exc:
        lean = exc.reason
    assert lean == expected
