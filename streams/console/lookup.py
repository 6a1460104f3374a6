"""Key lookups for the web API: a key asked for by an alias (`Acme Corp|contract.seats`) names
the key its claims were filed under (`acme|contract.seats`), by the alias table the arbiter
applies to every claim's subject before keying it. Read side only; the hot path is unchanged."""

from __future__ import annotations

from collections.abc import Callable

from streams.core.keystate import split_key, state_key


def canonical_key(key: str, alias_of: Callable[[str], str | None]) -> str:
    """`key` with its subject replaced by the canonical subject it is an alias of, if any."""
    subject, field = split_key(key)
    canonical = alias_of(subject)
    return state_key(canonical, field) if canonical and canonical != subject else key
