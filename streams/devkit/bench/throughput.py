"""The throughput phase: the raw aiokafka loops and the worker over the same records, taking
turns a round each, so the machine's drift falls on both sides of the ratio alike.

The records are cut into `ROUNDS` slices. The raw loops read the whole of their topic, filled
once, a slice a round; the worker's input gets each slice when its turn comes, filled while the
worker is paused (SIGSTOP), so that it reads a backlog as the raw loops do, and its round is
timed from its resumption to its last claim processed. Each side's figure is
its CPU (and wall) time over all its rounds; the per-round CPU ratios show the spread. A slice's
new keys cost the worker more than its known ones, so early rounds weigh more on its side: the
spread is of one run's rounds, not of the ratio between runs.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from streams.devkit.bench.raw import RawLoop
from streams.devkit.bench.worker import BenchWorker, processed_marks, stalls_between
from streams.devkit.bench.workload import Throughput, Workload, create_topics, fill
from streams.settings import Settings

ROUNDS = 5
"""Rounds of the throughput phase, each a fifth of the records on every side."""


@dataclass(frozen=True)
class Yardstick:
    """The raw loops' throughput and the worker's, over the same records in interleaved
    rounds, and the CPU ratio (raw model loop over the worker, a claim) round by round."""

    raw: Throughput
    lean: Throughput
    ours: Throughput
    round_cpu_ratios: tuple[float, ...]
    expiry_ticks: int
    """Re-decisions by time alone the worker made in its rounds (their CPU is in its figure)."""
    round_stalls: tuple[dict[str, float], ...]
    """What the worker spent its rounds on, round by round: keys decoded from their encoded
    state, the collector's pauses, µs a claim in the stages that grow with a key's claims."""


def throughput_phase(
    bootstrap: str, name: str, settings: Settings, load: Workload, worker: BenchWorker
) -> Yardstick:
    """The raw loops and the worker, a round each in turn, over `load`'s records."""
    raw_in, raw_out = f"{name}.raw-in", f"{name}.raw-out"
    records = load.records
    asyncio.run(create_topics(bootstrap, [raw_in, raw_out], settings.partitions))
    asyncio.run(fill(bootstrap, raw_in, records))
    bounds = [len(records) * (n + 1) // ROUNDS for n in range(ROUNDS)]
    while not worker.ready():
        worker.alive("ready")
        time.sleep(0.05)
    with asyncio.Runner() as runner:
        raw = RawLoop(runner, bootstrap, raw_in, raw_out, lean=False)
        lean = RawLoop(runner, bootstrap, raw_in, raw_out, lean=True)
        ratios, claims, cpu_s, wall_s, start, ticks = [], 0.0, 0.0, 0.0, 0, 0
        stalls: list[dict[str, float]] = []
        try:
            for until in bounds:
                raw_cpu_before, raw_seen_before = raw.cpu_seconds, raw.seen
                raw.round(until)
                lean.round(until)
                raw_us = (raw.cpu_seconds - raw_cpu_before) / (raw.seen - raw_seen_before) * 1e6
                round_claims = until - start
                # Read while it idles, so that these scrapes' CPU falls outside its round.
                ticks_began, stalls_began = worker.expiry_ticks(), worker.stall_counts()
                staged = worker.stage_seconds()
                worker.pause()  # its slice waits as a backlog, as the raw loops' did
                try:
                    asyncio.run(fill(bootstrap, settings.topics.claims, records[start:until]))
                finally:
                    worker.resume()
                began, cpu_began = time.perf_counter(), worker.cpu_seconds()
                marks = processed_marks(worker, [until])
                ticks += worker.expiry_ticks() - ticks_began
                found = stalls_between(stalls_began, worker.stall_counts())
                spent = worker.stage_seconds()
                stalls.append(
                    {k: found[k] for k in ("state_cache_misses", "gc_pause_ms_total")}
                    | {
                        f"{stage}_us": round((spent[stage] - staged[stage]) / round_claims * 1e6, 1)
                        for stage in ("admit", "arbitrate", "journal")
                    }
                )
                round_cpu_s = marks.cpu_at[0] - cpu_began
                claims, cpu_s = claims + round_claims, cpu_s + round_cpu_s
                wall_s += marks.at[0] - began
                ratios.append(round(raw_us / (round_cpu_s / round_claims * 1e6), 3))
                start = until
        finally:
            raw.stop()
            lean.stop()
    ours = Throughput(claims / wall_s, cpu_s / claims * 1e6)
    return Yardstick(raw.throughput(), lean.throughput(), ours, tuple(ratios), ticks, tuple(stalls))
