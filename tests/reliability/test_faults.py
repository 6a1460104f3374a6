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

from streams.devkit.brokers import KafkaBroker, KafkaCluster
from tests.reliability.checker import (
    EXACTLY_ONCE_FAULTS,
    GUARANTEES,
    History,
    arbiter_group,
    busiest_leader,
    changelog_of,
    deployment_on,
    generations,
    isolation_of,
    judge,
    publish_steadily,
    under_load,
    until_group,
    workload,
)
from tests.stream.support import WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.reliability]

RATE = 250.0  # claims/s offered, well under a worker's capacity


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

    try:
        time.sleep(5)
        under_load(
            kafka.bootstrap, deployment.topics.claims, workload(4000, 41), RATE, history, chaos
        )
        verdict = judge("sigkill-x3", deployment, history, last_restart[0], [kafka.log_path])
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

    try:
        time.sleep(4)
        under_load(
            kafka.bootstrap, deployment.topics.claims, workload(3500, 43), RATE, history, membership
        )
        verdict = judge(
            "worker-added-then-removed", deployment, history, changed[0], [kafka.log_path]
        )
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

        try:
            time.sleep(4)
            under_load(
                broker.bootstrap,
                deployment.topics.claims,
                workload(3000, 47),
                150.0,
                history,
                outage,
            )
            verdict = judge("broker-down-10s", deployment, history, back[0], [broker.log_path])
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
        judge("before-restart", deployment, history, time.monotonic(), [kafka.log_path])
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
            f"checker: scenario=table-recovery keys_compared={len(sample)} "
            f"recovery_s={recovered_s:.1f}"
        )
    finally:
        worker.stop()


def histories(worker: WorkerProcess, key: str) -> Any:
    return worker.get(f"/api/decisions/{urllib.parse.quote(key, safe='')}/history")


@EXACTLY_ONCE_FAULTS
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

    try:
        time.sleep(5)
        under_load(
            kafka.bootstrap, deployment.topics.claims, workload(3000, 59), RATE, history, crash
        )
        verdict = judge(
            "exactly-once-sigkill-x2",
            deployment,
            history,
            restarted[0],
            [kafka.log_path],
            "read_committed",
        )
    finally:
        survivor.stop()
        victim.stop()
    assert verdict.lost == 0, verdict.problems
    assert not verdict.problems
    assert (verdict.duplicates, verdict.repeated_dead_letters) == (0, 0), verdict.line()


@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_a_worker_rejoining_while_the_other_restores_lets_the_group_settle(
    kafka: KafkaBroker, tmp_path: Path, guarantee: str
) -> None:
    """The defect a black-box run found: a worker that rejoins right after the other took every
    partition used to evict it while it restored inside the rebalance callback (no heartbeats),
    and the two evicted each other for as long as both ran. Five times in a row here, with
    enough state on 8 partitions that restoring all of them outlasts the 6 s rebalance timeout
    on this machine (the earlier arbiter looped here; see the issue note)."""
    deployment = deployment_on(
        kafka.bootstrap,
        tmp_path,
        guarantee=guarantee,
        partitions=8,
        # Up to 31 claims per key here: the stream keeps them all, as the replay does (beyond
        # the per-key bound the two can differ, which is not what this scenario is about).
        max_claims_per_key=64,
        settings={"broker_session_timeout_s": "6"},
    )
    group = arbiter_group(deployment)
    everything = set(range(deployment.partitions))
    survivor, victim = deployment.worker(0).start(), deployment.worker(1).start()
    history = History()
    settled = [time.monotonic()]
    rounds = 5

    def shared(members: list[set[int]]) -> bool:
        return len(members) == 2 and all(members) and set().union(*members) == everything

    async def rejoins() -> None:
        await until_group(kafka.bootstrap, group, shared, "two members")
        # State first: every key a restore has to read back.
        await publish_steadily(
            kafka.bootstrap, deployment.topics.claims, workload(16000, 59), 2000.0, history
        )
        for _ in range(rounds):
            victim.kill()
            await until_group(
                kafka.bootstrap, group, lambda m: m == [everything], "one member with all"
            )
            await asyncio.to_thread(victim.start)
            await until_group(kafka.bootstrap, group, shared, "two members again")
            settled[0] = time.monotonic()

    try:
        under_load(
            kafka.bootstrap, deployment.topics.claims, workload(8000, 61), 100.0, history, rejoins
        )
        verdict = judge(
            f"rejoin-during-restore-{guarantee.replace('_', '-')}",
            deployment,
            history,
            settled[0],
            [kafka.log_path],
            isolation_of(guarantee),
        )
    finally:
        survivor.stop()
        victim.stop()
    assert verdict.lost == 0, verdict.problems
    assert not verdict.problems
    if guarantee == "exactly_once":
        assert (verdict.duplicates, verdict.repeated_dead_letters) == (0, 0), verdict.line()
    # Two to start, then per round one to drop the victim and one (rarely two, when its join
    # meets a rebalance under way) to take it back. A loop of evictions runs far past this.
    assert verdict.generations <= 2 + 3 * rounds, verdict.line()


