"""The arbiter's tasks: task `p` is partition `p` of every input topic and the state of its keys.

Sits between the loop (which asks for tasks to be opened, reloaded and closed) and the stores
(`streams.state`): a task is restored from its changelog partition off the rebalance callback
(`streams.state.restore`), from its local checkpoint when it has a usable one
(`streams.state.local`), else from the beginning, each record's timer with it; installed (its
input partitions fetched again); checkpointed after commits as the guarantee says; and closed
(off the schedule, out of the shared cache) when revoked, rewound or fenced. What the processing
guarantee adds to opening a task (fencing its previous owner, re-reading the committed offsets)
is the commit strategy's, reached through `Opening`. Modelled on Kafka Streams' `StreamTask`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaError
from aiokafka.structs import TopicPartition

from streams.arbiter.schedule import Schedule
from streams.ops.metrics import Metrics
from streams.state.cache import StateCache
from streams.state.local import Checkpoints
from streams.state.restore import ChangelogReader
from streams.state.task import TaskStore

log = logging.getLogger(__name__)

RESTORE_RETRY_S = 1.0


@dataclass
class Task:
    """Partition `partition` of every input topic, and the state of the keys they carry."""

    partition: int
    states: TaskStore
    changelog_offset: int = 0  # next changelog offset this task has not yet seen
    applied: int = 0  # every changelog record below this offset is in the task's key store
    checkpointed: int = 0  # the offset the task's last checkpoint names
    producer: AIOKafkaProducer | None = None  # transactional, exactly_once only

    async def open_producer(self, options: Mapping[str, Any]) -> None:
        """Start this task's own producer (once): with a transactional id, this fences the
        task's previous owner."""
        if self.producer is not None:
            return
        producer = AIOKafkaProducer(**options)
        try:
            await producer.start()
        except BaseException:
            with contextlib.suppress(Exception):
                await producer.stop()
            raise
        self.producer = producer

    async def release_producer(self) -> None:
        if self.producer is not None:
            with contextlib.suppress(Exception):  # a fenced producer may fail to stop cleanly
                await self.producer.stop()
            self.producer = None


class InputPositions:
    """Where this worker reads each input partition: the group consumer's positions, pauses,
    seeks and offset commits."""

    def __init__(self) -> None:
        self._consumer: AIOKafkaConsumer | None = None
        self.reached: dict[TopicPartition, int] = {}  # next input offset, per partition

    def attach(self, consumer: AIOKafkaConsumer) -> None:
        self._consumer = consumer

    @property
    def consumer(self) -> AIOKafkaConsumer:
        assert self._consumer is not None, "the arbiter has not started"
        return self._consumer

    def held(self, partitions: Collection[int]) -> list[TopicPartition]:
        """The assigned input partitions of these tasks."""
        return [tp for tp in self.consumer.assignment() if tp.partition in partitions]

    def pause(self, partitions: Collection[int]) -> None:
        self.consumer.pause(*self.held(partitions))

    def resume(self, held: Iterable[TopicPartition]) -> None:
        self.consumer.resume(*held)

    def read_again(self, tp: TopicPartition, offset: int) -> None:
        """Fetch `tp` again from `offset`, if it is still assigned here."""
        if tp in self.consumer.assignment():
            self.consumer.seek(tp, offset)

    def forget(self, partitions: Collection[int]) -> None:
        # Where this worker stopped says nothing about where the next owner stops.
        self.reached = {tp: o for tp, o in self.reached.items() if tp.partition not in partitions}

    async def seek_to_committed(self, partitions: Collection[int]) -> None:
        consumer = self.consumer
        for tp in consumer.assignment():
            if tp.partition in partitions:
                committed = await consumer.committed(tp)
                log.info("arbiter: %s resumes at committed offset %s", tp, committed)
                if committed is None:
                    await consumer.seek_to_beginning(tp)
                else:
                    consumer.seek(tp, committed)
                self.reached[tp] = committed or 0

    def commit(self, offsets: Mapping[TopicPartition, int]) -> asyncio.Future[None]:
        commit: Awaitable[None] = self.consumer.commit(dict(offsets))
        return asyncio.ensure_future(commit)


class Opening(Protocol):
    """What the processing guarantee does to tasks being opened on this worker."""

    async def fence(self, tasks: Sequence[Task]) -> None:
        """Before the tasks' changelog partitions are read."""

    async def positioned(self, task: Task) -> None:
        """Once the task is installed, before its input partitions are fetched again."""


