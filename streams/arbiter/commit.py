"""How a batch's work is committed: the processing guarantee, chosen once, as a strategy.

The loop hands a strategy each batch's work per task (`TaskBatch`: outputs, input offsets; the
changed keys are journaled from the task's store) and gets back what could not be committed,
as a value (`Failed`): the tasks to rewind to their last commit, the tasks another owner fenced.
The loop repairs those; a strategy never calls back into it. What a guarantee adds to opening a
task (`Opening`) is the strategy's too.

- `AtLeastOnce`: a batch's outputs are sent, its changelog records once the outputs are all
  acknowledged, and its offsets are committed once those are; the loop decides the next batches
  meanwhile and waits for one only when `IN_FLIGHT` are on their way.
- `ExactlyOnce`: one Kafka transaction per task, through the task's own transactional producer,
  with its input offsets inside; opening a task fences its previous owner.

Modelled on quix-streams' `checkpointing/checkpoint.py` (the commit order in one place) and Kafka
Streams' `TaskExecutor.commitOffsetsOrTransaction`.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import Counter, deque
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from time import monotonic, perf_counter
from typing import Any, Protocol

from aiokafka.errors import (
    CorruptRecordException,
    InvalidTimestampError,
    MessageSizeTooLargeError,
    ProducerFenced,
    RecordListTooLargeError,
    RecordTooLargeError,
)
from aiokafka.structs import TopicPartition

from streams.arbiter.changelog import ChangelogWriter
from streams.arbiter.collector import RecordCollector, producer_options
from streams.arbiter.tasks import InputPositions, Opening, Task, Tasks
from streams.ops.metrics import COMMIT, JOURNAL, PRODUCE, Metrics, StageClock
from streams.pipeline import Outgoing
from streams.settings import Guarantee, Settings
from streams.wire.kafka import client_options

log = logging.getLogger(__name__)


@dataclass
class TaskBatch:
    """What one batch did to one task: records to send, outcome counts to add (summed over the
    batch's tasks, one record per field|outcome|kind), offsets to commit."""

    outputs: list[Outgoing] = field(default_factory=list)
    tallies: Counter[bytes] = field(default_factory=Counter)
    offsets: dict[TopicPartition, int] = field(default_factory=dict)


REFUSED: tuple[type[BaseException], ...] = (
    MessageSizeTooLargeError,
    RecordTooLargeError,
    RecordListTooLargeError,
    CorruptRecordException,
    InvalidTimestampError,
    ValueError,  # the collector's: a record larger than a whole producer batch
)
"""Errors a retry of the same records cannot fix: the broker (or the producer) refuses a record
for what it is."""


@dataclass(frozen=True)
class Failed:
    """What a commit left for the loop to repair: tasks to rewind (reload, re-read from the last
    commit) and tasks another worker fenced (close here)."""

    rewind: frozenset[int] = frozenset()
    fenced: frozenset[int] = frozenset()
    cause: str = ""
    """Why the rewound tasks' commit failed (the error), for the operator."""
    refused: bool = False
    """The error is one no retry fixes (`REFUSED`): a record is refused for good."""

    def __or__(self, other: Failed) -> Failed:
        return Failed(
            self.rewind | other.rewind,
            self.fenced | other.fenced,
            self.cause or other.cause,
            self.refused or other.refused,
        )


NOTHING_FAILED = Failed()


class Commits(Opening, Protocol):
    """A processing guarantee, as the loop sees it."""

    isolation: str  # how this worker reads its inputs and changelog
    idempotent: bool  # whether its producers are

    async def commit(self, work: Mapping[int, TaskBatch]) -> Failed:
        """Send a batch's outputs and journal; commit its offsets."""

    async def idle(self) -> Failed:
        """No input this time: commit what the last batch read."""

    async def flush(self, staying: Collection[int] | None = None) -> Failed:
        """Commit everything sent. Failed tasks are rewound only if in `staying` (None: all)."""


def commits_for(
    settings: Settings,
    group: str,
    tasks: Tasks,
    collector: RecordCollector,
    positions: InputPositions,
    metrics: Metrics,
    stages: StageClock,
) -> Commits:
    """The strategy of the configured guarantee: the one place that asks which it is."""
    if settings.processing_guarantee is Guarantee.EXACTLY_ONCE:
        return ExactlyOnce(settings, group, tasks, collector, positions, metrics, stages)
    return AtLeastOnce(
        tasks, collector, positions, metrics, stages, commit_interval_s=settings.commit_interval_s
    )


def journaled(tasks: Tasks, work: Mapping[int, TaskBatch]) -> list[Outgoing]:
    """The batch's outputs, then one changelog record per key changed in the batch."""
    records: list[Outgoing] = []
    for batch in work.values():
        records += batch.outputs
    return records + journal_of(tasks, work)


def journal_of(tasks: Tasks, work: Mapping[int, TaskBatch]) -> list[Outgoing]:
    """One changelog record per key changed in the batch, task by task."""
    return [
        Outgoing(tasks.changelog, key, data, partition=partition)
        for partition in work
        for key, data in tasks.open[partition].states.journal().items()
    ]


def _failed(
    metrics: Metrics, partitions: Collection[int], exc: BaseException, fenced: Collection[int] = ()
) -> Failed:
    """Count and log a failed commit: these tasks rewind, with the cause."""
    metrics.commit_failures.inc()
    cause = f"{type(exc).__name__}: {exc}"
    log.warning(
        "arbiter: batch of %d tasks failed to commit (%s); rewinding them", len(partitions), cause
    )
    return Failed(frozenset(partitions), frozenset(fenced), cause, isinstance(exc, REFUSED))


@dataclass
class InFlight:
    """An at-least-once batch on its way: its outputs are sent, its changelog records are with
    the `ChangelogWriter` and settle once acknowledged (`journaled`), its offsets are committed
    after that. The next batches are read and decided meanwhile."""

    journaled: asyncio.Future[dict[int, int]]  # how far each changelog partition reaches
    offsets: dict[TopicPartition, int]
    partitions: set[int]


class _Committer:
    """What every strategy commits through: the tasks, the producer, the group's positions."""

    def __init__(
        self,
        tasks: Tasks,
        collector: RecordCollector,
        positions: InputPositions,
        metrics: Metrics,
        stages: StageClock,
    ) -> None:
        self.tasks = tasks
        self.collector = collector
        self.positions = positions
        self.metrics = metrics
        self.stages = stages


# At-least-once batches sent and not yet settled, at most: past it the loop waits for the
# oldest. Below it the loop never waits for an acknowledgement: a settled batch is committed
# when the loop next looks (after a batch, or a fetch that found none).
IN_FLIGHT = 8


class AtLeastOnce(_Committer):
    """Batches in flight: a batch is settled once its changelog is acknowledged, and the loop
    looks for settled batches without waiting for any, unless `IN_FLIGHT` are on their way.

    A batch's changelog records go out only once all its outputs are acknowledged. Sent with
    them, they could be taken while a decision is refused: the batch is rewound, its task
    reloads a changelog that already holds its claims, and the claims read again count as
    redeliveries, which repeat only the key's latest decision (an earlier one, an escalation,
    is never sent). Held back, a changelog never holds a claim whose outputs are not out. The
    `ChangelogWriter` sends them, the batches ready by then together.

    Waiting instead for the batch two behind before deciding the next, the loop spent 189 ms a
    second of the latency phase in that wait, while the claims behind it queued (`claimstream
    bench`, half load). The offsets go the same way: a batch's are committed once the commit
    before it is done, or folded into the next (commits are cumulative: a lost one only means a
    later one, or the next owner, re-reads a little more)."""

    isolation = "read_uncommitted"
    idempotent = False
    _commit: asyncio.Future[None] | None = None  # the last offset commit

    def __init__(self, *parts: Any, commit_interval_s: float = 0.0) -> None:
        """`_Committer`'s parts; settled offsets are committed at most every
        `commit_interval_s` (and whenever the batches in flight are flushed)."""
        super().__init__(*parts)
        self._in_flight: deque[InFlight] = deque()  # oldest first, until its changelog is acked
        self._changelog = ChangelogWriter(self.collector)
        self._settled: dict[TopicPartition, int] = {}  # offsets settled, not committed yet
        self.commit_interval_s = commit_interval_s
        self._committed_at = -math.inf  # monotonic time of the last offset commit

    async def fence(self, tasks: Sequence[Task]) -> None:
        """Nothing to fence: a previous owner still sending only repeats decisions."""

    async def positioned(self, task: Task) -> None:
        """The offsets fetched on assignment stand: the previous owner committed before leaving."""

    async def commit(self, work: Mapping[int, TaskBatch]) -> Failed:
        stages = self.stages
        started = perf_counter()
        journal = journal_of(self.tasks, work)
        started = stages.add(JOURNAL, started)
        outputs = [record for batch in work.values() for record in batch.outputs]
        try:
            sent = await self.collector.enqueue(outputs)
        except Exception as exc:
            return await self.flush() | _failed(self.metrics, work, exc)
        partitions = set(work)
        acks = asyncio.ensure_future(self.collector.acknowledged(sent))
        journaled = self._changelog.write(acks, journal, partitions)
        for future in (acks, journaled):
            future.add_done_callback(_retrieved)
        offsets = {tp: o for batch in work.values() for tp, o in batch.offsets.items()}
        in_flight = self._in_flight
        in_flight.append(InFlight(journaled, offsets, partitions))
        started = stages.add(PRODUCE, started)
        failed = await self._settle_ready(staying=None)
        while len(in_flight) > IN_FLIGHT and not failed.rewind:
            await asyncio.wait([in_flight[0].journaled])
            failed |= await self._settle_ready(staying=None)
        stages.add(COMMIT, started)
        return failed

    async def idle(self) -> Failed:
        return await self._settle_ready(staying=None)

    async def flush(self, staying: Collection[int] | None = None) -> Failed:
        """Settle the batches in flight, and wait for their offsets' commit. Failed tasks are
        rewound only if in `staying` (None: all)."""
        failed = NOTHING_FAILED
        while self._in_flight:
            await asyncio.wait([self._in_flight[0].journaled])
            failed |= await self._settle_ready(staying)
        await self._settled_commit()
        if self._settled:
            self._commit_settled()
            await self._settled_commit()
        return failed

    async def _settle_ready(self, staying: Collection[int] | None) -> Failed:
        """Settle the oldest batches whose changelog is acknowledged, without waiting for any;
        commit what they read if the last commit is done.

        A failed batch rewinds, of its tasks and those of the batches sent after it, the ones
        that stay on this worker (`staying`; None: all of them) to the last commit; the others'
        next owner reads again from there. The later batches' changelog records may be on their
        way: they land (or fail) before the tasks reload their changelog."""
        in_flight = self._in_flight
        while in_flight and in_flight[0].journaled.done():
            batch = in_flight.popleft()
            try:
                ends = batch.journaled.result()
            except Exception as exc:
                later = list(in_flight)
                in_flight.clear()
                self._settled.clear()
                if later:
                    await asyncio.wait([b.journaled for b in later])
                self._changelog.resume()
                partitions = batch.partitions.union(*(b.partitions for b in later))
                if staying is not None:
                    partitions &= set(staying)
                return _failed(self.metrics, partitions, exc)
            for partition in batch.partitions:
                self.tasks.durable(partition, ends.get(partition))
            self._settled.update(batch.offsets)
        if (
            self._settled
            and (self._commit is None or self._commit.done())
            and monotonic() - self._committed_at >= self.commit_interval_s
        ):
            self._commit_settled()
        return NOTHING_FAILED

    def _commit_settled(self) -> None:
        """Commit the settled offsets; the commit before it is done (or was never made)."""
        previous, self._commit = self._commit, self.positions.commit(self._settled)
        self._settled = {}
        self._committed_at = monotonic()
        if previous is not None:
            _logged(previous, self.metrics)

    async def _settled_commit(self) -> None:
        commit, self._commit = self._commit, None
        if commit is None:
            return
        await asyncio.wait([commit])
        _logged(commit, self.metrics)


def _logged(commit: asyncio.Future[None], metrics: Metrics) -> None:
    """Count and log a failed offset commit: the next one covers its offsets."""
    if commit.cancelled() or (exc := commit.exception()) is None:
        return
    metrics.commit_failures.inc()
    log.warning("arbiter: offset commit failed (%s: %s)", type(exc).__name__, exc)


def _retrieved(acks: asyncio.Future[Any]) -> None:
    """Mark a failure as seen: a batch dropped by a rewind is never awaited."""
    if not acks.cancelled():
        acks.exception()


class ExactlyOnce(_Committer):
    """One transaction per task: its outputs, journal and input offsets commit together."""

    isolation = "read_committed"
    idempotent = True

    def __init__(
        self,
        settings: Settings,
        group: str,
        tasks: Tasks,
        collector: RecordCollector,
        positions: InputPositions,
        metrics: Metrics,
        stages: StageClock,
    ) -> None:
        super().__init__(tasks, collector, positions, metrics, stages)
        self.settings = settings
        self.group = group

    async def fence(self, tasks: Sequence[Task]) -> None:
        """Fence each task's previous owner and settle its open transaction (committed or
        aborted), so the changelog read next ends where that transaction left it."""
        options = client_options(self.settings) | producer_options(idempotent=True)
        await asyncio.gather(
            *(
                task.open_producer(options | {"transactional_id": f"{self.group}-{task.partition}"})
                for task in tasks
            )
        )

    async def positioned(self, task: Task) -> None:
        # The offsets the consumer fetched on assignment may predate the previous owner's last
        # transaction, which opening the task has only now settled.
        await self.positions.seek_to_committed({task.partition})

    async def commit(self, work: Mapping[int, TaskBatch]) -> Failed:
        stages = self.stages
        started = perf_counter()
        records = {p: journaled(self.tasks, {p: batch}) for p, batch in work.items()}
        started = stages.add(JOURNAL, started)
        sent: list[float] = []  # when each task's records were all acknowledged
        results = await asyncio.gather(
            *(
                self._transaction(self.tasks.open[p], batch, records[p], sent)
                for p, batch in work.items()
            ),
            return_exceptions=True,
        )
        # The tasks' transactions run side by side: wall time until the last one's records
        # were acknowledged is producing, the rest committing.
        produced = max(sent, default=started)
        stages.seconds[PRODUCE] += produced - started
        stages.add(COMMIT, produced)
        fenced, failed = set(), NOTHING_FAILED
        for partition, result in zip(work, results, strict=True):
            if isinstance(result, ProducerFenced):
                # Another worker opened this task: it is the owner now, and reopening the task
                # here would fence it in turn. Drop it; the rebalance under way takes it away.
                log.warning("arbiter: task %d was fenced by its new owner; dropping it", partition)
                fenced.add(partition)
            elif isinstance(result, Exception):
                failed |= _failed(self.metrics, {partition}, result)
        return failed | Failed(fenced=frozenset(fenced))

    async def idle(self) -> Failed:
        return NOTHING_FAILED  # every batch committed with its transaction

    async def flush(self, staying: Collection[int] | None = None) -> Failed:
        return NOTHING_FAILED

    async def _transaction(
        self, task: Task, batch: TaskBatch, records: list[Outgoing], sent: list[float]
    ) -> None:
        producer = task.producer
        assert producer is not None
        async with producer.transaction():
            ends = await self.collector.send_all(records, via=producer)
            sent.append(perf_counter())
            await producer.send_offsets_to_transaction(batch.offsets, self.group)
        self.tasks.durable(task.partition, ends.get(task.partition))
