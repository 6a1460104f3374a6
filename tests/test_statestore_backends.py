"""The disk key store answers as the memory one does: the same task-store operations, the same
reads, iteration, timers and open conflicts, whatever the sequence."""

from __future__ import annotations

import tempfile
from datetime import timedelta
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.journal import encode_state
from streams.state.cache import StateCache
from streams.state.keystore import micros
from streams.state.rocks import Budget, RocksKeyStore
from streams.state.task import TaskStore
from tests.test_statestore import NOW, state_of

KEYS = [f"s{n}|order.payment_status".encode() for n in range(4)]
VALUES = st.lists(st.sampled_from(["paid", "unpaid"]), min_size=1, max_size=3)
STEPS = st.lists(
    st.one_of(
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
    ),
    max_size=30,
)


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
