"""Key state on local disk, on a real broker: a restart reads only its changelog's tail, a store
that cannot be vouched for is rebuilt in full and the log says why, and a worker without local
state restores in full before it reports ready."""

from __future__ import annotations

import asyncio
import json
import random
import re
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from streams.devkit.brokers import KafkaBroker
from tests.stream.support import (
    Deployment,
    WorkerProcess,
    expected_decisions,
    produce,
    publishable,
    read_topic,
    records,
    wait_for_decisions,
)

pytestmark = pytest.mark.integration

CAUGHT_UP = re.compile(
    r"task (\d+) caught up to changelog offset (\d+) \(end (\d+)\): (\d+) records read "
    r"from offset (\d+)"
)


def rocksdb_deployment(factory: Any, bootstrap: str, **options: Any) -> Deployment:
    deployment: Deployment = factory(
        bootstrap, store="rocksdb://", settings={"log_level": "info"}, **options
    )
    return deployment


def restores(worker: WorkerProcess, since: int) -> dict[int, tuple[int, int, int]]:
    """partition -> (records read, from offset, end), from the log written after byte `since`."""
    with worker.log_path.open("rb") as log:
        log.seek(since)
        text = log.read().decode(errors="replace")
    found = {}
    for match in CAUGHT_UP.finditer(text):
        partition, _, end, read, start = (int(group) for group in match.groups())
        found[partition] = (read, start, end)
    return found


def log_since(worker: WorkerProcess, since: int) -> str:
    with worker.log_path.open("rb") as log:
        log.seek(since)
        return log.read().decode(errors="replace")


def log_size(worker: WorkerProcess) -> int:
    return worker.log_path.stat().st_size if worker.log_path.exists() else 0


def restarted(worker: WorkerProcess, deployment: Deployment) -> dict[int, tuple[int, int, int]]:
    """Start the worker again; once every assigned task is restored, what each read."""
    mark = log_size(worker)
    worker.start()
    return restored_after(worker, deployment, mark)


def restored_after(
    worker: WorkerProcess, deployment: Deployment, mark: int
) -> dict[int, tuple[int, int, int]]:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        found = restores(worker, mark)
        if len(found) == deployment.partitions:
            return found
        time.sleep(0.3)
    raise AssertionError(f"tasks not restored in 90 s:\n{worker.log_tail()}")


def publish(bootstrap: str, deployment: Deployment, claims: list[dict[str, Any]]) -> None:
    rng = random.Random(len(claims))
    asyncio.run(produce(bootstrap, deployment.topics.claims, records(deployment, claims, rng)))


def decided(bootstrap: str, deployment: Deployment, claims: list[dict[str, Any]]) -> None:
    """Every key reaches the decision replay computes from `claims`."""
    expected, _ = expected_decisions(deployment, claims)
    latest, _ = asyncio.run(wait_for_decisions(bootstrap, deployment.topics.decisions, expected))
    lost = {k for k, v in expected.items() if k not in latest or latest[k].decision_id != v}
    assert not lost, f"{len(lost)} of {len(expected)} keys differ from replay"


def changelog_records(bootstrap: str, deployment: Deployment) -> int:
    topic = f"{deployment.name}-key-state-changelog"
    return len(asyncio.run(read_topic(bootstrap, topic, idle_s=2)))


def checkpoint_file(worker: WorkerProcess, deployment: Deployment, partition: int) -> Path:
    return worker.data_dir / f"{deployment.name}-arbiter" / f"task-{partition}" / "checkpoint.json"


def first_ready(worker: WorkerProcess, stop: threading.Event, seen: list[float]) -> None:
    """Poll /readyz until it answers 200; note the wall time it first did."""
    while not stop.is_set():
        if worker.get("/readyz", attempts=1) is not None:
            seen.append(time.time())
            return
        time.sleep(0.05)


