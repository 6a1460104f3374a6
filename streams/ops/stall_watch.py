"""What ran while the event loop stalled: the worker's stall capture, beside `streams.ops.stalls`.

`streams.ops.stalls` measures how long the loop is held (lag, collector pauses); this room says by
what. A heartbeat task on the loop notes when it is next due; a daemon thread (not the loop: a
held loop cannot report on itself) checks every half of `threshold_s` whether the heartbeat
is late by more than that, and while it is, samples the loop thread's stack
(`sys._current_frames()`) every fifth of `threshold_s`. A stall ends when the heartbeat runs;
it is kept with its folded stacks and the collections (`CollectorHooks.long_collections`) that
overlapped it: the longest few since the worker started and the last 128, on the web API
(`GET /api/stalls`, `stall_view`) and counted in `claimstream_loop_stalls_total`.

Nothing here runs per claim: the heartbeat ticks twenty times a second, the thread wakes twenty
times a second (so a stall shorter than 1.5 `threshold_s` may pass unseen) and samples only
during a stall; `cpu_s` is the thread's own CPU time.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from time import perf_counter
from typing import Any

import prometheus_client
from faust.web import Request, Response, View
from mode import Service

from streams.ops.stalls import (
    COLLECTOR_HOOKS,
    Collection,
    CollectorHooks,
    Stack,
    folded,
    frame_names,
    stack_of,
)

HEARTBEAT_S = 0.05
TOP_FRAMES = 12  # frames of a stack the report shows, innermost first
TOP_STACKS = 3  # distinct stacks a stall's report shows, most sampled first


@dataclass
class Stall:
    """One stall: from when the heartbeat was due to when it ran, and what the loop ran."""

    due: float  # perf_counter time the heartbeat was due
    at: float  # the same instant, wall-clock (seconds since the epoch)
    lag_s: float = 0.0
    stacks: Counter[Stack] = field(default_factory=Counter)  # stack -> samples
    collections: list[Collection] = field(default_factory=list)

    def json(self) -> dict[str, Any]:
        return {
            "at": datetime.fromtimestamp(self.at, UTC).isoformat(),
            "lag_ms": round(self.lag_s * 1000, 1),
            "samples": sum(self.stacks.values()),
            "collections": [
                {
                    "generation": c.generation,
                    "pause_ms": round(c.pause_s * 1000, 1),
                    "collected": c.collected,
                    "triggered_in": frame_names(c.stack)[:TOP_FRAMES],
                }
                for c in self.collections
            ],
            "stacks": [
                {
                    "samples": count,
                    "frames": frame_names(stack)[:TOP_FRAMES],
                    "folded": folded(stack),
                }
                for stack, count in self.stacks.most_common(TOP_STACKS)
            ],
        }


class StallWatch(Service):
    """The heartbeat on the loop and the watchdog thread that samples the loop when it is late."""

    def __init__(
        self,
        registry: prometheus_client.CollectorRegistry,
        threshold_s: float = 0.1,
        keep: int = 5,
        recent: int = 128,
        hooks: CollectorHooks = COLLECTOR_HOOKS,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.threshold_s = threshold_s
        self.keep = keep
        self.hooks = hooks
        self.stalls = prometheus_client.Counter(
            "claimstream_loop_stalls",
            "Times the event loop was held longer than stall_threshold_s (what it ran: "
            "GET /api/stalls).",
            registry=registry,
        )
        self.count = 0
        self.cpu_s = 0.0  # the watchdog thread's CPU time so far
        self.longest: list[Stall] = []
        self.recent: deque[Stall] = deque(maxlen=recent)
        self._due = float("inf")  # when the heartbeat is next due (perf_counter)
        self._ran = 0.0  # when it last ran
        self._loop_thread = 0
        self._lock = threading.Lock()
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None

    async def on_start(self) -> None:
        self._loop_thread = threading.get_ident()
        self._halt.clear()
        self._thread = threading.Thread(target=self._watch, name="stall-watch", daemon=True)
        self._thread.start()

    async def on_stop(self) -> None:
        self._due = float("inf")
        self._halt.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)

    @Service.task
    async def _heartbeat(self) -> None:
        while not self.should_stop:
            self._due = perf_counter() + HEARTBEAT_S
            await asyncio.sleep(HEARTBEAT_S)
            self._ran = perf_counter()

    # -- the watchdog thread ---------------------------------------------------------------------

    def _watch(self) -> None:
        poll_s, sample_s = self.threshold_s / 2, self.threshold_s / 5
        while not self._halt.wait(poll_s):
            due = self._due
            if perf_counter() - due > self.threshold_s and self._ran < due:
                self._capture(due, sample_s)
            self.cpu_s = time.thread_time()

    def _capture(self, due: float, sample_s: float) -> None:
        stall = Stall(due, time.time() - (perf_counter() - due))
        while self._ran < due and not self._halt.is_set():
            frame = sys._current_frames().get(self._loop_thread)
            if frame is not None:
                stall.stacks[stack_of(frame)] += 1
            self._halt.wait(sample_s)
        ran = self._ran if self._ran >= due else perf_counter()
        stall.lag_s = ran - due
        stall.collections = [
            c for c in list(self.hooks.long_collections) if c.started < ran and c.ended > due
        ]
        self._keep(stall)

    def _keep(self, stall: Stall) -> None:
        with self._lock:
            self.count += 1
            self.recent.append(stall)
            longest = sorted([*self.longest, stall], key=lambda s: s.lag_s, reverse=True)
            self.longest = longest[: self.keep]
        self.stalls.inc()

    # -- the report ------------------------------------------------------------------------------

    def report(self, since: float | None = None) -> dict[str, Any]:
        """The longest stalls kept (the longest since start and the most recent), longest
        first; with `since` (seconds since the epoch), only those that began after it."""
        with self._lock:
            kept = {id(s): s for s in (*self.longest, *self.recent)}.values()
            count = self.count
        chosen = [s for s in kept if since is None or s.at >= since]
        chosen.sort(key=lambda s: s.lag_s, reverse=True)
        return {
            "threshold_ms": round(self.threshold_s * 1000, 1),
            "stalls": count,
            "watchdog_cpu_s": round(self.cpu_s, 3),
            "longest": [s.json() for s in chosen[: self.keep]],
        }


def stall_view(watch: StallWatch) -> Callable[[View, Request], Any]:
    async def stalls(web: View, request: Request) -> Response:
        since = request.query.get("since")
        return web.json(watch.report(float(since) if since else None))

    return stalls
