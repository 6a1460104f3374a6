"""A batch's read ahead changes no read: a task store that reads ahead answers every `get` as
one that does not, whatever the writes, journals and restores in between."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st

from streams.core.keys.state import KeyState
from streams.state.cache import StateCache
from streams.state.rocks import Budget, RocksKeyStore
from streams.state.task import TaskStore
from tests.support.store_steps import KEYS, READ, STEP, apply, assert_answer_alike


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(STEP, READ), max_size=40), st.booleans())
@example(  # read ahead while a journal not yet written holds the key, taken after it is
    steps=[
        ("put", 0, ["paid"]),
        ("put", 1, ["paid"]),
        ("journal",),
        ("read_ahead", [0]),
        ("journaled",),
        ("get", 0),
    ],
    on_disk=True,
)
def test_a_store_that_reads_ahead_answers_as_one_that_does_not(
    steps: list[tuple[object, ...]], on_disk: bool
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        disk = RocksKeyStore(Path(directory) / "rocksdb", Budget(1 << 20)) if on_disk else None
        # A cache of one state: most reads miss it, and go to what was read ahead.
        plain, ahead = TaskStore(StateCache(1)), TaskStore(StateCache(1), disk)
        try:
            assert_answer_alike(plain, ahead, steps)
        finally:
            if disk is not None:
                disk.close()


class _CountedCache(StateCache):
    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.puts: list[bytes] = []

    def put(self, key: bytes, state: KeyState, owner: int = 0) -> None:
        self.puts.append(key)
        super().put(key, state, owner)


def test_a_batch_caches_each_state_it_decodes_once(tmp_path: Path) -> None:
    """A key decoded then put in a batch is cached once, as put; one only read is cached when
    the batch is journaled."""
    disk = RocksKeyStore(tmp_path / "rocksdb", Budget(1 << 20))
    writer = TaskStore(StateCache(10), disk)
    for n in (0, 1):
        apply(writer, ("put", n, ["paid"]))
    writer.journal()
    writer.journaled()
    cache = _CountedCache(10)
    store = TaskStore(cache, disk)
    store.read_ahead(KEYS[:2])
    assert store.get(KEYS[0]) is not None
    assert store.get(KEYS[1]) is not None
    apply(store, ("put", 0, ["paid", "unpaid"]))
    assert cache.puts == [KEYS[0]]
    store.journal()
    assert cache.puts == [KEYS[0], KEYS[1]]
    assert KEYS[1] in cache
    disk.close()
