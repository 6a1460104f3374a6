"""An export's table files (files.py): Parquet read back with the columns `TABLES` names, typed
(instants as UTC microsecond timestamps, counts as int64, the rest strings, nulls kept), in row
groups of `ROW_GROUP` rows; JSON Lines with sorted keys and instants as RFC 3339 `Z` text; and
the same rows written twice give the same bytes, in either format."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streams.audit import files
from streams.audit.files import (
    JsonLinesTable,
    ParquetTable,
    TableWriter,
    sha256_of,
    table_writer,
)
from streams.core.reading.audit_rows import TABLES, Row
from streams.core.records.contracts import micros

DECIDED = datetime(2026, 12, 4, 12, 0, 0, 123456, tzinfo=UTC)


def _policy(n: int, until: int | None = None) -> Row:
    return {
        "version": f"v{n}",
        "since": micros(DECIDED) + n,
        "until": until,
        "digest": f"{n:064x}",
    }


def _belief(n: int) -> Row:
    row: dict[str, Any] = dict.fromkeys((name for name, _ in TABLES["beliefs"]), None)
    row |= {
        "subject": f"invoice:{n}",
        "field": "order.payment_status",
        "decision_id": f"dec_{n:024x}",
        "outcome": "resolved",
        "status": "present",
        "value": '"paid"' if n % 2 else '{"amount_minor":1250,"currency":"USD"}',
        "action": "continue",
        "reason": "système",
        "policy_version": "v1",
        "decided_at": micros(DECIDED) + n,
        "claims_held": 2**40 + n,
    }
    return row


def _written(writer: TableWriter, rows: list[Row], chunk: int = 7) -> Path:
    for start in range(0, len(rows), chunk):
        writer.add(rows[start : start + chunk])
    writer.close()
    assert writer.rows == len(rows)
    return writer.path


def test_parquet_holds_the_tables_columns_typed(tmp_path: Path) -> None:
    rows = [_belief(n) for n in range(5)]
    path = _written(table_writer(tmp_path, "beliefs", "parquet"), rows)
    assert path == tmp_path / "beliefs.parquet"
    table = pq.read_table(path)
    schema = table.schema
    assert schema.names == [name for name, _ in TABLES["beliefs"]]
    assert schema.field("decided_at").type == pa.timestamp("us", tz="UTC")
    assert schema.field("claims_held").type == pa.int64()
    assert schema.field("value").type == pa.string()
    assert schema.field("conflict_kind").type == pa.string()
    read = table.to_pylist()
    assert [r["subject"] for r in read] == [f"invoice:{n}" for n in range(5)]
    first = read[0]
    assert first["decided_at"] == DECIDED  # to the microsecond, in UTC
    assert first["claims_held"] == 2**40
    assert first["conflict_kind"] is None
    assert first["tiebreak"] is None
    assert first["reason"] == "système"
    assert read[1]["value"] == '"paid"'


def test_parquet_keeps_a_null_instant(tmp_path: Path) -> None:
    rows = [_policy(1, until=micros(DECIDED) + 2), _policy(2)]
    path = _written(ParquetTable(tmp_path / "policies.parquet", "policies"), rows)
    read = pq.read_table(path).to_pylist()
    assert [r["until"] for r in read] == [datetime(2026, 12, 4, 12, 0, 0, 123458, tzinfo=UTC), None]
    assert read[1]["since"] == datetime(2026, 12, 4, 12, 0, 0, 123458, tzinfo=UTC)


def test_parquet_writes_a_row_group_each_row_group_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files, "ROW_GROUP", 4)
    rows = [_belief(n) for n in range(10)]
    path = _written(ParquetTable(tmp_path / "beliefs.parquet", "beliefs"), rows, chunk=3)
    meta = pq.ParquetFile(path).metadata
    assert [meta.row_group(g).num_rows for g in range(meta.num_row_groups)] == [4, 4, 2]
    assert meta.num_rows == 10
    assert [r["subject"] for r in pq.read_table(path).to_pylist()] == [
        f"invoice:{n}" for n in range(10)
    ]


def test_an_empty_table_is_a_readable_file(tmp_path: Path) -> None:
    parquet = _written(ParquetTable(tmp_path / "e.parquet", "statements"), [])
    table = pq.read_table(parquet)
    assert table.num_rows == 0
    assert table.schema.names == [name for name, _ in TABLES["statements"]]
    jsonl = _written(JsonLinesTable(tmp_path / "e.jsonl", "statements"), [])
    assert jsonl.read_bytes() == b""


@pytest.mark.parametrize("fmt", files.FORMATS)
def test_the_same_rows_give_the_same_bytes(tmp_path: Path, fmt: str) -> None:
    rows = [_belief(n) for n in range(25)]
    for name in ("one", "other", "third"):
        (tmp_path / name).mkdir()
    one = _written(table_writer(tmp_path / "one", "beliefs", fmt), rows, chunk=4)
    other = _written(table_writer(tmp_path / "other", "beliefs", fmt), rows, chunk=9)
    assert one.name == other.name == f"beliefs.{fmt}"
    assert one.read_bytes() == other.read_bytes()
    assert sha256_of(one) == sha256_of(other)
    changed = [*rows[:-1], _belief(99)]
    third = _written(table_writer(tmp_path / "third", "beliefs", fmt), changed)
    assert sha256_of(third) != sha256_of(one)


def test_json_lines_show_instants_as_rfc3339_z_text(tmp_path: Path) -> None:
    rows = [_policy(1, until=micros(DECIDED) + 2), _policy(2)]
    path = _written(table_writer(tmp_path, "policies", "jsonl"), rows)
    assert path == tmp_path / "policies.jsonl"
    text = path.read_text(encoding="utf-8")
    assert text.endswith("\n")
    assert "\r" not in text
    lines = text.splitlines()
    assert [json.loads(line) for line in lines] == [
        {
            "version": "v1",
            "since": "2026-12-04T12:00:00.123457Z",
            "until": "2026-12-04T12:00:00.123458Z",
            "digest": f"{1:064x}",
        },
        {
            "version": "v2",
            "since": "2026-12-04T12:00:00.123458Z",
            "until": None,
            "digest": f"{2:064x}",
        },
    ]
    assert lines[0].index('"digest"') < lines[0].index('"since"') < lines[0].index('"until"')


def test_json_lines_keep_integers_and_text_as_written(tmp_path: Path) -> None:
    path = _written(table_writer(tmp_path, "beliefs", "jsonl"), [_belief(0)])
    line = path.read_text(encoding="utf-8")
    assert "système" in line  # not escaped
    read = json.loads(line)
    assert read["claims_held"] == 2**40
    assert read["value"] == '{"amount_minor":1250,"currency":"USD"}'
    assert read["decided_at"] == "2026-12-04T12:00:00.123456Z"
    assert read["tiebreak"] is None
    assert list(read) == sorted(read)


def test_an_instant_before_the_epoch_reads_in_both_formats(tmp_path: Path) -> None:
    before = datetime(1969, 7, 20, 20, 17, 40, 5, tzinfo=UTC)
    row = _policy(1) | {"since": micros(before)}
    jsonl = _written(table_writer(tmp_path, "policies", "jsonl"), [row])
    assert json.loads(jsonl.read_text())["since"] == "1969-07-20T20:17:40.000005Z"
    parquet = _written(table_writer(tmp_path, "policies", "parquet"), [row])
    assert pq.read_table(parquet).to_pylist()[0]["since"] == before


def test_sha256_of_is_the_files_digest(tmp_path: Path) -> None:
    path = tmp_path / "blob"
    data = bytes(range(256)) * 5000  # past one read of the loop
    path.write_bytes(data)
    assert sha256_of(path) == hashlib.sha256(data).hexdigest()
