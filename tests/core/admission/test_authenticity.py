"""Signed claims: a declared source is accepted only with a fresh signature by a key bound to it."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, timezone

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import SecretStr, ValidationError

from streams.core.admission.authenticity import (
    KEY_ID_HEADER,
    SIGNATURE_HEADER,
    SIGNED_AT_HEADER,
    SourceKey,
    ed25519_public_key_b64,
    format_signed_at,
    keyring,
    sign,
    signing_payload,
    verify,
)
from streams.core.records.contracts import RejectReason
from streams.core.records.errors import ContractError

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
MAX_AGE = timedelta(minutes=5)
# Stands in for the Avro wire bytes of a claim: magic byte, schema id, body.
VALUE = b"\x00\x00\x00\x00\x07" + b"invoice:42 order.payment_status paid billing-api"

HMAC_SECRET = "s3cret-" + "x" * 40
ED_PRIVATE = Ed25519PrivateKey.generate().private_bytes(
    Encoding.Raw, PrivateFormat.Raw, NoEncryption()
)
OTHER_ED_PRIVATE = Ed25519PrivateKey.generate().private_bytes(
    Encoding.Raw, PrivateFormat.Raw, NoEncryption()
)

KEYS = keyring(
    [
        SourceKey(
            key_id="billing-2026",
            algorithm="hmac-sha256",
            secret=SecretStr(HMAC_SECRET),
            sources=("billing-api",),
        ),
        SourceKey(
            key_id="ledger-ed",
            algorithm="ed25519",
            public_key=ed25519_public_key_b64(ED_PRIVATE),
            sources=("billing-api", "reporting-replica"),
        ),
        SourceKey(
            key_id="weather-agent",
            algorithm="ed25519",
            public_key=ed25519_public_key_b64(OTHER_ED_PRIVATE),
            sources=("weather-agent",),
        ),
    ]
)

SIGNERS = {
    "billing-2026": ("hmac-sha256", HMAC_SECRET.encode()),
    "ledger-ed": ("ed25519", ED_PRIVATE),
    "weather-agent": ("ed25519", OTHER_ED_PRIVATE),
}


def signed(
    key_id: str = "billing-2026", value: bytes = VALUE, at: datetime = NOW
) -> list[tuple[str, bytes]]:
    algorithm, material = SIGNERS[key_id]
    return sign(value, key_id, algorithm, material, at)


def check(
    headers: Sequence[tuple[str, bytes | None]],
    value: bytes = VALUE,
    source: str = "billing-api",
    required: bool = True,
) -> str | None:
    return verify(value, headers, source, KEYS, NOW, MAX_AGE, required)


def rejected(headers: Sequence[tuple[str, bytes | None]], **kw: object) -> str:
    """Assert rejection as UNAUTHENTICATED and return the detail for the caller to inspect."""
    with pytest.raises(ContractError) as info:
        check(headers, **kw)  # type: ignore[arg-type]
    assert info.value.reason is RejectReason.UNAUTHENTICATED
    return info.value.detail


def replace(headers: list[tuple[str, bytes]], name: str, new: bytes) -> list[tuple[str, bytes]]:
    return [(n, new if n == name else v) for n, v in headers]


def flip(data: bytes, bit: int) -> bytes:
    out = bytearray(data)
    out[bit // 8] ^= 1 << (bit % 8)
    return bytes(out)


# --- round trips -----------------------------------------------------------------------------


@pytest.mark.parametrize("key_id", ["billing-2026", "ledger-ed"])
def test_round_trip(key_id: str) -> None:
    headers = signed(key_id)
    assert [name for name, _ in headers] == [SIGNATURE_HEADER, KEY_ID_HEADER, SIGNED_AT_HEADER]
    assert check(headers) == key_id


def test_headers_are_what_the_spec_says() -> None:
    headers = dict(signed("ledger-ed", at=datetime(2026, 11, 29, 13, 0, tzinfo=UTC)))
    assert headers[KEY_ID_HEADER] == b"ledger-ed"
    assert headers[SIGNED_AT_HEADER] == b"2026-11-29T13:00:00.000Z"
    assert len(base64.b64decode(headers[SIGNATURE_HEADER], validate=True)) == 64


def test_signed_at_in_another_offset_is_normalised_to_utc() -> None:
    local = NOW.astimezone(timezone(timedelta(hours=2)))
    assert dict(signed(at=local))[SIGNED_AT_HEADER] == format_signed_at(NOW).encode()
    assert check(signed(at=local)) == "billing-2026"


def test_other_headers_are_ignored() -> None:
    headers = [("trace", b"abc"), *signed(), ("claimstream.other", b"")]
    assert check(headers) == "billing-2026"


def test_unsigned_when_not_required_is_accepted_without_a_key() -> None:
    assert check([("trace", b"abc")], required=False) is None


def test_a_bad_signature_is_rejected_even_when_not_required() -> None:
    headers = signed(value=b"something else")
    assert "bad signature" in rejected(headers, required=False)


def test_one_key_may_sign_for_several_sources() -> None:
    assert check(signed("ledger-ed"), source="reporting-replica") == "ledger-ed"


# --- rejections ------------------------------------------------------------------------------


def test_unsigned_where_required() -> None:
    detail = rejected([("trace", b"abc")])
    assert "unsigned" in detail
    assert "billing-api" in detail


def test_unknown_key_id() -> None:
    headers = sign(VALUE, "stolen-key", "hmac-sha256", b"k" * 32, NOW)
    assert "unknown key id 'stolen-key'" in rejected(headers)


@pytest.mark.parametrize("key_id", ["weather-agent", "billing-2026"])
def test_spoofed_source(key_id: str) -> None:
    """A valid signature by a key that is not bound to the declared source proves nothing."""
    source = "billing-api" if key_id == "weather-agent" else "reporting-replica"
    detail = rejected(signed(key_id), source=source)
    assert "spoofed source" in detail
    assert repr(source) in detail
    assert repr(key_id) in detail


@pytest.mark.parametrize("key_id", ["billing-2026", "ledger-ed"])
def test_flipped_bit_in_value(key_id: str) -> None:
    detail = rejected(signed(key_id), value=flip(VALUE, 13))
    assert "bad signature" in detail
    assert "does not match" in detail


@pytest.mark.parametrize("key_id", ["billing-2026", "ledger-ed"])
def test_flipped_bit_in_signature(key_id: str) -> None:
    headers = signed(key_id)
    raw = base64.b64decode(dict(headers)[SIGNATURE_HEADER])
    tampered = replace(headers, SIGNATURE_HEADER, base64.b64encode(flip(raw, 5)))
    assert "bad signature" in rejected(tampered)


@pytest.mark.parametrize("key_id", ["billing-2026", "ledger-ed"])
def test_flipped_bit_in_signed_at(key_id: str) -> None:
    headers = signed(key_id)
    at = dict(headers)[SIGNED_AT_HEADER]
    # '2026-11-29T12:00:00.000Z': bit 0 of the minute's tens digit turns 12:00 into 12:10
    position = at.index(b":") + 1
    later = flip(at, position * 8)
    assert later != at
    assert "bad signature" in rejected(replace(headers, SIGNED_AT_HEADER, later))


def test_flipped_bit_in_key_id_names_an_unknown_key() -> None:
    headers = signed()
    tampered = replace(headers, KEY_ID_HEADER, flip(b"billing-2026", 0))
    assert "unknown key id" in rejected(tampered)


def test_key_id_swapped_to_another_key_breaks_the_signature() -> None:
    """Re-labelling an HMAC signature with an Ed25519 key id must not pass as anything."""
    headers = replace(signed("billing-2026"), KEY_ID_HEADER, b"ledger-ed")
    assert "bad signature" in rejected(headers)


def test_replayed_claim() -> None:
    detail = rejected(signed(at=NOW - MAX_AGE - timedelta(seconds=1)))
    assert "replayed" in detail
    assert "older than max_age 300s" in detail


def test_signed_at_exactly_max_age_ago_is_still_accepted() -> None:
    assert check(signed(at=NOW - MAX_AGE)) == "billing-2026"


def test_future_signed_at() -> None:
    detail = rejected(signed(at=NOW + MAX_AGE + timedelta(seconds=1)))
    assert "future" in detail
    assert "beyond max_age" in detail


def test_small_clock_skew_into_the_future_is_tolerated() -> None:
    assert check(signed(at=NOW + timedelta(seconds=30))) == "billing-2026"


@pytest.mark.parametrize("missing", [SIGNATURE_HEADER, KEY_ID_HEADER, SIGNED_AT_HEADER])
def test_incomplete_signature(missing: str) -> None:
    headers = [(n, v) for n, v in signed() if n != missing]
    detail = rejected(headers, required=False)
    assert "incomplete signature" in detail
    assert missing in detail


def test_duplicate_signature_header() -> None:
    headers = [*signed(), (SIGNATURE_HEADER, dict(signed())[SIGNATURE_HEADER])]
    assert "more than once" in rejected(headers)


@pytest.mark.parametrize("header", [SIGNATURE_HEADER, KEY_ID_HEADER, SIGNED_AT_HEADER])
def test_empty_or_null_header(header: str) -> None:
    headers: list[tuple[str, bytes | None]] = list(signed())
    for empty in (b"", None):
        tampered = [(n, empty if n == header else v) for n, v in headers]
        assert "is empty" in rejected(tampered)


def test_signature_that_is_not_base64() -> None:
    headers = replace(signed(), SIGNATURE_HEADER, b"not base64 at all!")
    assert "not valid base64" in rejected(headers)


def test_non_canonical_base64_signature() -> None:
    headers = signed()
    text = dict(headers)[SIGNATURE_HEADER]
    # 32 bytes -> 43 chars + '='; the last char carries 2 unused bits. Setting one decodes to
    # the same bytes, but every bit of the header must count.
    last = text[-2:-1]
    alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    sloppy = text[:-2] + alphabet[alphabet.index(last) ^ 1 : alphabet.index(last) ^ 1 + 1] + b"="
    assert base64.b64decode(sloppy) == base64.b64decode(text)
    assert "canonical" in rejected(replace(headers, SIGNATURE_HEADER, sloppy))


def test_signed_at_not_rfc3339_even_when_signed() -> None:
    """A correctly signed but unparseable time is the publisher's bug; it still cannot pass."""
    at = b"29/11/2026 12:00"
    sig = hmac.new(
        HMAC_SECRET.encode(), signing_payload(VALUE, b"billing-2026", at), hashlib.sha256
    ).digest()
    headers = [
        (SIGNATURE_HEADER, base64.b64encode(sig)),
        (KEY_ID_HEADER, b"billing-2026"),
        (SIGNED_AT_HEADER, at),
    ]
    assert "not an RFC 3339 time" in rejected(headers)


