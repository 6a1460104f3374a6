"""One task's keys as the arbiter sees them: decoded on demand, journaled per batch, written to
the task's key store once the changelog holds them.

A batch's changed keys wait decoded (`put`) until the batch is journaled: `journal` encodes each
once, however often it changed, and hands the changelog records to the commit. They wait again,
encoded, until the commit strategy says the changelog holds them (`journaled`: acknowledged, or
committed with its transaction), and only then reach the key store, with their timers, in one
write. So a key store holds nothing its changelog does not: a failed batch is forgotten
(`forget_pending`) and the task reads its changelog on from where its store stands.

A restore writes the changelog's records as they are, with each key's timer read from the
record's few fields that say it (`encoded_timer`): no restored key is decoded until it is used.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Literal

import msgspec

from streams.core.keys.journal import UnknownStateFormat, decode_state, encode_state
from streams.core.keys.state import KeyState
from streams.core.records.contracts import OPEN_OUTCOMES
from streams.core.records.instants import micros
from streams.state.cache import StateCache
from streams.state.keystore import RESERVED, Changes, KeyStore, MemoryKeyStore, Timer

_owners = itertools.count(1)

DROPPED = KeyState(subject="", field="")
"""What a dropped key holds until its next journal, which writes its tombstone (`drop`)."""


def open_since(state: KeyState) -> datetime | None:
    """Since when the key is an open conflict, if it is one."""
    current = state.current
    if current is not None and current.outcome in OPEN_OUTCOMES:
        return state.conflict_since
    return None


def timer_of(state: KeyState) -> Timer | None:
    """When the key may next change by time alone, and since when it is an open conflict. A
    timer that waits for a policy deciding the key's field again is not indexed."""
    check_at = state.next_check_at
    due = micros(check_at) if check_at is not None and not state.timer_waits else None
    since = open_since(state)
    if since is not None:
        return Timer(due, state.field, micros(since))
    return Timer(due) if due is not None else None


class _Decided(msgspec.Struct, rename={"outcome": "o"}):
    """A stored decision summary (`streams.core.keys.stored.StoredSummary`): its outcome alone."""

    outcome: str


class _Timing(msgspec.Struct):
    """The fields of a stored state (`streams.core.keys.stored.StoredState`, journal version 4) that
    say its timer; the rest of the record is skipped unread."""

    version: Literal[4]
    field: str
    history: tuple[_Decided, ...] = ()
    conflict_since: int | None = None
    next_check_at: int | None = None
    timer_waits: bool = False


_TIMING = msgspec.msgpack.Decoder(_Timing)


class _Versioned(msgspec.Struct):
    """The fields of a stored state (journal version 4) that name the policy it was decided
    under and the last alias change it was regrouped at; the rest is skipped unread."""

    version: Literal[4]
    policy_version: str | None = None
    aliases_at: int | None = None


_VERSIONED = msgspec.msgpack.Decoder(_Versioned)


def encoded_timer(data: bytes) -> Timer | None:
    """`timer_of` the state `data` encodes, read without decoding the state (an earlier journal
    version is decoded; one this release does not read raises `UnknownStateFormat`)."""
    try:
        timing = _TIMING.decode(data)
    except msgspec.DecodeError:
        return timer_of(decode_state(data))
    due = None if timing.timer_waits else timing.next_check_at
    since, history = timing.conflict_since, timing.history
    if since is not None and history and history[-1].outcome in OPEN_OUTCOMES:
        return Timer(due, timing.field, since)
    return Timer(due) if due is not None else None


