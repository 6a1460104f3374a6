"""The stall signals: a blocked event loop shows as lag, a collection as a pause, a decode from
the encoded state as a cache miss, each read back from the registry Prometheus scrapes."""

from __future__ import annotations

import asyncio
import gc
import time

from prometheus_client import CollectorRegistry

from streams.core.keys.journal import encode_state
from streams.core.keys.state import KeyState
from streams.ops.stalls import (
    COLLECTOR_HOOKS,
    CollectorHooks,
    LoopLagProbe,
    StallCollector,
    tune_collector,
)
from streams.state.cache import StateCache
from streams.state.task import TaskStore


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    value = registry.get_sample_value(name, labels)
    assert value is not None, name
    return value


async def test_a_loop_blocked_for_300_ms_shows_a_lag_over_200_ms() -> None:
    registry = CollectorRegistry()
    probe = LoopLagProbe(registry, interval_s=0.01)
    await probe.start()
    try:
        await asyncio.sleep(0.1)  # a few probes on an idle loop
        time.sleep(0.3)  # blocks the loop, as a long batch or a blocking call would
        await asyncio.sleep(0.1)
    finally:
        await probe.stop()
    # A busy machine can only add lag, never remove the block's: bound the figures from below.
    assert sample(registry, "claimstream_loop_lag_seconds_count") >= 2
    blocked = sample(registry, "claimstream_loop_lag_seconds_count") - sample(
        registry, "claimstream_loop_lag_seconds_bucket", le="0.2"
    )
    assert blocked >= 1
    assert sample(registry, "claimstream_loop_lag_max_seconds") >= 0.25


def test_the_max_gauge_forgets_a_lag_two_windows_later() -> None:
    probe = LoopLagProbe(CollectorRegistry())
    probe.observe(0.4, now=100.0)
    probe.observe(0.001, now=100.0 + probe.WINDOW_S)  # the next window still shows it
    assert probe.lag_max._value.get() == 0.4
    probe.observe(0.002, now=100.0 + 2 * probe.WINDOW_S)
    assert probe.lag_max._value.get() == 0.002


def test_a_forced_full_collection_counts_a_pause_and_freezes_survivors() -> None:
    hooks = CollectorHooks()
    registry = CollectorRegistry()
    registry.register(StallCollector(StateCache(1), hooks))
    gc.callbacks.append(hooks)
    try:
        gc.collect()
    finally:
        gc.callbacks.remove(hooks)
        gc.unfreeze()
    assert sample(registry, "claimstream_gc_pauses_total", generation="2") == 1
    paused = sample(registry, "claimstream_gc_pause_seconds_total", generation="2")
    assert 0 < paused == sample(registry, "claimstream_gc_longest_pause_seconds", generation="2")
    assert sample(registry, "claimstream_gc_pauses_total", generation="0") == 0


def test_the_worker_hook_is_the_one_collector_callback() -> None:
    before = list(gc.callbacks)
    thresholds = gc.get_threshold()
    try:
        tune_collector()
        tune_collector()
        assert gc.callbacks.count(COLLECTOR_HOOKS) == 1
    finally:
        gc.callbacks[:] = before
        gc.set_threshold(*thresholds)


def test_a_state_decoded_from_its_encoded_form_counts_a_miss_and_a_cached_one_does_not() -> None:
    cache = StateCache(1)
    registry = CollectorRegistry()
    registry.register(StallCollector(cache, CollectorHooks()))
    store = TaskStore(cache)
    store.load(b"a", encode_state(KeyState("acme", "hq")))
    store.load(b"b", encode_state(KeyState("acme", "hq")))
    assert store.get(b"a") is not None  # decoded: a miss
    assert store.get(b"a") is not None  # cached: no miss
    assert store.get(b"b") is not None  # decoded, and evicts a (capacity 1)
    assert store.get(b"a") is not None
    assert store.get(b"missing") is None  # no state at all is not a miss
    assert sample(registry, "claimstream_state_cache_misses_total") == 3
