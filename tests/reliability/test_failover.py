"""How long a key goes undecided while its worker fails over, under either guarantee.

Two workers share four partitions; once the group is stable and claims flow, one worker is
SIGKILLed and restarted a second later (static membership, as the Kubernetes StatefulSet runs
it), SIGKILLed for good (dynamic membership: the survivor takes its partitions once the session
times out), or stopped cleanly (it leaves the group; the survivor takes over at once). The
checker's `max_pause_s` is the longest any partition's input waited with no decision coming
out: the fail-over, since nothing else pauses a partition here. `scripts/failover-figures.sh`
runs these (and the broker leader kill of test_faults) many times and prints p50 and max per
scenario; this test holds what must not vary: nothing lost, nothing repeated exactly once, and
at least once no more repeated than the input of one commit interval.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from streams.devkit.brokers import KafkaBroker
from streams.settings import Settings
from tests.reliability.checker import (
    History,
    arbiter_group,
    deployment_on,
    isolation_of,
    judge,
    under_load,
    until_group,
    workload,
)
from tests.stream.support import WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.reliability, pytest.mark.failover]

RATE = 100.0  # claims/s: 25 a second per partition, so a pause is seen to 40 ms
LOAD_S = 30.0  # long enough for the slowest fail-over (a session timeout, then a rebalance)
FAULT_AFTER_S = 5.0
COMMIT_INTERVAL_S = Settings().commit_interval_s


@dataclass(frozen=True)
class Fault:
    name: str
    static_membership: bool
    strike: Callable[[WorkerProcess], Awaitable[None]]


async def sigkill_then_restart(victim: WorkerProcess) -> None:
    victim.kill()
    await asyncio.sleep(1)  # a supervisor's restart (kubelet, systemd)
    await asyncio.to_thread(victim.start)


async def sigkill(victim: WorkerProcess) -> None:
    victim.kill()


async def stop(victim: WorkerProcess) -> None:
    await asyncio.to_thread(victim.stop)


FAULTS = [
    Fault("sigkill-restarted", True, sigkill_then_restart),
    Fault("sigkill-gone", False, sigkill),
    Fault("stopped", False, stop),
]


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
@pytest.mark.parametrize("fault", FAULTS, ids=lambda fault: fault.name)
def test_a_key_waits_only_while_its_worker_fails_over(
    kafka: KafkaBroker, tmp_path: Path, fault: Fault, guarantee: str
) -> None:
    deployment = deployment_on(
        kafka.bootstrap,
        tmp_path,
        guarantee=guarantee,
        static_membership=fault.static_membership,
    )
    group = arbiter_group(deployment)
    everything = set(range(deployment.partitions))
    workers = [deployment.worker(0), deployment.worker(1)]
    history = History()
    struck = [time.monotonic()]

    async def fail_over() -> None:
        await asyncio.sleep(FAULT_AFTER_S)
        struck[0] = time.monotonic()
        await fault.strike(workers[1])

    try:
        for worker in workers:
            worker.start()
        # Claims flow only once both workers hold partitions: the pause measured is the fault's.
        asyncio.run(
            until_group(
                kafka.bootstrap,
                group,
                lambda members: (
                    len(members) == 2 and all(members) and set().union(*members) == everything
                ),
                "two members",
            )
        )
        under_load(
            kafka.bootstrap,
            deployment.topics.claims,
            workload(int(RATE * LOAD_S), 73),
            RATE,
            history,
            fail_over,
        )
        verdict = judge(
            f"failover-{fault.name}-{guarantee.replace('_', '-')}",
            deployment,
            history,
            struck[0],
            [kafka.log_path],
            isolation_of(guarantee),
        )
        assert workers[0].alive, workers[0].log_tail()
    finally:
        for worker in workers:
            worker.stop()
    assert verdict.lost == 0, verdict.problems
    assert not verdict.problems
    if guarantee == "exactly_once":
        assert (verdict.duplicates, verdict.repeated_dead_letters) == (0, 0), verdict.line()
    else:
        # A fault repeats the decisions of what the failed worker read after its last offset
        # commit: at most `commit_interval_s` of input, plus the batches still settling (a
        # second here, for a loaded machine). Only the victim's partitions' share counts, so
        # the whole rate bounds it from above.
        assert verdict.duplicates <= RATE * (COMMIT_INTERVAL_S + 1.0), verdict.line()
