"""The worker's per-claim path without a broker: what the shell around the engine costs a claim.

Beside `inprocess` (the engine alone), this room runs the bench's Avro claims through what the
arbiter does with each batch, minus the network: `Processor.process` against each task's
`TaskStore` (decode, admit, arbitrate, encode, charged by the processor's own StageClock), the
loop's bookkeeping (state put, settlements, decision metrics, outcome tallies), the journal
(`journaled`: each changed key encoded for the changelog) and the hand-off to the producer
(`RecordCollector.enqueue` appending every record to aiokafka's batch builders, whose send is a
no-op), and the collection after each batch (`collect_after_batch`). `cpu_us` is the whole
loop's CPU time a claim; the stages are microseconds a claim of wall time, as the worker's stage
clocks count them, or with `--cpu-stages` of this thread's CPU time (the processor's stage
clock pointed at `time.thread_time`: on a shared machine wall time swings with the load, but
each stage boundary is then a system call, ~2 µs a claim's boundary added to the stage after it
and to `cpu_us`).

    python -m streams.devkit.bench.shell --claims 20000 --subjects 2400 --rounds 3

With `--worker-cache --slices 5` the decoded cache is bounded as the worker's settings bound it
and each round is measured in five parts, as the broker bench's interleaved rounds: the later
parts find their keys outside the cache, decoded again (`decoded`), the cost that makes the
broker bench's ratio fall from round to round, here without a broker in a fraction of the time.

    python -m streams.devkit.bench.shell --claims 100000 --subjects 12000 --worker-cache \
        --slices 5 --cpu-stages

With `--at-size KEYS` it runs the scale phase's probe (`streams.devkit.bench.scale`) instead:
KEYS keys filled in RocksDB task stores, then `--probe` updates of keys most of which the
decoded cache no longer holds, read ahead as the loop does.

    python -m streams.devkit.bench.shell --at-size 300000 --probe 30000 --cpu-stages
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from aiokafka.producer.message_accumulator import BatchBuilder
from aiokafka.structs import TopicPartition

from streams.arbiter.bookkeeping import Bookkeeping
from streams.arbiter.collector import RecordCollector
from streams.arbiter.commit import TaskBatch, journaled
from streams.arbiter.loop import collect_after_batch
from streams.arbiter.schedule import Schedule
from streams.arbiter.sources import SourceLedgers
from streams.core.records.policy import load_policy
from streams.devkit.bench.scale import UPDATE_AFTER, lean_claims
from streams.devkit.bench.workload import CODEC, workload
from streams.ops.metrics import ADMIT, ARBITRATE, DECODE, ENCODE, JOURNAL, PRODUCE, Metrics
from streams.ops.stalls import COLLECTOR_HOOKS, tune_collector
from streams.packaged import example_path
from streams.pipeline import Incoming, Outgoing, Processor
from streams.pipeline import processor as processor_module
from streams.pipeline.rekey import partition_of
from streams.settings import Settings
from streams.state.cache import StateCache
from streams.state.rocks import Budget, RocksKeyStore
from streams.state.task import TaskStore

APPLY = "apply"
"""The loop's bookkeeping of a handled record (`Bookkeeping.apply`): no stage clock charges it."""
READ_AHEAD = "read_ahead"
"""Each task's read ahead of its batch's keys (`TaskStore.read_ahead`): a multi-get on disk."""
WRITE = "write"
"""Each task's store write once its journal is "acknowledged" (`TaskStore.journaled`)."""
SHOWN = (READ_AHEAD, DECODE, ADMIT, ARBITRATE, ENCODE, APPLY, JOURNAL, PRODUCE, WRITE)


