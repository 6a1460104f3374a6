"""The collection after each batch: it frees the cycles nothing reaches and freezes what lives."""

from __future__ import annotations

import gc
import weakref

from streams.arbiter.loop import collect_after_batch


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def test_an_unreachable_cycle_is_freed_and_a_live_object_frozen() -> None:
    dropped, kept = _Node(), _Node()
    dropped.other, kept.other = _Node(), kept
    dropped.other.other = dropped  # a cycle only the collector frees
    gone = weakref.ref(dropped)
    del dropped
    frozen_before = gc.get_freeze_count()
    try:
        collect_after_batch()
        assert gone() is None
        assert gc.get_freeze_count() > frozen_before
        assert not any(o is kept for g in range(3) for o in gc.get_objects(g))
    finally:
        gc.unfreeze()
    assert any(o is kept for o in gc.get_objects(2))
