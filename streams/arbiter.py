"""The hot path: a batched aiokafka loop that owns the arbiter's partitions, key state and commits.

Faust's per-event machinery costs about 30 µs per record before any work is done, and one table
write sends one changelog record; measured, an agent doing decode + table + send tops out near
3k records/s here. So the arbiter works like a Kafka Streams task set instead, and Faust keeps the
rest (aliases, outcome windows, web, lifecycle):

- **Tasks.** Every input topic is keyed by `subject|field` with one partition count, so partition
  `p` of every input topic holds the same keys. Task `p` owns those partitions and the state of
  their keys: a dict in memory, journaled to partition `p` of a compacted changelog topic. A range
  assignment hands partition `p` of every topic to one worker, and also tells every worker which
  worker's web API serves each partition.
- **Batches.** Fetch many records; run each through `Processor` against its task's state; then
  send the outputs plus one changelog record per changed key, and commit the input offsets only
  once all of that is acknowledged (at least once), or inside the same Kafka transaction (exactly
  once, one transactional producer per task, so a task's new owner fences the old one).
- **Rebalances.** A revoked task stops before its partitions move (the batch in flight finishes
  and commits first). The assignment callback only records the new partitions and pauses them:
  aiokafka heartbeats only once that callback returns, so a callback that restores state would
  outlast the rebalance timeout and get the member evicted (two members can evict each other in
  a loop). Restoring runs as its own task instead, all new partitions at once, and each resumes
  as soon as its changelog partition is read to its end offset. A task assigned again catches up
  from the changelog offset it last saw instead of reloading everything. A revocation cancels a
  restore under way. A batch that fails to commit rewinds: its tasks reload from the changelog and
  re-read from the last committed offsets.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import json
import logging
import socket
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from time import perf_counter
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)
from aiokafka.errors import KafkaError, ProducerFenced
from aiokafka.structs import ConsumerRecord, TopicPartition
from mode import Service

from streams.client import client_options
from streams.core.contracts import OPEN_OUTCOMES, Decision
from streams.core.keystate import KeyState
from streams.health import Pulse
from streams.metrics import COMMIT, JOURNAL, PRODUCE, Metrics
from streams.pipeline import Handled, Incoming, Outgoing, Processor
from streams.pipeline.rekey import partition_of
from streams.settings import Guarantee, Settings
from streams.statestore import StateCache, TaskStore

log = logging.getLogger(__name__)

RESTORE_FETCH_MS = 500  # getmany returns as soon as records arrive; this only bounds an idle wait
RESTORE_RETRY_S = 1.0
SCHEDULE_YIELD_KEYS = 500  # keys scheduled between yields, so restoring never starves heartbeats


def advertised_url(settings: Settings) -> str:
    host = settings.web_host if settings.web_host not in ("0.0.0.0", "::") else socket.getfqdn()
    return f"http://{host}:{settings.web_port}"


class RoutingAssignor(RangePartitionAssignor):  # type: ignore[misc]
    """Range assignment (partition p of every topic to one member: co-partitioned tasks) that
    also shares each member's web URL, so any worker can route a key's API request to its owner."""

    name = "claimstream-range"

    def __init__(self, url: str) -> None:
        self.url = url
        self.owners: dict[int, str] = {}

    def metadata(self, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:
        return ConsumerProtocolMemberMetadata(self.version, list(topics), self.url.encode())

    def assign(
        self, cluster: Any, members: Mapping[str, ConsumerProtocolMemberMetadata]
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        assignments = RangePartitionAssignor.assign(cluster, members)
        owners = {
            partition: members[member].user_data.decode()
            for member, assignment in assignments.items()
            for _, partitions in assignment.assignment
            for partition in partitions
        }
        routes = json.dumps(owners).encode()
        return {
            member: ConsumerProtocolMemberAssignment(a.version, a.assignment, routes)
            for member, a in assignments.items()
        }

    def on_assignment(self, assignment: ConsumerProtocolMemberAssignment) -> None:
        routes = json.loads(assignment.user_data or b"{}")
        self.owners = {int(partition): url for partition, url in routes.items()}


@dataclass
class Task:
    """Partition `partition` of every input topic, and the state of the keys they carry."""

    partition: int
    states: TaskStore
    changelog_offset: int = 0  # next changelog offset this task has not yet seen
    producer: AIOKafkaProducer | None = None  # transactional, exactly_once only


@dataclass
class Schedule:
    """When each owned key may change by time alone, and which are open conflicts. Derived from
    the tasks' state; the state stays the truth."""

    due: dict[bytes, datetime] = field(default_factory=dict)
    open_since: dict[bytes, tuple[str, datetime]] = field(default_factory=dict)
    # (due, key) in due order; an entry whose key is no longer due then is skipped when reached.
    _queue: list[tuple[datetime, bytes]] = field(default_factory=list)

    def note(self, key: bytes, state: KeyState) -> None:
        self.plan(key, state.next_check_at)
        current = state.current
        if (
            current is not None
            and current.outcome in OPEN_OUTCOMES
            and state.conflict_since is not None
        ):
            self.open_since[key] = (state.field, state.conflict_since)
        else:
            self.open_since.pop(key, None)

    def plan(self, key: bytes, due: datetime | None) -> None:
        if due is None:
            self.due.pop(key, None)
        elif self.due.get(key) != due:
            self.due[key] = due
            heapq.heappush(self._queue, (due, key))

    def forget(self, keys: Iterable[bytes]) -> None:
        for key in keys:
            self.due.pop(key, None)
            self.open_since.pop(key, None)

    def take_due(self, now: datetime, limit: int | None = None) -> list[tuple[bytes, datetime]]:
        """Up to `limit` keys due by `now`, the earliest first; each is handed out once."""
        ready: list[tuple[bytes, datetime]] = []
        planned, heap = self.due, self._queue
        while heap and heap[0][0] <= now and (limit is None or len(ready) < limit):
            due, key = heapq.heappop(heap)
            if planned.get(key) == due:
                del planned[key]
                ready.append((key, due))
        if len(heap) > 2 * len(planned) + 1024:
            # Mostly superseded entries (keys re-planned or forgotten): rebuild from the truth.
            self._queue = [(due, key) for key, due in planned.items()]
            heapq.heapify(self._queue)
        return ready


