"""Personal values sealed under their data subject's key, so erasing a person is destroying keys.

A field the policy marks `personal` travels sealed: the producer seals its value under a key of
the claim's data subject (`DataKey`) before it leaves, and the worker never opens it; it compares
the sealed strings. Erasure destroys the subject's keys (`subject_keys`), after which every copy
of the value, on every topic, in every changelog and backup, no longer opens (crypto-shredding).

A sealed value is the string `csp1:<key_id>:<ciphertext>`, the ciphertext base64url without
padding: AES-256-GCM-SIV under the subject key, with a fixed nonce, over the value normalized as
the engine normalizes a case-preserving string, bound to the field's name and the key's id. No
character of it is one the engine's string normalization changes, so it is compared as sent.

Subject keys are kept on a topic wrapped by the deployment key (`DeploymentKey`, AES-256-GCM with
a random nonce), bound to the subject's spelling and both keys' ids, so a wrapped key moved to
another subject or another deployment does not open.

Nothing here prints a secret or a value: errors name key ids and fields only.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, AESGCMSIV

from streams.core.admission.normalize import SEALED_PREFIX, normalize_string
from streams.core.records.errors import ClaimstreamError
from streams.core.records.policy import StringCase
from streams.core.timeline.aliases import alias_key

KEY_BYTES = 32
NONCE_BYTES = 12
TAG_BYTES = 16
# Deterministic sealing (see `seal`): one nonce for every value.
_FIXED_NONCE = bytes(NONCE_BYTES)
# A key id sits between `:`s in a sealed value and before `|` in a keys topic record's key, so
# it holds neither: letters, digits, `_` and `-`.
_KEY_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_SEALED = re.compile(
    re.escape(SEALED_PREFIX) + r"(?P<key_id>[A-Za-z0-9_-]{1,64}):(?P<sealed>[A-Za-z0-9_-]+)"
)
# The shortest ciphertext is the tag alone (an empty value): 16 bytes, 22 base64url characters.
_SHORTEST_SEALED = -(-TAG_BYTES * 4 // 3)


class SealError(ClaimstreamError):
    """A sealed value or wrapped key that is malformed or does not open under the key given; the
    message names key ids and fields, never a value or a secret."""


def _check_key(key_id: str, secret: bytes, what: str) -> None:
    if not _KEY_ID.fullmatch(key_id):
        raise SealError(f"{what} id {key_id!r}: give 1 to 64 of A-Z a-z 0-9 _ -")
    if len(secret) != KEY_BYTES:
        raise SealError(f"{what} {key_id}: the secret is {len(secret)} bytes, not {KEY_BYTES}")


def _associated(*parts: str) -> bytes:
    """Associated data binding a ciphertext to its context: each part length-prefixed, so no two
    different contexts give the same bytes."""
    out = bytearray()
    for part in parts:
        encoded = part.encode("utf-8")
        out += len(encoded).to_bytes(4, "big") + encoded
    return bytes(out)


@dataclass(frozen=True, slots=True)
class DataKey:
    """One data subject's key for personal fields: its id (named in every value it seals) and
    its AES-256 secret, which its repr never shows."""

    key_id: str
    secret: bytes = field(repr=False)

    def __post_init__(self) -> None:
        _check_key(self.key_id, self.secret, "subject key")

    @classmethod
    def new(cls) -> DataKey:
        return cls(os.urandom(8).hex(), AESGCMSIV.generate_key(256))


def seal(value: str, key: DataKey, field: str) -> str:
    """`value` of `field` sealed under `key`: `csp1:<key_id>:<base64url ciphertext>`.

    Sealing is deterministic: the same key, field and value (once normalized as the engine
    normalizes a case-preserving string) always seal to the same string. It has to be: the worker
    never opens a value, it compares sealed strings to tell agreement from conflict. The nonce is
    therefore fixed, which AES-GCM-SIV is built to survive (nonce-misuse resistance): what leaks
    is only whether two values sealed under one subject's key for one field are equal, which is
    exactly what the worker needs to see."""
    plaintext = normalize_string(value, StringCase.PRESERVE).encode("utf-8")
    ciphertext = AESGCMSIV(key.secret).encrypt(
        _FIXED_NONCE, plaintext, _associated(field, key.key_id)
    )
    encoded = base64.urlsafe_b64encode(ciphertext).rstrip(b"=").decode("ascii")
    return f"{SEALED_PREFIX}{key.key_id}:{encoded}"


_SEALED_IN_BYTES = re.compile(_SEALED.pattern.encode())


def sealed_in(data: bytes) -> list[str]:
    """Every sealed value in a record's bytes, found without decoding it (an Avro string is its
    UTF-8 bytes): what an erasure's decryption check tries to open."""
    return [found.group().decode() for found in _SEALED_IN_BYTES.finditer(data)]