def test_verify_refuses_naive_now_and_bad_max_age() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        verify(VALUE, signed(), "billing-api", KEYS, NOW.replace(tzinfo=None), MAX_AGE, True)
    with pytest.raises(ValueError, match="positive"):
        verify(VALUE, signed(), "billing-api", KEYS, NOW, timedelta(0), True)


def test_sign_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        sign(VALUE, "k", "hmac-sha256", b"k" * 32, NOW.replace(tzinfo=None))
    with pytest.raises(ValueError, match="unknown algorithm"):
        sign(VALUE, "k", "rsa", b"k" * 32, NOW)
    with pytest.raises(ValueError, match="at least 32 bytes"):
        sign(VALUE, "k", "hmac-sha256", b"short", NOW)
    with pytest.raises(ValueError, match="32 raw bytes"):
        sign(VALUE, "k", "ed25519", b"short", NOW)


# --- the key model ---------------------------------------------------------------------------


def test_secrets_never_appear_in_repr_or_str() -> None:
    key = KEYS["billing-2026"]
    for text in (repr(key), str(key), key.model_dump_json(), repr(key.model_dump()), f"{key}"):
        assert HMAC_SECRET not in text
        assert "s3cret" not in text
    assert key.secret is not None
    assert key.secret.get_secret_value() == HMAC_SECRET


