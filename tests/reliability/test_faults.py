"""Faults under load, judged by the history checker: nothing acknowledged is ever lost."""

from __future__ import annotations

import asyncio
import shutil
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streams.core.contracts import Claim, Decision
from streams.core.policy import load_policy
from streams.devkit.brokers import KafkaBroker
from tests.reliability.checker import (
    History,
    Verdict,
    check,
    offline_replay,
    publish_steadily,
    wait_for_final,
    workload,
)
from tests.stream.conftest import write_policy
from tests.stream.support import CODEC, Deployment, WorkerProcess, read_topic

pytestmark = [pytest.mark.integration, pytest.mark.reliability]

RATE = 250.0  # claims/s offered, well under a worker's capacity


@pytest.fixture(scope="module")
def kafka() -> Iterator[KafkaBroker]:
    with KafkaBroker(partitions=4) as broker:
        yield broker


def deployment_on(bootstrap: str, tmp_path: Path, **options: Any) -> Deployment:
    policy = write_policy(
        tmp_path / "policy.yaml",
        **{"order.payment_status": {"freshness": "10m"}, "account.balance": {"freshness": "10m"}},
    )
    return Deployment(
        bootstrap=bootstrap, workdir=tmp_path, policy=policy, store="rocksdb://", **options
    )


def judge(
    scenario: str,
    deployment: Deployment,
    history: History,
    recovery_started: float,
    isolation_level: str = "read_uncommitted",
) -> Verdict:
    bootstrap = deployment.bootstrap
    stored = [
        CODEC.decode(Claim, r.value)
        for r in asyncio.run(read_topic(bootstrap, deployment.topics.claims, idle_s=2))
    ]
    policy = load_policy(deployment.policy)

    expected = offline_replay(policy, stored)
    wanted = {(d.subject, d.field): d.decision_id for d in expected.decisions}
    asyncio.run(wait_for_final(bootstrap, deployment.topics.decisions, wanted, timeout_s=150))
    recovery_s = time.monotonic() - recovery_started
    decisions_raw = asyncio.run(
        read_topic(
            bootstrap, deployment.topics.decisions, idle_s=2, isolation_level=isolation_level
        )
    )
    decisions = [CODEC.decode(Decision, r.value) for r in decisions_raw]
    dead = asyncio.run(read_topic(bootstrap, deployment.topics.dead_letters, idle_s=2))
    verdict = check(scenario, expected, history, stored, decisions, dead, recovery_s)
    print(verdict.line())
    return verdict


def test_workers_killed_with_sigkill_mid_stream(kafka: KafkaBroker, tmp_path: Path) -> None:
    deployment = deployment_on(kafka.bootstrap, tmp_path)
    workers = [deployment.worker(0).start(), deployment.worker(1).start()]
    history = History()
    last_restart = [time.monotonic()]

    async def chaos() -> None:
        for round_no in range(3):
            await asyncio.sleep(3)
            victim = workers[round_no % 2]
            victim.kill()
            await asyncio.sleep(1)
            await asyncio.to_thread(victim.start)
            last_restart[0] = time.monotonic()

    async def run() -> None:
        await asyncio.gather(
            publish_steadily(
                kafka.bootstrap, deployment.topics.claims, workload(4000, 41), RATE, history
            ),
            chaos(),
        )

    try:
        time.sleep(5)
        asyncio.run(run())
        verdict = judge("sigkill-x3", deployment, history, last_restart[0])
    finally:
        for worker in workers:
            worker.stop()
    assert verdict.lost == 0, verdict.problems
    assert not verdict.problems


def test_a_worker_added_and_removed_under_load(kafka: KafkaBroker, tmp_path: Path) -> None:
    deployment = deployment_on(kafka.bootstrap, tmp_path)
    first = deployment.worker(0).start()
    second = deployment.worker(1)
    history = History()
    changed = [time.monotonic()]

    async def membership() -> None:
        await asyncio.sleep(3)
        await asyncio.to_thread(second.start)
        await asyncio.sleep(5)
        await asyncio.to_thread(first.stop)
        changed[0] = time.monotonic()

    async def run() -> None:
        await asyncio.gather(
            publish_steadily(
                kafka.bootstrap, deployment.topics.claims, workload(3500, 43), RATE, history
            ),
            membership(),
        )

    try:
        time.sleep(4)
        asyncio.run(run())
        verdict = judge("worker-added-then-removed", deployment, history, changed[0])
    finally:
        first.stop()
        second.stop()
    assert verdict.lost == 0, verdict.problems
    assert not verdict.problems


