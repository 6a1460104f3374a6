"""What a worker tells Kubernetes and Prometheus about itself: liveness, readiness, consumer lag.

- **Liveness** (`/healthz`): the arbiter's loop completes an iteration at least every
  `liveness_timeout_s` (an idle loop iterates every `batch_within_s`; a batch stuck on a send or a
  commit does not), a rebalance restores its tasks within `restore_timeout_s`, and no task stays
  fenced by another owner while this worker still holds its partition. Failing it means a restart
  would help.
- **Readiness** (`/readyz`): the worker has joined its group, every partition it was assigned has
  an open task (its state restored from the changelog), and no task is stalled: none has gone
  `task_stall_timeout_s` without committing past its input while records wait for it (the lag
  probe's reading), or with its commits failing (the arbiter's). An idle member with no
  partition is ready. `claimstream_task_stalled_seconds` says how long each task has been so.
- **Lag**: log end offsets minus the group's committed offsets, asked from the broker by a task of
  its own, so the gauge keeps moving when the loop blocks (which is when it matters).

`Pulse` holds the signals the arbiter reports; time comes from an injectable monotonic clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import TopicPartition
from mode import Service

from streams.ops.metrics import Metrics
from streams.settings import Guarantee, Settings
from streams.wire.kafka import client_options

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProbeAnswer:
    ok: bool
    reasons: tuple[str, ...] = ()
    details: dict[str, Any] = field(default_factory=dict)

    def json(self) -> dict[str, Any]:
        status = "ok" if self.ok else "failing"
        return {"status": status, "reasons": list(self.reasons), **self.details}


class Stall(NamedTuple):
    """A task without progress: since when (the pulse's clock), and why."""

    since: float
    cause: str


class Pulse:
    """The arbiter's signs of life: loop iterations, rebalances, restores, fenced and stalled
    tasks."""

    def __init__(
        self,
        metrics: Metrics,
        liveness_timeout_s: float,
        restore_timeout_s: float,
        clock: Callable[[], float] = time.monotonic,
        stall_timeout_s: float = 60.0,
    ) -> None:
        self.metrics = metrics
        self.liveness_timeout_s = liveness_timeout_s
        self.restore_timeout_s = restore_timeout_s
        self.stall_timeout_s = stall_timeout_s
        self.stalls: dict[int, Stall] = {}
        self.clock = clock
        self.last_beat = clock()  # a loop that never iterates fails once the timeout passes
        self.restoring_since: float | None = None
        self.owned: frozenset[int] | None = None  # None until the group assigns something
        self.fenced: dict[int, float] = {}  # partition -> when another owner fenced its task

    def beat(self) -> None:
        """The loop completed an iteration (a batch, or an empty fetch)."""
        self.last_beat = self.clock()

    def rebalancing(self) -> None:
        """The group is rebalancing: partitions are about to be revoked."""
        if self.restoring_since is None:
            self.restoring_since = self.clock()

    def assigned(self, partitions: Iterable[int]) -> None:
        """The group assigned these partitions; their tasks are being restored."""
        self.owned = frozenset(partitions)
        self.fenced = {p: t for p, t in self.fenced.items() if p in self.owned}
        self.stalls.clear()  # a restored task starts afresh
        self.rebalancing()

    def restored(self) -> None:
        """The assigned tasks are open: the rebalance is over for this worker."""
        if self.restoring_since is not None:
            self.metrics.rebalanced(self.clock() - self.restoring_since)
        self.restoring_since = None
        self.beat()

    def commit_failed(self, partitions: Iterable[int], cause: str) -> None:
        """These tasks' commit failed (they rewind): stalled from the first failure on, until
        their committed offsets move."""
        now = self.clock()
        for partition in partitions:
            since = self.stalls[partition].since if partition in self.stalls else now
            self.stalls[partition] = Stall(since, f"its commits fail ({cause})")

    def committed(self, partition: int, waiting: int, unmoved_since: float) -> None:
        """The lag probe's reading of one task: `waiting` records after its committed offsets,
        which have not moved since `unmoved_since` (the pulse's clock)."""
        stall = self.stalls.get(partition)
        if unmoved_since > (stall.since if stall is not None else -float("inf")):
            self.stalls.pop(partition, None)  # it moved since the stall began
            stall = None
        if waiting > 0 and stall is None:
            cause = f"its committed offsets have not moved with {waiting} records waiting"
            self.stalls[partition] = Stall(unmoved_since, cause)
        elif waiting == 0 and stall is not None and not stall.cause.startswith("its commits"):
            self.stalls.pop(partition, None)

    def stalled_s(self) -> dict[int, float]:
        """Seconds each owned task has been stalled (0 when it is not)."""
        now = self.clock()
        owned = self.owned or frozenset()
        return {p: now - self.stalls[p].since if p in self.stalls else 0.0 for p in sorted(owned)}

    def fence(self, partition: int) -> None:
        self.fenced.setdefault(partition, self.clock())
        self.metrics.tasks_fenced.inc()

    def liveness(self) -> ProbeAnswer:
        now = self.clock()
        reasons = []
        if self.restoring_since is not None:
            restoring = now - self.restoring_since
            if restoring > self.restore_timeout_s:
                limit = self.restore_timeout_s
                reasons.append(f"rebalance restoring for {restoring:.0f}s (limit {limit:.0f}s)")
        else:
            idle = now - self.last_beat
            if idle > self.liveness_timeout_s:
                reasons.append(
                    f"arbiter loop has not completed an iteration for {idle:.0f}s "
                    f"(limit {self.liveness_timeout_s:.0f}s): stuck on a send, a commit or a lock"
                )
        for partition, since in sorted(self.fenced.items()):
            if now - since > self.liveness_timeout_s:
                reasons.append(
                    f"task {partition} fenced by another owner {now - since:.0f}s ago "
                    "and its partition is still assigned here"
                )
        return ProbeAnswer(
            not reasons,
            tuple(reasons),
            {"last_iteration_age_s": round(now - self.last_beat, 3)},
        )

    def readiness(self, open_tasks: Iterable[int]) -> ProbeAnswer:
        opened = set(open_tasks)
        if self.owned is None:
            return ProbeAnswer(False, ("not yet assigned partitions by the consumer group",))
        waiting = sorted(self.owned - opened)
        reasons = []
        if self.restoring_since is not None:
            reasons.append("rebalancing")
        if waiting:
            reasons.append(f"tasks {waiting} not restored")
        now = self.clock()
        for partition, stall in sorted(self.stalls.items()):
            stalled = now - stall.since
            if partition in opened and stalled >= self.stall_timeout_s:
                reasons.append(f"task {partition} stalled for {stalled:.0f}s: {stall.cause}")
        return ProbeAnswer(
            not reasons,
            tuple(reasons),
            {"tasks_assigned": sorted(self.owned), "tasks_open": sorted(opened & self.owned)},
        )


def report_health(
    metrics: Metrics, pulse: Pulse, open_tasks: Callable[[], Collection[int]]
) -> None:
    """Serve the verdicts as metrics too, computed when Prometheus scrapes."""
    metrics.up.set_function(lambda: float(pulse.liveness().ok))
    metrics.ready.set_function(lambda: float(pulse.readiness(open_tasks()).ok))
    metrics.tasks_owned.set_function(lambda: len(open_tasks()))


class LagProbe(Service):
    """Consumer lag of the partitions this worker owns, straight from the broker."""

    def __init__(
        self,
        settings: Settings,
        metrics: Metrics,
        group: str,
        topics: Iterable[str],
        owned: Callable[[], frozenset[int] | None],
        pulse: Pulse | None = None,
        **kwargs: Any,
    ) -> None:
        """`pulse`, where given, hears of each task whose committed offsets do not move."""
        super().__init__(**kwargs)
        self.settings = settings
        self.metrics = metrics
        self.group = group
        self.topics = list(topics)
        self.owned = owned
        self.pulse = pulse
        self._moved: dict[int, tuple[tuple[int, ...], float]] = {}  # offsets, when they moved
        self.positions: dict[TopicPartition, int] = {}  # committed (or earliest) offsets
        self._offsets: AIOKafkaConsumer | None = None
        self._admin: AIOKafkaAdminClient | None = None

    async def on_start(self) -> None:
        self._offsets = AIOKafkaConsumer(**client_options(self.settings), enable_auto_commit=False)
        self._admin = AIOKafkaAdminClient(**client_options(self.settings))
        await self._offsets.start()
        await self._admin.start()

    async def on_stop(self) -> None:
        with contextlib.suppress(Exception):
            if self._offsets is not None:
                await self._offsets.stop()
        with contextlib.suppress(Exception):
            if self._admin is not None:
                await self._admin.close()

    @Service.task
    async def _probe(self) -> None:
        interval = self.settings.lag_interval_s
        failing = False
        while not self.should_stop:
            try:
                await asyncio.wait_for(self.refresh(), timeout=max(5.0, interval))
            except Exception as exc:
                # Once per outage, not every interval; the gauge keeps its last value meanwhile.
                level = logging.DEBUG if failing else logging.WARNING
                log.log(level, "lag probe failed (%s: %s)", type(exc).__name__, exc)
                failing = True
            else:
                failing = False
            await self.sleep(interval)

    async def refresh(self) -> None:
        """Ask the broker for end and committed offsets: the lag gauge, the committed count."""
        assert self._offsets is not None
        assert self._admin is not None
        owned = self.owned() or frozenset()
        partitions = [TopicPartition(t, p) for t in self.topics for p in sorted(owned)]
        lag = dict.fromkeys(self.topics, 0)
        positions: dict[TopicPartition, int] = {}
        if partitions:
            ends = await self._offsets.end_offsets(partitions)
            fetched = await self._admin.list_consumer_group_offsets(
                self.group, partitions=partitions
            )
            positions = {tp: meta.offset for tp, meta in fetched.items() if meta.offset >= 0}
            missing = [tp for tp in partitions if tp not in positions]
            if missing:  # nothing committed yet: the group starts from the earliest record
                positions |= await self._offsets.beginning_offsets(missing)
            for tp in partitions:
                lag[tp.topic] += max(0, ends[tp] - positions[tp])
        self.metrics.records_committed.inc(
            sum(
                max(0, offset - self.positions[tp])
                for tp, offset in positions.items()
                if tp in self.positions
            )
        )
        self.positions = positions
        for topic, value in lag.items():
            self.metrics.consumer_lag.labels(topic).set(value)
        if self.pulse is not None and partitions:
            self._report(self.pulse, owned, ends, positions)

    def _report(
        self,
        pulse: Pulse,
        owned: frozenset[int],
        ends: dict[TopicPartition, int],
        positions: dict[TopicPartition, int],
    ) -> None:
        """Tell the pulse, per task, how many records wait and since when its committed
        offsets have not moved; publish how long each has been stalled."""
        # Exactly once, an input partition written in transactions (the re-keyed topic) ends
        # with the marker of the last: the committed offset stops before it, though no record
        # waits. One record a partition is not counted there.
        markers = 1 if self.settings.processing_guarantee is Guarantee.EXACTLY_ONCE else 0
        for partition in sorted(owned):
            tps = [TopicPartition(topic, partition) for topic in self.topics]
            committed = tuple(positions[tp] for tp in tps)
            seen = self._moved.get(partition)
            if seen is None or seen[0] != committed:
                seen = self._moved[partition] = (committed, pulse.clock())
            waiting = sum(max(0, ends[tp] - positions[tp] - markers) for tp in tps)
            pulse.committed(partition, waiting, seen[1])
        self.metrics.stalled.set(pulse.stalled_s())
