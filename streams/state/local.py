"""Where each task's key store lives, and the checkpoint that says how much of its changelog
partition the store already reflects.

With `store: memory://` a task's store is in memory and every restore reads the changelog from
its beginning. With `rocksdb://` it is on disk, `<data_dir>/<app_id>-arbiter/task-<p>/`:
`rocksdb/` (the store) and `checkpoint.json`, written atomically (a temporary file, fsynced, then
renamed over the old one, and the directory fsynced) once the store's own writes are synced:

    {"format": 1, "app_id": ..., "changelog": ..., "partition": p, "offset": N}

`offset` is the next changelog offset the store has not applied: a restore reads from there. A
store whose checkpoint is missing, unreadable, or names another app id, store format, changelog or
partition is wiped and restored in full, and the log says why. A store holds for any policy:
each key records the policy it was decided under, and a newer one moves it (`core.rollout`).
When the checkpoint is written and removed is the guarantee's (see `Checkpoints`). Modelled on Kafka
Streams' `OffsetCheckpoint` and `ProcessorStateManager`, quix-streams' `state/recovery.py`.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

from streams.settings import Guarantee, Settings
from streams.state.keystore import KeyStore, MemoryKeyStore
from streams.state.rocks import Budget, RocksKeyStore

log = logging.getLogger(__name__)

STORE_FORMAT = 1  # the layout of `streams.state.rocks`; a new layout is a new number


def write_atomically(path: Path, text: str) -> None:
    """Replace `path` by `text` so that a crash leaves either the old file or the new one."""
    temporary = path.with_name(path.name + ".tmp")
    with temporary.open("w", encoding="utf-8") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


class Checkpoints:
    """The task stores of one worker, and their checkpoints.

    - at least once: written when a task is installed, after commits (once at least
      `CHECKPOINT_RECORDS` changelog records were applied since the last one) and on a clean
      close; a crash leaves the last one, and the restore reads on from it.
    - exactly once: removed when a task is installed, written only on a clean close (as Kafka
      Streams does): a store found without one was not closed cleanly, and is rebuilt in full.
    """

    CHECKPOINT_RECORDS = 10_000

    def __init__(self, settings: Settings) -> None:
        self.on_disk = settings.store.startswith("rocksdb:")
        self.at_close_only = settings.processing_guarantee is Guarantee.EXACTLY_ONCE
        self.root = settings.data_dir / f"{settings.app_id}-arbiter"
        self.identity: dict[str, Any] = {
            "format": STORE_FORMAT,
            "app_id": settings.app_id,
            "changelog": settings.changelog_topic,
        }
        self._budget = Budget(settings.store_cache_mb * 1024 * 1024) if self.on_disk else None

    def _file(self, partition: int) -> Path:
        return self.root / f"task-{partition}" / "checkpoint.json"

    def open(self, partition: int) -> tuple[KeyStore, int]:
        """The task's store and the changelog offset to restore it from."""
        if self._budget is None:
            return MemoryKeyStore(), 0
        path = self.root / f"task-{partition}" / "rocksdb"
        offset = 0
        if path.exists():
            found = self.read(partition)
            if isinstance(found, int):
                offset = found
                log.info("arbiter: task %d restores from checkpoint offset %d", partition, found)
            else:
                log.warning(
                    "arbiter: task %d: local store %s %s; rebuilding it from the changelog",
                    partition,
                    path,
                    found,
                )
                shutil.rmtree(path)
                self.remove(partition)
        return RocksKeyStore(path, self._budget), offset

    def read(self, partition: int) -> int | str:
        """The checkpoint's offset, or why it cannot be used."""
        file = self._file(partition)
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            if self.at_close_only:
                return "has no checkpoint (not closed cleanly, under exactly-once)"
            return "has no checkpoint"
        except (OSError, ValueError) as exc:
            return f"has a corrupt checkpoint ({type(exc).__name__}: {exc})"
        if not isinstance(data, dict) or not isinstance(data.get("offset"), int):
            return "has a corrupt checkpoint (no offset)"
        expected = self.identity | {"partition": partition}
        for name, value in expected.items():
            if data.get(name) != value:
                return f"was written for {name} {data.get(name)!r}, not {value!r}"
        offset: int = data["offset"]
        return offset if offset >= 0 else "has a corrupt checkpoint (negative offset)"

    def write(self, partition: int, store: KeyStore, offset: int) -> None:
        """Name `offset` as what the store reflects, once its writes are durable."""
        if self._budget is None:
            return
        store.flush()
        record = self.identity | {"partition": partition, "offset": offset}
        write_atomically(self._file(partition), json.dumps(record, sort_keys=True))

    def remove(self, partition: int) -> None:
        self._file(partition).unlink(missing_ok=True)

    def installed(self, partition: int, store: KeyStore, offset: int) -> None:
        """A task restored to `offset` goes into service."""
        if self.at_close_only:
            self.remove(partition)
        else:
            self.write(partition, store, offset)

    def committed(self, partition: int, store: KeyStore, offset: int, since: int) -> bool:
        """After a commit: whether a checkpoint was written (the last one named `since`)."""
        if self.at_close_only or offset - since < self.CHECKPOINT_RECORDS:
            return False
        self.write(partition, store, offset)
        return True
