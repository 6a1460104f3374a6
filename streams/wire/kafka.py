"""How every part of claimstream connects to Kafka: the aiokafka options (bootstrap servers,
SASL and TLS from the settings) that the arbiter's consumer and producers, the worker's probes,
the command line and the public client all open their connections with."""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from streams.settings import Settings


def client_options(settings: Settings) -> dict[str, Any]:
    """aiokafka connection options (SASL/TLS pass through)."""
    options: dict[str, Any] = {
        "bootstrap_servers": settings.bootstrap,
        "security_protocol": settings.security_protocol,
    }
    if settings.sasl_mechanism:
        options["sasl_mechanism"] = settings.sasl_mechanism
        options["sasl_plain_username"] = settings.sasl_username
        options["sasl_plain_password"] = (
            settings.sasl_password.get_secret_value() if settings.sasl_password else None
        )
    context = settings.ssl_context()
    if context is not None:
        options["ssl_context"] = context
    return options


METADATA_ATTEMPTS = 8
"""How often `topic_partitions` asks: each time a broker picked at random, so a broker that is
down (a fail-over, a rolling restart) costs a retry, not a worker."""


async def topic_partitions(settings: Settings, topics: list[str]) -> dict[str, list[int]]:
    """Each topic's partitions (none for a topic the cluster does not have), from the cluster's
    metadata: a consumer's holds only the topics it subscribed to."""
    admin = AIOKafkaAdminClient(**client_options(settings))
    await admin.start()
    try:
        for attempt in range(METADATA_ATTEMPTS):
            try:
                described = await admin.describe_topics(topics)
                break
            except KafkaError as exc:
                if not exc.retriable or attempt + 1 == METADATA_ATTEMPTS:
                    raise
                await asyncio.sleep(min(0.25 * 2**attempt, 2.0))
    finally:
        await admin.close()
    return {
        each["topic"]: sorted(p["partition"] for p in each["partitions"])
        for each in described
        if each["error_code"] == 0
    }
