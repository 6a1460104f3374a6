"""Who may write from the console: steward tokens, compared in constant time.

Writing (publishing a resolution) is off unless at least one token is configured, in
`steward_tokens` (comma-separated, e.g. `CLAIMSTREAM_STEWARD_TOKENS`) or a file of one token per
line. An entry `name:token` binds the token to the steward `name`, who is then the `decided_by` of
every resolution written with it (the request cannot name anyone else); a bare token is bound to
`steward-<first 8 hex digits of its SHA-256>`, stable and revealing nothing of the token.
A token travels only in the `Authorization: Bearer` header: never in a URL (logged, kept in
history) nor a cookie (sent by the browser on its own, which is what cross-site forgery abuses).

Where the policy's `stewards` section asks for signatures, what a token writes is signed as its
steward: `steward_signing_keys` names, per steward, a key of that section and the environment
variable holding its secret (or base64 Ed25519 private key), read when the worker starts. The
token proves who writes; the signature proves it to every worker that applies it.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Callable, Iterable, Mapping
from enum import StrEnum

from streams.core.admission.authenticity import SignatureHeaders, steward_signer
from streams.core.records.errors import ClaimstreamError
from streams.core.records.policy import Signing
from streams.settings import Settings

Signer = Callable[[bytes], SignatureHeaders]

MIN_TOKEN_LENGTH = 16
BEARER = "bearer "


class Refusal(StrEnum):
    """Why a write was refused (the label of claimstream_console_writes_refused_total)."""

    WRITES_DISABLED = "writes_disabled"  # 403: no steward token is configured
    MISSING_TOKEN = "missing_token"  # 401
    BAD_TOKEN = "bad_token"  # 403
    INVALID = "invalid_resolution"  # 400: the policy refuses the resolution
    STALE_DECISION = "stale_decision"  # 409: resolved a decision no longer the key's current one
    UNSIGNED = "unsigned"  # 403: the policy asks for a signature; no key for this steward
    REVIEW_REFUSED = "review_refused"  # 409: the key's owner would refuse the review or task


class StewardTokens:
    def __init__(self, tokens: Iterable[str], keys: Mapping[str, tuple[str, str]] = {}) -> None:
        """`keys`: per steward, the stewards section's key id and its material."""
        self._keys = dict(keys)
        kept = [_named(entry.strip()) for entry in tokens if entry.strip()]
        short = [token for _, token in kept if len(token) < MIN_TOKEN_LENGTH]
        if short:
            raise ClaimstreamError(
                f"steward tokens must be at least {MIN_TOKEN_LENGTH} characters "
                f"({len(short)} configured token(s) are shorter)"
            )
        # Digests have one length, so comparing them leaks nothing about a token's length.
        self._digests = [_digest(token) for _, token in kept]
        self._stewards = [name or f"steward-{_digest(token).hex()[:8]}" for name, token in kept]

    @classmethod
    def from_settings(
        cls, settings: Settings, environ: Mapping[str, str] = os.environ
    ) -> StewardTokens:
        tokens: list[str] = []
        if settings.steward_tokens is not None:
            tokens += settings.steward_tokens.get_secret_value().split(",")
        if settings.steward_tokens_file is not None:
            try:
                lines = settings.steward_tokens_file.read_text(encoding="utf-8").splitlines()
            except OSError as exc:
                raise ClaimstreamError(
                    f"{settings.steward_tokens_file}: cannot read steward tokens: {exc.strerror}"
                ) from exc
            tokens += [line for line in lines if not line.lstrip().startswith("#")]
        return cls(tokens, _signing_keys(settings.steward_signing_keys or "", environ))

    def signer(self, steward: str, stewards: Signing) -> Signer | Refusal | None:
        """What signs `steward`'s writes under the policy's stewards section `stewards`: None
        where it asks for no signature and none is configured; UNSIGNED where it asks for one
        and none can be made."""
        if steward not in self._keys:
            return Refusal.UNSIGNED if stewards.required else None
        key_id, material = self._keys[steward]
        try:
            return steward_signer(stewards, steward, key_id, material)
        except ValueError:
            return Refusal.UNSIGNED

    @property
    def writes_enabled(self) -> bool:
        return bool(self._digests)

    def refusal(self, authorization: str | None) -> Refusal | None:
        """None when the header carries a configured token; else why the write is refused."""
        found = self.steward(authorization)
        return found if isinstance(found, Refusal) else None

    def steward(self, authorization: str | None) -> str | Refusal:
        """The steward the header's token is bound to, or why the write is refused."""
        if not self._digests:
            return Refusal.WRITES_DISABLED
        if not authorization or authorization[: len(BEARER)].lower() != BEARER:
            return Refusal.MISSING_TOKEN
        offered = _digest(authorization[len(BEARER) :].strip())
        # Every configured token is compared, whichever matches.
        matches = [hmac.compare_digest(offered, digest) for digest in self._digests]
        return next(
            (name for name, hit in zip(self._stewards, matches, strict=True) if hit),
            Refusal.BAD_TOKEN,
        )


def _named(entry: str) -> tuple[str, str]:
    """`name:token` or a bare token (tokens as generated, hex or URL-safe base64, hold no `:`)."""
    name, separator, token = entry.rpartition(":")
    return (name.strip(), token.strip()) if separator else ("", entry)


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def _signing_keys(entries: str, environ: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """`steward:key_id:VARIABLE` entries, comma-separated, each with its variable's value."""
    keys = {}
    for entry in filter(None, (e.strip() for e in entries.split(","))):
        parts = [part.strip() for part in entry.split(":")]
        if len(parts) != 3 or not all(parts):
            raise ClaimstreamError(
                f"steward_signing_keys: {entry!r} is not steward:key_id:VARIABLE"
            )
        steward, key_id, variable = parts
        material = environ.get(variable)
        if not material:
            raise ClaimstreamError(
                f"steward_signing_keys: {steward}'s key {key_id!r} is read from ${variable}, "
                "which is not set"
            )
        keys[steward] = (key_id, material)
    return keys
