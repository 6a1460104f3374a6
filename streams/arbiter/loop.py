"""The arbiter's loop: lifecycle, fetch, apply, tick, and the orchestration of rebalances.

Each iteration fetches a batch of input records, runs each through `Processor` against its
task's state, applies what came back (state, schedule, outputs, observers), hands the batch to
the commit strategy and repairs what it reports failed, and what the processor reported corrupt
(`TaskCorrupted`: a task's batch dropped, the task rewound); then sends the ticks due. Rebalances
come through the consumer's listener: a revocation flushes and closes, an assignment pauses the
new partitions and restores their tasks off the callback. Modelled on Kafka Streams'
`StreamThread.runOnce` and `TaskManager` (handleRevocation / handleAssignment).
"""

from __future__ import annotations

import asyncio
import gc
import heapq
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from time import perf_counter
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener
from aiokafka.structs import ConsumerRecord, TopicPartition
from mode import Service

from streams.arbiter.bookkeeping import Bookkeeping
from streams.arbiter.collector import RecordCollector, Unawaited, producer_options
from streams.arbiter.commit import NOTHING_FAILED, Failed, TaskBatch, commits_for
from streams.arbiter.isolation import Isolation
from streams.arbiter.pacing import Costs, Pacing
from streams.arbiter.routing import Observer, Ownership, RoutingAssignor, advertised_url
from streams.arbiter.schedule import Schedule
from streams.arbiter.sources import SourceLedgers
from streams.arbiter.tallies import Tallies
from streams.arbiter.tasks import InputPositions, Task, Tasks
from streams.ops.health import Pulse
from streams.ops.metrics import Metrics
from streams.pipeline import Incoming, Processor, TaskCorrupted
from streams.settings import Settings
from streams.state.cache import StateCache
from streams.state.local import Checkpoints
from streams.wire.kafka import client_options

log = logging.getLogger(__name__)

# After a batch, the loop is let go this long before the next fetch: aiokafka's sender puts the
# batch's records on the wire only when the loop runs it, a few callbacks after they are
# enqueued, and a fetch that finds records buffered returns without letting the loop run. So
# under a backlog, a batch whose predecessor was already acknowledged would go out only once the
# next batch was decided too: its decisions would wait one more batch (0.3-0.7 s a batch held
# the loop at half load on a loaded machine, by `GET /api/stalls`). Three loop iterations are
# enough for the sender to write (`claimstream bench`, half load) and idle less, but measured no
# lower p99 at least once and a slower exactly-once, whose batches then came smaller, a
# transaction each.
SEND_TURN_S = 0.001


async def send_turn() -> None:
    """Let the loop go `SEND_TURN_S`: the producer's sender writes what the batch enqueued."""
    await asyncio.sleep(SEND_TURN_S)


def collect_after_batch() -> None:
    """Collect what is not frozen yet (what the batch left, mostly), then freeze the survivors.

    Left to its thresholds, the collector let a key's new state age through the young and the
    middle generation, and walked each of them there long after it was made: on the bench mix
    then 80k fresh keys in batches of 50 (in process, 2-core machine), young collections of
    16-19 ms each and a middle one of 390 ms, the half-load latency's p99 (a collection holds the
    loop, and on a busy machine takes 5-10 times as long). Run here, each collection walks one
    batch's survivors while they are still in cache: at most 0.5 ms (1.6 ms for batches of 500),
    230 ms in all against 820 ms. A middle collection finds every unreachable cycle among the
    objects not frozen (the oldest generation holds only what one since the last freeze kept);
    the survivors are frozen as after a full collection (`streams.ops.stalls.CollectorHooks`), and
    are still freed by reference counting."""
    gc.collect(1)
    gc.freeze()