def test_the_broker_stopped_for_ten_seconds_and_restarted(tmp_path: Path) -> None:
    with KafkaBroker(data_dir=tmp_path / "kafka", partitions=4) as broker:
        deployment = deployment_on(broker.bootstrap, tmp_path)
        worker = deployment.worker(0).start()
        history = History()
        back = [time.monotonic()]

        async def outage() -> None:
            await asyncio.sleep(3)
            await asyncio.to_thread(broker.stop)
            await asyncio.sleep(10)
            await asyncio.to_thread(broker.start)
            back[0] = time.monotonic()

        async def run() -> None:
            await asyncio.gather(
                publish_steadily(
                    broker.bootstrap, deployment.topics.claims, workload(3000, 47), 150.0, history
                ),
                outage(),
            )

        try:
            time.sleep(4)
            asyncio.run(run())
            verdict = judge("broker-down-10s", deployment, history, back[0])
            assert worker.alive, worker.log_tail()
        finally:
            worker.stop()
    assert verdict.lost == 0, verdict.problems
    assert not verdict.problems


def test_a_worker_restarted_without_local_state_recovers_its_table_from_the_changelog(
    kafka: KafkaBroker, tmp_path: Path
) -> None:
    deployment = deployment_on(kafka.bootstrap, tmp_path)
    worker = deployment.worker(0).start()
    history = History()
    claims = workload(2000, 53)
    try:
        time.sleep(4)
        asyncio.run(
            publish_steadily(kafka.bootstrap, deployment.topics.claims, claims, 400.0, history)
        )
        judge("before-restart", deployment, history, time.monotonic())
        sample = sorted({f"{c.subject}|{c.field}" for c in claims})[:25]
        before = {key: histories(worker, key) for key in sample}
        worker.stop()
        shutil.rmtree(worker.data_dir)  # nothing local: the table must come from the changelog
        restarted = time.monotonic()
        worker = WorkerProcess(deployment, worker.data_dir).start()
        deadline = time.monotonic() + 90
        after: dict[str, Any] = {}
        while time.monotonic() < deadline:
            after = {key: histories(worker, key) for key in sample}
            if after == before:
                break
            time.sleep(2)
        recovered_s = time.monotonic() - restarted
        assert after == before, "table state after recovery differs from before the restart"
        print(
            f"checker: scenario=table-recovery keys_compared={len(sample)} recovery_s={recovered_s:.1f}"
        )
    finally:
        worker.stop()


def histories(worker: WorkerProcess, key: str) -> Any:
    return worker.get(f"/api/decisions/{urllib.parse.quote(key, safe='')}/history")


def test_exactly_once_neither_loses_nor_repeats_across_crashes_and_rebalances(
    kafka: KafkaBroker, tmp_path: Path
) -> None:
    """Two workers; one is killed twice mid-stream, so its tasks move to the other and back.
    A read_committed reader must see every decision once: each task's transactional producer
    fences the task's previous owner, and aborted batches are replayed from committed state."""
    deployment = deployment_on(kafka.bootstrap, tmp_path, guarantee="exactly_once")
    survivor, victim = deployment.worker(0).start(), deployment.worker(1).start()
    history = History()
    restarted = [time.monotonic()]

    async def crash() -> None:
        for _ in range(2):
            await asyncio.sleep(3)
            victim.kill()
            await asyncio.sleep(1)
            await asyncio.to_thread(victim.start)
            restarted[0] = time.monotonic()

    async def run() -> None:
        await asyncio.gather(
            publish_steadily(
                kafka.bootstrap, deployment.topics.claims, workload(3000, 59), RATE, history
            ),
            crash(),
        )

    try:
        time.sleep(5)
        asyncio.run(run())
        verdict = judge(
            "exactly-once-sigkill-x2", deployment, history, restarted[0], "read_committed"
        )
    finally:
        survivor.stop()
        victim.stop()
    assert verdict.lost == 0, verdict.problems
    assert not verdict.problems
    assert verdict.duplicates == 0
