"""A stuck task is seen: a worker whose commits of one task keep failing says so on `/readyz`
(the task and the broker's error) and on `claimstream_task_stalled_seconds`, and is ready again
once the task moves, on a real worker and Apache Kafka.

The task is wedged as an operator could wedge it: the `max.message.bytes` of the decisions and
dead-letter topics is lowered under the running worker, below the size of any record, so that
the broker refuses every decision the task sends and even the dead letter of the claim that made
it (`arbiter.isolation` finds the claim, and cannot set it aside); raised back, the task commits
and moves on.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from streams.core.keys.state import state_key
from streams.core.records.contracts import Claim
from streams.devkit.brokers import KafkaBroker
from tests.stream.support import (
    CODEC,
    Deployment,
    WorkerProcess,
    metric_sum,
    one_claim,
    produce,
    write_policy,
)


async def _max_message_bytes(bootstrap: str, topic: str, limit: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        resource = ConfigResource(
            ConfigResourceType.TOPIC, topic, {"max.message.bytes": str(limit)}
        )
        await admin.alter_configs([resource])
    finally:
        await admin.close()


def _readyz(worker: WorkerProcess) -> tuple[int, dict[str, Any]]:
    url = f"http://127.0.0.1:{worker.web_port}/readyz"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _publish(deployment: Deployment, claims: list[Claim]) -> None:
    """Claims on one key: one task's."""
    topic = deployment.topics.claims
    records = [(state_key(c.subject, c.field).encode(), CODEC.encode(topic, c), []) for c in claims]
    asyncio.run(produce(deployment.bootstrap, topic, records))


def _stalled_reasons(answer: tuple[int, dict[str, Any]]) -> list[str]:
    status, body = answer
    return [r for r in body.get("reasons", []) if "stalled for" in r] if status == 503 else []


def test_a_task_whose_commits_keep_failing_fails_readiness_with_its_cause(
    kafka: KafkaBroker, tmp_path: Path
) -> None:
    deployment = Deployment(
        bootstrap=kafka.bootstrap,
        workdir=tmp_path / "worker",
        policy=write_policy(tmp_path / "policy.yaml"),
        partitions=2,
        settings={"task_stall_timeout_s": "3", "lag_interval_s": "0.5"},
    )
    worker = deployment.worker(0)
    try:
        worker.start()
        deadline = time.monotonic() + 60
        while _readyz(worker)[0] != 200:
            assert time.monotonic() < deadline, worker.log_tail()
            time.sleep(0.3)
        refusing = [deployment.topics.decisions, deployment.topics.dead_letters]
        for topic in refusing:
            asyncio.run(_max_message_bytes(kafka.bootstrap, topic, 64))  # below any record
        _publish(deployment, [one_claim(n, "paid") for n in range(20)])
        # While a failed commit reloads the task, readiness says it is not restored; the
        # stall is named once the task has failed for task_stall_timeout_s.
        deadline = time.monotonic() + 60
        while not (stalled := _stalled_reasons(answer := _readyz(worker))):
            assert time.monotonic() < deadline, (answer, worker.log_tail())
            time.sleep(0.5)
        assert answer[0] == 503, answer
        assert "its commits fail" in stalled[0], stalled
        assert "MessageSizeTooLarge" in stalled[0] or "RecordTooLarge" in stalled[0], stalled
        # The lag probe publishes the gauge every lag_interval_s: it may trail readiness by one.
        deadline = time.monotonic() + 10
        while metric_sum(metrics := worker.get("/metrics"), "claimstream_task_stalled_seconds") < 3:
            assert time.monotonic() < deadline, metrics[-2000:]
            time.sleep(0.25)
        for topic in refusing:
            asyncio.run(_max_message_bytes(kafka.bootstrap, topic, 1048588))
        deadline = time.monotonic() + 60
        while _readyz(worker)[0] != 200:
            assert time.monotonic() < deadline, (_readyz(worker), worker.log_tail())
            time.sleep(0.5)
    finally:
        worker.stop()
    assert "Traceback" not in worker.log_tail(400), worker.log_tail()
