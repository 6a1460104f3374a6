"""The interface one task's encoded key states and timers live behind, and its memory form.

A key store holds, per key, the bytes its changelog record holds, and two indexes derived from
the state: when the key may next change by time alone (ordered by that instant, so the due keys
are read earliest first without every key in memory), and, for an open conflict, since when it
is open. A task store (`streams.state.task`) writes a batch's changes in one `write`, once the
changelog holds them. Keys starting with `RESERVED` are task-level records (not key states):
stored and read like any other, never iterated as keys nor indexed.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

RESERVED = b"\x00"  # first byte of task-level records kept beside the key states


class Timer(NamedTuple):
    """What a key's state says about time: when it is next due (micros), and, while it is an open
    conflict, its field and since when (micros)."""

    due: int | None
    open_field: str | None = None
    open_since: int | None = None


@dataclass
class Changes:
    """One atomic write: encoded states (None deletes) and timers (None: nothing due, not open).

    `old_timers` holds, for some of the keys in `timers`, the timer the store holds for the key
    when this write applies (that of the state it replaces), as its writer knew it: a store that
    indexes timers need not read those back."""

    states: dict[bytes, bytes | None] = field(default_factory=dict)
    timers: dict[bytes, Timer | None] = field(default_factory=dict)
    old_timers: dict[bytes, Timer | None] = field(default_factory=dict)


class KeyStore(Protocol):
    """One task's encoded key states and their timers."""

    def get(self, key: bytes) -> bytes | None: ...

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        """`get` of each key, in one read."""

    def write(self, changes: Changes) -> None:
        """Apply `changes` all at once."""

    def state_keys(self) -> Iterator[bytes]:
        """The stored keys, task-level records excepted."""

    def due(self, until: int, limit: int) -> list[tuple[int, bytes]]:
        """Up to `limit` (due, key) pairs due by `until`, earliest first."""

    def open_conflicts(self) -> Iterator[tuple[bytes, str, int]]:
        """(key, field, since) for every key that is an open conflict."""

    def count(self) -> int:
        """Stored keys (an estimate on disk)."""

    def size(self) -> int:
        """Stored bytes (an estimate on disk)."""

    def flush(self) -> None:
        """Make every write so far survive a crash of the process and of the machine."""

    def wipe(self) -> None:
        """Forget everything."""

    def close(self) -> None: ...


class MemoryKeyStore:
    """A key store in the process's memory: the default; a restart rebuilds it from the
    changelog."""

    def __init__(self) -> None:
        self._states: dict[bytes, bytes] = {}
        self._bytes = 0
        self._keys = 0  # task-level records excepted
        self._due: dict[bytes, int] = {}
        # (due, key) in due order; an entry whose key is no longer due then is skipped.
        self._queue: list[tuple[int, bytes]] = []
        self._open: dict[bytes, tuple[str, int]] = {}

    def get(self, key: bytes) -> bytes | None:
        return self._states.get(key)

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        states = self._states
        return [states.get(key) for key in keys]

    def write(self, changes: Changes) -> None:
        for key, data in changes.states.items():
            old = self._states.pop(key, None)
            if old is not None:
                self._bytes -= len(old)
                self._keys -= not key.startswith(RESERVED)
            if data is not None:
                self._states[key] = data
                self._bytes += len(data)
                self._keys += not key.startswith(RESERVED)
        for key, timer in changes.timers.items():
            self._plan(key, timer)
        if len(self._queue) > 2 * len(self._due) + 1024:
            # Mostly superseded entries (keys re-planned or settled): rebuild from the truth.
            self._queue = [(due, key) for key, due in self._due.items()]
            heapq.heapify(self._queue)

    def _plan(self, key: bytes, timer: Timer | None) -> None:
        due = timer.due if timer is not None else None
        if due is None:
            self._due.pop(key, None)
        elif self._due.get(key) != due:
            self._due[key] = due
            heapq.heappush(self._queue, (due, key))
        if timer is not None and timer.open_field is not None and timer.open_since is not None:
            self._open[key] = (timer.open_field, timer.open_since)
        else:
            self._open.pop(key, None)

    def state_keys(self) -> Iterator[bytes]:
        return (key for key in list(self._states) if not key.startswith(RESERVED))

    def due(self, until: int, limit: int) -> list[tuple[int, bytes]]:
        queue, planned = self._queue, self._due
        found: list[tuple[int, bytes]] = []
        while queue and queue[0][0] <= until and len(found) < limit:
            due, key = heapq.heappop(queue)
            if planned.get(key) == due and (not found or found[-1] != (due, key)):
                found.append((due, key))
        for entry in found:  # read, not taken: a key stays due until its state says otherwise
            heapq.heappush(queue, entry)
        return found

    def open_conflicts(self) -> Iterator[tuple[bytes, str, int]]:
        return ((key, name, since) for key, (name, since) in list(self._open.items()))

    def count(self) -> int:
        return self._keys

    def size(self) -> int:
        return self._bytes

    def flush(self) -> None:
        """Nothing survives the process: nothing to make durable."""

    def wipe(self) -> None:
        self._states.clear()
        self._bytes = self._keys = 0
        self._due.clear()
        self._queue.clear()
        self._open.clear()

    def close(self) -> None:
        """Nothing to release."""