def is_sealed(value: object) -> bool:
    """Whether `value` has a sealed value's shape (it is not opened)."""
    if not isinstance(value, str):
        return False
    found = _SEALED.fullmatch(value)
    if found is None:
        return False
    sealed = found["sealed"]
    # base64 without padding never leaves one character over a multiple of four.
    return len(sealed) >= _SHORTEST_SEALED and len(sealed) % 4 != 1


def _parts(sealed: str) -> tuple[str, bytes]:
    if not is_sealed(sealed):
        raise SealError(
            f"not a sealed value: expected {SEALED_PREFIX}<key id>:<base64url ciphertext>"
        )
    key_id, _, encoded = sealed.removeprefix(SEALED_PREFIX).partition(":")
    try:
        ciphertext = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
    except (binascii.Error, ValueError) as exc:
        raise SealError(
            f"a value sealed under key {key_id}: its ciphertext is not base64url"
        ) from exc
    return key_id, ciphertext


def key_id_of(sealed: str) -> str:
    """The id of the key `sealed` was sealed under (SealError when it is not a sealed value)."""
    return _parts(sealed)[0]


def open_sealed(sealed: str, key: DataKey, field: str) -> str:
    """The value `sealed` holds, opened with `key` as a value of `field`; SealError, naming the
    key, when it was sealed under another key or for another field, or was altered."""
    key_id, ciphertext = _parts(sealed)
    if key_id != key.key_id:
        raise SealError(f"a value sealed under key {key_id} cannot open with key {key.key_id}")
    try:
        plaintext = AESGCMSIV(key.secret).decrypt(
            _FIXED_NONCE, ciphertext, _associated(field, key_id)
        )
        return plaintext.decode("utf-8")
    except (InvalidTag, UnicodeDecodeError) as exc:
        raise SealError(
            f"a value of {field!r} sealed under key {key_id} does not open: another field's, "
            "or altered"
        ) from exc


@dataclass(frozen=True, slots=True)
class DeploymentKey:
    """The deployment's AES-256 key, which wraps every subject key kept on the keys topic; its
    repr never shows the secret."""

    key_id: str
    secret: bytes = field(repr=False)

    def __post_init__(self) -> None:
        _check_key(self.key_id, self.secret, "deployment key")

    @classmethod
    def from_setting(cls, setting: str, env: Mapping[str, str]) -> DeploymentKey:
        """`KEY_ID:VARIABLE` (the `deployment_key` setting): the key's id, and the environment
        variable holding its base64 32-byte secret."""
        key_id, _, variable = setting.strip().partition(":")
        if not _KEY_ID.fullmatch(key_id) or not variable:
            raise ClaimstreamError(
                "deployment_key: give KEY_ID:VARIABLE, the key id (A-Z a-z 0-9 _ -) and the "
                "environment variable holding its base64 secret (`claimstream erase keygen` "
                "makes one)"
            )
        material = env.get(variable, "").strip()
        if not material:
            raise ClaimstreamError(f"deployment_key {key_id}: ${variable} is not set")
        try:
            secret = base64.b64decode(material, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ClaimstreamError(
                f"deployment_key {key_id}: ${variable} is not base64 (standard alphabet)"
            ) from exc
        if len(secret) != KEY_BYTES:
            raise ClaimstreamError(
                f"deployment_key {key_id}: ${variable} holds {len(secret)} bytes, an AES-256 "
                f"key is {KEY_BYTES}"
            )
        return cls(key_id, secret)

    @staticmethod
    def generate() -> tuple[str, str]:
        """A new deployment key: its id and its base64 secret (for `erase keygen`)."""
        secret = AESGCM.generate_key(256)
        return secrets.token_hex(8), base64.b64encode(secret).decode("ascii")

    def wrap(self, key: DataKey, spelling: str) -> bytes:
        """`key`, the key of the subject spelled `spelling`, wrapped: a random 12-byte nonce and
        the ciphertext, bound to the spelling (as aliases match it) and both keys' ids."""
        nonce = os.urandom(NONCE_BYTES)
        context = _associated(alias_key(spelling), key.key_id, self.key_id)
        return nonce + AESGCM(self.secret).encrypt(nonce, key.secret, context)

    def unwrap(self, wrapped: bytes, key_id: str, spelling: str) -> DataKey:
        """The subject key `key_id` of `spelling` from its wrapped bytes; SealError when they do
        not open (wrapped by another deployment key, for another subject, or altered)."""
        nonce, ciphertext = wrapped[:NONCE_BYTES], wrapped[NONCE_BYTES:]
        context = _associated(alias_key(spelling), key_id, self.key_id)
        try:
            if len(ciphertext) != KEY_BYTES + TAG_BYTES:
                raise InvalidTag
            secret = AESGCM(self.secret).decrypt(nonce, ciphertext, context)
        except InvalidTag as exc:
            raise SealError(
                f"subject key {key_id} does not open under deployment key {self.key_id}: "
                "wrapped by another deployment key, for another subject, or altered"
            ) from exc
        return DataKey(key_id, secret)
