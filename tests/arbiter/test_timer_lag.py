"""The timers not yet ticked, as the worker's gauges read them: how many, and since when the
oldest is due; a key handed out (its tick sent) no longer counts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from streams.arbiter.schedule import Schedule
from streams.core.keys.state import KeyState
from streams.state.cache import StateCache
from streams.state.task import TaskStore

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def _store_with_timers(*dues: datetime) -> TaskStore:
    store = TaskStore(StateCache(100))
    for n, due in enumerate(dues):
        store.put(f"k{n}|f".encode(), KeyState(subject=f"k{n}", field="f", next_check_at=due))
    store.journal()
    store.journaled()
    return store


def test_waiting_counts_the_due_timers_not_handed_out_and_names_the_oldest() -> None:
    schedule = Schedule()
    schedule.attach(0, _store_with_timers(NOW - timedelta(seconds=30), NOW + timedelta(hours=1)))
    schedule.attach(1, _store_with_timers(NOW - timedelta(seconds=90), NOW - timedelta(seconds=5)))
    assert schedule.waiting(NOW, 100) == (3, NOW - timedelta(seconds=90))
    assert schedule.waiting(NOW, 1) == (2, NOW - timedelta(seconds=90))  # counted 1 a task
    schedule.take_due(NOW, 1)  # the oldest's tick goes out
    assert schedule.waiting(NOW, 100) == (2, NOW - timedelta(seconds=30))
    schedule.take_due(NOW)
    assert schedule.waiting(NOW, 100) == (0, None)