class TaskStore:
    """One task's keys: each key's encoded state in `store`, decoded through the shared cache."""

    def __init__(self, cache: StateCache, store: KeyStore | None = None) -> None:
        self.cache = cache
        self.store: KeyStore = store if store is not None else MemoryKeyStore()
        self.owner = next(_owners)  # names this store's entries in the shared cache
        self._unjournaled: dict[bytes, KeyState] = {}
        # The timer of each state a batch was handed (`get`), taken as it was handed: the caller
        # may change that very object in place before it puts it back (`apply_claim` does), so
        # by `put` the object no longer says what it replaced. None: the key had no state.
        self._handed_timers: dict[bytes, Timer | None] = {}
        # The timer each unjournaled key had before its first put since the last journal, where
        # the batch was handed it: the one the store holds when this journal is written (after
        # those before it), so the store need not read it back.
        self._old_timers: dict[bytes, Timer | None] = {}
        # States a batch decoded (from `read_ahead` to `journal`), cached once: those it put
        # are cached as put, the others when it is journaled.
        self._batch_open = False
        self._decoded: dict[bytes, KeyState] = {}
        self._records: dict[bytes, bytes] = {}  # task-level records put since the last journal
        self._pending: deque[Changes] = deque()  # journaled, not yet known to be in the changelog
        self._handed: dict[bytes, int] = {}  # due keys handed out, until their timer is rewritten
        self._read: dict[bytes, bytes | None] = {}  # read ahead from the store (`read_ahead`)

    def get(self, key: bytes) -> KeyState | None:
        """The key's state: in a batch (from `read_ahead` to `journal`), the caller may change it
        in place and `put` it back."""
        unjournaled = self._unjournaled
        state = unjournaled.get(key) or self._decoded.get(key) or self.cache.get(key)
        if state is DROPPED:
            return None
        if state is None:
            data = self._encoded(key)
            if data is not None:
                state = decode_state(data)
                self.cache.misses += 1
                if self._batch_open:
                    self._decoded[key] = state
                else:
                    self.cache.put(key, state, self.owner)
        if self._batch_open and key not in unjournaled and key not in self._handed_timers:
            self._handed_timers[key] = timer_of(state) if state is not None else None
        return state

    def marks_of(self, key: bytes) -> tuple[str | None, int | None]:
        """The policy the key was last decided under and the instant (in microseconds) of the
        last alias change it was regrouped at, read without decoding (or caching) its state
        where it is not decoded already: what the rollout sweep asks of every key."""
        state = self._unjournaled.get(key) or self._decoded.get(key) or self.cache.peek(key)
        if state is DROPPED:
            return None, None
        if state is None:
            data = self._encoded_peek(key)
            if data is None:
                return None, None
            try:
                marks = _VERSIONED.decode(data)
            except msgspec.DecodeError:
                state = decode_state(data)  # an earlier journal version
            else:
                return marks.policy_version, marks.aliases_at
        regrouped_at = state.aliases_at
        return state.policy_version, None if regrouped_at is None else micros(regrouped_at)

    def _encoded_peek(self, key: bytes) -> bytes | None:
        for changes in reversed(self._pending):
            if key in changes.states:
                return changes.states[key]
        return self._read.get(key) or self.store.get(key)

    def _encoded(self, key: bytes) -> bytes | None:
        for changes in reversed(self._pending):
            if key in changes.states:
                return changes.states[key]
        read = self._read
        if key in read:
            return read.pop(key)
        return self.store.get(key)

    def read_ahead(self, keys: Iterable[bytes]) -> None:
        """Read the stored states of the keys a batch is about to `get` that are not decoded
        yet, in one `get_many`: on disk one multi-get for the batch instead of a get a key.
        What the batch does not take is forgotten by the next read ahead or store write."""
        unjournaled, decoded, cached = self._unjournaled, self._decoded, self.cache
        wanted = [
            key
            for key in dict.fromkeys(keys)
            if key not in unjournaled and key not in decoded and key not in cached
        ]
        self._read = dict(zip(wanted, self.store.get_many(wanted), strict=True))
        self._batch_open = True

    def put(self, key: bytes, state: KeyState) -> None:
        """Keep `state` for `key`, encoded by the next `journal` (a key changed several times
        in one batch is encoded and journaled once)."""
        unjournaled = self._unjournaled
        if key not in unjournaled:
            self._decoded.pop(key, None)  # cached as put, below
            handed = self._handed_timers
            if key in handed:  # else the store reads the key's timer back when it writes
                self._old_timers[key] = handed.pop(key)
        unjournaled[key] = state
        self.cache.put(key, state, self.owner)

    def drop(self, key: bytes) -> None:
        """Forget `key`: the next `journal` writes its tombstone (the changelog record that
        deletes it), and it reads as absent from now on."""
        self.put(key, DROPPED)
        self.cache.discard(key)

    def get_encoded(self, key: bytes) -> bytes | None:
        """A task-level record (its key starts with `RESERVED`), as last put."""
        record = self._records.get(key)
        return record if record is not None else self._encoded(key)

    def put_encoded(self, key: bytes, value: bytes) -> None:
        """Keep a task-level record, journaled with the next batch like a changed key."""
        if not key.startswith(RESERVED):
            raise ValueError(f"task-level record keys start with {RESERVED!r}: {key!r}")
        self._records[key] = value

    def journal(self) -> dict[bytes, bytes | None]:
        """Encode what changed since the last call: key -> the changelog record's value (None:
        the key was dropped, a tombstone)."""
        changed: dict[bytes, bytes | None] = {
            key: None if state is DROPPED else encode_state(state)
            for key, state in self._unjournaled.items()
        }
        timers = {key: timer_of(state) for key, state in self._unjournaled.items()}
        old_timers, self._old_timers = self._old_timers, {}
        changed.update(self._records)
        self._unjournaled.clear()
        self._close_batch()
        self._records = {}
        self._pending.append(Changes(dict(changed), timers, old_timers))
        return changed

    def _close_batch(self) -> None:
        """Cache what the batch decoded and did not put."""
        cache, owner = self.cache, self.owner
        for key, state in self._decoded.items():
            cache.put(key, state, owner)
        self._decoded.clear()
        self._handed_timers.clear()
        self._batch_open = False

    def journaled(self) -> None:
        """The changelog holds the oldest journal not yet written: write it to the store."""
        if not self._pending:
            return
        changes = self._pending.popleft()
        self._read.clear()  # read before the write: what the pending changes overrode
        self.store.write(changes)
        for key in changes.timers:
            self._handed.pop(key, None)

    def forget_pending(self) -> None:
        """Forget every change the changelog may not hold (a failed batch)."""
        for key in [*self._unjournaled, *(k for c in self._pending for k in c.states)]:
            self.cache.discard(key)
        self._unjournaled.clear()
        self._old_timers.clear()
        self._handed_timers.clear()
        self._decoded.clear()
        self._batch_open = False
        self._records = {}
        self._pending.clear()
        self._handed.clear()
        self._read.clear()

    def load(self, key: bytes, data: bytes | None) -> None:
        """Take a key's state as the changelog has it (None: the key was deleted)."""
        self.load_all([(key, data)])

    def load_all(self, records: Iterable[tuple[bytes, bytes | None]], where: str = "") -> None:
        """Take changelog records, in their order, in one write, each key's timer with its
        state; `where` names the records' place should one be of an unknown format."""
        changes = Changes()
        states, timers = changes.states, changes.timers
        for key, data in records:
            self.cache.discard(key)
            self._unjournaled.pop(key, None)
            self._old_timers.pop(key, None)
            self._handed_timers.pop(key, None)
            self._decoded.pop(key, None)
            for pending in self._pending:  # the store's timer is now this record's
                pending.old_timers.pop(key, None)
            states[key] = data
            if key.startswith(RESERVED):
                continue
            try:
                timers[key] = encoded_timer(data) if data is not None else None
            except UnknownStateFormat as exc:
                raise UnknownStateFormat(exc.version, f"{where}key {key!r}") from None
        self._read.clear()
        self.store.write(changes)

    def due(self, until: int, limit: int) -> list[tuple[int, bytes]]:
        """Up to `limit` (due, key) pairs due by `until`, earliest first, not yet handed out;
        keys changing in a batch not yet written wait for it."""
        # The keys handed out are due (the earliest, mostly); the changing ones seldom are. So
        # the store is asked for enough to pass the handed ones, and for enough to pass the
        # changing ones too only if that fell short and it has more.
        asked = limit + len(self._handed)
        stored = self.store.due(until, asked)
        found = self._not_handed_nor_changing(stored, limit)
        if len(found) < limit and len(stored) == asked:
            changing = len(self._unjournaled) + sum(len(c.timers) for c in self._pending)
            if changing:
                found = self._not_handed_nor_changing(
                    self.store.due(until, asked + changing), limit
                )
        return found

    def _not_handed_nor_changing(
        self, stored: list[tuple[int, bytes]], limit: int
    ) -> list[tuple[int, bytes]]:
        # Only the due keys are looked up among the changing ones (most ticks find none due).
        unjournaled, pending, handed = self._unjournaled, self._pending, self._handed
        found: list[tuple[int, bytes]] = []
        for due, key in stored:
            if len(found) >= limit:
                break
            if handed.get(key) == due or key in unjournaled:
                continue
            if not any(key in changes.timers for changes in pending):
                found.append((due, key))
        return found

    def hand_out(self, due: Iterable[tuple[int, bytes]]) -> None:
        """These timers were handed out: not again until they change."""
        self._handed.update((key, at) for at, key in due)

    def open_conflicts(self) -> Iterator[tuple[bytes, str, int]]:
        return self.store.open_conflicts()

    def evict(self) -> None:
        """Drop this task's keys from the shared cache (the task is moving elsewhere)."""
        self.cache.discard_owned(self.owner)
        self._decoded.clear()

    def count(self) -> int:
        """Keys in the store (an estimate on disk): what the worker's gauge shows."""
        return self.store.count()

    @property
    def encoded_bytes(self) -> int:
        return self.store.size()

    def _changing(self) -> set[bytes]:
        keys = {*self._unjournaled, *(k for c in self._pending for k in c.states)}
        return {key for key in keys if not key.startswith(RESERVED)}

    def __iter__(self) -> Iterator[bytes]:
        changing = self._changing()
        yield from changing
        yield from (key for key in self.store.state_keys() if key not in changing)

    def __len__(self) -> int:
        changing = self._changing()
        return self.store.count() + sum(1 for key in changing if self.store.get(key) is None)
