"""Where a worker keeps its keys' state: compact for every key, decoded for the keys in use.

A decoded KeyState (pydantic claims, datetimes, precomputed orderings) takes several KB; its
encoded form, what the changelog holds, about 1 KB. So every key is kept encoded, and the decoded
states of the most recently used keys sit in a cache of bounded size shared by the worker's tasks:
memory grows by the encoded size per key once the cache is full, and a key outside the cache
costs one decode when it is next touched.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator

from streams.core.journal import decode_state, encode_state
from streams.core.keystate import KeyState

TASK_RECORD_PREFIX = b"\x00"
"""Keys of task-level records (not a key's state): never a state key, as state keys are text."""


class StateCache:
    """Decoded states of recently used keys, least recently used evicted first."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._states: OrderedDict[bytes, KeyState] = OrderedDict()
        self.misses = 0  # states decoded from their encoded form: claimstream_state_cache_misses

    def get(self, key: bytes) -> KeyState | None:
        state = self._states.get(key)
        if state is not None:
            self._states.move_to_end(key)
        return state

    def put(self, key: bytes, state: KeyState) -> None:
        self._states[key] = state
        self._states.move_to_end(key)
        while len(self._states) > self.capacity:
            self._states.popitem(last=False)

    def discard(self, key: bytes) -> None:
        self._states.pop(key, None)

    def __len__(self) -> int:
        return len(self._states)


class TaskStore:
    """One task's keys: each key's encoded state, decoded on demand through the shared cache."""

    def __init__(self, cache: StateCache) -> None:
        self.cache = cache
        self._encoded: dict[bytes, bytes] = {}
        self._unjournaled: dict[bytes, KeyState] = {}
        self._records: dict[bytes, bytes] = {}  # task-level records, apart from the keys
        self._unjournaled_records: dict[bytes, bytes] = {}
        self.encoded_bytes = 0

    def get(self, key: bytes) -> KeyState | None:
        state = self._unjournaled.get(key) or self.cache.get(key)
        if state is None:
            data = self._encoded.get(key)
            if data is None:
                return None
            state = decode_state(data)
            self.cache.misses += 1
            self.cache.put(key, state)
        return state

    def put(self, key: bytes, state: KeyState) -> None:
        """Keep `state` for `key`, encoded by the next `journal` (a key changed several times
        in one batch is encoded and journaled once)."""
        self._unjournaled[key] = state
        self.cache.put(key, state)

    def get_encoded(self, key: bytes) -> bytes | None:
        """A task-level record (its key starts with `TASK_RECORD_PREFIX`), as last put."""
        pending = self._unjournaled_records.get(key)
        return pending if pending is not None else self._records.get(key)

    def put_encoded(self, key: bytes, value: bytes) -> None:
        """Keep a task-level record, journaled with the next `journal`."""
        self._unjournaled_records[key] = value

    def journal(self) -> dict[bytes, bytes]:
        """Encode the keys changed since the last call: key -> the changelog record's value."""
        changed = {key: encode_state(state) for key, state in self._unjournaled.items()}
        changed.update(self._unjournaled_records)
        self._unjournaled.clear()
        self._unjournaled_records.clear()
        for key, data in changed.items():
            self._keep(key, data)
        return changed

    def load(self, key: bytes, data: bytes | None) -> None:
        """Take a key's state as the changelog has it (None: the key was deleted)."""
        self.cache.discard(key)
        self._unjournaled.pop(key, None)
        self._unjournaled_records.pop(key, None)
        if data is None:
            self.encoded_bytes -= len(self._table(key).pop(key, b""))
        else:
            self._keep(key, data)

    def _keep(self, key: bytes, data: bytes) -> None:
        table = self._table(key)
        self.encoded_bytes += len(data) - len(table.get(key, b""))
        table[key] = data

    def _table(self, key: bytes) -> dict[bytes, bytes]:
        return self._records if key.startswith(TASK_RECORD_PREFIX) else self._encoded

    def evict(self) -> None:
        """Drop this task's keys from the shared cache (the task is moving elsewhere)."""
        for key in self:
            self.cache.discard(key)

    def __iter__(self) -> Iterator[bytes]:
        """The state keys (task-level records are kept apart)."""
        yield from self._encoded
        yield from (key for key in self._unjournaled if key not in self._encoded)

    def __len__(self) -> int:
        return len(self._encoded) + sum(1 for key in self._unjournaled if key not in self._encoded)