def test_a_rejection_detail_never_carries_the_secret() -> None:
    details = [
        rejected(signed(value=b"x")),
        rejected(signed("weather-agent")),
        rejected(signed(at=NOW - timedelta(days=1))),
    ]
    assert all(HMAC_SECRET not in d and "s3cret" not in d for d in details)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"algorithm": "hmac-sha256"}, "needs `secret`"),
        ({"algorithm": "hmac-sha256", "secret": "short"}, "at least 32 bytes"),
        ({"algorithm": "ed25519"}, "needs `public_key`"),
        ({"algorithm": "ed25519", "public_key": base64.b64encode(b"x" * 31).decode()}, "32 bytes"),
        ({"algorithm": "ed25519", "public_key": "%%%"}, "base64"),
        ({"algorithm": "ed25519", "public_key": "A" * 43 + "=", "secret": "s" * 40}, "no `secret`"),
        ({"algorithm": "rsa", "secret": "s" * 40}, "algorithm"),
        ({"algorithm": "hmac-sha256", "secret": "s" * 40, "sources": ()}, "sources"),
    ],
)
def test_source_key_validation(fields: dict[str, object], message: str) -> None:
    data: dict[str, object] = {"key_id": "k", "sources": ("billing-api",), **fields}
    with pytest.raises(ValidationError, match=message):
        SourceKey.model_validate(data)