def test_a_rolling_restart_of_three_static_members_causes_no_rebalance(
    kafka: KafkaBroker, tmp_path: Path
) -> None:
    """A Kubernetes rollout: each worker stopped and started again (same instance id, like a
    StatefulSet pod) once the previous one serves again, under load. The session timeout is
    above a restart, so the coordinator keeps every assignment."""
    deployment = deployment_on(
        kafka.bootstrap,
        tmp_path,
        static_membership=True,
        settings={"broker_session_timeout_s": "30"},
    )
    group = arbiter_group(deployment)
    everything = set(range(deployment.partitions))
    workers = [deployment.worker(n).start() for n in range(3)]
    history = History()
    rolled = [time.monotonic()]
    before: list[int] = []

    async def rollout() -> None:
        await until_group(
            kafka.bootstrap,
            group,
            lambda m: len(m) == 3 and set().union(*m) == everything,
            "three members",
        )
        before.append(generations(group, [kafka.log_path]))
        for worker in workers:
            await asyncio.to_thread(worker.stop)
            await asyncio.to_thread(worker.start)
        rolled[0] = time.monotonic()

    try:
        under_load(
            kafka.bootstrap, deployment.topics.claims, workload(6000, 67), 150.0, history, rollout
        )
        verdict = judge("rolling-restart-3", deployment, history, rolled[0], [kafka.log_path])
    finally:
        for worker in workers:
            worker.stop()
    assert verdict.lost == 0, verdict.problems
    assert not verdict.problems
    assert verdict.generations == before[0], f"rebalanced during the rollout: {verdict.line()}"


@pytest.fixture(scope="module")
def cluster() -> Iterator[KafkaCluster]:
    with KafkaCluster(size=3, partitions=4) as started:
        yield started


@pytest.mark.failover
@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_the_broker_leading_input_decisions_and_changelog_killed_under_load(
    cluster: KafkaCluster, guarantee: str, tmp_path: Path
) -> None:
    deployment = deployment_on(
        cluster.bootstrap,
        tmp_path,
        guarantee=guarantee,
        settings={"replication_factor": "3", "min_insync_replicas": "2"},
    )
    workers = [deployment.worker(0).start(), deployment.worker(1).start()]
    history = History()
    back = [time.monotonic()]
    topics = [deployment.topics.claims, deployment.topics.decisions, changelog_of(deployment)]
    led: list[int] = []

    async def leader_kill() -> None:
        await asyncio.sleep(3)
        victim, partitions_led = await busiest_leader(cluster, topics)
        led.append(partitions_led)
        node = cluster.node(victim)
        node.kill()
        await asyncio.sleep(10)
        await asyncio.to_thread(node.start)
        back[0] = time.monotonic()

    try:
        time.sleep(4)
        under_load(
            cluster.bootstrap,
            deployment.topics.claims,
            workload(3500, 71),
            RATE,
            history,
            leader_kill,
        )
        verdict = judge(
            f"leader-kill-{guarantee.replace('_', '-')}",
            deployment,
            history,
            back[0],
            [node.log_path for node in cluster.nodes],
            isolation_of(guarantee),
        )
        print(f"checker: leader-kill partitions_led_by_killed_broker={led[0]}")
        assert all(worker.alive for worker in workers), [w.log_tail() for w in workers]
    finally:
        for worker in workers:
            worker.stop()
    assert verdict.lost == 0, verdict.problems
    assert not verdict.problems
    if guarantee == "exactly_once":
        assert (verdict.duplicates, verdict.repeated_dead_letters) == (0, 0), verdict.line()
