"""A cache keyed by object identity: a value worked out once from a frozen record.

Where it sits: normalize keeps each field's compiled normalizer here (compiled once per policy,
asked by every claim), and the journal each decision summary's stored form (written again on
every change of its key). Unlike a cached property, an entry belongs to one object: a copy made
with `model_copy(update=...)` is another object and gets its own, so the records need no
`model_copy` override. An entry goes when its object does.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

Key = TypeVar("Key")
Made = TypeVar("Made")


class ByIdentity(Generic[Key, Made]):
    """`make(key)`, made once per live `key` object (which must accept weak references)."""

    __slots__ = ("_entries", "_make")

    def __init__(self, make: Callable[[Key], Made]) -> None:
        self._make = make
        self._entries: dict[int, tuple[weakref.ref[Key], Made]] = {}

    def __call__(self, key: Key) -> Made:
        identity = id(key)
        entry = self._entries.get(identity)
        if entry is not None and entry[0]() is key:
            return entry[1]
        made = self._make(key)
        entries = self._entries
        # Removed when the key dies, before its identity can be reused.
        alive = weakref.ref(key, lambda _: entries.pop(identity, None))
        entries[identity] = (alive, made)
        return made
