"""A small language of task-store steps (put, load, delete, record, journal, journaled, forget,
read ahead, get) over four keys, and what a store answers after them: properties run the same
steps on two stores and compare."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import strategies as st

from streams.core.keys.journal import encode_state
from streams.core.records.instants import micros
from streams.state.task import TaskStore
from tests.support.builders import NOW, state_of

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
"""A step that changes a store (`apply`)."""
READ = st.one_of(
    st.tuples(st.just("read_ahead"), st.lists(st.integers(0, 3), max_size=4)),
    st.tuples(st.just("get"), st.integers(0, 3)),
)
"""A step that reads (`read`)."""


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


def read(store: TaskStore, step: tuple[object, ...]) -> object:
    match step:
        case ("read_ahead", list(numbers)):
            store.read_ahead(KEYS[n] for n in numbers)
        case ("get", int(n)):
            state = store.get(KEYS[n])
            return encode_state(state) if state is not None else None
        case _:
            return apply(store, step)
    return None


def assert_answer_alike(
    plain: TaskStore, other: TaskStore, steps: list[tuple[object, ...]]
) -> None:
    """Run the steps on both stores: every read, and what each holds after, must be the same
    (a read ahead answers nothing, so only the other store takes it)."""
    for step in steps:
        reference = read(plain, step) if step[0] != "read_ahead" else None
        assert read(other, step) == reference, step
    assert observed(plain) == observed(other)
