"""Retention on real Apache Kafka: the configs of the topics a worker creates, the warning for a
topic that keeps less than the audit horizon, and replaying dead letters."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from streams.devkit.brokers import KafkaBroker
from streams.retention import DAY_MS
from tests.stream.support import Deployment

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
        for compacted in (changelog, topics.decisions, topics.aliases):
            assert configs[compacted]["cleanup.policy"] == "compact", compacted
        assert configs[topics.resolutions]["retention.ms"] == "-1"
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
