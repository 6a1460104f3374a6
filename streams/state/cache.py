"""The decoded states of a worker's most recently used keys, shared by its tasks.

A decoded KeyState (pydantic claims, datetimes, precomputed orderings) takes several KB; its
encoded form, what the changelog and the key stores hold, about 1 KB. So every key is kept
encoded, and the decoded states of the most recently used keys sit here, at most `capacity` of
them: a key outside the cache costs one decode when it is next touched. Each entry names the
task store that put it, so a task moving elsewhere leaves without a scan of its keys.
"""

from __future__ import annotations

from collections import OrderedDict

from streams.core.keystate import KeyState


class StateCache:
    """Decoded states of recently used keys, least recently used evicted first."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._states: OrderedDict[bytes, KeyState] = OrderedDict()
        self._owners: dict[bytes, int] = {}
        self.misses = 0  # states decoded from their encoded form: claimstream_state_cache_misses

    def get(self, key: bytes) -> KeyState | None:
        state = self._states.get(key)
        if state is not None:
            self._states.move_to_end(key)
        return state

    def put(self, key: bytes, state: KeyState, owner: int = 0) -> None:
        self._states[key] = state
        self._states.move_to_end(key)
        self._owners[key] = owner
        while len(self._states) > self.capacity:
            evicted, _ = self._states.popitem(last=False)
            del self._owners[evicted]

    def discard(self, key: bytes) -> None:
        if self._states.pop(key, None) is not None:
            del self._owners[key]

    def discard_owned(self, owner: int) -> None:
        """Drop every state `owner` put here."""
        for key in [key for key, held in self._owners.items() if held == owner]:
            self.discard(key)

    def __len__(self) -> int:
        return len(self._states)
