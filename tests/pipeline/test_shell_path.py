"""The shell's per-claim path: its records stay values (equal by fields, readable), and the
in-process harness that measures it (streams/devkit/bench/shell.py) runs every stage."""

from __future__ import annotations

import time

from streams.devkit.bench.shell import SHOWN, claim_records, run_once
from streams.pipeline import Handled, Incoming, Outgoing
from streams.settings import Settings


def test_records_compare_by_value_and_read_their_headers() -> None:
    record = Incoming("t", 1, 2, b"k", b"v", (("a", b"1"), ("b", b"2")), 3.0)
    assert record == Incoming("t", 1, 2, b"k", b"v", (("a", b"1"), ("b", b"2")), 3.0)
    assert record != Incoming("t", 1, 3, b"k", b"v", (("a", b"1"), ("b", b"2")), 3.0)
    assert record.header("b") == b"2"
    assert record.header("c") is None
    assert Incoming("t", 0, 0, None, None).header("a") is None
    sent = Outgoing("t", b"k", b"v", partition=4)
    assert sent == Outgoing("t", b"k", b"v", (), 4)
    assert repr(sent) == (
        "Outgoing(topic='t', key=b'k', value=b'v', headers=(), partition=4, timestamp_ms=None)"
    )
    first, second = Handled(), Handled()
    first.outputs.append(sent)
    assert second.outputs == []  # each its own lists
    assert second.emitted == []
    assert Handled(key=b"k", outputs=[sent]) == Handled(b"k", None, [sent], [], None)


def test_the_shell_harness_runs_every_stage() -> None:
    settings = Settings()
    (result,) = run_once(settings, claim_records(settings, 300, 40), time.perf_counter)
    assert result["claims"] == 300
    assert result["cpu_us"] > 0
    assert set(result["stage_us"]) == set(SHOWN)
    assert all(result["stage_us"][stage] > 0 for stage in SHOWN)


def test_the_harness_in_slices_with_the_worker_cache_decodes_the_keys_that_left_it() -> None:
    """A cache too small for the claims' keys: the second slice finds most of them decoded
    before and gone, and decodes them again, as the broker bench's later rounds do."""
    settings = Settings(state_cache_keys=50)
    incoming = claim_records(settings, 2_000, 400)
    first, second = run_once(settings, incoming, time.perf_counter, 2, worker_cache=True)
    assert first["claims"] == second["claims"] == 1_000
    assert first["decoded"] < second["decoded"]
    assert second["decoded"] > 200
    (unbounded,) = run_once(settings, incoming, time.perf_counter)
    assert unbounded["decoded"] == 0
