"""A task store's due keys are those its store has due, less the ones handed out and the ones
changing in a batch not yet written: the due keys alone are looked up among the changing ones,
with the answer of a set of every changing key built for each call."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.records.instants import micros
from streams.state.cache import StateCache
from streams.state.task import TaskStore
from tests.support.builders import NOW
from tests.support.store_steps import STEP, apply

LATER = micros(NOW + timedelta(days=400))
HAND_OUT = st.tuples(st.just("hand_out"), st.integers(1, 4))


def reference_due(store: TaskStore, until: int, limit: int) -> list[tuple[int, bytes]]:
    changing = set(store._unjournaled).union(*(c.timers for c in store._pending))
    return [
        (due, key)
        for due, key in store.store.due(until, limit + len(store._handed) + len(changing))
        if store._handed.get(key) != due and key not in changing
    ][:limit]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(STEP, HAND_OUT), max_size=40), st.integers(1, 4))
def test_due_keys_are_those_a_set_of_the_changing_keys_leaves(
    steps: list[tuple[object, ...]], limit: int
) -> None:
    store = TaskStore(StateCache(2))
    for step in steps:
        if step[0] == "hand_out":
            store.hand_out(store.due(LATER, int(str(step[1]))))
        else:
            apply(store, step)
        assert store.due(LATER, limit) == reference_due(store, LATER, limit), step
