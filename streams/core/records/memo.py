"""A cache keyed by object identity: a value worked out once from a frozen record.

Where it sits: normalize keeps each field's compiled normalizer here (compiled once per policy,
asked by every claim). Unlike a cached property, an entry belongs to one object: a copy made with
`model_copy(update=...)` is another object and gets its own, so the record needs no `model_copy`
override. An entry goes when its object does.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TypeVar

Key = TypeVar("Key")
Made = TypeVar("Made")


def by_identity(make: Callable[[Key], Made]) -> Callable[[Key], Made]:
    """`make(key)`, made once per live `key` object (which must accept weak references). A
    closure, not a class with `__call__`: it is asked once per claim, and that halves the cost."""
    entries: dict[int, tuple[weakref.ref[Key], Made]] = {}

    def cached(key: Key) -> Made:
        identity = id(key)
        entry = entries.get(identity)
        if entry is not None and entry[0]() is key:
            return entry[1]
        made = make(key)
        # Removed when the key dies, before its identity can be reused.
        entries[identity] = (weakref.ref(key, lambda _: entries.pop(identity, None)), made)
        return made

    return cached
