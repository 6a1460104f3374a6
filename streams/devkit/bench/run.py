"""The bench's run: the phases in order on one broker, then the figures as one JSON object.

Phases: the raw aiokafka limits and a worker process read the workload's records in interleaved
rounds (`throughput`); with `peer`, a quixstreams pipeline reads the same records after them
(`peer`); the worker then takes an offered load for latency (and optionally a
soak), merges `merge_pairs` pairs of keys by aliases under the same offered load (`merge`, when
asked), and is restarted on a new policy (`rollout`, unless `rollout=False`); last, the engine
and the state size are measured in process; when asked, the scale phase (`scale`) runs last, or
alone. `main` prints the figures' JSON line.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streams.build_info import compiled_modules
from streams.core.records.policy import Policy, load_policy
from streams.devkit.bench.cores import cpu_seconds, pin, split_cores
from streams.devkit.bench.inprocess import engine_rate, state_bytes_per_key
from streams.devkit.bench.load import Offered, latency, percentiles, soak
from streams.devkit.bench.merge import merge_phase
from streams.devkit.bench.peer import PeerFigures, peer_version, run_peer
from streams.devkit.bench.rollout import payments_stale_in_s, rollout_phase
from streams.devkit.bench.scale import Scale, scale_phase
from streams.devkit.bench.throughput import Yardstick, throughput_phase
from streams.devkit.bench.worker import (
    BenchWorker,
    gc_pauses_between,
    stall_capture,
    stall_summary,
    stalls_between,
    worker_env,
)
from streams.devkit.bench.workload import Throughput, Workload, workload
from streams.devkit.brokers import free_port, start_broker
from streams.packaged import example_path
from streams.settings import Guarantee, Settings
from streams.topic_names import Topics
from streams.worker.topics import ensure_topics


@dataclass(frozen=True)
class WorkerFigures:
    """What the phases against the worker process measured."""

    yardstick: Yardstick  # the raw loops' throughput and the worker's, interleaved
    stage_us: dict[str, float]
    saturated: float  # new-key decisions per second at saturation
    offered: Offered  # the latency phase
    peak_rss: int
    soak_samples: list[tuple[float, int, int]]
    stalls: dict[str, Any]  # what stalled the worker during the latency phase
    rollout: dict[str, Any]  # the restart on policy B (empty: not asked)
    merge: dict[str, Any]  # the aliases taking effect (empty: not asked)
    peer: PeerFigures | None = None  # the quixstreams pipeline on the same records (not asked)


def run(
    claims: int,
    subjects: int,
    broker_kind: str,
    partitions: int,
    latency_s: float,
    soak_s: float = 0.0,
    guarantee: Guarantee = Guarantee.AT_LEAST_ONCE,
    scale: Scale | None = None,
    pin_cores: bool = False,
    rollout: bool = True,
    merge_pairs: int = 0,
    peer: str | None = None,
) -> dict[str, Any]:
    if peer is not None:
        peer_version(peer)  # a missing peer fails the run before a broker starts
    policy = load_policy(example_path("policy.yaml"))
    work_dir = Path(tempfile.mkdtemp(prefix="claimstream-bench-"))
    name = f"bench{uuid.uuid4().hex[:6]}"
    topics = Topics(**{k: f"{name}.{v}" for k, v in Topics().model_dump().items()})
    broker = start_broker(broker_kind, partitions=partitions)
    try:
        settings = Settings(
            app_id=name,
            broker=f"kafka://{broker.bootstrap}",
            partitions=partitions,
            topics=topics,
            web_port=free_port(),
            data_dir=work_dir / "state",
            log_level="error",
            processing_guarantee=guarantee,
        )
        result: dict[str, Any] = {"broker": broker_kind, "guarantee": guarantee.value}
        if scale is None or not scale.only:
            asyncio.run(ensure_topics(settings))
            load = workload(claims, subjects, seed=1, topic=topics.claims)
            print(f"bench: {len(load.records)} claims ({len(load.claims)} valid) on {broker_kind}")
            assert broker.pid is not None
            measured = _worker_phases(
                broker.bootstrap,
                broker.pid,
                name,
                settings,
                load,
                latency_s,
                soak_s,
                pin_cores,
                rollout,
                merge_pairs,
                peer,
            )
            result |= {"claims": len(load.records), "subjects": subjects}
            result |= _figures(policy, load, measured, soak_s)
        if scale is not None:
            result["scale"] = scale_phase(broker.bootstrap, settings, scale, work_dir)
    finally:
        broker.close()  # stops it and removes its data folder
        shutil.rmtree(work_dir, ignore_errors=True)
    return result


def _worker_phases(
    bootstrap: str,
    broker_pid: int,
    name: str,
    settings: Settings,
    load: Workload,
    latency_s: float,
    soak_s: float,
    pin_cores: bool,
    rollout: bool = True,
    merge_pairs: int = 0,
    peer: str | None = None,
) -> WorkerFigures:
    """A worker process reads the workload in rounds interleaved with the raw loops' (then, with
    `peer`, the peer reads the same records), then takes the offered load (and the soak); then,
    with `merge_pairs`, merges that many pairs of keys by aliases, and with `rollout`, it is
    restarted on policy B, each under the same offered load."""
    topics = settings.topics
    worker = BenchWorker(settings, worker_env(settings))
    try:
        yardstick = throughput_phase(bootstrap, name, settings, load, worker)
        _say_throughput(yardstick)
        stage_us = {
            stage: round(seconds / len(load.records) * 1e6, 1)
            for stage, seconds in worker.stage_seconds().items()
        }
        print(f"bench: µs per claim by stage {stage_us}")
        peered = _peer_phase(bootstrap, name, settings, load, yardstick) if peer else None
        saturated, offered, stalls = _latency_phases(
            bootstrap, topics, worker, broker_pid, latency_s, pin_cores
        )
        rss = worker.peak_rss()
        samples = []
        if soak_s > 0:
            samples = asyncio.run(soak(bootstrap, topics, worker, saturated / 4, soak_s, keys=5000))
        # The earlier phases' payment statuses are let go stale once, by the first of these.
        stale_in_s = payments_stale_in_s(settings)
        merged = {}
        if merge_pairs:
            merged = merge_phase(
                bootstrap,
                worker,
                saturated / 2,
                merge_pairs,
                broker_pid=broker_pid,
                stale_in_s=stale_in_s,
            )
            stale_in_s = 0.0
        moved = {}
        if rollout:
            moved = rollout_phase(
                bootstrap, worker, saturated / 2, broker_pid=broker_pid, stale_in_s=stale_in_s
            )
    finally:
        worker.stop()
    return WorkerFigures(
        yardstick, stage_us, saturated, offered, rss, samples, stalls, moved, merged, peered
    )


def _say_throughput(yardstick: Yardstick) -> None:
    raw, lean, ours = yardstick.raw, yardstick.lean, yardstick.ours
    print(f"bench: raw aiokafka {raw.per_s:,.0f} claims/s, {raw.cpu_us:.0f} µs CPU a claim")
    print(f"bench: raw lean aiokafka {lean.per_s:,.0f} claims/s, {lean.cpu_us:.0f} µs CPU")
    print(f"bench: claimstream {ours.per_s:,.0f} claims/s, {ours.cpu_us:.0f} µs CPU a claim")
    print(
        f"bench: CPU ratio by round {list(yardstick.round_cpu_ratios)}, "
        f"{yardstick.expiry_ticks} re-decisions by time meanwhile"
    )


def _peer_phase(
    bootstrap: str, name: str, settings: Settings, load: Workload, yardstick: Yardstick
) -> PeerFigures:
    """The quixstreams peer over the records the worker read (its claims topic holds exactly
    those until the latency phase), keeping as many claims a key as the worker."""
    found = run_peer(
        bootstrap,
        settings.topics.claims,
        f"{name}.peer-out",
        len(load.records),
        settings.partitions,
        max_claims=settings.max_claims_per_key,
        commit_interval_s=settings.commit_interval_s,
    )
    peer, ours = found.throughput, yardstick.ours
    print(
        f"bench: quixstreams {found.version} peer {peer.per_s:,.0f} claims/s, "
        f"{peer.cpu_us:.0f} µs CPU a claim; claimstream / peer {ours.per_s / peer.per_s:.2f}"
    )
    return found


def _latency_phases(
    bootstrap: str,
    topics: Topics,
    worker: BenchWorker,
    broker_pid: int,
    latency_s: float,
    pin_cores: bool,
) -> tuple[float, Offered, dict[str, Any]]:
    """The new-key saturating rate, then half of it offered for `latency_s`: the rate, what the
    offered load measured, and the figures of what stalled the worker meanwhile and the CPU the
    worker, the broker and this process (the load) spent. With `pin_cores` both phases run with
    the worker on one core and the broker and the load on the others."""
    allowed = os.sched_getaffinity(0)
    pids = {"worker": worker.proc.pid, "broker": broker_pid, "load": os.getpid()}
    pinning: dict[str, list[int]] | None = None
    if pin_cores:
        mine, others = split_cores(allowed)
        pinning = {role: sorted(mine if role == "worker" else others) for role in pids}
        for role, pid in pids.items():
            pin(pid, pinning[role])
    try:
        # New keys cost more than the mixed workload's average (each one is a decision), so
        # the saturating rate for the latency phase is measured on new keys first.
        saturated = asyncio.run(latency(bootstrap, topics, 1e9, 4000)).rate
        print(f"bench: new-key decisions saturate at {saturated:,.0f}/s")
        before, began, ticks = worker.stall_counts(), time.time(), worker.expiry_ticks()
        staged = worker.stage_seconds()
        watched = worker.stall_report(began)
        cpu = {role: cpu_seconds(pid) for role, pid in pids.items()}
        offered = asyncio.run(
            latency(bootstrap, topics, saturated / 2, int(saturated / 2 * latency_s))
        )
        wall = time.time() - began
        spent = {role: cpu_seconds(pid) - cpu[role] for role, pid in pids.items()}
        after, ticks = worker.stall_counts(), worker.expiry_ticks() - ticks
        staged = {stage: s - staged.get(stage, 0.0) for stage, s in worker.stage_seconds().items()}
    finally:
        if pin_cores:
            for pid in pids.values():
                pin(pid, allowed)
    stalls: dict[str, Any] = {**stalls_between(before, after), **gc_pauses_between(before, after)}
    report = worker.stall_report(began)
    stalls |= stall_capture(watched, report, spent["worker"])
    print(f"bench: stalls during the latency phase {stalls}")
    for stall in report.get("longest", [])[1:]:
        print(f"bench: next longest stall {stall_summary(stall)}")
    stalls["pinned_cores"] = pinning
    # The throughput phase's keys going stale meanwhile: their re-decisions share the loop.
    stalls["latency_expiry_ticks"] = ticks
    # Where the worker's loop spent the phase, in ms a second by stage (commit: waiting for
    # acknowledgements too, when more batches than the window are in flight).
    stalls["latency_stage_ms_per_s"] = {
        stage: round(s / wall * 1000, 1) for stage, s in staged.items()
    }
    # Percent of one core over the phase: what each process took from the machine's cores.
    stalls["latency_cpu_pct"] = {role: round(s / wall * 100, 1) for role, s in spent.items()}
    return saturated, offered, stalls


def _figures(
    policy: Policy, load: Workload, measured: WorkerFigures, soak_s: float
) -> dict[str, Any]:
    """The JSON figures of the phases; the engine and state size are measured here, in process,
    once the broker and worker are gone."""
    offered, saturated = measured.offered, measured.saturated
    raw, lean, ours = measured.yardstick.raw, measured.yardstick.lean, measured.yardstick.ours
    engine = engine_rate(policy)
    return {
        "raw_claims_per_s": round(raw.per_s),
        "raw_lean_claims_per_s": round(lean.per_s),
        "claimstream_claims_per_s": round(ours.per_s),
        "raw_cpu_us_per_claim": round(raw.cpu_us, 1),
        "raw_lean_cpu_us_per_claim": round(lean.cpu_us, 1),
        "claimstream_cpu_us_per_claim": round(ours.cpu_us, 1),
        "cpu_ratio": round(raw.cpu_us / ours.cpu_us, 3),
        "cpu_ratio_by_round": list(measured.yardstick.round_cpu_ratios),
        "throughput_expiry_ticks": measured.yardstick.expiry_ticks,
        "throughput_stalls_by_round": list(measured.yardstick.round_stalls),
        "stage_us": measured.stage_us,
        "ratio": round(ours.per_s / raw.per_s, 3),
        "lean_ratio": round(ours.per_s / lean.per_s, 3),
        "new_key_saturation_per_s": round(saturated),
        "latency_offered_per_s": round(saturated / 2),
        "latency_samples": len(offered.latencies),
        **percentiles("", offered.latencies),
        # Where the time went: until the worker appended the decision, then until read here.
        **percentiles("worker_", offered.in_worker),
        **percentiles("delivery_", offered.delivery),
        **percentiles("to_broker_", offered.to_broker),
        **measured.stalls,
        "peak_rss_bytes": measured.peak_rss,
        "bytes_per_key": round(state_bytes_per_key(policy, load.claims)),
        "engine_decisions_per_s": round(engine),
        "compiled": bool(compiled_modules()),
        **measured.merge,
        **measured.rollout,
        **(_peer_figures(ours, measured.peer) if measured.peer is not None else {}),
        **(_soak_figures(measured, soak_s) if soak_s > 0 else {}),
    }


def _peer_figures(ours: Throughput, peer: PeerFigures) -> dict[str, Any]:
    # claimstream's claims/s over the peer's: the worker aims at 1.2 or more.
    return {"peer": peer.as_json(), "peer_ratio": round(ours.per_s / peer.throughput.per_s, 3)}


def _soak_figures(measured: WorkerFigures, soak_s: float) -> dict[str, Any]:
    # Growth is measured from the middle of the run: the keys take minutes to fill their
    # bounded claims and decision history (measured: about 4 minutes at these rates).
    samples = measured.soak_samples
    settled = next(s for s in samples if s[0] >= soak_s / 2)
    return {
        "soak_s": soak_s,
        "soak_offered_per_s": round(measured.saturated / 4),
        "soak_rss_settled_bytes": settled[1],
        "soak_rss_end_bytes": samples[-1][1],
        "soak_rss_growth_pct": round((samples[-1][1] / settled[1] - 1) * 100, 1),
        "soak_keys_end": samples[-1][2],
    }


def main(
    claims: int,
    subjects: int,
    broker_kind: str,
    partitions: int,
    latency_s: float,
    soak_s: float = 0.0,
    guarantee: Guarantee = Guarantee.AT_LEAST_ONCE,
    scale: Scale | None = None,
    pin_cores: bool = False,
    rollout: bool = True,
    merge_pairs: int = 0,
    peer: str | None = None,
) -> int:
    result = run(
        claims,
        subjects,
        broker_kind,
        partitions,
        latency_s,
        soak_s,
        guarantee,
        scale,
        pin_cores,
        rollout,
        merge_pairs,
        peer,
    )
    print(json.dumps(result, sort_keys=True))
    return 0
