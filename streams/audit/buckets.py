"""Bounded memory however many keys: the cut's records spilled to disk in buckets, each bucket
replayed on its own.

A key's evidence can move only between spellings an alias ever linked, so the spellings fall
into families (linked by any alias change of the history, retractions included) and a family
never needs another's records. Each record goes to the bucket of its subject's family; a bucket
holds whole families, is replayed alone and is then forgotten. The bucket count follows from the
cut alone (`bucket_count`), so an export run again from its token spills alike and writes its
files in the same order.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from streams.core.timeline.aliases import AliasHistory, alias_key

RECORDS_PER_BUCKET = 50_000
"""About this many records a bucket: a bucket replayed takes some 150-200 MB."""

_ENTRY = struct.Struct("<qqBI")  # instant (µs), place in the cut, kind, value's length


def bucket_count(records: int) -> int:
    """Buckets for a cut spanning `records` offsets."""
    return max(1, -(-records // RECORDS_PER_BUCKET))


class Families:
    """Which family a subject's spelling belongs to under an alias history."""

    def __init__(self, history: AliasHistory) -> None:
        parent: dict[str, str] = {}

        def root(spelling: str) -> str:
            while parent.setdefault(spelling, spelling) != spelling:
                parent[spelling] = parent[parent[spelling]]
                spelling = parent[spelling]
            return spelling

        for change in history.changes:
            if change.canonical is not None:
                one, other = root(alias_key(change.alias)), root(alias_key(change.canonical))
                if one != other:
                    parent[max(one, other)] = min(one, other)
        self._root = {spelling: root(spelling) for spelling in parent}

    def of(self, subject: str) -> str:
        """The family's name: its least spelling as aliases match it (`alias_key`); with no
        alias at all, the subject as sent (each key its own family, no spelling matched)."""
        if not self._root:
            return subject
        key = alias_key(subject)
        return self._root.get(key, key)


@dataclass(frozen=True, slots=True)
class Spilled:
    """A record as a bucket holds it: its instant (µs), its place in the cut (`seq`: the order
    in which the export read it), what it is (`kind`) and its value's bytes."""

    at_us: int
    seq: int
    kind: int
    value: bytes


class Spill:
    """The buckets' files under `folder`, written as the cut is read, then read a bucket at a
    time."""

    def __init__(self, folder: Path, buckets: int) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.paths = [folder / f"bucket-{n:05d}.bin" for n in range(buckets)]
        self._files: list[BinaryIO] = [path.open("wb") for path in self.paths]

    def add(self, family: str, record: Spilled) -> None:
        out = self._files[zlib.crc32(family.encode()) % len(self._files)]
        out.write(_ENTRY.pack(record.at_us, record.seq, record.kind, len(record.value)))
        out.write(record.value)

    def close(self) -> None:
        for out in self._files:
            out.close()

    def bucket(self, n: int) -> Iterator[Spilled]:
        """Bucket `n`'s records, in the order written; the file is removed once read."""
        path = self.paths[n]
        with path.open("rb") as source:
            while header := source.read(_ENTRY.size):
                at_us, seq, kind, size = _ENTRY.unpack(header)
                yield Spilled(at_us, seq, kind, source.read(size))
        path.unlink()
