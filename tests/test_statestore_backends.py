"""The disk key store answers as the memory one does: the same task-store operations, the same
reads, iteration, timers and open conflicts, whatever the sequence."""

from __future__ import annotations

import tempfile
from datetime import timedelta
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.instants import micros
from streams.core.journal import encode_state
from streams.settings import Settings
from streams.state.cache import StateCache
from streams.state.local import Checkpoints
from streams.state.rocks import Budget, RocksKeyStore
from streams.state.task import TaskStore
from tests.test_statestore import NOW, state_of

KEYS = [f"s{n}|order.payment_status".encode() for n in range(4)]
VALUES = st.lists(st.sampled_from(["paid", "unpaid"]), min_size=1, max_size=3)
STEP = st.one_of(
    st.tuples(st.just("put"), st.integers(0, 3), VALUES),
    st.tuples(st.just("load"), st.integers(0, 3), VALUES),
    st.tuples(st.just("delete"), st.integers(0, 3)),
    st.tuples(st.just("record"), st.integers(0, 3)),
    st.tuples(
        st.just("journal"),
    ),
    st.tuples(
        st.just("journaled"),
    ),
    st.tuples(
        st.just("forget"),
    ),
)
STEPS = st.lists(STEP, max_size=30)


def observed(store: TaskStore) -> tuple[object, ...]:
    states = {key: store.get(key) for key in KEYS}
    later = micros(NOW + timedelta(days=400))
    return (
        sorted(store),
        {key: encode_state(state) if state else None for key, state in states.items()},
        store.get_encoded(b"\x00tally"),
        store.due(later, 100),
        sorted(store.open_conflicts()),
    )


def apply(store: TaskStore, step: tuple[object, ...]) -> object:
    match step:
        case ("put", int(n), list(values)):
            store.put(KEYS[n], state_of(f"s{n}", values))
        case ("load", int(n), list(values)):
            store.load(KEYS[n], encode_state(state_of(f"s{n}", values)))
        case ("delete", int(n)):
            store.load(KEYS[n], None)
        case ("record", int(n)):
            store.put_encoded(b"\x00tally", str(n).encode())
        case ("journal",):
            return store.journal()
        case ("journaled",):
            store.journaled()
        case ("forget",):
            store.forget_pending()
    return None


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
    checkpoints = Checkpoints(Settings(**options), "1.0")
    store, offset = checkpoints.open(3)
    assert offset == 0
    checkpoints.write(3, store, 42)
    store.close()
    assert checkpoints.read(3) == 42
    store, offset = checkpoints.open(3)
    assert offset == 42
    store.close()
    assert Checkpoints(Settings(**options), "2.0").read(3) == (
        "was written for policy_version '1.0', not '2.0'"
    )
    assert Checkpoints(Settings(**options | {"app_id": "b"}), "1.0").read(3) == (
        "has no checkpoint"  # another app id keeps its stores apart
    )
    file = tmp_path / "a-arbiter" / "task-3" / "checkpoint.json"
    file.write_text("{")
    assert str(checkpoints.read(3)).startswith("has a corrupt checkpoint")
    store, offset = checkpoints.open(3)  # rebuilt: empty, from the beginning
    assert offset == 0
    assert list(store.state_keys()) == []
    store.close()
    exactly_once = Checkpoints(Settings(**options, processing_guarantee="exactly_once"), "1.0")
    assert exactly_once.read(3) == "has no checkpoint (not closed cleanly, under exactly-once)"