def test_source_key_is_frozen() -> None:
    with pytest.raises(ValidationError):
        KEYS["billing-2026"].sources = ("billing-api", "anything")  # type: ignore[misc]


def test_keyring_refuses_duplicate_ids() -> None:
    key = KEYS["billing-2026"]
    with pytest.raises(ValueError, match="duplicate key id"):
        keyring([key, key])


# --- properties ------------------------------------------------------------------------------

KEY_IDS = st.sampled_from(["billing-2026", "ledger-ed"])


@settings(max_examples=200, deadline=None)
@given(key_id=KEY_IDS, value=st.binary(min_size=1, max_size=300), data=st.data())
def test_any_flipped_bit_in_the_value_fails(key_id: str, value: bytes, data: st.DataObject) -> None:
    headers = signed(key_id, value=value)
    assert check(headers, value=value) == key_id
    bit = data.draw(st.integers(0, len(value) * 8 - 1), label="bit")
    with pytest.raises(ContractError) as info:
        check(headers, value=flip(value, bit))
    assert info.value.reason is RejectReason.UNAUTHENTICATED
    assert "bad signature" in info.value.detail


@settings(max_examples=200, deadline=None)
@given(key_id=KEY_IDS, value=st.binary(max_size=100), data=st.data())
def test_any_flipped_bit_in_the_signature_fails(
    key_id: str, value: bytes, data: st.DataObject
) -> None:
    headers = signed(key_id, value=value)
    raw = base64.b64decode(dict(headers)[SIGNATURE_HEADER])
    bit = data.draw(st.integers(0, len(raw) * 8 - 1), label="bit")
    tampered = replace(headers, SIGNATURE_HEADER, base64.b64encode(flip(raw, bit)))
    with pytest.raises(ContractError) as info:
        check(tampered, value=value)
    assert info.value.reason is RejectReason.UNAUTHENTICATED
    assert "bad signature" in info.value.detail


@settings(max_examples=200, deadline=None)
@given(key_id=KEY_IDS, header=st.sampled_from([SIGNATURE_HEADER, SIGNED_AT_HEADER]), data=st.data())
def test_any_flipped_bit_in_the_header_text_fails(
    key_id: str, header: str, data: st.DataObject
) -> None:
    """Bits of the header as transmitted (base64 text, time text), not only of decoded bytes."""
    headers = signed(key_id)
    text = dict(headers)[header]
    bit = data.draw(st.integers(0, len(text) * 8 - 1), label="bit")
    with pytest.raises(ContractError) as info:
        check(replace(headers, header, flip(text, bit)))
    assert info.value.reason is RejectReason.UNAUTHENTICATED


@settings(max_examples=50, deadline=None)
@given(secret=st.text(min_size=32, max_size=64).filter(lambda s: len(s.encode()) >= 32))
def test_hmac_secret_never_in_repr(secret: str) -> None:
    key = SourceKey(
        key_id="k", algorithm="hmac-sha256", secret=SecretStr(secret), sources=("billing-api",)
    )
    assert secret not in repr(key)
    assert secret not in str(key)


def test_random_keys_round_trip() -> None:
    secret = secrets.token_urlsafe(32)
    key = SourceKey(
        key_id="fresh", algorithm="hmac-sha256", secret=SecretStr(secret), sources=("a",)
    )
    headers = sign(VALUE, "fresh", "hmac-sha256", secret.encode(), NOW)
    assert verify(VALUE, headers, "a", {"fresh": key}, NOW, MAX_AGE, True) == "fresh"