def test_a_clean_restart_reads_only_the_tail_and_a_new_worker_restores_in_full(
    kafka: KafkaBroker, deployment_factory: Any
) -> None:
    deployment = rocksdb_deployment(deployment_factory, kafka.bootstrap)
    claims = publishable(2400, seed=41, now=datetime.now(UTC))
    first, second = claims[:1800], claims[1800:]
    worker = deployment.worker(0).start()
    newcomer = deployment.worker(1)
    try:
        publish(kafka.bootstrap, deployment, first)
        decided(kafka.bootstrap, deployment, first)
        worker.stop()  # SIGTERM: a clean close checkpoints every task
        publish(kafka.bootstrap, deployment, second)
        read = restarted(worker, deployment)
        assert all(start > 0 and n == 0 for n, start, _ in read.values()), read  # nothing new
        decided(kafka.bootstrap, deployment, claims)
        # SIGKILL: the checkpoints are those written when the tasks were installed; the
        # restart reads what the second batch journaled since, not the whole changelog.
        worker.kill()
        read = restarted(worker, deployment)
        held = changelog_records(kafka.bootstrap, deployment)
        tail = sum(n for n, _, _ in read.values())
        assert all(start > 0 for _, start, _ in read.values()), read
        assert 0 < tail < held, f"read {tail} of the changelog's {held} records: {read}"
        print(f"tail restore: read {tail} of {held} changelog records: {read}")

        # A worker without local state takes every task over: it restores each in full, and
        # reports ready only once it has.
        worker.stop()
        stop, seen = threading.Event(), []
        mark = log_size(newcomer)
        poller = threading.Thread(target=first_ready, args=(newcomer, stop, seen))
        newcomer.start()
        poller.start()
        try:
            full = restored_after(newcomer, deployment, mark)
        finally:
            poller.join(timeout=60)
            stop.set()
        assert all(start == 0 for _, start, _ in full.values()), full
        assert sum(n for n, _, _ in full.values()) == held
        caught_up_at = last_caught_up_time(newcomer, mark)
        assert seen, "the newcomer never reported ready"
        assert seen[0] >= caught_up_at, (seen, caught_up_at)
        metrics = newcomer.get("/metrics")
        assert "claimstream_restore_records_remaining 0.0" in metrics
        print(f"full restore: {full}")
    finally:
        worker.stop()
        newcomer.stop()
    assert "Traceback" not in worker.log_tail(2000)


def last_caught_up_time(worker: WorkerProcess, mark: int) -> float:
    """The wall time of the last task's caught-up line (JSON logs carry `ts`)."""
    times = [
        datetime.fromisoformat(json.loads(line)["ts"]).timestamp()
        for line in log_since(worker, mark).splitlines()
        if CAUGHT_UP.search(line)
    ]
    assert times
    return max(times)


TAMPERINGS: list[tuple[str, Any, str]] = [
    ("app_id", "another-app", "was written for app_id 'another-app'"),
    ("changelog", "another-changelog", "was written for changelog 'another-changelog'"),
    ("format", 99, "was written for format 99"),
    ("offset", 10**9, "past its changelog's end"),
    ("corrupt", None, "has a corrupt checkpoint"),
]


def test_a_checkpoint_that_cannot_be_vouched_for_rebuilds_its_task_in_full(
    kafka: KafkaBroker, deployment_factory: Any
) -> None:
    deployment = rocksdb_deployment(deployment_factory, kafka.bootstrap)
    claims = publishable(1200, seed=43, now=datetime.now(UTC))
    worker = deployment.worker(0).start()
    try:
        publish(kafka.bootstrap, deployment, claims[:900])
        decided(kafka.bootstrap, deployment, claims[:900])
        for name, value, said in TAMPERINGS:
            worker.stop()
            file = checkpoint_file(worker, deployment, 0)
            if name == "corrupt":
                file.write_bytes(b'{"format": 1, "offs')
            else:
                file.write_text(json.dumps(json.loads(file.read_text()) | {name: value}))
            mark = log_size(worker)
            read = restarted(worker, deployment)
            logged = log_since(worker, mark)
            told = [line for line in logged.splitlines() if "task 0" in line and said in line]
            assert told, f"{name}: {logged[-3000:]}"
            assert read[0][1] == 0, (name, read)  # task 0 rebuilt in full
            assert all(start > 0 for p, (_, start, _) in read.items() if p != 0), (name, read)
        publish(kafka.bootstrap, deployment, claims[900:])
        decided(kafka.bootstrap, deployment, claims)
    finally:
        worker.stop()
    assert "Traceback" not in worker.log_tail(4000)


def test_under_exactly_once_only_a_clean_close_leaves_a_store_to_restore_from(
    kafka: KafkaBroker, deployment_factory: Any
) -> None:
    deployment = rocksdb_deployment(deployment_factory, kafka.bootstrap, guarantee="exactly_once")
    claims = publishable(1800, seed=47, now=datetime.now(UTC))
    worker = deployment.worker(0).start()
    try:
        publish(kafka.bootstrap, deployment, claims[:900])
        decided(kafka.bootstrap, deployment, claims[:900])
        assert not checkpoint_file(worker, deployment, 0).exists()  # a running task has none
        worker.stop()
        assert checkpoint_file(worker, deployment, 0).exists()
        publish(kafka.bootstrap, deployment, claims[900:1300])
        read = restarted(worker, deployment)
        assert all(start > 0 for _, start, _ in read.values()), read
        decided(kafka.bootstrap, deployment, claims[:1300])
        worker.kill()  # SIGKILL: no clean close, no checkpoint
        publish(kafka.bootstrap, deployment, claims[1300:])
        mark = log_size(worker)
        read = restarted(worker, deployment)
        logged = log_since(worker, mark)
        assert logged.count("has no checkpoint (not closed cleanly, under exactly-once)") == 4
        assert all(start == 0 for _, start, _ in read.values()), read
        decided(kafka.bootstrap, deployment, claims)
    finally:
        worker.stop()
    assert "Traceback" not in worker.log_tail(4000)
