"""The arbiter's timers: which owned keys may change by time alone, and which are open conflicts.

The timers themselves live in each task's key store, ordered by instant (`streams.state`), so
they need no key in memory: the tick reads the due keys of every open task, earliest first
across them. The open conflicts (the console's queue, the open-conflict gauges) are kept here
per task, loaded from its store when the task is installed and kept current by the loop as it
applies each key's new state. A punctuation queue in Kafka Streams' terms, derived from the
tasks' state: the state stays the truth.
"""

from __future__ import annotations

import heapq
import itertools
import sys
from collections import ChainMap, Counter
from datetime import datetime

from streams.arbiter.sweep import RolloutSweep
from streams.core.keys.journal import decode_state
from streams.core.keys.state import KeyState
from streams.core.keys.steward_log import Standing
from streams.core.keys.stored import holds_steward_log
from streams.core.records.instants import instant, micros
from streams.core.records.policy import Policy
from streams.ops.metrics import TIMERS_COUNTED, Metrics
from streams.state.task import TaskStore, open_since

PENDING = Standing.PENDING


class Schedule:
    """When each owned key may change by time alone, and which are open conflicts."""

    def __init__(self) -> None:
        self._stores: dict[int, TaskStore] = {}
        self._open: dict[int, dict[bytes, tuple[str, datetime]]] = {}
        self._reviewed: dict[int, dict[bytes, str]] = {}
        """key -> field of each key with proposals waiting for review, per task: those of its
        open conflicts when it was installed, then every key as the loop applies its state."""
        self.sweep = RolloutSweep()
        """The keys that change by a policy taking effect: walked, not ordered by instant."""

    @property
    def open_since(self) -> ChainMap[bytes, tuple[str, datetime]]:
        """key -> (field, since) for every open conflict of the open tasks."""
        return ChainMap(*self._open.values())

    def attach(self, partition: int, store: TaskStore) -> None:
        """The task is in service: its timers count, its open conflicts are listed."""
        self._stores[partition] = store
        self.sweep.attach(partition, store)
        self._open[partition] = {
            key: (name, instant(since)) for key, name, since in store.open_conflicts()
        }
        self._reviewed[partition] = {
            key: name for key, (name, _) in self._open[partition].items() if _waits(store, key)
        }

    def detach(self, partition: int) -> None:
        self._stores.pop(partition, None)
        self._open.pop(partition, None)
        self._reviewed.pop(partition, None)
        self.sweep.detach(partition)

    def waiting(self, now: datetime, counted: int) -> tuple[int, datetime | None]:
        """The timers due by `now` not yet handed out (up to `counted` a task), and the instant
        the earliest of them came due: how far behind the ticks are."""
        until, count, earliest = micros(now), 0, None
        for store in self._stores.values():
            due = store.due(until, counted)
            count += len(due)
            if due and (earliest is None or due[0][0] < earliest):
                earliest = due[0][0]
        return count, instant(earliest) if earliest is not None else None

    def report(self, metrics: Metrics, now: datetime, policy: Policy) -> None:
        """Refresh the gauges of what the schedule holds: the open conflicts (count and oldest
        age per field, how many are past their field's `escalate_after` under `policy`), the
        keys waiting for review, the timers not yet ticked (count and lag), the keys left to
        sweep."""
        ages: dict[str, list[float]] = {}
        for field_name, since in self.open_since.values():
            ages.setdefault(field_name, []).append((now - since).total_seconds())
        metrics.set_open_conflicts(ages)
        metrics.stewards.set(
            {name: _overdue(policy, name, field_ages) for name, field_ages in ages.items()},
            Counter(name for listed in self._reviewed.values() for name in listed.values()),
        )
        waiting, earliest = self.waiting(now, TIMERS_COUNTED)
        lag_s = (now - earliest).total_seconds() if earliest is not None else 0.0
        metrics.timers.set(waiting, lag_s)
        metrics.policies.sweep_remaining.set(self.sweep.remaining)
        metrics.aliases.pending.set(self.sweep.regroups_pending)

    def forget(self, partition: int, key: bytes) -> None:
        """The key was dropped: it is no longer open nor waiting for a review."""
        self._open.get(partition, {}).pop(key, None)
        self._reviewed.get(partition, {}).pop(key, None)

    def note(self, partition: int, key: bytes, state: KeyState) -> None:
        """The key's new state, as the loop applies it."""
        listed = self._open.get(partition)
        if listed is None:
            return
        reviewed = self._reviewed[partition]
        if state.steward_log and any(s.standing is PENDING for s in state.steward_log):
            reviewed[key] = state.field
        elif reviewed:
            reviewed.pop(key, None)
        since = open_since(state)
        if since is None:
            listed.pop(key, None)
        else:
            listed[key] = (state.field, since)

    def take_due(self, now: datetime, limit: int | None = None) -> list[tuple[bytes, datetime]]:
        """Up to `limit` keys due by `now`, the earliest first; each is handed out once.

        Each task is asked for its share of the budget first: asked for the whole budget, every
        task read and put back that many of its due timers at each tick (about 1 ms a tick, 4%
        of the loop, at half load beside a wave of stale keys). Only a task that gave all it was
        asked for, and whose last would not be taken, may hold earlier ones: it is asked again
        for the whole budget, so the answer is the one the whole budget from each would give."""
        until, stores = micros(now), self._stores
        budget = sys.maxsize if limit is None else limit
        share = -(-budget // len(stores)) if stores and limit is not None else budget
        found = {p: store.due(until, share) for p, store in stores.items()}
        chosen = _earliest(found, budget)
        if share < budget:
            again = [
                p
                for p, due in found.items()
                if len(due) == share and (len(chosen) < budget or due[-1] < chosen[-1][0])
            ]
            if again:
                found.update({p: stores[p].due(until, budget) for p in again})
                chosen = _earliest(found, budget)
        for partition, store in stores.items():
            store.hand_out(entry for entry, p in chosen if p == partition)
        return [(key, instant(due)) for (due, key), _ in chosen]


def _earliest(
    found: dict[int, list[tuple[int, bytes]]], budget: int
) -> list[tuple[tuple[int, bytes], int]]:
    """The first `budget` of the tasks' due timers, earliest first, with their task."""
    runs = [[(entry, p) for entry in due] for p, due in found.items()]
    return list(itertools.islice(heapq.merge(*runs), budget))


def _waits(store: TaskStore, key: bytes) -> bool:
    """Whether the stored key has proposals waiting for review: read only where its state holds
    a steward log (`stored.holds_steward_log`), which few do."""
    encoded = store.get_encoded(key)
    if encoded is None or not holds_steward_log(encoded):
        return False
    return any(s.standing is PENDING for s in decode_state(encoded).steward_log)


def _overdue(policy: Policy, field_name: str, ages: list[float]) -> int:
    rules = policy.rules_for(field_name)
    if rules is None:
        return 0
    due_s = rules.escalate_after.total_seconds()
    return sum(age >= due_s for age in ages)