class Tasks:
    """The tasks open on this worker, and the revoked ones it keeps to catch up if they return."""

    def __init__(
        self,
        changelog: str,
        cache: StateCache,
        schedule: Schedule,
        positions: InputPositions,
        checkpoints: Checkpoints,
        metrics: Metrics,
    ) -> None:
        self.changelog = changelog
        self.cache = cache
        self.schedule = schedule
        self.positions = positions
        self.checkpoints = checkpoints
        self.metrics = metrics
        self.open: dict[int, Task] = {}
        self.standby: dict[int, Task] = {}  # revoked tasks, kept to catch up if they come back
        self.reader = ChangelogReader(changelog, metrics)
        self._reading = asyncio.Lock()  # one reader of the changelog at a time

    def attach(self, restorer: AIOKafkaConsumer) -> None:
        self.reader.attach(restorer)

    def keys(self) -> int:
        return sum(task.states.count() for task in self.open.values())

    def encoded_bytes(self) -> int:
        return sum(task.states.encoded_bytes for task in self.open.values())

    def journaled_to(self, partition: int, end: int) -> None:
        """The task's changelog partition is acknowledged up to `end`."""
        task = self.open.get(partition)
        if task is not None:
            task.changelog_offset = max(task.changelog_offset, end)

    def durable(self, partition: int, end: int | None) -> None:
        """The task's oldest journal not yet written is in its changelog, which reaches `end`
        (None: the journal had no record): write it to the task's store; checkpoint if due."""
        task = self.open.get(partition)
        if task is None:
            return
        task.states.journaled()
        if end is not None:
            task.applied = max(task.applied, end)
        store = task.states.store
        if self.checkpoints.committed(partition, store, task.applied, task.checkpointed):
            task.checkpointed = task.applied

    def take(self, partitions: Iterable[int]) -> list[Task]:
        """Tasks for newly assigned partitions: from standby (to catch up), else opened from
        their local store and checkpoint, if any."""
        standby = self.standby
        tasks = [standby.pop(p) if p in standby else self._opened(p) for p in sorted(partitions)]
        for task in self.standby.values():  # the partitions went elsewhere: another's state now
            task.states.store.close()
        self.standby.clear()
        return tasks

    def _opened(self, partition: int) -> Task:
        store, offset = self.checkpoints.open(partition)
        return Task(partition, TaskStore(self.cache, store), offset, offset, offset)

    def _rebuild(self, task: Task, why: str) -> None:
        """Wipe the task's store: it restores in full."""
        log.warning(
            "arbiter: task %d %s; wiping its local store and restoring in full", task.partition, why
        )
        task.states.forget_pending()
        task.states.store.wipe()
        self.checkpoints.remove(task.partition)
        task.changelog_offset = task.applied = task.checkpointed = 0

    async def restore_assigned(self, tasks: list[Task], opening: Opening) -> None:
        """Restore newly assigned tasks; each partition resumes as soon as its task is ready."""
        started = time.monotonic()
        try:
            while tasks:
                try:
                    await self.restore(tasks, opening)
                except KafkaError as exc:
                    log.warning(
                        "arbiter: restore failed (%s: %s); retrying", type(exc).__name__, exc
                    )
                    await asyncio.sleep(RESTORE_RETRY_S)
                tasks = [task for task in tasks if task.partition not in self.open]
        except asyncio.CancelledError:
            # Revoked mid-restore: what was read stays valid up to the task's changelog offset,
            # so the task waits in standby in case the partition comes back.
            for task in tasks:
                if task.partition not in self.open:
                    await task.release_producer()
                    self.standby[task.partition] = task
            raise
        log.info(
            "arbiter: tasks %s ready in %.2fs (%d keys)",
            sorted(self.open),
            time.monotonic() - started,
            self.keys(),
        )

    async def restore(self, tasks: list[Task], opening: Opening) -> None:
        """Fence the tasks' previous owners, then read their changelog partitions, all at once,
        installing each task the moment its partition is read to its end."""
        if not tasks:
            return
        async with self._reading:
            await opening.fence(tasks)
            await self.reader.read(tasks, self._rebuild, lambda task: self._install(task, opening))

    async def _install(self, task: Task, opening: Opening) -> None:
        """Put a restored task in service and let its partitions be fetched again."""
        states = task.states
        task.applied = task.checkpointed = task.changelog_offset
        self.checkpoints.installed(task.partition, states.store, task.changelog_offset)
        self.open[task.partition] = task
        self.schedule.attach(task.partition, states)
        held = self.positions.held({task.partition})
        await opening.positioned(task)
        self.positions.resume(held)

    async def reload(self, partitions: Iterable[int], opening: Opening) -> None:
        """Forget what these open tasks did since their changelog, and read it again."""
        reloaded = []
        for partition in partitions:
            if partition not in self.open:
                continue
            # Exactly once, the task's transactional producer is opened anew (`restore` fences):
            # its failed transaction may have committed after all (the error came after the
            # commit was sent), and initialising the producer again makes the coordinator settle
            # it, committed or aborted, before the changelog and the committed offsets are read
            # (Kafka Streams does the same); and a producer whose batch the broker refused keeps
            # sequence numbers the broker will never accept again (OutOfOrderSequenceNumber).
            reloaded.append(await self.close(partition))
        await self.restore(reloaded, opening)

    async def close(self, partition: int) -> Task:
        """Take a task out of service: off the schedule, out of the shared cache, its changes
        not known to be in the changelog forgotten. Its store stays open."""
        task = self.open.pop(partition)
        self.schedule.detach(partition)
        task.states.forget_pending()
        # Its store holds only what the changelog holds: should it reopen, it reads on from there.
        task.changelog_offset = task.applied
        task.states.evict()
        await task.release_producer()
        return task

    async def drop(self, partition: int) -> None:
        """Close a task another owner took (fenced): no checkpoint of this worker's."""
        task = await self.close(partition)
        task.states.store.close()

    async def to_standby(self, partitions: Iterable[int]) -> None:
        """Close the revoked tasks, checkpointed, and keep them to catch up should they come
        back."""
        for partition in set(partitions) & set(self.open):
            task = self.standby[partition] = await self.close(partition)
            self._checkpoint(task)

    def _checkpoint(self, task: Task) -> None:
        self.checkpoints.write(task.partition, task.states.store, task.applied)
        task.checkpointed = task.applied

    async def close_all(self) -> None:
        """The worker stops, its batches settled: checkpoint and close every store."""
        for partition in list(self.open):
            task = await self.close(partition)
            try:
                self._checkpoint(task)
            except OSError as exc:  # the next start reads an older checkpoint, or rebuilds
                log.warning("arbiter: task %d not checkpointed (%s)", partition, exc)
            task.states.store.close()
        for task in self.standby.values():
            task.states.store.close()
        self.standby.clear()

    async def stop_producers(self) -> None:
        for task in [*self.open.values(), *self.standby.values()]:
            if task.producer is not None:
                await task.producer.stop()
