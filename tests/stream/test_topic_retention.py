"""Retention on real Apache Kafka: the configs of the topics a worker creates, the warning for a
topic that keeps less than the audit horizon, and replaying dead letters."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from streams.core.keys.state import state_key
from streams.core.records.contracts import Claim, Decision
from streams.devkit.brokers import KafkaBroker
from streams.worker.retention import DAY_MS
from tests.stream.support import CODEC, REPO, Deployment, produce, read_topic

pytestmark = pytest.mark.integration

HOUR_MS = 3600 * 1000


async def create_topic(bootstrap: str, name: str, partitions: int, **configs: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1, topic_configs=configs)])
    finally:
        await admin.close()


async def described(bootstrap: str, names: list[str]) -> dict[str, dict[str, str]]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        responses = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, name) for name in names]
        )
    finally:
        await admin.close()
    return {
        resource[3]: {entry[0]: entry[1] for entry in resource[4]}
        for response in responses
        for resource in response.resources
    }


def test_topics_get_explicit_configs_and_a_short_retention_is_warned_of(
    kafka: KafkaBroker, deployment_factory: Any
) -> None:
    deployment: Deployment = deployment_factory(kafka.bootstrap)
    topics = deployment.topics
    asyncio.run(
        create_topic(
            kafka.bootstrap, topics.claims, deployment.partitions, **{"retention.ms": str(HOUR_MS)}
        )
    )
    worker = deployment.worker().start()
    try:
        changelog = f"{deployment.name}-key-state-changelog"
        names = [changelog, *topics.model_dump().values()]
        configs = asyncio.run(described(kafka.bootstrap, names))
        for compacted in (changelog, topics.decisions):
            assert configs[compacted]["cleanup.policy"] == "compact", compacted
        for history in (topics.resolutions, topics.policies, topics.aliases):  # every change
            assert configs[history]["cleanup.policy"] == "delete", history
            assert configs[history]["retention.ms"] == "-1", history
        for audited in (topics.user_claims, topics.dead_letters, topics.escalations):
            assert configs[audited]["cleanup.policy"] == "delete", audited
            assert configs[audited]["retention.ms"] == str(30 * DAY_MS), audited
        assert configs[topics.rekeyed]["retention.ms"] == str(7 * DAY_MS)
        # The pre-created topic is left as it is, and warned of.
        assert configs[topics.claims]["retention.ms"] == str(HOUR_MS)
        log = worker.log_tail(100_000)
        assert f"topic {topics.claims} keeps records" in log, log[-3000:]
        assert f"(retention.ms={HOUR_MS}); claimstream keeps it 30 days" in log
        assert f"--entity-name {topics.claims} --add-config retention.ms={30 * DAY_MS}" in log
        assert f"topic {topics.user_claims} keeps" not in log
    finally:
        worker.stop()


def test_dead_letters_replay_to_their_topic_once_fixed_and_stale_signatures_say_so(
    kafka: KafkaBroker, tmp_path: Path, deployment_factory: Any
) -> None:
    """A claim of a field the policy lacks is dead-lettered; with the field added, the replay
    sends it back and it is decided. A signed claim past max_age is listed and not sent."""
    full = yaml.safe_load((REPO / "examples" / "policy.yaml").read_text())
    behind = {**full, "fields": {k: v for k, v in full["fields"].items() if k != "contract.seats"}}
    behind["version"] = f"{full['version']}-behind"  # the fix is a version of its own
    policy = tmp_path / "policy-behind.yaml"
    policy.write_text(yaml.safe_dump(behind))
    deployment: Deployment = deployment_factory(kafka.bootstrap, policy=policy)
    topics = deployment.topics
    seats = Claim(
        claim_id="seats-1",
        subject="contract:9",
        field="contract.seats",
        status="present",
        value=40,
        source="crm",
        observed_at=datetime.now(UTC),
    )
    key = state_key(seats.subject, seats.field).encode()
    worker = deployment.worker().start()
    try:
        asyncio.run(
            produce(
                kafka.bootstrap,
                topics.claims,
                [(key, CODEC.encode(topics.claims, seats), [("trace", b"t-1")])],
            )
        )
        letters = until_some(kafka.bootstrap, topics.dead_letters)
        assert [dict(m.headers)["claimstream.error.reason"] for m in letters] == [b"unknown_field"]
    finally:
        worker.stop()
    stale_at = (datetime.now(UTC) - timedelta(hours=1)).isoformat().encode()
    stale = [
        (
            b"k-stale",
            b"stale-bytes",
            [
                ("claimstream.signed-at", stale_at),
                ("claimstream.error.reason", b"processing_failed"),
                ("claimstream.error.topic", topics.claims.encode()),
            ],
        )
    ]
    asyncio.run(produce(kafka.bootstrap, topics.dead_letters, stale))
    policy.write_text(yaml.safe_dump(full))  # the fix: the policy knows the field
    worker = deployment.worker().start()  # the fix in force first: claims are decided by it
    try:
        deadline = time.monotonic() + 60
        while worker.get("/healthz")["policy_version"] != full["version"]:
            assert time.monotonic() < deadline, worker.log_tail()
            time.sleep(0.3)
        replay = subprocess.run(
            [sys.executable, "-m", "streams.cli", "replay-dead-letters"],
            env=deployment.env(0, tmp_path / "cli"),
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert replay.returncode == 1, replay.stderr  # one could not be sent
        assert "older than signing.max_age 300s; not sent" in replay.stderr
        assert f"sent 1 ({topics.claims}: 1)" in replay.stderr
        assert "1 signed past max_age 300s not sent" in replay.stderr
        resent = asyncio.run(read_topic(kafka.bootstrap, topics.claims, idle_s=2))
        assert [(m.key, list(m.headers)) for m in resent] == [(key, [("trace", b"t-1")])] * 2
        decided = [
            CODEC.decode(Decision, m.value)
            for m in until_some(kafka.bootstrap, topics.decisions)
            if m.key == key
        ]
        assert [(d.outcome, d.value) for d in decided] == [("resolved", 40)]
    finally:
        worker.stop()


def until_some(bootstrap: str, topic: str, timeout_s: float = 90.0) -> list[Any]:
    """The topic's records, read again until there are some (the worker is starting)."""
    deadline = time.monotonic() + timeout_s
    while True:
        records = asyncio.run(read_topic(bootstrap, topic, idle_s=2))
        if records or time.monotonic() > deadline:
            return records
