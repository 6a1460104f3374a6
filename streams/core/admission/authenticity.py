"""Signed claims: a claim's declared source is proven by a signature, not taken on trust.

Kafka principals (SASL/SCRAM + ACLs) prove who *published* a record, but many deployments share one
producer principal between many sources (an agent gateway, a CDC bridge). For those, each source
signs what it says and the worker checks the signature against keys the policy binds to sources.

A signed record carries three headers:

* ``claimstream.signature``: base64 (canonical, padded) of the signature;
* ``claimstream.key-id``: which key made it;
* ``claimstream.signed-at``: when, RFC 3339 in UTC.

What is signed is the record value exactly as published (the Avro wire bytes), so the signature
does not depend on the topic or on how the claim is re-encoded later, plus the key id and the
signing time. Each part is length-prefixed behind a domain-separation tag, so no two different
(key id, time, value) triples serialise to the same bytes and a signature made for some other
protocol that happens to use the same key can never be replayed here.

The algorithm is taken from the verifier's key, never from a header: a forger cannot downgrade an
Ed25519 key to HMAC (where the "secret" would be the public key) by asking for it.

A replay inside ``max_age`` is not caught here: it is the same claim (same ``claim_id``) and the
engine counts duplicates once. The window bounds how long a captured claim stays usable.

This module is pure (stdlib, pydantic, and ``cryptography`` loaded only for Ed25519) so it can be
used from the core, from publishers and from tests without any Kafka library.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from streams.core.records.contracts import RejectReason
from streams.core.records.errors import ContractError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

    from streams.core.records.policy import Signing

SIGNATURE_HEADER = "claimstream.signature"
KEY_ID_HEADER = "claimstream.key-id"
SIGNED_AT_HEADER = "claimstream.signed-at"
SIGNATURE_HEADERS = (SIGNATURE_HEADER, KEY_ID_HEADER, SIGNED_AT_HEADER)

HMAC_SHA256 = "hmac-sha256"
ED25519 = "ed25519"
Algorithm = Literal["hmac-sha256", "ed25519"]
ALGORITHMS: tuple[str, ...] = (HMAC_SHA256, ED25519)

# Bump the version if the payload layout ever changes, so old and new signatures never collide.
DOMAIN = b"claimstream/claim-signature/v1"

# RFC 2104 advises a key at least as long as the hash output; a short shared secret can be
# brute-forced offline from one signed record.
MIN_HMAC_SECRET_BYTES = 32
_ED25519_KEY_BYTES = 32
_ED25519_SIGNATURE_BYTES = 64
_HMAC_SIGNATURE_BYTES = 32

# RFC 3339 date-time (upper-case separators). fromisoformat alone also takes ISO forms that
# RFC 3339 does not (week dates, basic format, a bare date), which other verifiers would reject.
_RFC3339 = re.compile(
    r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:Z|[+-]\d{2}:\d{2})$", re.ASCII
)


def _unauthenticated(detail: str) -> ContractError:
    return ContractError(RejectReason.UNAUTHENTICATED, detail)


def _b64decode_exact(text: bytes | str, size: int, what: str) -> bytes:
    """Only the canonical encoding of exactly `size` bytes is accepted.

    Lenient base64 (non-zero padding bits, missing padding) lets several header values decode to
    the same bytes; refusing them makes every bit of the header matter.
    """
    raw_text = text.encode("ascii", "replace") if isinstance(text, str) else text
    try:
        raw = base64.b64decode(raw_text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{what} is not valid base64") from None
    if base64.b64encode(raw) != raw_text:
        raise ValueError(f"{what} is not canonical base64")
    if len(raw) != size:
        raise ValueError(f"{what} must be {size} bytes, got {len(raw)}")
    return raw


class SourceKey(BaseModel):
    """A key the policy trusts, and the sources it may speak for.

    The binding to ``sources`` is the point: a valid signature only proves who signed, and a key
    that may sign for ``weather-agent`` must not be able to publish as ``billing-api``.
    The HMAC secret is a ``SecretStr`` so a logged or printed policy never reveals it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    key_id: str = Field(min_length=1)
    algorithm: Algorithm
    secret: SecretStr | None = None
    public_key: str | None = None
    sources: tuple[str, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _material_matches_algorithm(self) -> SourceKey:
        if self.algorithm == HMAC_SHA256:
            if self.secret is None or self.public_key is not None:
                raise ValueError("an hmac-sha256 key needs `secret` and no `public_key`")
            if len(self.secret.get_secret_value().encode()) < MIN_HMAC_SECRET_BYTES:
                raise ValueError(
                    f"an hmac-sha256 secret must be at least {MIN_HMAC_SECRET_BYTES} bytes"
                )
        else:
            if self.public_key is None or self.secret is not None:
                raise ValueError("an ed25519 key needs `public_key` and no `secret`")
            _b64decode_exact(self.public_key, _ED25519_KEY_BYTES, "public_key")
        if any(not s for s in self.sources):
            raise ValueError("sources must be non-empty source names")
        return self

    def may_sign_for(self, source: str) -> bool:
        return source in self.sources


def keyring(keys: Iterable[SourceKey]) -> dict[str, SourceKey]:
    """Index keys by id, refusing duplicates: two keys under one id would make the check depend
    on which one happened to be loaded last."""
    ring: dict[str, SourceKey] = {}
    for key in keys:
        if key.key_id in ring:
            raise ValueError(f"duplicate key id {key.key_id!r}")
        ring[key.key_id] = key
    return ring


def format_signed_at(signed_at: datetime) -> str:
    """RFC 3339 in UTC with millisecond precision: one spelling per instant, so publishers in any
    language produce the header the same way."""
    if signed_at.tzinfo is None or signed_at.utcoffset() is None:
        raise ValueError("signed_at must be timezone-aware")
    return signed_at.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def signing_payload(value: bytes, key_id: bytes, signed_at: bytes) -> bytes:
    """The exact bytes that are signed. Length prefixes make the encoding injective: moving bytes
    between the key id, the time and the value always changes the payload."""
    parts = (DOMAIN, key_id, signed_at, value)
    return b"".join(struct.pack(">Q", len(part)) + part for part in parts)


def _ed25519_private(raw: bytes) -> Ed25519PrivateKey:
    # Imported here so HMAC-only deployments (and the purity test) do not need `cryptography`.
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    if len(raw) != _ED25519_KEY_BYTES:
        raise ValueError(f"an ed25519 private key is {_ED25519_KEY_BYTES} raw bytes")
    return Ed25519PrivateKey.from_private_bytes(raw)


def _ed25519_public(raw: bytes) -> Ed25519PublicKey:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    return Ed25519PublicKey.from_public_bytes(raw)


def ed25519_public_key_b64(private_key: bytes) -> str:
    """The ``public_key`` value for a policy, from a raw 32-byte private key (the publisher keeps
    the private half; only this goes into the policy)."""
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    public = _ed25519_private(private_key).public_key()
    return base64.b64encode(public.public_bytes(Encoding.Raw, PublicFormat.Raw)).decode()


def _hmac(secret: bytes, payload: bytes) -> bytes:
    return hmac.new(secret, payload, hashlib.sha256).digest()


def sign(
    value: bytes,
    key_id: str,
    algorithm: str,
    secret_or_private_key: bytes,
    signed_at: datetime,
) -> list[tuple[str, bytes]]:
    """Headers that prove `value` came from the holder of `key_id`'s key at `signed_at`.

    For HMAC the key is the shared secret's UTF-8 bytes (as written in the policy); for Ed25519
    it is the raw 32-byte private key.
    """
    if not key_id:
        raise ValueError("key_id must not be empty")
    key_id_bytes = key_id.encode()
    signed_at_bytes = format_signed_at(signed_at).encode()
    payload = signing_payload(value, key_id_bytes, signed_at_bytes)
    if algorithm == HMAC_SHA256:
        if len(secret_or_private_key) < MIN_HMAC_SECRET_BYTES:
            raise ValueError(
                f"an hmac-sha256 secret must be at least {MIN_HMAC_SECRET_BYTES} bytes"
            )
        signature = _hmac(secret_or_private_key, payload)
    elif algorithm == ED25519:
        signature = _ed25519_private(secret_or_private_key).sign(payload)
    else:
        raise ValueError(f"unknown algorithm {algorithm!r}; expected one of {list(ALGORITHMS)}")
    return [
        (SIGNATURE_HEADER, base64.b64encode(signature)),
        (KEY_ID_HEADER, key_id_bytes),
        (SIGNED_AT_HEADER, signed_at_bytes),
    ]


SignatureHeaders = list[tuple[str, bytes]]


def steward_signer(
    stewards: Signing, steward: str, key_id: str, material: str
) -> Callable[[bytes], SignatureHeaders]:
    """What signs a record value as `steward`, with the stewards section's key `key_id` (which
    must be bound to `steward`): `material` is its HMAC secret, or its base64 raw Ed25519 private
    key. Checked at once by signing an empty value; ValueError says what is wrong."""
    key = next((k for k in stewards.keys if k.key_id == key_id), None)
    if key is None or steward not in key.sources:
        raise ValueError(f"{key_id!r} is not a key of the stewards section bound to {steward!r}")
    raw = (
        base64.b64decode(material, validate=True) if key.algorithm == ED25519 else material.encode()
    )
    sign(b"", key.key_id, key.algorithm, raw, datetime.now(UTC))  # binascii.Error is a ValueError
    return lambda value: sign(value, key.key_id, key.algorithm, raw, datetime.now(UTC))


def _signature_headers(headers: Sequence[tuple[str, bytes | None]]) -> dict[str, bytes]:
    """Our headers, each at most once: with two copies, code that reads the first and code that
    reads the last could disagree about what was verified."""
    found: dict[str, bytes] = {}
    for name, raw in headers:
        if name not in SIGNATURE_HEADERS:
            continue
        if name in found:
            raise _unauthenticated(f"header {name} appears more than once")
        if raw is None or raw == b"":
            raise _unauthenticated(f"header {name} is empty")
        found[name] = bytes(raw)
    return found


def _signature_matches(key: SourceKey, signature: bytes, payload: bytes) -> bool:
    if key.algorithm == HMAC_SHA256:
        assert key.secret is not None  # enforced by the model
        expected = _hmac(key.secret.get_secret_value().encode(), payload)
        return hmac.compare_digest(expected, signature)
    from cryptography.exceptions import InvalidSignature

    assert key.public_key is not None  # enforced by the model
    public = _ed25519_public(_b64decode_exact(key.public_key, _ED25519_KEY_BYTES, "public_key"))
    try:
        public.verify(signature, payload)
    except InvalidSignature:
        return False
    return True


def _parse_signed_at(raw: bytes) -> datetime:
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise _unauthenticated(f"header {SIGNED_AT_HEADER} is not ASCII") from None
    if not _RFC3339.match(text):
        raise _unauthenticated(f"header {SIGNED_AT_HEADER} {text!r} is not an RFC 3339 time")
    try:
        return datetime.fromisoformat(text).astimezone(UTC)
    except ValueError:
        raise _unauthenticated(f"header {SIGNED_AT_HEADER} {text!r} is not a valid time") from None


def verify(
    value: bytes,
    headers: Sequence[tuple[str, bytes | None]],
    declared_source: str,
    keys: Mapping[str, SourceKey],
    now: datetime,
    max_age: timedelta,
    required: bool,
) -> str | None:
    """Prove that `declared_source` signed `value` recently; return the key id that proves it.

    Returns None only for a record with none of the signature headers when signatures are not
    required. A record that carries any of them is checked in full even then: a signature that
    does not verify is evidence of tampering, not the absence of a claim to authenticity.

    Checks run in the order that gives the most useful reason: the key must exist before a
    signature can be checked; the signature must hold before the key's source binding or the
    signing time mean anything (an unverified time could be anything the forger wrote).
    """
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("now must be timezone-aware")
    if max_age <= timedelta(0):
        raise ValueError("max_age must be positive")

    found = _signature_headers(headers)
    if not found:
        if required:
            raise _unauthenticated(
                f"unsigned claim: source {declared_source!r} requires a signature "
                f"(header {SIGNATURE_HEADER}) but the record has none"
            )
        return None
    missing = [name for name in SIGNATURE_HEADERS if name not in found]
    if missing:
        raise _unauthenticated(f"incomplete signature: missing header(s) {', '.join(missing)}")

    raw_key_id = found[KEY_ID_HEADER]
    key_id = raw_key_id.decode("utf-8", "replace")
    key = keys.get(key_id)
    if key is None or key.key_id != key_id:
        raise _unauthenticated(f"unknown key id {key_id!r}: no such key in the policy")

    size = _HMAC_SIGNATURE_BYTES if key.algorithm == HMAC_SHA256 else _ED25519_SIGNATURE_BYTES
    try:
        signature = _b64decode_exact(found[SIGNATURE_HEADER], size, f"header {SIGNATURE_HEADER}")
    except ValueError as exc:
        raise _unauthenticated(f"bad signature: {exc}") from None
    payload = signing_payload(value, raw_key_id, found[SIGNED_AT_HEADER])
    if not _signature_matches(key, signature, payload):
        raise _unauthenticated(
            f"bad signature: the {key.algorithm} signature by key {key_id!r} does not match "
            "the record (value, key id or signed-at altered, or signed with another key)"
        )

    if not key.may_sign_for(declared_source):
        raise _unauthenticated(
            f"spoofed source: key {key_id!r} may sign for {list(key.sources)}, "
            f"not for declared source {declared_source!r}"
        )

    signed_at = _parse_signed_at(found[SIGNED_AT_HEADER])
    age = now.astimezone(UTC) - signed_at
    if age > max_age:
        raise _unauthenticated(
            f"replayed or stale claim: signed at {format_signed_at(signed_at)}, "
            f"{age.total_seconds():.3f}s ago, older than max_age {max_age.total_seconds():g}s"
        )
    if -age > max_age:
        raise _unauthenticated(
            f"signed in the future: signed-at {format_signed_at(signed_at)} is "
            f"{-age.total_seconds():.3f}s ahead of now, beyond max_age {max_age.total_seconds():g}s"
        )
    return key_id
