"""The old timers a task store carries in its writes are the store's: whatever the puts, reads,
journals, restores and failed batches, each carried timer is the one the store holds for its
key when the write applies, so a store that trusts them indexes what one that reads them would."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st

from streams.state.cache import StateCache
from streams.state.keystore import Changes, Timer
from streams.state.rocks import Budget, RocksKeyStore
from streams.state.task import TaskStore, encoded_timer
from tests.support.store_steps import READ, STEP, assert_answer_alike, read

# A key stored and journaled, then decoded again by a batch's `get` (a batch opens with its read
# ahead): its next put carries its old timer.
_STORED_THEN_DECODED: list[tuple[object, ...]] = [
    ("put", 0, ["paid"]),
    ("journal",),
    ("journaled",),
    ("read_ahead", [0]),
    ("get", 0),
]


class _Checked(RocksKeyStore):
    """A disk store that checks each carried old timer against the key's stored state."""

    carried = 0

    def write(self, changes: Changes) -> None:
        for key, carried in changes.old_timers.items():
            data = self.get(key)
            stored: Timer | None = encoded_timer(data) if data is not None else None
            assert carried == stored, key
            self.carried += 1
        super().write(changes)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(STEP, READ), max_size=40), st.integers(1, 5))
@example(  # a key put twice in one batch: its old timer is the stored one, not the first put's
    steps=[("put", 0, ["paid"]), ("put", 0, ["paid", "paid"]), ("journal",), ("journaled",)],
    capacity=3,
)
@example(  # a record loaded while a journal carrying the key's old timer waits to be written
    steps=[
        *_STORED_THEN_DECODED,
        ("put", 0, ["paid", "unpaid"]),
        ("journal",),
        ("load", 0, ["paid", "paid", "unpaid"]),
        ("journaled",),
    ],
    capacity=3,
)
def test_each_carried_old_timer_is_the_stored_one(
    steps: list[tuple[object, ...]], capacity: int
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        disk = _Checked(Path(directory) / "rocksdb", Budget(1 << 20))
        plain, carrying = TaskStore(StateCache(capacity)), TaskStore(StateCache(capacity), disk)
        try:
            assert_answer_alike(plain, carrying, steps)
        finally:
            disk.close()


def test_a_batch_of_updates_carries_every_old_timer(tmp_path: Path) -> None:
    """A key put after a batch's `get` decoded it carries its old timer (the check can fail)."""
    disk = _Checked(tmp_path / "rocksdb", Budget(1 << 20))
    store = TaskStore(StateCache(10), disk)
    steps = [*_STORED_THEN_DECODED, ("put", 0, ["unpaid", "paid"]), ("journal",), ("journaled",)]
    for step in steps:
        read(store, step)
    assert disk.carried == 1
    disk.close()
