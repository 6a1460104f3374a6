"""What stalls a worker's event loop, measured: the room that tells a p99 stall's cause.

Everything a worker does runs on one event loop (the arbiter's batches, Faust's agents, the web
API), so a claim's decision waits behind whatever holds that loop. Three signals, next to the
worker's other metrics on the same registry:

- **Loop lag** (`LoopLagProbe`): a small task sleeps `interval_s` and measures how much later than
  due the loop ran it: `claimstream_loop_lag_seconds` (a histogram) and
  `claimstream_loop_lag_max_seconds` (the longest over the last 10 to 20 s).
- **Collector pauses** (`CollectorHooks`): the process's one `gc.callbacks` hook times each
  collection by generation and, after a full one, freezes what survived; `StallCollector`
  publishes the tallies when Prometheus scrapes. Collections of `LONG_COLLECTION_S` or more are
  kept with the stack that set them off, for the stall watch (`streams.ops.stall_watch`).
- **State-cache misses**: decodes of a key's state from its encoded form (`StateCache.misses`),
  published by `StallCollector` too.

Nothing here runs per claim: the probe ticks ten times a second, the hook once per collection.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import sysconfig
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter
from types import CodeType, FrameType
from typing import Any, Protocol

from mode import Service
from prometheus_client import CollectorRegistry, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

LOOP_LAG_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
GENERATIONS = (0, 1, 2)

# Young objects are collected after 20,000 allocations instead of 700: a claim allocates a few
# hundred short-lived objects, and each young collection also walks whatever the batch still
# holds. Measured in-process on the bench mix (40k claims): 211 -> 182-190 µs CPU a claim.
COLLECTOR_THRESHOLDS = (20_000, 50, 20)
# Collections at least this long are kept with the stack that triggered them (for the stall
# watch in `streams.ops.stall_watch`); shorter ones, the thousands a minute, only tallied.
LONG_COLLECTION_S = 0.01


Stack = tuple[tuple[CodeType, int], ...]  # (code, line) of each frame, innermost first


@dataclass(frozen=True)
class Collection:
    """One long collection: when (perf_counter), which generation, and where it was triggered."""

    started: float
    ended: float
    generation: int
    collected: int
    stack: Stack  # the allocation that set it off

    @property
    def pause_s(self) -> float:
        return self.ended - self.started


def stack_of(frame: FrameType | None) -> Stack:
    """A frame's stack as plain (code, line) pairs: cheap to take, named only when reported."""
    frames = []
    while frame is not None:
        frames.append((frame.f_code, frame.f_lineno))
        frame = frame.f_back
    return tuple(frames)


def frame_names(stack: Stack) -> list[str]:
    """`file:function:line` of each frame, innermost first; files as an import names them."""
    return [f"{_short(code.co_filename)}:{code.co_name}:{line}" for code, line in stack]


def folded(stack: Stack) -> str:
    """The stack as one folded line, outermost frame first (what flame graph tools read)."""
    return ";".join(reversed(frame_names(stack)))


_ROOTS = (
    *(str(Path(p)) for p in sys.path if p.endswith("site-packages")),
    sysconfig.get_paths()["stdlib"],
    str(Path(__file__).parents[2]),  # the folder holding the streams package
)
_short_names: dict[str, str] = {}


def _short(filename: str) -> str:
    """A frame's file the way an import names it: `faust/app/base.py`, `asyncio/events.py`."""
    short = _short_names.get(filename)
    if short is None:
        roots = [root for root in _ROOTS if filename.startswith(root + "/")]
        short = filename[len(roots[0]) + 1 :] if roots else filename
        _short_names[filename] = short
    return short


