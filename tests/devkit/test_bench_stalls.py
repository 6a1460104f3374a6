"""The bench's stall figures from two scrapes of a worker's /metrics text."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from streams.devkit.bench.worker import (
    StallCounts,
    _buckets,
    gc_pauses_between,
    stall_capture,
    stalls_between,
)
from streams.ops.stalls import LoopLagProbe


def counts(probe: LoopLagProbe, registry: CollectorRegistry, gc_s: float) -> StallCounts:
    text = generate_latest(registry).decode()
    return StallCounts(_buckets(text, "claimstream_loop_lag_seconds"), 0.0, gc_s, 0.0)


def test_the_longest_lag_between_two_scrapes_is_its_buckets_bound_not_an_earlier_one() -> None:
    registry = CollectorRegistry()
    probe = LoopLagProbe(registry)
    probe.observe(3.0, now=1.0)  # before the phase: not the phase's
    before = counts(probe, registry, gc_s=0.5)
    for lag in (0.0004, 0.03, 0.15):
        probe.observe(lag, now=2.0)
    after = counts(probe, registry, gc_s=0.75)
    assert stalls_between(before, after) == {
        "longest_loop_lag_ms": 200.0,
        "gc_pause_ms_total": 250.0,
        "state_cache_misses": 0,
    }
    assert stalls_between(after, after)["longest_loop_lag_ms"] == 0.0


def test_a_lag_past_the_last_bucket_reports_at_least_the_recent_longest() -> None:
    registry = CollectorRegistry()
    probe = LoopLagProbe(registry)
    before = counts(probe, registry, gc_s=0.0)
    probe.observe(7.5, now=1.0)
    after = counts(probe, registry, gc_s=0.0)
    recent = StallCounts(after.loop_lags, 7.5, 0.0, 0.0)
    assert stalls_between(before, recent)["longest_loop_lag_ms"] == 7500.0


def test_the_longest_stall_is_named_with_its_innermost_frames_and_collections() -> None:
    stall = {
        "lag_ms": 420.0,
        "samples": 9,
        "collections": [{"generation": 2, "pause_ms": 300.0, "collected": 4, "triggered_in": []}],
        "stacks": [{"samples": 6, "frames": [f"f{n}" for n in range(20)], "folded": "..."}],
    }
    before = {"stalls": 3, "watchdog_cpu_s": 0.5, "longest": []}
    after = {"stalls": 5, "watchdog_cpu_s": 0.52, "longest": [stall]}
    assert stall_capture(before, after, worker_cpu_s=4.0) == {
        "stalls_over_threshold": 2,
        "watchdog_cpu_pct": 0.5,
        "longest_stall": {
            "lag_ms": 420.0,
            "samples": 9,
            "collections": [{"generation": 2, "pause_ms": 300.0, "collected": 4}],
            "frames": [f"f{n}" for n in range(8)],
        },
    }
    assert stall_capture({}, {}, 1.0)["longest_stall"]["frames"] == []


def test_the_collector_pauses_between_two_scrapes_by_generation() -> None:
    before = StallCounts({}, 0.0, 0.0, 0.0, (0.1, 0.2, 0.0))
    after = StallCounts({}, 0.0, 0.0, 0.0, (0.15, 0.2, 0.75))
    assert gc_pauses_between(before, after) == {"gc_pause_ms_by_generation": [50.0, 0.0, 750.0]}
