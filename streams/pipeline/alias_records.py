"""An alias change as a record of the aliases topic, written by `claimstream alias` and the
client, read by every worker (`streams.worker.alias_log`).

Keyed by the alias's spelling, valued with the subject it names (no value: the alias retracted);
headers: `claimstream.effective_at`, the instant it takes effect (RFC 3339; a record without one
takes effect at its timestamp), `claimstream.steward`, who made it, and where stewards sign, the
signature over the alias, the subject and the instant (`authentication.alias_payload`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from streams.core.records.contracts import parse_instant
from streams.core.records.errors import AliasError
from streams.core.timeline.aliases import AliasChange
from streams.pipeline.authentication import EFFECTIVE_AT_HEADER, STEWARD_HEADER, alias_payload

Signer = Callable[[bytes], Sequence[tuple[str, bytes]]]


def alias_record(
    change: AliasChange, signer: Signer | None = None
) -> tuple[bytes, bytes | None, list[tuple[str, bytes]]]:
    """The key, value and headers of the record that publishes `change`."""
    at = change.at.astimezone(UTC).isoformat().encode()
    value = change.canonical.encode() if change.canonical is not None else None
    key = change.alias.encode()
    headers = [(EFFECTIVE_AT_HEADER, at), (STEWARD_HEADER, change.by.encode())]
    if signer is not None:
        headers = [*signer(alias_payload(key, value or b"", at)), *headers]
    return key, value, headers


def change_of(
    key: bytes | None, value: bytes | None, headers: Any, timestamp_ms: int
) -> AliasChange:
    """The change a record of the aliases topic says, or AliasError."""
    if not key:
        raise AliasError("an alias record is keyed by the alias's spelling")
    found = dict(headers or ())
    steward = bytes(found.get(STEWARD_HEADER) or b"").decode("utf-8", "replace")
    stated = found.get(EFFECTIVE_AT_HEADER)
    try:
        alias = key.decode()
        canonical = value.decode().strip() if value else ""
        at = (
            parse_instant(bytes(stated).decode())
            if stated
            else datetime.fromtimestamp(timestamp_ms / 1000, UTC)
        )
    except (UnicodeDecodeError, ValueError) as exc:
        raise AliasError(f"an alias record that does not read: {exc}") from exc
    return AliasChange(alias, canonical or None, at, steward)