class Arbiter(Service):
    """The batched arbiter loop, started and stopped with the Faust app."""

    def __init__(
        self,
        settings: Settings,
        processor: Processor,
        metrics: Metrics,
        inputs: Sequence[str],
        pulse: Pulse,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.settings = settings
        self.processor = processor
        self.metrics = metrics
        self.inputs = list(inputs)
        self._input_rank = {topic: rank for rank, topic in enumerate(self.inputs)}
        self.pulse = pulse
        self.group = f"{settings.app_id}-arbiter"
        self.schedule = Schedule()
        self.sources = SourceLedgers(processor.policy, metrics)
        self.positions = InputPositions()
        cache = StateCache.for_worker(settings)
        self.tasks = Tasks(
            settings.changelog_topic,
            cache,
            self.schedule,
            self.positions,
            Checkpoints(settings),
            metrics,
        )
        self.collector = RecordCollector(settings.changelog_topic, self.tasks.journaled_to)
        self.isolation = Isolation(self.positions, processor)
        self.ticks_out = Unawaited(self.collector)
        self.tallies = Tallies(self.collector, settings.topics.outcomes)
        self.commits = commits_for(
            settings,
            self.group,
            self.tasks,
            self.collector,
            self.positions,
            metrics,
            processor.stages,
        )
        self.assignor = RoutingAssignor(advertised_url(settings))
        # Told of every decision this worker emits (the console's live feed); must not block.
        self._observers: list[Observer] = []
        self.ownership = Ownership(
            self.assignor, settings.partitions, self.tasks, self.schedule, self._observers
        )
        self.bookkeeping = Bookkeeping(metrics, self.sources, self.schedule, self._observers)
        self.turn = asyncio.Lock()  # a batch and a rebalance never interleave
        self.assigned_partitions: set[int] = set()
        self._consumer: AIOKafkaConsumer | None = None
        self._clients: list[AIOKafkaConsumer | AIOKafkaProducer] = []
        self._restore: asyncio.Task[None] | None = None  # tasks being restored off the callback
        self._last_scan = 0.0
        self.pacing = Pacing(
            settings.batch_size, settings.expiry_ticks_per_batch, settings.batch_within_s
        )

    # -- lifecycle -------------------------------------------------------------------------------

    async def on_start(self) -> None:
        settings, isolation = self.settings, self.commits.isolation
        producer = AIOKafkaProducer(
            **client_options(settings), **producer_options(self.commits.idempotent)
        )
        restorer = AIOKafkaConsumer(
            **client_options(settings),
            enable_auto_commit=False,
            isolation_level=isolation,
            max_partition_fetch_bytes=4 * 1024 * 1024,
        )
        consumer = AIOKafkaConsumer(
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
        self._clients = [consumer, restorer, producer]  # stopped in this order
        self.collector.attach(producer)
        self.tasks.attach(restorer)
        self.positions.attach(consumer)
        self._consumer = consumer
        await producer.start()
        await restorer.start()
        await consumer.start()
        consumer.subscribe(self.inputs, listener=_Rebalance(self))

    async def on_stop(self) -> None:
        await self._cancel_restore()
        async with self.turn:
            # Stopping: no task stays here; the next owner reads on from the commit.
            await self._repair(await self.commits.flush(staying=()))
            await self.ticks_out.settled()  # one lost only delays its key: timers stay stored
            await self.tallies.send(now=True)
            await self.tallies.settled()
            await self.tasks.close_all()
            for client in self._clients:
                await client.stop()
            await self.tasks.stop_producers()

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
                    live = await self._batch(fetched)
                else:
                    live = 0
                    await self._repair(await self.commits.idle())
                await self._tick(live)
                await self.tallies.send()
                await self._scan()
            self.pulse.beat()
            if any(tp.partition not in self.tasks.open for tp in fetched):
                await asyncio.sleep(0.05)  # a rebalance is preparing this worker's tasks
            elif fetched:
                await send_turn()
            if fetched:
                # After the send turn: the batch's records are on the wire. Its input records
                # are let go first, not walked and frozen.
                del fetched
                collect_after_batch()

    # -- batches ---------------------------------------------------------------------------------

    async def _batch(self, fetched: Mapping[TopicPartition, list[ConsumerRecord]]) -> int:
        """Decide, apply and commit a fetch; returns how many of its records were input, not
        ticks."""
        began = perf_counter()
        ticks, ticks_s, rekeyed = 0, 0.0, self.processor.topics.rekeyed
        work: dict[int, TaskBatch] = {}
        corrupted: set[int] = set()  # tasks whose state no longer matches their changelog
        reached, isolated = self.positions.reached, self.isolation.tasks
        for partition, parts in _by_task(fetched, self._input_rank).items():
            task = self.tasks.open.get(partition)
            if task is None:
                # Fetched before this worker's task for the partition is ready (a rebalance is
                # under way): read the records again once it is, or let the new owner read them.
                for tp, messages in parts:
                    self.positions.read_again(tp, messages[0].offset)
                continue
            # A seek on assignment can deliver again records a fetch already returned.
            parts = [(tp, unread) for tp, m in parts if (unread := _from(m, reached.get(tp, 0)))]
            if not parts:
                continue
            if partition in isolated:  # one record at a time, to find one the broker refuses
                parts = self.isolation.limit(partition, parts, _earliest(parts))
            batch = work[partition] = TaskBatch()
            task.states.read_ahead(m.key for _, ms in parts for m in ms if m.key is not None)
            try:
                for message in _in_time_order(parts):
                    tick_began = perf_counter() if message.value is None else 0.0
                    record = incoming(message)
                    handled = self.processor.process(record, task.states.get)
                    received = record.timestamp or 0.0
                    self.bookkeeping.apply(partition, task.states, batch, handled, received)
                    if tick_began and message.topic == rekeyed:  # a tick: no value
                        ticks += 1
                        ticks_s += perf_counter() - tick_began
            except TaskCorrupted as exc:
                log.warning("arbiter: task %d reloads from its changelog: %s", partition, exc)
                corrupted.add(partition)
                del work[partition]  # nothing of it is sent: the task does it all again
                continue
            for tp, messages in parts:
                batch.offsets[tp] = reached[tp] = messages[-1].offset + 1
        decided_s = perf_counter() - began
        for batch in work.values():
            self.tallies.add(batch.tallies)
        alone = {p: work.pop(p) for p in isolated & work.keys()}
        failed = await self.isolation.commit_alone(self.commits, alone) if alone else NOTHING_FAILED
        failed |= await self.commits.commit(work)
        if corrupted:
            # As after a failed commit: what is in flight settles first, so that the reloaded
            # tasks read on from a commit past everything sent before.
            reloads = Failed(rewind=frozenset(corrupted), cause="a record's outputs failed")
            failed |= await self.commits.flush() | reloads
        await self._repair(failed)
        self.metrics.flush(self.processor.stages)
        count = sum(len(messages) for messages in fetched.values())
        self.pacing.measured(Costs(perf_counter() - began, decided_s, count, ticks, ticks_s))
        self.metrics.state_keys.set(self.tasks.keys())
        self.metrics.state_bytes.set(self.tasks.encoded_bytes())
        return count - ticks

    async def _repair(self, failed: Failed) -> None:
        """Close the tasks another worker fenced; rewind the ones whose commit failed."""
        for partition in sorted(failed.fenced):
            self.pulse.fence(partition)
            await self.tasks.drop(partition)
        if failed.rewind:
            self.pulse.commit_failed(failed.rewind, failed.cause)
            self.isolation.failed(failed.rewind, failed.cause, failed.refused)
            await self._rewind(sorted(failed.rewind))

    async def _rewind(self, partitions: list[int]) -> None:
        """Forget what the failed batch did: reload its tasks and re-read from the last commit."""
        await self.tasks.reload(partitions, self.commits)
        await self.positions.seek_to_committed(set(partitions))

    async def _tick(self, live: int) -> None:
        """Send ticks to the keys whose decision may change by time alone or by a policy taking
        effect, as many as `Pacing` affords this turn (`live`: records of input, not ticks,
        fetched in it), earliest timers first, behind fresh input.

        The ticks' acknowledgement is not awaited (a round trip that also carries the batch's
        outputs: 10-40 ms a batch, some 400 ms, on a loaded machine at half load): no ticks go
        out while one send is in flight, and its failure fails the loop on the next turn."""
        if self.ticks_out.in_flight():
            return
        timers, sweep = self.pacing.budgets(live)
        now_at = datetime.now(UTC)
        due = self.schedule.take_due(now_at, timers)
        processor = self.processor
        moving = self.schedule.sweep.take(
            processor.policy, processor.aliases, now_at, sweep, processor.clock.erasures
        )
        self.pacing.swept(len(moving))
        if due or moving:
            self.metrics.expiry_ticks.inc(len(due))
            ticks = [self.processor.tick(key, at) for key, at in due]
            ticks += [self.processor.tick(key, now_at) for key in moving]
            await self.ticks_out.send(ticks)

    async def _scan(self) -> None:
        """Refresh the schedule's gauges (`Schedule.report`) and the policy in force, at most
        every `expiry_interval_s`; consumer lag is the lag probe's (`lag_interval_s`)."""
        if time.monotonic() - self._last_scan < self.settings.expiry_interval_s:
            return
        self._last_scan = time.monotonic()
        now = datetime.now(UTC)
        self.schedule.report(self.metrics, now, self.processor.policies.in_force(now))
        self.metrics.policies.in_force(self.processor.policy.version)

    # -- rebalances ------------------------------------------------------------------------------

    async def revoked(self, partitions: set[int]) -> None:
        await self._cancel_restore()
        self.assigned_partitions -= partitions
        async with self.turn:
            await self._repair(await self.commits.flush(staying=self.assigned_partitions))
            self.positions.forget(partitions)
            await self.tasks.to_standby(partitions)

    async def assigned(self, partitions: set[int]) -> None:
        """Record the assignment and hold back its new partitions until their state is ready.

        Returns without restoring anything: aiokafka heartbeats only once this callback is done.
        """
        await self._cancel_restore()
        self.assigned_partitions = set(partitions)
        opened = partitions - set(self.tasks.open)
        self.positions.pause(opened)
        tasks = self.tasks.take(opened)
        if tasks:
            self._restore = asyncio.ensure_future(self._restore_assigned(tasks))
            self._restore.add_done_callback(self._restore_done)
        else:
            self.pulse.restored()

    async def _restore_assigned(self, tasks: list[Task]) -> None:
        await self.tasks.restore_assigned(tasks, self.commits)
        self.pulse.restored()

    def _restore_done(self, restore: asyncio.Task[None]) -> None:
        # Anything but a Kafka error (retried) leaves partitions paused for good: crash the
        # worker instead, so that its supervisor restarts it. `add_future` holds on to the crash
        # until it has run (the event loop keeps only a weak reference to a task).
        if not restore.cancelled() and (exc := restore.exception()) is not None:
            log.error("arbiter: restore failed (%s: %s)", type(exc).__name__, exc)
            self.add_future(self.crash(exc))

    async def _cancel_restore(self) -> None:
        restore, self._restore = self._restore, None
        if restore is not None and not restore.done():
            restore.cancel()
            await asyncio.wait([restore])


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


def _by_task(
    fetched: Mapping[TopicPartition, list[ConsumerRecord]], rank: Mapping[str, int]
) -> dict[int, list[tuple[TopicPartition, list[ConsumerRecord]]]]:
    """The fetched records by task, each task's input partitions in the order of the input
    topics (`rank`: claims before resolutions, so a tie in time goes to the claim, as in
    replay)."""
    by_task: dict[int, list[tuple[TopicPartition, list[ConsumerRecord]]]] = {}
    for tp in sorted(fetched, key=lambda tp: (tp.partition, rank.get(tp.topic, len(rank)))):
        by_task.setdefault(tp.partition, []).append((tp, fetched[tp]))
    return by_task


def _from(messages: list[ConsumerRecord], offset: int) -> list[ConsumerRecord]:
    """The messages at `offset` or later."""
    if messages[0].offset >= offset:
        return messages
    return [m for m in messages if m.offset >= offset]


def _in_time_order(
    parts: list[tuple[TopicPartition, list[ConsumerRecord]]],
) -> Iterable[ConsumerRecord]:
    """A task's records of one fetch merged by record timestamp, each partition's in its own
    order (Kafka Streams' `PartitionGroup`): during a catch-up a resolution is applied after the
    claims it answers, not before them because its topic came first in the fetch. A tie goes to
    the partition listed first."""
    if len(parts) == 1:
        return parts[0][1]
    return heapq.merge(*(messages for _, messages in parts), key=_timestamp)


def _earliest(parts: list[tuple[TopicPartition, list[ConsumerRecord]]]) -> ConsumerRecord:
    """The record `_in_time_order` would give first."""
    return min(parts, key=lambda part: _timestamp(part[1][0]))[1][0]


def _timestamp(message: ConsumerRecord) -> int:
    return int(message.timestamp)


def incoming(message: ConsumerRecord) -> Incoming:
    headers = message.headers
    return Incoming(
        topic=message.topic,
        partition=message.partition,
        offset=message.offset,
        key=message.key,
        value=message.value,
        # Most records have none: no generator for them (0.4 µs a record).
        headers=tuple([(k, bytes(v or b"")) for k, v in headers]) if headers else (),
        timestamp=message.timestamp / 1000 if message.timestamp else None,
    )