class _Sink:
    """A producer that only builds batches: each one handed to it is built, then dropped."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions

    async def partitions_for(self, topic: str) -> set[int]:
        return set(range(self.partitions))

    def create_batch(self) -> BatchBuilder:
        return BatchBuilder(256 * 1024, 0)

    async def send_batch(self, batch: BatchBuilder, topic: str, partition: int) -> Any:
        batch._build()  # what the sender does before the batch goes on the wire
        return None


class _Tasks:
    """What `journaled` reads of the arbiter's tasks: the changelog and each task's store."""

    def __init__(self, changelog: str, stores: dict[int, TaskStore]) -> None:
        self.changelog = changelog
        self.open = {p: _Task(store) for p, store in stores.items()}


class _Task:
    def __init__(self, states: TaskStore) -> None:
        self.states = states


def claim_records(settings: Settings, claims: int, subjects: int, seed: int = 1) -> list[Incoming]:
    """The bench's claims as the arbiter reads them, each on its key's partition."""
    topic = settings.topics.claims
    now = time.time()
    return [
        Incoming(topic, partition_of(key, settings.partitions), offset, key, value, (), now)
        for offset, (key, value) in enumerate(workload(claims, subjects, seed, topic).records)
    ]


def run_once(
    settings: Settings,
    incoming: list[Incoming],
    clock: Callable[[], float],
    slices: int = 1,
    worker_cache: bool = False,
) -> list[dict[str, Any]]:
    """One pass over `incoming` with fresh state in memory, in `slices` consecutive parts (as
    the broker bench's rounds, each on the state the ones before left): per part, µs a claim by
    stage (timed by `clock`) and the loop's CPU µs a claim. The decoded cache holds every key,
    or with `worker_cache` what the worker's settings bound it to, so that keys leave it and
    are decoded again as their states grow (the broker bench's later rounds)."""
    cache = StateCache.for_worker(settings) if worker_cache else StateCache(1_000_000)
    shell = Shell(settings, {p: TaskStore(cache) for p in range(settings.partitions)}, clock)
    size = -(-len(incoming) // slices)
    return [shell.run(incoming[start : start + size]) for start in range(0, len(incoming), size)]


class Shell:
    """The arbiter's per-batch work on `stores` (sharing one decoded cache, as a worker's
    tasks do), kept across runs (a fill, then a probe)."""

    def __init__(
        self, settings: Settings, stores: dict[int, TaskStore], clock: Callable[[], float]
    ) -> None:
        self.cache = next(iter(stores.values())).cache
        setattr(processor_module, "perf_counter", clock)  # noqa: B010 (the module reads it)
        self.settings, self.clock = settings, clock
        policy = load_policy(example_path("policy.yaml"))
        self.metrics = Metrics(policy)
        self.processor = Processor(settings, policy, CODEC, self.metrics)
        self.tasks = _Tasks(settings.changelog_topic, stores)
        schedule = Schedule()
        for partition, task in self.tasks.open.items():
            schedule.attach(partition, task.states)
        sources = SourceLedgers(self.processor.policy, self.metrics)
        self.bookkeeping = Bookkeeping(self.metrics, sources, schedule)
        self.collector = RecordCollector(settings.changelog_topic, lambda partition, end: None)
        self.collector.attach(_Sink(settings.partitions))

    def run(self, incoming: list[Incoming]) -> dict[str, Any]:
        """Handle `incoming` in the worker's batches: each task reads its batch's keys ahead,
        handles them, journals, and writes its store once the changelog "acknowledged"."""
        settings, clock, processor = self.settings, self.clock, self.processor
        tasks, bookkeeping = self.tasks, self.bookkeeping
        topic, outcomes = settings.topics.claims, settings.topics.outcomes
        loop = asyncio.new_event_loop()
        seconds = dict.fromkeys(SHOWN, 0.0)
        misses = self.cache.misses
        gc_started = sum(COLLECTOR_HOOKS.seconds)
        cpu_started, thread_started = time.process_time(), time.thread_time()
        for start in range(0, len(incoming), settings.batch_size):
            chunk = incoming[start : start + settings.batch_size]
            reading = clock()
            by_partition: dict[int, list[bytes]] = {}
            for record in chunk:
                if record.key is not None:
                    by_partition.setdefault(record.partition, []).append(record.key)
            for partition, keys in by_partition.items():
                tasks.open[partition].states.read_ahead(keys)
            seconds[READ_AHEAD] += clock() - reading
            work: dict[int, TaskBatch] = {}
            for record in chunk:
                store = tasks.open[record.partition].states
                handled = processor.process(record, store.get)
                applying = clock()
                batch = work.get(record.partition) or work.setdefault(record.partition, TaskBatch())
                bookkeeping.apply(record.partition, store, batch, handled, record.timestamp or 0.0)
                batch.offsets[TopicPartition(topic, record.partition)] = record.offset + 1
                seconds[APPLY] += clock() - applying
            journaling = clock()
            tallies = Counter[bytes]()
            for batch in work.values():
                tallies.update(batch.tallies)
            out = journaled(tasks, work)  # type: ignore[arg-type]  # reads .changelog, .open
            out += [Outgoing(outcomes, key, str(count).encode()) for key, count in tallies.items()]
            producing = clock()
            loop.run_until_complete(self.collector.enqueue(out))
            writing = clock()
            for partition in work:
                tasks.open[partition].states.journaled()
            done = clock()
            seconds[JOURNAL] += producing - journaling
            seconds[PRODUCE] += writing - producing
            seconds[WRITE] += done - writing
            for stage, spent in processor.stages.seconds.items():
                if stage in seconds:
                    seconds[stage] += spent
            self.metrics.flush(processor.stages)
            collect_after_batch()
        cpu_s = time.process_time() - cpu_started
        # The process's other threads: RocksDB's flushes and compactions.
        background_s = cpu_s - (time.thread_time() - thread_started)
        gc_s = sum(COLLECTOR_HOOKS.seconds) - gc_started
        loop.close()
        count = len(incoming)
        misses = self.cache.misses - misses
        return {
            "claims": count,
            "cpu_us": round(cpu_s / count * 1e6, 1),
            "gc_us": round(gc_s / count * 1e6, 1),  # wall time, charged to the stage it fell in
            "background_cpu_us": round(background_s / count * 1e6, 1),
            "decoded": misses,  # states decoded from the store (decoded-cache misses)
            "stage_us": {stage: round(seconds[stage] / count * 1e6, 1) for stage in SHOWN},
        }


def at_size(
    settings: Settings, keys: int, probe: int, directory: Path, clock: Callable[[], float]
) -> dict[str, Any]:
    """The scale phase's probe without a broker: `keys` keys filled in RocksDB task stores
    (the worker's cache and store budgets), then `probe` of them, drawn at random, updated by
    a later observation of a changed value, most of them no longer in the decoded cache."""
    budget = Budget(settings.store_cache_mb * 2**20)
    cache = StateCache.for_worker(settings)
    stores = {
        p: TaskStore(cache, RocksKeyStore(directory / f"task-{p}", budget))
        for p in range(settings.partitions)
    }
    shell = Shell(settings, stores, clock)
    topic = settings.topics.claims
    observed_at = datetime.now(UTC) - timedelta(minutes=1)
    probed = random.Random(7).sample(range(1, keys + 1), min(probe, keys))
    now = time.time()

    def records(round_no: int, numbers: Iterable[int], at: datetime) -> list[Incoming]:
        claims = lean_claims(topic, round_no, numbers, at)
        return [
            Incoming(topic, partition_of(key, settings.partitions), offset, key, value, (), now)
            for offset, (key, value) in enumerate(claims)
        ]

    try:
        fill = shell.run(records(0, range(1, keys + 1), observed_at))
        figures = shell.run(records(1, probed, observed_at + UPDATE_AFTER))
    finally:
        for store in stores.values():
            store.store.close()
    return {"keys": keys, "fill_cpu_us": fill["cpu_us"], **figures}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--claims", type=int, default=20_000)
    parser.add_argument("--subjects", type=int, default=2_400)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--cpu-stages", action="store_true", help="stages in CPU time, not wall")
    parser.add_argument("--profile", metavar="FILE", help="write a cProfile of each round")
    parser.add_argument(
        "--at-size", type=int, metavar="KEYS", help="fill KEYS keys in RocksDB, then probe"
    )
    parser.add_argument("--probe", type=int, default=20_000, help="updates at size")
    parser.add_argument(
        "--slices", type=int, default=1, help="each round's claims in parts, one line each"
    )
    parser.add_argument(
        "--worker-cache", action="store_true", help="the decoded cache as the worker bounds it"
    )
    args = parser.parse_args()
    clock = time.thread_time if args.cpu_stages else time.perf_counter
    settings = Settings()
    if args.at_size:
        tune_collector()
        for _ in range(args.rounds):
            with tempfile.TemporaryDirectory() as directory:
                print(
                    json.dumps(at_size(settings, args.at_size, args.probe, Path(directory), clock))
                )
        return 0
    incoming = claim_records(settings, args.claims, args.subjects)
    tune_collector()  # as the worker runs
    for _ in range(args.rounds):
        if args.profile:
            import cProfile

            with cProfile.Profile() as profile:
                results = run_once(settings, incoming, clock, args.slices, args.worker_cache)
            profile.dump_stats(args.profile)
        else:
            results = run_once(settings, incoming, clock, args.slices, args.worker_cache)
        for result in results:
            print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
