"""A task's key store on local disk (`store: rocksdb://`): memory bounded by RocksDB's caches,
whatever the number of keys.

One RocksDB database per task, under the task's directory (`streams.state.local`). Its column
families:
- `default`: key -> the encoded state, as its changelog record holds it (and task-level
  records, keys starting with `RESERVED`);
- `due`: due instant (8 bytes, big-endian micros) + key -> nothing: the timers, read in due order;
- `due_of`: key -> its due instant, to find a key's old `due` entry when it is re-planned;
- `open`: key -> since (8 bytes) + field: the open conflicts.

Writes are not synced one by one (a batch is in the changelog before it is written here, and
the changelog is the truth); `flush` syncs the write-ahead log before a checkpoint names them.
Modelled on Kafka Streams' `RocksDBStore` and quix-streams' `state/rocksdb/`.
"""

from __future__ import annotations

import shutil
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import cast

from rocksdict import (
    BlockBasedOptions,
    Cache,
    Options,
    Rdict,
    ReadOptions,
    WriteBatch,
    WriteBufferManager,
)

from streams.state.keystore import Changes, Timer

_INSTANT = struct.Struct(">Q")
_FAMILIES = ("due", "due_of", "open")
WRITE_BUFFER_BYTES = 8 * 1024 * 1024  # one memtable of one column family, at most
WRITE_BUFFERS_BYTES = 64 * 1024 * 1024  # every memtable of every task store of a worker


class Budget:
    """What every task store of a worker shares: the block cache reads keep in memory, and the
    memtables' bound. RocksDB's memory is these, whatever the number of keys."""

    def __init__(self, cache_bytes: int) -> None:
        self.cache = Cache(cache_bytes)
        self.write_buffers = WriteBufferManager(WRITE_BUFFERS_BYTES, False)


def _options(budget: Budget) -> Options:
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    options.create_missing_column_families(True)
    options.set_write_buffer_size(WRITE_BUFFER_BYTES)
    options.set_max_write_buffer_number(2)
    options.set_write_buffer_manager(budget.write_buffers)
    options.set_max_open_files(256)
    # A bloom filter over the memtable's whole keys too: a key not stored costs no memtable
    # search (most keys read for their old timer have none).
    options.set_memtable_prefix_bloom_ratio(0.02)
    options.set_memtable_whole_key_filtering(True)
    table = BlockBasedOptions()
    table.set_block_cache(budget.cache)
    table.set_cache_index_and_filter_blocks(True)
    table.set_bloom_filter(10, False)  # a key not stored (a new one) costs no disk read
    options.set_block_based_table_factory(table)
    return options


def _due_bytes(timer: Timer | None) -> bytes | None:
    """The timer's instant as `due_of` holds it."""
    return _INSTANT.pack(timer.due) if timer is not None and timer.due is not None else None


def _is_open(timer: Timer) -> bool:
    """Whether the timer names an open conflict, as `open` holds it."""
    return timer.open_field is not None and timer.open_since is not None


class RocksKeyStore:
    """A task's encoded key states and timers in a RocksDB database at `path`."""

    def __init__(self, path: Path, budget: Budget) -> None:
        self.path = path
        self._budget = budget
        self._open()

    def _open(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        self._db = Rdict(
            str(self.path),
            options=_options(self._budget),
            column_families={name: _options(self._budget) for name in _FAMILIES},
        )
        self._due = self._db.get_column_family("due")
        self._due_of = self._db.get_column_family("due_of")
        self._open_cf = self._db.get_column_family("open")
        self._handles = [self._db.get_column_family_handle(name) for name in _FAMILIES]

    def get(self, key: bytes) -> bytes | None:
        value: bytes | None = self._db.get(key)
        return value

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        # One multi-get: RocksDB looks the keys up together, sorted, where a get a key pays
        # for its own call, filter and index searches and block read.
        found = cast(
            list[bytes | None], self._db.get(cast(list[str | int | float | bytes | bool], keys))
        )
        return found

    def write(self, changes: Changes) -> None:
        batch = WriteBatch(raw_mode=True)
        for key, data in changes.states.items():
            if data is None:
                batch.delete(key)
            else:
                batch.put(key, data)
        # Each key's old timer: its old `due` entry is deleted, and a key that was no open
        # conflict leaves no tombstone in `open`. Those the writer did not carry are read, in
        # one multi-get per family.
        known = changes.old_timers
        unknown = [key for key in changes.timers if key not in known]
        read: dict[bytes, tuple[bytes | None, bool]] = {}
        if unknown:
            asked = cast(list[str | int | float | bytes | bool], unknown)
            dues = cast(list[bytes | None], self._due_of.get(asked))
            opens = cast(list[bytes | None], self._open_cf.get(asked))
            for key, due, opened in zip(unknown, dues, opens, strict=True):
                read[key] = due, opened is not None
        for key, timer in changes.timers.items():
            if key in known:
                old_timer = known[key]
                old, was_open = _due_bytes(old_timer), old_timer is not None and _is_open(old_timer)
            else:
                old, was_open = read[key]
            if timer is not None or old is not None or was_open:
                self._plan(batch, key, timer, old, was_open)
        self._db.write(batch)

    def _plan(
        self, batch: WriteBatch, key: bytes, timer: Timer | None, old: bytes | None, was_open: bool
    ) -> None:
        due_cf, due_of_cf, open_cf = self._handles
        new = _due_bytes(timer)
        if old != new:
            if old is not None:
                batch.delete(old + key, due_cf)
            if new is None:
                batch.delete(key, due_of_cf)
            else:
                batch.put(new + key, b"", due_cf)
                batch.put(key, new, due_of_cf)
        if timer is not None and _is_open(timer):
            since = _INSTANT.pack(cast(int, timer.open_since))
            batch.put(key, since + cast(str, timer.open_field).encode(), open_cf)
        elif was_open:
            batch.delete(key, open_cf)

    def state_keys(self) -> Iterator[bytes]:
        # Task-level records sort first (RESERVED is the lowest byte): start past them.
        yield from self._db.keys(from_key=b"\x01")

    def due(self, until: int, limit: int) -> list[tuple[int, bytes]]:
        found: list[tuple[int, bytes]] = []
        read = ReadOptions()
        read.set_iterate_upper_bound(_INSTANT.pack(until + 1))
        for entry in cast(Iterator[bytes], self._due.keys(read_opt=read)):
            if len(found) >= limit:
                break
            found.append((_INSTANT.unpack_from(entry)[0], entry[_INSTANT.size :]))
        return found

    def open_conflicts(self) -> Iterator[tuple[bytes, str, int]]:
        for key, value in cast(Iterator[tuple[bytes, bytes]], self._open_cf.items()):
            yield key, value[_INSTANT.size :].decode(), _INSTANT.unpack_from(value)[0]

    def count(self) -> int:
        estimate: int = self._db.property_int_value("rocksdb.estimate-num-keys") or 0
        return estimate

    def size(self) -> int:
        on_disk = self._db.property_int_value("rocksdb.estimate-live-data-size") or 0
        in_memory = self._db.property_int_value("rocksdb.cur-size-all-mem-tables") or 0
        return int(on_disk) + int(in_memory)

    def flush(self) -> None:
        self._db.flush_wal(True)

    def wipe(self) -> None:
        self.close()
        shutil.rmtree(self.path, ignore_errors=True)
        self._open()

    def close(self) -> None:
        # The column families' handles share the database: it is released once all are gone.
        for family in (self._due, self._due_of, self._open_cf):
            family.close()
        self._handles.clear()
        self._db.close()
