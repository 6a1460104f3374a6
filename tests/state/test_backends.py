"""The disk key store answers as the memory one does: the same task-store operations, the same
reads, iteration, timers and open conflicts, whatever the sequence."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from streams.settings import Settings
from streams.state.cache import StateCache
from streams.state.local import Checkpoints
from streams.state.rocks import Budget, RocksKeyStore
from streams.state.task import TaskStore
from tests.support.store_steps import STEP, apply, observed

STEPS = st.lists(STEP, max_size=30)


@settings(max_examples=40, deadline=None)
@given(STEPS)
def test_the_rocksdb_store_answers_as_the_memory_store_does(
    steps: list[tuple[object, ...]],
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        disk = RocksKeyStore(Path(directory) / "rocksdb", Budget(1 << 20))
        memory, rocks = TaskStore(StateCache(2)), TaskStore(StateCache(2), disk)
        try:
            for step in steps:
                assert apply(memory, step) == apply(rocks, step), step
                assert observed(memory) == observed(rocks), step
        finally:
            disk.close()


def test_a_checkpoint_reads_back_only_for_the_store_it_was_written_for(tmp_path: Path) -> None:
    options = {"store": "rocksdb://", "data_dir": tmp_path, "app_id": "a"}
    checkpoints = Checkpoints(Settings(**options))
    store, offset = checkpoints.open(3)
    assert offset == 0
    checkpoints.write(3, store, 42)
    store.close()
    assert checkpoints.read(3) == 42
    store, offset = checkpoints.open(3)
    assert offset == 42
    store.close()
    assert Checkpoints(Settings(**options | {"app_id": "b"})).read(3) == (
        "has no checkpoint"  # another app id keeps its stores apart
    )
    file = tmp_path / "a-arbiter" / "task-3" / "checkpoint.json"
    file.write_text("{")
    assert str(checkpoints.read(3)).startswith("has a corrupt checkpoint")
    store, offset = checkpoints.open(3)  # rebuilt: empty, from the beginning
    assert offset == 0
    assert list(store.state_keys()) == []
    store.close()
    exactly_once = Checkpoints(Settings(**options, processing_guarantee="exactly_once"))
    assert exactly_once.read(3) == "has no checkpoint (not closed cleanly, under exactly-once)"
