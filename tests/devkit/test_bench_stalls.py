"""The bench's stall figures from two scrapes of a worker's /metrics text."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from streams.devkit.bench.worker import StallCounts, _buckets, stalls_between
from streams.stalls import LoopLagProbe


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