class CollectorHooks:
    """The process's one garbage-collector callback: each collection's pause, by generation,
    tallied in plain numbers; after a full collection, what survived is frozen.

    A worker's key state is hundreds of thousands of long-lived objects; every full collection
    walked all of them (262 ms for 5k keys), and those pauses were the decision latency's p99.
    Frozen objects are still freed by reference counting; only reference cycles among them
    would be kept, and state records have none."""

    def __init__(self) -> None:
        self.pauses = [0] * len(GENERATIONS)
        self.seconds = [0.0] * len(GENERATIONS)
        self.longest = [0.0] * len(GENERATIONS)
        self.long_collections: deque[Collection] = deque(maxlen=64)
        self._started = 0.0  # collections never nest: one start, then its stop

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = perf_counter()
            return
        ended = perf_counter()
        pause = ended - self._started
        generation = info["generation"]
        self.pauses[generation] += 1
        self.seconds[generation] += pause
        self.longest[generation] = max(self.longest[generation], pause)
        if pause >= LONG_COLLECTION_S:
            # The frame that set the collection off; none when it ran with no Python frame
            # below this hook (at interpreter shutdown, for one).
            stack = stack_of(sys._getframe().f_back)
            collection = Collection(self._started, ended, generation, info["collected"], stack)
            self.long_collections.append(collection)
        if generation == 2:
            gc.freeze()


COLLECTOR_HOOKS = CollectorHooks()


def tune_collector() -> None:
    """Fewer collections of young objects; pauses timed and full collections' survivors frozen."""
    gc.set_threshold(*COLLECTOR_THRESHOLDS)
    if COLLECTOR_HOOKS not in gc.callbacks:
        gc.callbacks.append(COLLECTOR_HOOKS)


class CountsMisses(Protocol):
    """What the collector reads of the decoded-state cache (`streams.state.cache.StateCache`)."""

    @property
    def misses(self) -> int: ...


class StallCollector(Collector):
    """Publishes the collector's pauses and the state cache's misses when Prometheus scrapes
    (the hot path only bumps plain integers)."""

    def __init__(self, cache: CountsMisses, hooks: CollectorHooks = COLLECTOR_HOOKS) -> None:
        self.cache = cache
        self.hooks = hooks

    def collect(self) -> Iterator[Metric]:
        hooks = self.hooks
        families = (
            (CounterMetricFamily, "claimstream_gc_pauses", "Garbage collections", hooks.pauses),
            (
                CounterMetricFamily,
                "claimstream_gc_pause_seconds",
                "Time the garbage collector held the process (the event loop with it)",
                hooks.seconds,
            ),
            (
                GaugeMetricFamily,
                "claimstream_gc_longest_pause_seconds",
                "The longest garbage collection since the worker started",
                hooks.longest,
            ),
        )
        for kind, name, help_, values in families:
            family = kind(name, f"{help_}, by generation.", labels=["generation"])
            for generation in GENERATIONS:
                family.add_metric([str(generation)], values[generation])
            yield family
        yield CounterMetricFamily(
            "claimstream_state_cache_misses",
            "Keys whose state was decoded from its encoded form (not in the decoded-state cache).",
            value=self.cache.misses,
        )


class LoopLagProbe(Service):
    """How late the event loop runs a callback that is due: a sleep of `interval_s`, timed."""

    WINDOW_S = 10.0  # the max gauge covers the current window and the one before

    def __init__(self, registry: CollectorRegistry, interval_s: float = 0.1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.interval_s = interval_s
        self.lag = Histogram(
            "claimstream_loop_lag_seconds",
            "How much later than due the worker's event loop ran a timer (probed every 100 ms): "
            "time the loop spent on something else, a batch, a collection, a blocking call.",
            buckets=LOOP_LAG_BUCKETS,
            registry=registry,
        )
        self.lag_max = Gauge(
            "claimstream_loop_lag_max_seconds",
            "The longest event-loop lag over the last 10 to 20 seconds.",
            registry=registry,
        )
        self._window_end = 0.0
        self._window_max = self._previous_max = 0.0

    def observe(self, lag: float, now: float) -> None:
        self.lag.observe(lag)
        if now >= self._window_end:
            self._previous_max = self._window_max if now < self._window_end + self.WINDOW_S else 0
            self._window_max = 0.0
            self._window_end = now + self.WINDOW_S
        self._window_max = max(self._window_max, lag)
        self.lag_max.set(max(self._window_max, self._previous_max))

    @Service.task
    async def _probe(self) -> None:
        loop = asyncio.get_running_loop()
        while not self.should_stop:
            due = loop.time() + self.interval_s
            await asyncio.sleep(self.interval_s)
            now = loop.time()
            self.observe(max(0.0, now - due), now)
