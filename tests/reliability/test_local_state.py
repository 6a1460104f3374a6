"""Faults on a worker's local state store under load, judged by the history checker.

A worker on the disk-backed store keeps its keys' state in its data dir with, per task, a
checkpoint of the changelog offset that state reflects. Restarted on that dir it restores only
the changelog written since; under exactly-once an unclean stop wipes the store and restores it
in full. A checkpoint that cannot be trusted (corrupt, or ahead of what the changelog holds)
must never be used as if it were true: the worker rebuilds the task from the changelog and
logs that it did. Each wait below is bounded by progress (claims published, claims processed),
not by a fixed sleep: the suite runs on loaded 2-core machines.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from streams.devkit.brokers import KafkaBroker
from tests.reliability.checker import (
    GUARANTEES,
    History,
    deployment_on,
    isolation_of,
    judge,
    under_load,
    workload,
)
from tests.stream.support import Deployment, WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.reliability]
Restart = Callable[[WorkerProcess], None]

RATE = 200.0  # claims/s offered, well under one worker's capacity
PROCESSED_METRICS = ("claimstream_claims_accepted_total", "claimstream_claims_rejected_total")
FROM_CHECKPOINT = re.compile(r"task (\d+) restores from checkpoint offset \d+")
UNCLEAN = re.compile(
    r"task (\d+): local store \S+ has no checkpoint \(not closed cleanly, under exactly-once\); "
    r"rebuilding it from the changelog"
)
CORRUPT = re.compile(
    r"task (\d+): local store \S+ has a corrupt checkpoint .*; rebuilding it from the changelog"
)
AHEAD = re.compile(
    r"task (\d+) restores from offset \d+, past its changelog's end \d+ \(a checkpoint ahead "
    r"of the changelog\); wiping its local store and restoring in full"
)


def ready(worker: WorkerProcess) -> bool:
    """Whether /readyz answers 200 (`get` takes a 503, still restoring, for no answer)."""
    return worker.get("/readyz", attempts=1) is not None


def processed(worker: WorkerProcess) -> float:
    """Claims the worker process has accepted or rejected since it started (0: no answer)."""
    text = worker.get("/metrics", attempts=1) or ""
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(PROCESSED_METRICS)
    )


async def until(
    what: str, done: Callable[[], bool], worker: WorkerProcess, timeout_s: float = 180
) -> None:
    """Poll `done()` (run in a thread: it may scrape the worker) until true; the timeout only
    guards against a worker that stopped making progress."""
    deadline = time.monotonic() + timeout_s
    while not await asyncio.to_thread(done):
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} in {timeout_s:.0f}s:\n{worker.diagnosis()}")
        await asyncio.sleep(0.3)


def under_restarts(
    deployment: Deployment, worker: WorkerProcess, claims: int, seed: int, restart: Restart
) -> tuple[History, float]:
    """Publish `claims` at `RATE` while `restart(worker)` runs once a third, then two thirds,
    of them are out and the worker has decided since it started (so its data dir holds state
    and checkpoints); the history and when the last restart was done."""
    history = History()
    restarted = [time.monotonic()]

    async def restarts() -> None:
        for share in (3, 3 / 2):
            await until("published", lambda s=share: history.sent >= claims / s, worker)
            await until("processing", lambda: processed(worker) >= 200, worker)
            await asyncio.to_thread(restart, worker)
            restarted[0] = time.monotonic()

    bootstrap = deployment.bootstrap
    under_load(bootstrap, deployment.topics.claims, workload(claims, seed), RATE, history, restarts)
    return history, restarted[0]


def local_store_deployment(kafka: KafkaBroker, tmp_path: Path, guarantee: str) -> Deployment:
    # Static membership with a session above a restart: the restarted worker takes its own
    # partitions back, so what it restores is its own local state, not another's.
    return deployment_on(
        kafka.bootstrap,
        tmp_path,
        guarantee=guarantee,
        static_membership=True,
        settings={"broker_session_timeout_s": "30"},
    )


def started(deployment: Deployment) -> WorkerProcess:
    """Worker 0 (logging what its store restores from), once ready."""
    worker = deployment.worker(0, CLAIMSTREAM_LOG_LEVEL="info").start()
    asyncio.run(until("ready", lambda: ready(worker), worker))
    return worker


def tasks_logged(pattern: re.Pattern[str], worker: WorkerProcess) -> list[int]:
    """The task of each line of the worker's log (all its runs) that `pattern` matches."""
    return [int(match[1]) for match in pattern.finditer(worker.log_tail(10**7))]


