"""Liveness and readiness verdicts from the arbiter's signals, on an injected clock.

The same verdicts on a real arbiter and broker: tests/stream/test_arbiter_health.py; through a real
worker and Prometheus: tests/ops/test_live_prometheus.py."""

from __future__ import annotations

from streams.core.records.policy import load_policy
from streams.ops.health import Pulse
from streams.ops.metrics import Metrics
from streams.settings import Settings

LIVENESS_S, RESTORE_S = 60.0, 600.0


class Clock:
    def __init__(self) -> None:
        self.now = 5000.0

    def __call__(self) -> float:
        return self.now


def pulse() -> tuple[Pulse, Clock, Metrics]:
    clock = Clock()
    metrics = Metrics(load_policy(Settings().policy))
    return Pulse(metrics, LIVENESS_S, RESTORE_S, clock=clock), clock, metrics


def test_a_loop_that_stops_iterating_fails_liveness_after_the_timeout_and_recovers() -> None:
    health, clock, _ = pulse()
    clock.now += LIVENESS_S
    assert health.liveness().ok
    clock.now += 1
    verdict = health.liveness()
    assert not verdict.ok
    assert verdict.reasons == (
        "arbiter loop has not completed an iteration for 61s (limit 60s): "
        "stuck on a send, a commit or a lock",
    )
    assert verdict.json()["status"] == "failing"
    health.beat()
    assert health.liveness().ok
    assert health.liveness().details == {"last_iteration_age_s": 0.0}


def test_a_restore_may_take_longer_than_a_loop_iteration_but_not_for_ever() -> None:
    health, clock, metrics = pulse()
    health.rebalancing()
    health.assigned({0, 1})
    clock.now += RESTORE_S
    assert health.liveness().ok, "restoring blocks the loop: judged by the restore limit"
    clock.now += 1
    assert health.liveness().reasons == ("rebalance restoring for 601s (limit 600s)",)
    health.restored()
    assert health.liveness().ok
    assert metrics.registry.get_sample_value("claimstream_rebalances_total") == 1
    assert metrics.registry.get_sample_value("claimstream_restore_seconds_sum") == RESTORE_S + 1


def test_readiness_needs_an_assignment_and_every_assigned_task_open() -> None:
    health, _, _ = pulse()
    assert health.readiness([]).reasons == ("not yet assigned partitions by the consumer group",)
    health.assigned({0, 1, 2})
    assert health.readiness({0, 1, 2}).reasons == ("rebalancing",)
    health.restored()
    waiting = health.readiness({0, 2})
    assert not waiting.ok
    assert waiting.reasons == ("tasks [1] not restored",)
    ready = health.readiness({0, 1, 2, 5})
    assert ready.ok
    assert ready.details == {"tasks_assigned": [0, 1, 2], "tasks_open": [0, 1, 2]}
    health.rebalancing()
    assert not health.readiness({0, 1, 2}).ok


def test_an_idle_member_without_partitions_is_ready() -> None:
    health, _, _ = pulse()
    health.assigned(set())
    health.restored()
    assert health.readiness([]).ok


def test_a_fenced_task_still_assigned_here_fails_liveness_until_its_partition_moves() -> None:
    health, clock, metrics = pulse()
    health.assigned({0, 1})
    health.restored()
    health.fence(1)
    assert metrics.registry.get_sample_value("claimstream_tasks_fenced_total") == 1
    assert not health.readiness({0}).ok, "the fenced task's partition has no open task"
    clock.now += LIVENESS_S + 1
    health.beat()
    assert health.liveness().reasons == (
        "task 1 fenced by another owner 61s ago and its partition is still assigned here",
    )
    health.assigned({0})  # the rebalance moved partition 1 to its new owner
    health.restored()
    assert health.liveness().ok
    assert health.readiness({0}).ok


STALL_S = 60.0


def ready_with_tasks(partitions: set[int]) -> tuple[Pulse, Clock, Metrics]:
    clock = Clock()
    metrics = Metrics(load_policy(Settings().policy))
    health = Pulse(metrics, LIVENESS_S, RESTORE_S, clock=clock, stall_timeout_s=STALL_S)
    health.assigned(partitions)
    health.restored()
    return health, clock, metrics


def test_a_task_whose_offsets_do_not_move_while_records_wait_fails_readiness() -> None:
    health, clock, _ = ready_with_tasks({0, 1})
    unmoved = clock.now
    health.committed(0, waiting=14, unmoved_since=unmoved)
    health.committed(1, waiting=0, unmoved_since=unmoved)  # nothing to do: not stalled
    clock.now += STALL_S - 1
    assert health.readiness({0, 1}).ok
    assert health.stalled_s() == {0: STALL_S - 1, 1: 0.0}
    clock.now += 1
    verdict = health.readiness({0, 1})
    assert not verdict.ok
    assert verdict.reasons == (
        "task 0 stalled for 60s: its committed offsets have not moved with 14 records waiting",
    )
    health.committed(0, waiting=3, unmoved_since=clock.now)  # it moved
    assert health.readiness({0, 1}).ok
    assert health.stalled_s() == {0: 0.0, 1: 0.0}


def test_a_task_whose_commits_keep_failing_fails_readiness_until_it_moves() -> None:
    health, clock, _ = ready_with_tasks({2})
    first = clock.now
    health.commit_failed({2}, "MessageSizeTooLargeError: too large")
    clock.now += 30
    health.commit_failed({2}, "MessageSizeTooLargeError: too large")  # the clock runs on
    health.committed(2, waiting=0, unmoved_since=first - 5)  # the broker saw no move either
    clock.now += 30
    verdict = health.readiness({2})
    assert verdict.reasons == (
        "task 2 stalled for 60s: its commits fail (MessageSizeTooLargeError: too large)",
    )
    health.committed(2, waiting=0, unmoved_since=clock.now)
    assert health.readiness({2}).ok


def test_a_reassignment_starts_every_task_afresh() -> None:
    health, clock, _ = ready_with_tasks({0})
    health.commit_failed({0}, "KafkaTimeoutError: ")
    clock.now += STALL_S
    assert not health.readiness({0}).ok
    health.assigned({0})
    health.restored()
    assert health.readiness({0}).ok