@dataclass
class TaskBatch:
    """What one batch did to one task: records to send, keys to journal, offsets to commit."""

    outputs: list[Outgoing] = field(default_factory=list)
    changed: dict[bytes, bytes] = field(default_factory=dict)  # key -> encoded state
    offsets: dict[TopicPartition, int] = field(default_factory=dict)


@dataclass
class InFlight:
    """An at-least-once batch whose records are sent and not yet all acknowledged: its offsets
    are committed once they are. The next batch is read and decided meanwhile."""

    acks: asyncio.Future[None]
    offsets: dict[TopicPartition, int]
    partitions: set[int]


Pending = list[tuple[str, int, "asyncio.Future[Any]"]]  # topic, records, the batch's ack


class Arbiter(Service):
    """The batched arbiter loop, started and stopped with the Faust app."""

    def __init__(
        self,
        settings: Settings,
        processor: Processor,
        metrics: Metrics,
        alias_of: Callable[[str], str | None],
        inputs: Sequence[str],
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.settings = settings
        self.processor = processor
        self.metrics = metrics
        self.alias_of = alias_of
        self.inputs = list(inputs)
        self.group = f"{settings.app_id}-arbiter"
        self.changelog = settings.changelog_topic
        self.exactly_once = settings.processing_guarantee is Guarantee.EXACTLY_ONCE
        self.assignor = RoutingAssignor(advertised_url(settings))
        self.tasks: dict[int, Task] = {}
        self.standby: dict[int, Task] = {}  # revoked tasks, kept to catch up if they come back
        self.cache = StateCache(settings.state_cache_keys)
        self.schedule = Schedule()
        self.turn = asyncio.Lock()  # a batch and a rebalance never interleave
        self._consumer: AIOKafkaConsumer | None = None
        self._producer: AIOKafkaProducer | None = None
        self._restorer: AIOKafkaConsumer | None = None
        self._restoring_lock = asyncio.Lock()  # one reader of the changelog at a time
        self._restore: asyncio.Task[None] | None = None  # tasks being restored off the callback
        self._crashing: asyncio.Future[None] | None = None
        self.assigned_partitions: set[int] = set()
        self._last_scan = 0.0
        self.reached: dict[TopicPartition, int] = {}  # next input offset, per partition
        self._commit: asyncio.Future[None] | None = None  # the last batch's offset commit
        self._in_flight: InFlight | None = None  # the last batch, until its records are acked
        self._partitions: dict[str, list[int]] = {}  # each output topic's partitions
        self._unkeyed = 0  # spreads records without a key over partitions
        self._record_cost = 0.0  # seconds per input record, averaged over recent batches
        self.pulse = Pulse(metrics, settings.liveness_timeout_s, settings.restore_timeout_s)
        # Told of every decision this worker emits (the console's live feed); must not block.
        self.observers: list[Callable[[Decision], None]] = []

    # -- lifecycle -------------------------------------------------------------------------------

    async def on_start(self) -> None:
        isolation = "read_committed" if self.exactly_once else "read_uncommitted"
        settings = self.settings
        self._producer = AIOKafkaProducer(**client_options(settings), **self._producer_options())
        self._restorer = AIOKafkaConsumer(
            **client_options(settings),
            enable_auto_commit=False,
            isolation_level=isolation,
            max_partition_fetch_bytes=4 * 1024 * 1024,
        )
        self._consumer = AIOKafkaConsumer(
            **client_options(settings),
            group_id=self.group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level=isolation,
            partition_assignment_strategy=(self.assignor,),
            # Static membership: a restart within the session timeout keeps the assignment.
            group_instance_id=settings.instance_id,
            session_timeout_ms=int(settings.broker_session_timeout_s * 1000),
            heartbeat_interval_ms=int(min(3.0, settings.broker_session_timeout_s / 3) * 1000),
            rebalance_timeout_ms=int(settings.broker_rebalance_timeout_s * 1000),
            max_partition_fetch_bytes=4 * 1024 * 1024,
        )
        await self._producer.start()
        await self._restorer.start()
        await self._consumer.start()
        self._consumer.subscribe(self.inputs, listener=_Rebalance(self))

    async def on_stop(self) -> None:
        await self._cancel_restore()
        async with self.turn:
            await self._flush(staying=())  # stopping: the next owner reads on from the commit
            for client in (self._consumer, self._restorer, self._producer):
                if client is not None:
                    await client.stop()
            for task in [*self.tasks.values(), *self.standby.values()]:
                if task.producer is not None:
                    await task.producer.stop()

    @Service.task
    async def _run(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        while not self.should_stop:
            fetched = await consumer.getmany(
                timeout_ms=int(self.settings.batch_within_s * 1000),
                max_records=self.settings.batch_size,
            )
            async with self.turn:
                if fetched:
                    await self._batch(fetched)
                elif self._in_flight is not None:
                    await self._flush()  # idle: commit what the last batch read
                await self._tick(sum(len(messages) for messages in fetched.values()))
                await self._scan()
            self.pulse.beat()
            if any(tp.partition not in self.tasks for tp in fetched):
                await asyncio.sleep(0.05)  # a rebalance is preparing this worker's tasks

    # -- batches ---------------------------------------------------------------------------------

    async def _batch(self, fetched: Mapping[TopicPartition, list[ConsumerRecord]]) -> None:
        consumer = self._consumer
        assert consumer is not None
        began = perf_counter()
        work: dict[int, TaskBatch] = {}
        tallies: Counter[bytes] = Counter()
        for tp, messages in fetched.items():
            task = self.tasks.get(tp.partition)
            if task is None:
                # Fetched before this worker's task for the partition is ready (a rebalance is
                # under way): read the records again once it is, or let the new owner read them.
                if tp in consumer.assignment():
                    consumer.seek(tp, messages[0].offset)
                continue
            batch = work.setdefault(tp.partition, TaskBatch())
            # A seek on assignment can deliver again records a fetch already returned.
            resume = self.reached.get(tp, 0)
            if messages[0].offset < resume:
                messages = [m for m in messages if m.offset >= resume]
                if not messages:
                    continue
            for message in messages:
                record = incoming(message)
                handled = self.processor.process(record, task.states.get, self.alias_of)
                self._apply(task, batch, handled, record.timestamp or 0.0, tallies)
            batch.offsets[tp] = self.reached[tp] = messages[-1].offset + 1
        tally_records = [
            Outgoing(self.settings.topics.outcomes, key, str(count).encode())
            for key, count in tallies.items()
        ]
        stages = self.processor.stages
        if self.exactly_once:
            await self._commit_transactions(work)
            await self._send_all(self._producer, tally_records)
        else:
            started = perf_counter()
            records = self._journaled(work) + tally_records
            started = stages.add(JOURNAL, started)
            try:
                sent = await self._enqueue(self._producer, records)
            except Exception as exc:
                self._failed(len(work), exc)
                await self._flush()
                await self._rewind(list(work))
            else:
                # This batch's acknowledgements are awaited after the next batch is decided,
                # not before: the loop no longer idles for a round trip to the broker per batch.
                acks = asyncio.ensure_future(self._acknowledged(sent))
                acks.add_done_callback(_retrieved)
                offsets = {tp: o for batch in work.values() for tp, o in batch.offsets.items()}
                previous, self._in_flight = self._in_flight, InFlight(acks, offsets, set(work))
                started = stages.add(PRODUCE, started)
                await self._settle(previous, staying=None)
                stages.add(COMMIT, started)
        self.metrics.flush(stages)
        count = sum(len(messages) for messages in fetched.values())
        # What a record costs end to end (EWMA): what the expiry ticks' budget is measured in.
        cost = (perf_counter() - began) / max(1, count)
        self._record_cost = cost if not self._record_cost else 0.8 * self._record_cost + 0.2 * cost
        self.metrics.state_keys.set(sum(len(t.states) for t in self.tasks.values()))
        self.metrics.state_bytes.set(sum(t.states.encoded_bytes for t in self.tasks.values()))

    def _apply(
        self,
        task: Task,
        batch: TaskBatch,
        handled: Handled,
        received: float,
        tallies: Counter[bytes],
    ) -> None:
        if handled.key is not None and handled.state is not None:
            task.states.put(handled.key, handled.state)
            self.schedule.note(handled.key, handled.state)
        for record in handled.outputs:
            if record.topic == self.settings.topics.outcomes:
                # Outcome counts are summed per batch: one record per field|outcome|kind.
                tallies[record.key or b""] += int(record.value or b"1")
            else:
                batch.outputs.append(record)
        if handled.decisions:
            now = time.time()
            for decision in handled.decisions:
                self.metrics.decided(decision, now)
                for observe in self.observers:
                    observe(decision)
                if received > 0:
                    self.metrics.decision_latency.observe(max(0.0, now - received))

    async def _flush(self, staying: Collection[int] | None = None) -> None:
        """Settle the batch in flight, and wait for the last offset commit."""
        in_flight, self._in_flight = self._in_flight, None
        await self._settle(in_flight, staying)
        await self._settled_commit()

    async def _settle(self, in_flight: InFlight | None, staying: Collection[int] | None) -> None:
        """Wait for a sent batch's acknowledgements, then commit its offsets. A failed send
        rewinds, of its tasks and those of the batch sent after it, the ones that stay on this
        worker (`staying`; None: all of them) to the last commit; the others' next owner reads
        again from there."""
        if in_flight is None:
            return
        try:
            await in_flight.acks
        except Exception as exc:
            later, self._in_flight = self._in_flight, None
            partitions = in_flight.partitions | (later.partitions if later else set())
            self._failed(len(partitions), exc)
            if staying is not None:
                partitions &= set(staying)
            if partitions:
                await self._rewind(sorted(partitions))
            return
        if in_flight.offsets:
            # Commits are cumulative: the next batch need not wait for this one. A lost commit
            # only means a later one (or the new owner) re-reads a little more.
            await self._settled_commit()
            consumer = self._consumer
            assert consumer is not None
            self._commit = asyncio.ensure_future(consumer.commit(in_flight.offsets))

    async def _settled_commit(self) -> None:
        commit, self._commit = self._commit, None
        if commit is None:
            return
        try:
            await commit
        except Exception as exc:
            self.metrics.commit_failures.inc()
            log.warning("arbiter: offset commit failed (%s: %s)", type(exc).__name__, exc)

    def _journaled(self, work: Mapping[int, TaskBatch]) -> list[Outgoing]:
        """The batch's outputs, then one changelog record per key changed in the batch."""
        records: list[Outgoing] = []
        for partition, batch in work.items():
            records += batch.outputs
            records += [
                Outgoing(self.changelog, key, data, partition=partition)
                for key, data in self.tasks[partition].states.journal().items()
            ]
        return records

    async def _commit_transactions(self, work: Mapping[int, TaskBatch]) -> None:
        stages = self.processor.stages
        started = perf_counter()
        records = {p: self._journaled({p: batch}) for p, batch in work.items()}
        started = stages.add(JOURNAL, started)
        sent: list[float] = []  # when each task's records were all acknowledged
        results = await asyncio.gather(
            *(
                self._commit_transaction(self.tasks[p], batch, records[p], sent)
                for p, batch in work.items()
            ),
            return_exceptions=True,
        )
        # The tasks' transactions run side by side: wall time until the last one's records
        # were acknowledged is producing, the rest committing.
        produced = max(sent, default=started)
        stages.seconds[PRODUCE] += produced - started
        stages.add(COMMIT, produced)
        for partition, result in zip(work, results, strict=True):
            if isinstance(result, ProducerFenced):
                # Another worker opened this task: it is the owner now, and reopening the task
                # here would fence it in turn. Drop it; the rebalance under way takes it away.
                log.warning("arbiter: task %d was fenced by its new owner; dropping it", partition)
                self.pulse.fence(partition)
                await self._close(partition)
            elif isinstance(result, Exception):
                self._failed(1, result)
                await self._rewind([partition])

    def _failed(self, tasks: int, exc: Exception) -> None:
        self.metrics.commit_failures.inc()
        log.warning(
            "arbiter: batch of %d tasks failed to commit (%s: %s); rewinding them",
            tasks,
            type(exc).__name__,
            exc,
        )

    async def _close(self, partition: int, keep_producer: bool = False) -> Task:
        """Take a task out of service: off the schedule and out of the shared cache."""
        task = self.tasks.pop(partition)
        self.schedule.forget(task.states)
        task.states.evict()
        if not keep_producer:
            await _release_producer(task)
        return task

    async def _commit_transaction(
        self, task: Task, batch: TaskBatch, records: list[Outgoing], sent: list[float]
    ) -> None:
        producer = task.producer
        assert producer is not None
        async with producer.transaction():
            await self._send_all(producer, records)
            sent.append(perf_counter())
            await producer.send_offsets_to_transaction(batch.offsets, self.group)

    async def _send_all(self, producer: AIOKafkaProducer | None, records: list[Outgoing]) -> None:
        """Send `records` and wait until all are acknowledged."""
        await self._acknowledged(await self._enqueue(producer, records))

    async def _enqueue(self, producer: AIOKafkaProducer | None, records: list[Outgoing]) -> Pending:
        """Hand `records` to the producer as one batch per topic partition.

        Measured against one `send` per record (aiokafka appends each to its own accumulator
        batch, with a future and a coroutine per record): see `claimstream bench` stage_us."""
        assert producer is not None
        by_partition: dict[tuple[str, int], list[Outgoing]] = {}
        for record in records:
            partition = record.partition
            if partition is None:
                partition = await self._partition_for(producer, record.topic, record.key)
            by_partition.setdefault((record.topic, partition), []).append(record)
        pending: Pending = []
        for (topic, partition), group in by_partition.items():
            batch = producer.create_batch()
            count = 0
            for record in group:
                headers = list(record.headers)
                if batch.append(
                    key=record.key, value=record.value, timestamp=None, headers=headers
                ):
                    count += 1
                    continue
                pending.append(
                    (topic, count, await producer.send_batch(batch, topic, partition=partition))
                )
                batch, count = producer.create_batch(), 1
                if (
                    batch.append(
                        key=record.key, value=record.value, timestamp=None, headers=headers
                    )
                    is None
                ):
                    raise ValueError(f"a record for {topic} is larger than a whole batch")
            pending.append(
                (topic, count, await producer.send_batch(batch, topic, partition=partition))
            )
        return pending

    async def _acknowledged(self, pending: Pending) -> None:
        """Wait for the batches' acknowledgements; note how far each task's changelog reached."""
        acknowledged = await asyncio.gather(*(future for _, _, future in pending))
        for (topic, count, _), metadata in zip(pending, acknowledged, strict=True):
            if topic == self.changelog:
                task = self.tasks.get(metadata.partition)
                if task is not None:
                    end = metadata.offset + count
                    task.changelog_offset = max(task.changelog_offset, end)

    async def _partition_for(
        self, producer: AIOKafkaProducer, topic: str, key: bytes | None
    ) -> int:
        """The partition aiokafka's default partitioner would pick (murmur2 of the key)."""
        partitions = self._partitions.get(topic)
        if partitions is None:
            partitions = self._partitions[topic] = sorted(await producer.partitions_for(topic))
        if key is None:
            self._unkeyed += 1
            return partitions[self._unkeyed % len(partitions)]
        return partitions[partition_of(key, len(partitions))]

    async def _rewind(self, partitions: list[int]) -> None:
        """Forget what the failed batch did: reload its tasks and re-read from the last commit."""
        reloaded = []
        for partition in partitions:
            if partition not in self.tasks:
                continue
            # The task keeps its producer (its failed transaction was aborted): opening a new
            # one would fence whichever worker owns the task, were it no longer this one.
            failed = await self._close(partition, keep_producer=True)
            reloaded.append(Task(partition, TaskStore(self.cache), producer=failed.producer))
        await self._restore_tasks(reloaded)
        await self._seek_to_committed(set(partitions))

    async def _seek_to_committed(self, partitions: set[int]) -> None:
        consumer = self._consumer
        assert consumer is not None
        for tp in consumer.assignment():
            if tp.partition in partitions:
                committed = await consumer.committed(tp)
                log.info("arbiter: %s resumes at committed offset %s", tp, committed)
                if committed is None:
                    await consumer.seek_to_beginning(tp)
                else:
                    consumer.seek(tp, committed)
                self.reached[tp] = committed or 0

    async def _tick(self, fetched: int) -> None:
        """Send ticks to the keys whose decision may change by time alone, a few per batch.

        Keys that went stale together (a wave of claims ages out at once) came back as one burst
        of re-decisions that stalled every claim behind it for seconds (measured: claims
        processed fell to 0/s for 3 s while 2-3.6k ticks/s went out; p99 3.8 s). So ticks go out
        earliest first, behind fresh input: one per batch while input is waiting (a full
        batch), else as many as take half a fetch wait of work at the measured cost per
        record, at most `expiry_ticks_per_batch`."""
        budget = self.settings.expiry_ticks_per_batch
        if fetched >= self.settings.batch_size:
            budget = 1
        elif self._record_cost > 0:
            affordable = self.settings.batch_within_s / 2 / self._record_cost
            budget = max(1, min(budget, int(affordable)))
        due = self.schedule.take_due(datetime.now(UTC), budget)
        if due:
            self.metrics.expiry_ticks.inc(len(due))
            await self._send_all(self._producer, [self.processor.tick(k, at) for k, at in due])

    async def _scan(self) -> None:
        """Refresh the gauges of open conflicts and lag."""
        if time.monotonic() - self._last_scan < self.settings.expiry_interval_s:
            return
        self._last_scan = time.monotonic()
        now = datetime.now(UTC)
        ages: dict[str, list[float]] = {}
        for field_name, since in self.schedule.open_since.values():
            ages.setdefault(field_name, []).append((now - since).total_seconds())
        self.metrics.set_open_conflicts(ages)

    # -- rebalances ------------------------------------------------------------------------------

    async def revoked(self, partitions: set[int]) -> None:
        await self._cancel_restore()
        self.assigned_partitions -= partitions
        async with self.turn:
            await self._flush(staying=self.assigned_partitions)
            # Where this worker stopped says nothing about where the next owner stops.
            self.reached = {
                tp: o for tp, o in self.reached.items() if tp.partition not in partitions
            }
            for partition in partitions & set(self.tasks):
                self.standby[partition] = await self._close(partition)

    async def assigned(self, partitions: set[int]) -> None:
        """Record the assignment and hold back its new partitions until their state is ready.

        Returns without restoring anything: aiokafka heartbeats only once this callback is done.
        """
        consumer = self._consumer
        assert consumer is not None
        await self._cancel_restore()
        self.assigned_partitions = set(partitions)
        opened = partitions - set(self.tasks)
        consumer.pause(*(tp for tp in consumer.assignment() if tp.partition in opened))
        tasks = [
            self.standby.get(partition) or Task(partition, TaskStore(self.cache))
            for partition in sorted(opened)
        ]
        self.standby.clear()  # the partitions went elsewhere; their state is another's now
        if tasks:
            self._restore = asyncio.ensure_future(self._restore_assigned(tasks))
            self._restore.add_done_callback(self._restore_done)
        else:
            self.pulse.restored()

    def _restore_done(self, restore: asyncio.Task[None]) -> None:
        # Anything but a Kafka error (retried) leaves partitions paused for good: crash the
        # worker instead, so that its supervisor restarts it.
        if not restore.cancelled() and (exc := restore.exception()) is not None:
            log.error("arbiter: restore failed (%s: %s)", type(exc).__name__, exc)
            self._crashing = asyncio.ensure_future(self.crash(exc))

    async def _cancel_restore(self) -> None:
        restore, self._restore = self._restore, None
        if restore is not None and not restore.done():
            restore.cancel()
            await asyncio.wait([restore])

    async def _restore_assigned(self, tasks: list[Task]) -> None:
        """Restore newly assigned tasks; each partition resumes as soon as its task is ready."""
        started = time.monotonic()
        try:
            while tasks:
                try:
                    await self._restore_tasks(tasks)
                except KafkaError as exc:
                    log.warning(
                        "arbiter: restore failed (%s: %s); retrying", type(exc).__name__, exc
                    )
                    await asyncio.sleep(RESTORE_RETRY_S)
                tasks = [task for task in tasks if task.partition not in self.tasks]
        except asyncio.CancelledError:
            # Revoked mid-restore: what was read stays valid up to the task's changelog offset,
            # so the task waits in standby in case the partition comes back.
            for task in tasks:
                if task.partition not in self.tasks:
                    await _release_producer(task)
                    self.standby[task.partition] = task
            raise
        self.pulse.restored()
        log.info(
            "arbiter: tasks %s ready in %.2fs (%d keys)",
            sorted(self.tasks),
            time.monotonic() - started,
            sum(len(t.states) for t in self.tasks.values()),
        )

    async def _restore_tasks(self, tasks: list[Task]) -> None:
        """Read the tasks' changelog partitions, all at once, from where each task last saw its
        own to the end offset it has now; install each task the moment its partition is done."""
        if not tasks:
            return
        restorer = self._restorer
        assert restorer is not None
        async with self._restoring_lock:
            if self.exactly_once:
                # Fences each task's previous owner and settles its open transaction (committed
                # or aborted), so the changelog read next ends where that transaction left it.
                await asyncio.gather(*(self._open_producer(task) for task in tasks))
            restoring = {TopicPartition(self.changelog, task.partition): task for task in tasks}
            restorer.assign(list(restoring))
            for tp, task in restoring.items():
                restorer.seek(tp, task.changelog_offset)
            # Under read_committed this is the last stable offset: nothing past it may count.
            ends = await restorer.end_offsets(list(restoring))
            while True:
                for tp in list(restoring):
                    position = await restorer.position(tp)
                    if position >= ends[tp]:
                        task = restoring.pop(tp)
                        task.changelog_offset = position
                        log.info(
                            "arbiter: task %d caught up to changelog offset %d (end %d)",
                            task.partition,
                            position,
                            ends[tp],
                        )
                        await self._install(task)
                if not restoring:
                    return
                fetched = await restorer.getmany(
                    *restoring, timeout_ms=RESTORE_FETCH_MS, max_records=10000
                )
                for tp, messages in fetched.items():
                    task = restoring[tp]
                    for message in messages:
                        task.states.load(message.key, message.value)
                    task.changelog_offset = messages[-1].offset + 1

    async def _open_producer(self, task: Task) -> None:
        if task.producer is not None:
            return
        producer = AIOKafkaProducer(
            **client_options(self.settings),
            **self._producer_options(),
            transactional_id=f"{self.group}-{task.partition}",
        )
        try:
            await producer.start()
        except BaseException:
            with contextlib.suppress(Exception):
                await producer.stop()
            raise
        task.producer = producer

    async def _install(self, task: Task) -> None:
        """Put a restored task in service and let its partitions be fetched again."""
        consumer = self._consumer
        assert consumer is not None
        self.tasks[task.partition] = task
        for n, key in enumerate(task.states):
            state = task.states.get(key)
            if state is not None:
                self.schedule.note(key, state)
            if n % SCHEDULE_YIELD_KEYS == SCHEDULE_YIELD_KEYS - 1:
                await asyncio.sleep(0)
        held = [tp for tp in consumer.assignment() if tp.partition == task.partition]
        if self.exactly_once:
            # The offsets the consumer fetched on assignment may predate the previous owner's
            # last transaction, which opening the task has only now settled.
            await self._seek_to_committed({task.partition})
        consumer.resume(*held)

    def _producer_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {
            # A batch's records are all enqueued before the loop waits for them: nothing to linger for.
            "linger_ms": 0,
            "max_batch_size": 256 * 1024,
            "acks": "all",
        }
        if self.exactly_once:
            options["enable_idempotence"] = True
        return options

    def owner_url(self, key: bytes) -> tuple[bool, str | None]:
        """Whether this worker owns `key`, and else the URL of the worker that does."""
        partition = partition_of(key, self.settings.partitions)
        if partition in self.tasks:
            return True, None
        return False, self.assignor.owners.get(partition)

    def state_of(self, key: bytes) -> KeyState | None:
        task = self.tasks.get(partition_of(key, self.settings.partitions))
        return task.states.get(key) if task is not None else None


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, arbiter: Arbiter) -> None:
        self.arbiter = arbiter

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        self.arbiter.pulse.rebalancing()
        await self.arbiter.revoked({tp.partition for tp in revoked})

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        partitions = {tp.partition for tp in assigned}
        self.arbiter.pulse.assigned(partitions)
        await self.arbiter.assigned(partitions)  # the restore reports `restored` when done


def _retrieved(acks: asyncio.Future[None]) -> None:
    """Mark a failure as seen: a batch dropped by a rewind is never awaited."""
    if not acks.cancelled():
        acks.exception()


async def _release_producer(task: Task) -> None:
    if task.producer is not None:
        with contextlib.suppress(Exception):  # a fenced producer may fail to stop cleanly
            await task.producer.stop()
        task.producer = None


def incoming(message: ConsumerRecord) -> Incoming:
    return Incoming(
        topic=message.topic,
        partition=message.partition,
        offset=message.offset,
        key=message.key,
        value=message.value,
        headers=tuple((k, bytes(v or b"")) for k, v in message.headers or ()),
        timestamp=message.timestamp / 1000 if message.timestamp else None,
    )
