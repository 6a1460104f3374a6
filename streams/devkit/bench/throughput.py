"""The throughput phase: the raw aiokafka loops and the worker over the same records, taking
turns a round each, so the machine's drift falls on both sides of the ratio alike.

The records are cut into `ROUNDS` slices. The raw loops read the whole of their topic, filled
once, a slice a round; the worker's input gets each slice when its turn comes, and its round is
timed from the fill's start to its last claim processed (it idles until the first arrives: its
CPU then is next to nothing; the wall time counts in its claims a second). Each side's figure is
its CPU (and wall) time over all its rounds; the per-round CPU ratios show the spread. A slice's
new keys cost the worker more than its known ones, so early rounds weigh more on its side: the
spread is of one run's rounds, not of the ratio between runs.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from streams.devkit.bench.raw import RawLoop
from streams.devkit.bench.worker import BenchWorker, processed_marks
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
        ratios, claims, cpu_s, wall_s, start = [], 0.0, 0.0, 0.0, 0
        try:
            for until in bounds:
                raw_cpu_before, raw_seen_before = raw.cpu_seconds, raw.seen
                raw.round(until)
                lean.round(until)
                raw_us = (raw.cpu_seconds - raw_cpu_before) / (raw.seen - raw_seen_before) * 1e6
                began, cpu_began = time.perf_counter(), worker.cpu_seconds()
                asyncio.run(fill(bootstrap, settings.topics.claims, records[start:until]))
                marks = processed_marks(worker, [until])
                round_claims = until - start
                round_cpu_s = marks.cpu_at[0] - cpu_began
                claims, cpu_s = claims + round_claims, cpu_s + round_cpu_s
                wall_s += marks.at[0] - began
                ratios.append(round(raw_us / (round_cpu_s / round_claims * 1e6), 3))
                start = until
        finally:
            raw.stop()
            lean.stop()
    ours = Throughput(claims / wall_s, cpu_s / claims * 1e6)
    return Yardstick(raw.throughput(), lean.throughput(), ours, tuple(ratios))
