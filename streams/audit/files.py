"""An export's tables written as they grow: Parquet through pyarrow (the `audit` extra), in row
groups of `ROW_GROUP` rows so memory holds one group a table however many keys, or JSON Lines
for small exports. Both are written byte for byte alike for the same rows: no clock, no host and
no random name goes into a file.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from streams.core.reading.audit_rows import INSTANT, INTEGER, TABLES, Row
from streams.core.records.errors import ClaimstreamError

ROW_GROUP = 50_000
FORMATS = ("parquet", "jsonl")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class TableWriter(Protocol):
    path: Path
    rows: int

    def add(self, rows: list[Row]) -> None: ...

    def close(self) -> None: ...


def table_writer(folder: Path, table: str, fmt: str) -> TableWriter:
    """A writer of `table` (a name of `TABLES`) into `folder`, as `fmt` (one of FORMATS)."""
    if fmt == "parquet":
        return ParquetTable(folder / f"{table}.parquet", table)
    return JsonLinesTable(folder / f"{table}.jsonl", table)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        while chunk := source.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


class ParquetTable:
    """A table's rows as one Parquet file, a row group each `ROW_GROUP` rows, zstd."""

    def __init__(self, path: Path, table: str) -> None:
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError as exc:
            raise ClaimstreamError(
                "Parquet needs pyarrow: install claimstream[audit], or export --format jsonl"
            ) from exc
        kinds = {INTEGER: pa.int64(), INSTANT: pa.timestamp("us", tz="UTC")}
        self.schema = pa.schema(
            [pa.field(name, kinds.get(kind, pa.string())) for name, kind in TABLES[table]]
        )
        self.path, self.rows = path, 0
        self._pa = pa
        self._writer = pq.ParquetWriter(path, self.schema, compression="zstd")
        self._pending: list[Row] = []

    def add(self, rows: list[Row]) -> None:
        self._pending += rows
        while len(self._pending) >= ROW_GROUP:
            self._flush(self._pending[:ROW_GROUP])
            del self._pending[:ROW_GROUP]

    def close(self) -> None:
        if self._pending:
            self._flush(self._pending)
            self._pending = []
        self._writer.close()

    def _flush(self, rows: list[Row]) -> None:
        self._writer.write_table(self._pa.Table.from_pylist(rows, schema=self.schema))
        self.rows += len(rows)


class JsonLinesTable:
    """A table's rows as JSON Lines, keys sorted, instants as RFC 3339 text."""

    def __init__(self, path: Path, table: str) -> None:
        self.path, self.rows = path, 0
        self._instants = [name for name, kind in TABLES[table] if kind == INSTANT]
        self._out = path.open("w", encoding="utf-8", newline="\n")

    def add(self, rows: list[Row]) -> None:
        for row in rows:
            self._out.write(json.dumps(self._readable(row), sort_keys=True, ensure_ascii=False))
            self._out.write("\n")
        self.rows += len(rows)

    def close(self) -> None:
        self._out.close()

    def _readable(self, row: Row) -> dict[str, Any]:
        shown = dict(row)
        for name in self._instants:
            us = shown[name]
            if us is not None:
                moment = _EPOCH + timedelta(microseconds=us)
                shown[name] = moment.isoformat(timespec="microseconds").replace("+00:00", "Z")
        return shown
