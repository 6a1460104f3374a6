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
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from streams.devkit.brokers import KafkaBroker
from tests.reliability.checker import History, deployment_on, judge, under_load, workload
from tests.stream.support import WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.reliability]

RATE = 200.0  # claims/s offered, well under one worker's capacity
CLAIMS = 4000
PROCESSED_METRICS = ("claimstream_claims_accepted_total", "claimstream_claims_rejected_total")


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


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_a_worker_sigkilled_twice_restarts_on_its_local_store_under_load(
    kafka: KafkaBroker, tmp_path: Path, guarantee: str
) -> None:
    # Static membership with a session above a restart: the restarted worker takes its own
    # partitions back, so what it restores is its own local state, not another's.
    deployment = deployment_on(
        kafka.bootstrap,
        tmp_path,
        guarantee=guarantee,
        static_membership=True,
        settings={"broker_session_timeout_s": "30"},
    )
    worker = deployment.worker(0).start()
    asyncio.run(until("ready", lambda: ready(worker), worker))
    history = History()
    restarted = [time.monotonic()]

    async def crashes() -> None:
        for share in (3, 3 / 2):
            # Killed once a share of the load is out and it has decided since it started, so
            # its data dir holds state and a checkpoint of it.
            await until("published", lambda s=share: history.sent >= CLAIMS / s, worker)
            await until("processing", lambda: processed(worker) >= 200, worker)
            worker.kill()
            await asyncio.to_thread(worker.start)
            restarted[0] = time.monotonic()

    try:
        under_load(
            kafka.bootstrap,
            deployment.topics.claims,
            workload(CLAIMS, 83),
            RATE,
            history,
            crashes,
        )
        verdict = judge(
            f"local-store-sigkill-{guarantee.replace('_', '-')}",
            deployment,
            history,
            restarted[0],
            [kafka.log_path],
            "read_committed" if guarantee == "exactly_once" else "read_uncommitted",
        )
    finally:
        worker.stop()
    assert verdict.lost == 0, verdict.problems
    assert not verdict.problems
    if guarantee == "exactly_once":
        assert verdict.duplicates == 0
