"""The arbiter's timers: which owned keys may change by time alone, and which are open conflicts.

Fed by the loop as it applies each key's new state and by a task as it is installed; read by the
loop's tick (the due keys, earliest first) and by `Ownership.open_keys` (the console's queue). A
punctuation queue in Kafka Streams' terms, derived from the tasks' state: the state stays the truth.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from streams.core.contracts import OPEN_OUTCOMES
from streams.core.keystate import KeyState


@dataclass
class Schedule:
    """When each owned key may change by time alone, and which are open conflicts. Derived from
    the tasks' state; the state stays the truth."""

    due: dict[bytes, datetime] = field(default_factory=dict)
    open_since: dict[bytes, tuple[str, datetime]] = field(default_factory=dict)
    # (due, key) in due order; an entry whose key is no longer due then is skipped when reached.
    _queue: list[tuple[datetime, bytes]] = field(default_factory=list)

    def note(self, key: bytes, state: KeyState) -> None:
        self.plan(key, state.next_check_at)
        current = state.current
        if (
            current is not None
            and current.outcome in OPEN_OUTCOMES
            and state.conflict_since is not None
        ):
            self.open_since[key] = (state.field, state.conflict_since)
        else:
            self.open_since.pop(key, None)

    def plan(self, key: bytes, due: datetime | None) -> None:
        if due is None:
            self.due.pop(key, None)
        elif self.due.get(key) != due:
            self.due[key] = due
            heapq.heappush(self._queue, (due, key))

    def forget(self, keys: Iterable[bytes]) -> None:
        for key in keys:
            self.due.pop(key, None)
            self.open_since.pop(key, None)

    def take_due(self, now: datetime, limit: int | None = None) -> list[tuple[bytes, datetime]]:
        """Up to `limit` keys due by `now`, the earliest first; each is handed out once."""
        ready: list[tuple[bytes, datetime]] = []
        planned, heap = self.due, self._queue
        while heap and heap[0][0] <= now and (limit is None or len(ready) < limit):
            due, key = heapq.heappop(heap)
            if planned.get(key) == due:
                del planned[key]
                ready.append((key, due))
        if len(heap) > 2 * len(planned) + 1024:
            # Mostly superseded entries (keys re-planned or forgotten): rebuild from the truth.
            self._queue = [(due, key) for key, due in planned.items()]
            heapq.heapify(self._queue)
        return ready
