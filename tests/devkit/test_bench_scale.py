"""The scale phase's lean claims are the claims the codec would encode, and its CLI flag is off
by default."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from streams.cli.main import build_parser
from streams.core.keys.state import state_key
from streams.core.records.contracts import Claim
from streams.devkit.bench.scale import DEFAULT_KEYS, FIELD, disk_bytes, lean_claims
from streams.devkit.bench.workload import CODEC

TOPIC = "bench.scale-claims"


def test_each_lean_claim_decodes_to_its_keys_claim_and_is_the_codecs_bytes() -> None:
    observed_at = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    numbers = [1, 42, 999_999, 1_000_000, 9_999_999_999]
    for number, (key, value) in zip(
        numbers, lean_claims(TOPIC, 1, numbers, observed_at), strict=True
    ):
        subject = f"scale-{number:010d}"
        expected = Claim(
            claim_id=f"{subject}-1",
            subject=subject,
            field=FIELD,
            status="present",
            value=2,
            source="crm",
            observed_at=observed_at,
        )
        assert key == state_key(subject, FIELD).encode()
        assert value == CODEC.encode(TOPIC, expected)
        assert CODEC.decode(Claim, value) == expected


def test_the_scale_phase_runs_only_when_asked_and_defaults_to_a_million_keys() -> None:
    parser = build_parser()
    assert parser.parse_args(["bench"]).scale_keys is None
    assert parser.parse_args(["bench", "--scale-keys"]).scale_keys == DEFAULT_KEYS
    assert parser.parse_args(["bench", "--scale-keys", "5000"]).scale_keys == 5000


def test_disk_bytes_counts_the_allocated_blocks_of_every_file_below(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "sst").write_bytes(b"x" * 10_000)
    (tmp_path / "checkpoint").write_bytes(b"y")
    assert disk_bytes(tmp_path) >= 10_001
    assert disk_bytes(tmp_path / "missing") == 0
