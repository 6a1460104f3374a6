"""The arbiter's schedule: each due key handed out once, earliest first within a budget, and a
budget shared among the tasks as the whole budget from each would be. (The ticks it feeds run
against real brokers in tests/stream and tests/reliability.)"""

from __future__ import annotations

import heapq
import itertools
from datetime import UTC, datetime, timedelta

from hypothesis import example, given, settings
from hypothesis import strategies as st

from streams.arbiter.schedule import Schedule
from streams.core.admission.intake import admit
from streams.core.keys.journal import encode_state
from streams.core.keys.state import KeyState
from streams.core.keys.transitions import add_claim, add_resolution
from streams.core.records.contracts import Resolution
from streams.core.records.instants import instant, micros
from streams.core.records.policy import load_policy
from streams.ops.metrics import Metrics
from streams.state.cache import StateCache
from streams.state.keystore import Changes, Timer
from streams.state.task import TaskStore, timer_of
from tests.support.builders import NOW, REPO, claim


class Planner:
    """A schedule over one task whose store's timers are written as a journal would."""

    def __init__(self) -> None:
        self.store = TaskStore(StateCache(10))
        self.schedule = Schedule()
        self.schedule.attach(0, self.store)

    def plan(self, key: bytes, due: datetime | None) -> None:
        timer = Timer(micros(due)) if due is not None else None
        self.store.store.write(Changes(timers={key: timer}))


def test_the_schedule_hands_out_each_due_key_once_and_forgets_revoked_keys() -> None:
    now = datetime(2026, 11, 29, 12, tzinfo=UTC)
    planner = Planner()
    schedule = planner.schedule
    settled = KeyState("acme", "order.payment_status")
    planner.plan(b"a|f", now - timedelta(seconds=1))
    planner.plan(b"b|f", now + timedelta(seconds=1))
    schedule.note(0, b"c|f", settled)  # nothing can change it by time alone: not scheduled
    assert schedule.take_due(now) == [(b"a|f", now - timedelta(seconds=1))]
    assert schedule.take_due(now) == []
    schedule.detach(0)  # the task is revoked
    assert schedule.take_due(now + timedelta(hours=1)) == []


def test_due_keys_are_handed_out_earliest_first_within_a_budget() -> None:
    now = datetime(2026, 11, 29, 12, tzinfo=UTC)
    planner = Planner()
    schedule = planner.schedule
    for n in range(10):
        planner.plan(f"k{n}|f".encode(), now - timedelta(seconds=10 - n))
    planner.plan(b"k0|f", now - timedelta(seconds=30))  # re-planned: the old entry is void
    planner.plan(b"k9|f", None)  # settled: no longer due
    first = schedule.take_due(now, limit=3)
    assert first == [
        (b"k0|f", now - timedelta(seconds=30)),
        (b"k1|f", now - timedelta(seconds=9)),
        (b"k2|f", now - timedelta(seconds=8)),
    ]
    rest = schedule.take_due(now, limit=100)
    assert [key for key, _ in rest] == [f"k{n}|f".encode() for n in range(3, 9)]
    assert schedule.take_due(now) == []


NOON = datetime(2026, 11, 29, 12, tzinfo=UTC)


def _reference_take_due(
    schedule: Schedule, now: datetime, limit: int
) -> list[tuple[bytes, datetime]]:
    """Every task asked for the whole budget: what the schedule's answer must equal."""
    stores = schedule._stores
    found = {p: store.due(micros(now), limit) for p, store in stores.items()}
    runs = [[(entry, p) for entry in due] for p, due in found.items()]
    chosen = list(itertools.islice(heapq.merge(*runs), limit))
    for partition, store in stores.items():
        store.hand_out(entry for entry, p in chosen if p == partition)
    return [(key, instant(due)) for (due, key), _ in chosen]


def _scheduled(timers: list[list[int | None]]) -> Schedule:
    """A schedule over one task per list; the list's n-th timer is key n's, in seconds."""
    schedule = Schedule()
    for partition, planned in enumerate(timers):
        store = TaskStore(StateCache(10))
        store.store.write(
            Changes(
                timers={
                    f"p{partition}k{n}|f".encode(): (
                        Timer(micros(NOON + timedelta(seconds=s))) if s is not None else None
                    )
                    for n, s in enumerate(planned)
                }
            )
        )
        schedule.attach(partition, store)
    return schedule


@settings(max_examples=300)
@given(
    st.lists(st.lists(st.none() | st.integers(-20, 20), max_size=12), max_size=5),
    st.lists(st.tuples(st.integers(-20, 25), st.integers(1, 12)), min_size=1, max_size=6),
)
@example(timers=[[-9, -8, -7, -6], [-20]], takes=[(0, 2)])  # one task holds all but one
@example(timers=[[-9, -8], [-20, -19, -18]], takes=[(0, 4), (0, 2)])  # short, then handed
def test_the_tasks_asked_for_their_share_give_what_the_whole_budget_from_each_would(
    timers: list[list[int | None]], takes: list[tuple[int, int]]
) -> None:
    schedule, reference = _scheduled(timers), _scheduled(timers)
    for seconds, limit in takes:
        now = NOON + timedelta(seconds=seconds)
        assert schedule.take_due(now, limit) == _reference_take_due(reference, now, limit)


def test_the_gauges_count_overdue_tasks_and_keys_waiting_for_review_across_a_restart() -> None:
    policy = load_policy(REPO / "examples" / "policy.yaml")
    review = policy.defaults.review.model_copy(update={"approvals": 1})
    policy = policy.model_copy(
        update={"defaults": policy.defaults.model_copy(update={"review": review})}
    )
    field = "order.payment_status"
    rules = policy.rules_for(field)
    assert rules is not None
    state = None
    for c in (claim(1), claim(2, source="billing-export", value="overdue")):
        state = add_claim(state, admit(c, policy, NOW), rules, policy.version, NOW).state
    assert state is not None
    proposal = Resolution.model_validate(
        {
            "resolution_id": "r1",
            "subject": state.subject,
            "field": field,
            "value": "paid",
            "decided_by": "alice",
            "decided_at": NOW,
        }
    )
    state = add_resolution(state, proposal, rules, policy.version, NOW).state
    key = f"{state.subject}|{field}".encode()
    store = TaskStore(StateCache(10))
    store.store.write(Changes(states={key: encode_state(state)}, timers={key: timer_of(state)}))
    schedule, metrics = Schedule(), Metrics(policy)
    schedule.attach(0, store)  # as a restart installs the task: from its store
    late = NOW + rules.escalate_after

    def gauges() -> tuple[float | None, float | None]:
        def value(name: str) -> float | None:
            return metrics.registry.get_sample_value(name, {"field": field})

        return value("claimstream_overdue_tasks"), value("claimstream_reviews_waiting")

    schedule.report(metrics, late - timedelta(seconds=1), policy)
    assert gauges() == (0.0, 1.0)
    schedule.report(metrics, late, policy)
    assert gauges() == (1.0, 1.0)
    rejected = proposal.model_copy(
        update={"resolution_id": "x1", "act": "reject", "target_id": "r1", "value": None}
    )
    state = add_resolution(state, rejected, rules, policy.version, NOW).state
    schedule.note(0, key, state)
    schedule.report(metrics, late, policy)
    assert gauges() == (1.0, 0.0)
