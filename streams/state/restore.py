"""Restoring tasks' key states from their changelog partitions: the reader beside the checkpoints
(`local.py`) that say where each may start.

The arbiter's tasks (`streams.arbiter.tasks`) hand it the tasks to restore, each with the
changelog offset its store already holds (its checkpoint's, or 0). It reads every partition at
once, from there to the end offset each has when the read starts (under read_committed, the last
stable offset), loads each record into the task's store as it is (its timer read from the record,
no key decoded), and hands each task back the moment its partition is read to its end. Modelled
on Kafka Streams' `StoreChangelogReader` and quix-streams' `state/recovery.py`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition

from streams.ops.metrics import Metrics
from streams.state.task import TaskStore

log = logging.getLogger(__name__)

RESTORE_FETCH_MS = 500  # getmany returns as soon as records arrive; this only bounds an idle wait
PROGRESS_S = 5.0  # how often a long restore logs how far it is


class Restoring(Protocol):
    """What the reader needs of a task: its partition, its store, and where its store stands."""

    partition: int
    states: TaskStore
    changelog_offset: int  # the next changelog offset the task's store has not seen


TaskT = TypeVar("TaskT", bound=Restoring)


class ChangelogReader:
    """Reads changelog partitions into their tasks' stores, one read at a time."""

    def __init__(self, changelog: str, metrics: Metrics) -> None:
        self.changelog = changelog
        self.metrics = metrics
        self._restorer: AIOKafkaConsumer | None = None

    def attach(self, restorer: AIOKafkaConsumer) -> None:
        self._restorer = restorer

    async def read(
        self,
        tasks: Sequence[TaskT],
        rebuild: Callable[[TaskT, str], None],
        ready: Callable[[TaskT], Awaitable[None]],
    ) -> None:
        """Read the tasks' partitions to their end offsets, calling `ready` with each task as
        its partition is done; a task whose store is past its partition's end is first handed
        to `rebuild` (which wipes it), with the reason."""
        restorer = self._restorer
        assert restorer is not None
        restoring = {TopicPartition(self.changelog, task.partition): task for task in tasks}
        restorer.assign(list(restoring))
        # Under read_committed this is the last stable offset: nothing past it may count.
        ends = await restorer.end_offsets(list(restoring))
        for tp, task in restoring.items():
            if task.changelog_offset > ends[tp]:
                rebuild(
                    task,
                    f"restores from offset {task.changelog_offset}, past its changelog's "
                    f"end {ends[tp]} (a checkpoint ahead of the changelog)",
                )
            restorer.seek(tp, task.changelog_offset)
        progress = _Progress(self.metrics, restoring, ends)
        try:
            await self._read_to_ends(restorer, restoring, ends, progress, ready)
        finally:
            self.metrics.restore_records_remaining.set(0)  # done, failed or cancelled

    async def _read_to_ends(
        self,
        restorer: AIOKafkaConsumer,
        restoring: dict[TopicPartition, TaskT],
        ends: Mapping[TopicPartition, int],
        progress: _Progress,
        ready: Callable[[TaskT], Awaitable[None]],
    ) -> None:
        while True:
            for tp in list(restoring):
                position = await restorer.position(tp)
                if position >= ends[tp]:
                    task = restoring.pop(tp)
                    task.changelog_offset = position
                    progress.caught_up(tp, position)
                    await ready(task)
            if not restoring:
                return
            fetched = await restorer.getmany(
                *restoring, timeout_ms=RESTORE_FETCH_MS, max_records=10000
            )
            for tp, messages in fetched.items():
                task = restoring[tp]
                # A record of a state format this release does not read stops the restore (and
                # the worker) before any input is consumed.
                where = f"{self.changelog} partition {task.partition}, "
                task.states.load_all(((m.key, m.value) for m in messages), where)
                task.changelog_offset = messages[-1].offset + 1
            progress.read(fetched)


class _Progress:
    """How far a restore is: the remaining-records gauge, and a log line now and then."""

    def __init__(
        self,
        metrics: Metrics,
        restoring: Mapping[TopicPartition, Restoring],
        ends: Mapping[Any, int],
    ) -> None:
        self.gauge = metrics.restore_records_remaining
        self.ends = dict(ends)
        self.started = {tp: task.changelog_offset for tp, task in restoring.items()}
        self.positions = dict(self.started)
        self.began = self.logged = time.monotonic()
        self._show()

    def _show(self) -> None:
        self.gauge.set(sum(max(0, self.ends[tp] - o) for tp, o in self.positions.items()))

    def read(self, fetched: Mapping[TopicPartition, Sequence[Any]]) -> None:
        for tp, messages in fetched.items():
            self.positions[tp] = messages[-1].offset + 1
        self._show()
        now = time.monotonic()
        if now - self.logged >= PROGRESS_S:
            self.logged = now
            read = sum(self.positions[tp] - self.started[tp] for tp in self.positions)
            total = sum(self.ends[tp] - self.started[tp] for tp in self.positions)
            log.info(
                "arbiter: restoring: %d of %d changelog records read (%.0f records/s)",
                read,
                total,
                read / max(now - self.began, 1e-9),
            )

    def caught_up(self, tp: TopicPartition, position: int) -> None:
        self.positions[tp] = position
        self._show()
        elapsed = time.monotonic() - self.began
        read = position - self.started[tp]
        log.info(
            "arbiter: task %d caught up to changelog offset %d (end %d): %d records read "
            "from offset %d in %.2fs (%.0f records/s)",
            tp.partition,
            position,
            self.ends[tp],
            read,
            self.started[tp],
            elapsed,
            read / max(elapsed, 1e-9),
        )