def opened_at_least(
    pattern: re.Pattern[str], worker: WorkerProcess, partitions: int, times: int
) -> bool:
    logged = Counter(tasks_logged(pattern, worker))
    return all(logged[partition] >= times for partition in range(partitions))


@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_a_worker_sigkilled_twice_restarts_on_its_local_store_under_load(
    kafka: KafkaBroker, tmp_path: Path, guarantee: str
) -> None:
    deployment = local_store_deployment(kafka, tmp_path, guarantee)
    worker = started(deployment)

    def sigkill(worker: WorkerProcess) -> None:
        worker.kill()
        worker.start()

    try:
        history, restarted = under_restarts(deployment, worker, 4000, 83, sigkill)
        verdict = judge(
            f"local-store-sigkill-{guarantee.replace('_', '-')}",
            deployment,
            history,
            restarted,
            [kafka.log_path],
            isolation_of(guarantee),
        )
    finally:
        worker.stop()
    assert verdict.lost == 0, verdict.problems
    assert not verdict.problems
    # Each crash is followed by one open of each task's store (a rebalance inside the restarted
    # process could open one again: at least once, then).
    if guarantee == "exactly_once":
        assert (verdict.duplicates, verdict.repeated_dead_letters) == (0, 0), verdict.line()
        # An unclean stop under exactly-once: each task's store is wiped and restored in full.
        assert opened_at_least(UNCLEAN, worker, deployment.partitions, 2), worker.log_tail()
    else:
        # Each restart read only the tail: every task restored from its checkpoint.
        assert opened_at_least(FROM_CHECKPOINT, worker, deployment.partitions, 2)
        assert not tasks_logged(CORRUPT, worker) + tasks_logged(AHEAD, worker)


def corrupt(checkpoint: Path) -> None:
    checkpoint.write_bytes(checkpoint.read_bytes()[:17] + b"\x00\xff torn")


def ahead(checkpoint: Path) -> None:
    record = json.loads(checkpoint.read_text())
    checkpoint.write_text(json.dumps(record | {"offset": record["offset"] + 1_000_000}))


@pytest.mark.parametrize("tamper", [corrupt, ahead], ids=["corrupt", "ahead-of-changelog"])
def test_a_checkpoint_that_cannot_be_trusted_is_rebuilt_and_said_so_under_load(
    kafka: KafkaBroker, tmp_path: Path, tamper: Callable[[Path], None]
) -> None:
    """Stopped cleanly (every task checkpointed), its checkpoints damaged, started again, twice:
    the worker must not trust them, nor lose what the changelog holds."""
    deployment = local_store_deployment(kafka, tmp_path, "at_least_once")
    worker = started(deployment)
    damaged: list[int] = []

    def damaged_restart(worker: WorkerProcess) -> None:
        worker.stop()
        checkpoints = sorted(worker.data_dir.glob("*-arbiter/task-*/checkpoint.json"))
        assert len(checkpoints) == deployment.partitions, checkpoints
        for checkpoint in checkpoints:
            tamper(checkpoint)
            damaged.append(int(checkpoint.parent.name.removeprefix("task-")))
        worker.start()

    try:
        history, restarted = under_restarts(deployment, worker, 4000, 89, damaged_restart)
        verdict = judge(
            f"checkpoint-{tamper.__name__}", deployment, history, restarted, [kafka.log_path]
        )
    finally:
        worker.stop()
    assert verdict.lost == 0, verdict.problems
    assert not verdict.problems
    said = tasks_logged(CORRUPT if tamper is corrupt else AHEAD, worker)
    assert sorted(said) == sorted(damaged), worker.log_tail()
