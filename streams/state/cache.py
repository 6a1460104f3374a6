"""The decoded states of a worker's most recently used keys, shared by its tasks.

A decoded KeyState (admitted claims, decision summaries, datetimes, precomputed orderings, and
after a transition its last arbitration) takes about five times its encoded form, what the
changelog and the key stores hold: about 1 KB a claim. So every key is
kept encoded, and the decoded states of the most recently used keys sit here, at most `capacity`
of them and at most `capacity_bytes` by their estimated size (`decoded_bytes`): a key outside
the cache costs one decode when it is next touched. Each entry names the task store that put it,
so a task moving elsewhere leaves without a scan of its keys.
"""

from __future__ import annotations

from collections import OrderedDict

from streams.core.keys.state import KeyState
from streams.settings import Settings

# What each part of a decoded state retains, measured with tracemalloc by dropping each part of
# the states the bench's claims leave (three workloads: 3.1, 8.2 and 15.5 claims a key over
# 9,500, 12,000 and 3,000 keys: the bench's claims run through
# `streams.devkit.bench.shell`) and fitted by hand: the whole estimate falls within 3% of what
# the three hold in all. A claim is its admitted form, its LeanClaim (names interned, as the
# reader and the journal intern them; instants as integers only, and one attributes map shared
# by all claims that have none), its orderings and its journaled bytes: 935-950 bytes a claim
# admitted from the reader, 765-825 decoded from the journal (which builds one Money for the
# equal amounts of a key); the estimate sits between, within 11% of either. KEY_BYTES is the
# state's own object with its tuples and this cache's entry (the key, its place in the order,
# its owner and size).
KEY_BYTES = 500
CLAIM_BYTES = 850
SUMMARY_BYTES = 480
RESOLUTION_BYTES = 1450
DISPUTED_BYTES = 100
# A state a transition left also holds its last arbitration: its own claims list and roles,
# the verdict, the belief and the decision id (the Decision and its evidence records are built
# for sending and not kept): 670 bytes at 3 claims, 770-840 at 7.5-8, 1,780 at 16 (the roles
# dict grows in steps), fitted within -22%/+17%.
ARBITRATION_BYTES = 450
ARBITRATION_CLAIM_BYTES = 60


def decoded_bytes(state: KeyState) -> int:
    """An estimate of the memory a decoded state holds while cached, from its counts alone."""
    claims = len(state.claims)
    held = (
        KEY_BYTES
        + CLAIM_BYTES * claims
        + SUMMARY_BYTES * len(state.history)
        + RESOLUTION_BYTES * len(state.resolutions)
        + DISPUTED_BYTES * len(state.disputed)
    )
    if state.arbitration is not None:
        held += ARBITRATION_BYTES + ARBITRATION_CLAIM_BYTES * claims
    return held


class StateCache:
    """Decoded states of recently used keys, least recently used evicted first, bounded by count
    and by estimated bytes (None: by count alone); the newest state stays however large."""

    def __init__(self, capacity: int, capacity_bytes: int | None = None) -> None:
        self.capacity = capacity
        self.capacity_bytes = capacity_bytes
        self._states: OrderedDict[bytes, KeyState] = OrderedDict()
        self._held: dict[bytes, tuple[int, int]] = {}  # key -> (owner, estimated bytes)
        self.bytes = 0  # estimated bytes of the states held
        self.misses = 0  # states decoded from their encoded form: claimstream_state_cache_misses

    @classmethod
    def for_worker(cls, settings: Settings) -> StateCache:
        """The cache as a worker's settings bound it (`state_cache_keys`, `state_cache_mb`)."""
        return cls(settings.state_cache_keys, settings.state_cache_mb * 2**20)

    def peek(self, key: bytes) -> KeyState | None:
        """The key's cached state, its place in the eviction order left as it is."""
        return self._states.get(key)

    def get(self, key: bytes) -> KeyState | None:
        state = self._states.get(key)
        if state is not None:
            self._states.move_to_end(key)
        return state

    def put(self, key: bytes, state: KeyState, owner: int = 0) -> None:
        size = decoded_bytes(state)
        held = self._held.get(key)
        if held is not None:
            self.bytes -= held[1]
        self._states[key] = state
        self._states.move_to_end(key)
        self._held[key] = (owner, size)
        self.bytes += size
        limit = self.capacity_bytes
        while len(self._states) > self.capacity or (
            limit is not None and self.bytes > limit and len(self._states) > 1
        ):
            evicted, _ = self._states.popitem(last=False)
            self.bytes -= self._held.pop(evicted)[1]

    def __contains__(self, key: bytes) -> bool:
        """Whether `key`'s state is held (without marking it used)."""
        return key in self._states

    def discard(self, key: bytes) -> None:
        if self._states.pop(key, None) is not None:
            self.bytes -= self._held.pop(key)[1]

    def discard_owned(self, owner: int) -> None:
        """Drop every state `owner` put here."""
        for key in [key for key, (held, _) in self._held.items() if held == owner]:
            self.discard(key)

    def __len__(self) -> int:
        return len(self._states)
