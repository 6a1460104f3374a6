"""What a worker tells its operator about itself: a mistyped setting at start, and on SIGUSR1
where every thread and asyncio task is (the runbook's step for a stalled worker), never a secret
setting's value; on Apache Kafka.
"""

from __future__ import annotations

import json
import signal
import time
from typing import Any

import pytest

from streams.devkit.brokers import KafkaBroker
from tests.stream.support import _LOCAL_REPR, Deployment

pytestmark = pytest.mark.integration


def json_lines(text: str) -> list[dict[str, Any]]:
    events = []
    for line in text.splitlines():
        if line.startswith("{"):
            events.append(json.loads(line))
    return events


def test_a_worker_names_a_mistyped_setting_and_prints_its_tasks_stacks_on_sigusr1(
    kafka: KafkaBroker, deployment_factory: Any
) -> None:
    deployment: Deployment = deployment_factory(kafka.bootstrap)
    secrets = {
        "CLAIMSTREAM_SASL_PASSWORD": "sasl-s3cret-never-printed",
        "CLAIMSTREAM_SCHEMA_REGISTRY_USERNAME": "svc",
        "CLAIMSTREAM_SCHEMA_REGISTRY_PASSWORD": "registry-s3cret-never-printed",
        "CLAIMSTREAM_STEWARD_TOKENS": "steward-s3cret-never-printed",
    }
    # info, the default level (the test deployment's is warn): more lines that could leak
    worker = deployment.worker(
        CLAIMSTREAM_STATE_CACHE_KEY="77", CLAIMSTREAM_LOG_LEVEL="info", **secrets
    ).start()
    try:
        started = worker.log_path.read_text(errors="replace")
        assert any(
            event["level"] == "warning"
            and event["variable"] == "CLAIMSTREAM_STATE_CACHE_KEY"
            and event["closest"] == "CLAIMSTREAM_STATE_CACHE_KEYS"
            for event in json_lines(started)
        ), started[-2000:]
        assert "77" not in "".join(e["message"] for e in json_lines(started) if "variable" in e)

        deadline = time.monotonic() + 120
        while worker.get("/readyz", attempts=1) is None and time.monotonic() < deadline:
            time.sleep(0.5)  # until the arbiter runs: its loop is the task the dump must show
        started = worker.log_path.read_text(errors="replace")
        worker.proc.send_signal(signal.SIGUSR1)  # type: ignore[union-attr]
        deadline = time.monotonic() + 30
        dumps: list[dict[str, Any]] = []
        while not dumps and time.monotonic() < deadline:
            time.sleep(0.5)
            dumped = worker.log_path.read_text(errors="replace")[len(started) :]
            dumps = [
                event
                for event in json_lines(dumped)
                if event["message"].startswith("asyncio task stacks")
            ]
        assert dumps, dumped[-2000:]
        stacks = dumps[0]["message"]
        assert "streams/arbiter/loop.py" in stacks  # the arbiter's loop, awaiting its fetch
        assert 'File "' in stacks
        assert "most recent call first" in dumped  # faulthandler's thread stacks, printed first
        assert not [line for line in dumped.splitlines() if _LOCAL_REPR.match(line)]
        assert worker.alive
    finally:
        worker.stop()
    log = worker.log_path.read_text(errors="replace")
    assert [secret for secret in secrets.values() if secret in log] == []
    # The line the runbook says to watch when a worker gains tasks.
    assert [e for e in json_lines(log) if e["message"].startswith("arbiter: tasks ")], log[-2000:]
