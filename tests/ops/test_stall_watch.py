"""The stall watch: a loop held by a blocking call is caught with the blocking frame named, and
an idle loop gives no stall; a long collection is kept with where it was triggered."""

from __future__ import annotations

import _thread
import asyncio
import gc
import sys
import time

import pytest
from prometheus_client import CollectorRegistry

from streams.ops.stall_watch import StallWatch
from streams.ops.stalls import CollectorHooks, frame_names


def hold_the_loop(seconds: float) -> None:
    time.sleep(seconds)  # as a long batch or a blocking call on the loop would


async def watched(watch: StallWatch, block_s: float) -> None:
    await watch.start()
    try:
        await asyncio.sleep(0.2)  # a few heartbeats on an idle loop
        if block_s:
            hold_the_loop(block_s)
        await asyncio.sleep(0.2)
    finally:
        await watch.stop()


async def test_a_blocking_call_on_the_loop_is_a_stall_with_its_frame_named() -> None:
    registry = CollectorRegistry()
    watch = StallWatch(registry, threshold_s=0.05, hooks=CollectorHooks())
    started = time.time()
    await watched(watch, block_s=0.4)
    report = watch.report(since=started - 1)
    assert report["stalls"] >= 1
    assert registry.get_sample_value("claimstream_loop_stalls_total") == report["stalls"]
    longest = report["longest"][0]
    # A busy machine can only lengthen the stall: bound it from below.
    assert longest["lag_ms"] >= 300
    assert longest["samples"] >= 2
    stack = longest["stacks"][0]
    assert stack["frames"][0].startswith("tests/ops/test_stall_watch.py:hold_the_loop:")
    assert stack["folded"].endswith(f";{stack['frames'][1]};{stack['frames'][0]}")
    assert watch.report(since=time.time() + 60)["longest"] == []


async def test_an_idle_loop_has_no_stall() -> None:
    watch = StallWatch(CollectorRegistry(), threshold_s=0.1, hooks=CollectorHooks())
    await watched(watch, block_s=0.0)
    assert watch.report() == {
        "threshold_ms": 100.0,
        "stalls": 0,
        "watchdog_cpu_s": watch.report()["watchdog_cpu_s"],
        "longest": [],
    }


def test_a_long_collection_is_kept_with_the_frame_that_set_it_off() -> None:
    hooks = CollectorHooks()
    hooks("start", {"generation": 2})
    time.sleep(0.02)  # a collection as long as a worker's full one over its state
    hooks("stop", {"generation": 2, "collected": 7})
    gc.unfreeze()
    (collection,) = hooks.long_collections
    assert (collection.generation, collection.collected) == (2, 7)
    assert collection.pause_s >= 0.02
    innermost = frame_names(collection.stack)[0]
    assert innermost.startswith("tests/ops/test_stall_watch.py:test_a_long_collection_is_kept_")


def test_a_long_collection_with_no_python_frame_below_is_kept_with_an_empty_stack(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A collection can run with no Python frame under the hook (at interpreter shutdown, say):
    # called straight from C in a new thread, the hook still keeps it and raises nothing.
    hooks = CollectorHooks()
    unraised: list[BaseException | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda failure: unraised.append(failure.exc_value))
    hooks("start", {"generation": 0})
    time.sleep(0.02)
    _thread.start_new_thread(hooks, ("stop", {"generation": 0, "collected": 0}))
    deadline = time.monotonic() + 5
    while not (hooks.long_collections or unraised) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert unraised == []
    (collection,) = hooks.long_collections
    assert (collection.generation, collection.stack) == (0, ())
