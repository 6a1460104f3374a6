"""Whether the topics that carry a key's largest records take them: checked at start, after the
topics are ensured (`topics.ensure_topics`).

A decision repeats its key's kept claims, a changelog record holds them, and a dead letter holds the
record it refuses. The worker keeps those within `Settings.max_record_bytes`
(`streams.core.records.bounds`); a topic whose `max.message.bytes` is below it would refuse such a
record for good, and the partition's commit with it. So the worker refuses to start, naming the
topic, its limit and the two ways out. A broker that does not answer DescribeConfigs (no ACL, or a
Kafka-compatible broker without it) is warned of, and the worker starts.
"""

from __future__ import annotations

import logging
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from streams.core.records.errors import ClaimstreamError
from streams.settings import Settings

log = logging.getLogger(__name__)

LIMIT = "max.message.bytes"


def sized_topics(settings: Settings) -> list[str]:
    """The topics whose records grow with a key's kept claims, or with a refused record."""
    topics = settings.topics
    return [settings.changelog_topic, topics.decisions, topics.escalations, topics.dead_letters]


def too_small(limits: dict[str, int], settings: Settings) -> list[str]:
    """One line per topic whose record limit is below `max_record_bytes`."""
    wanted = settings.max_record_bytes
    return [
        f"topic {name} takes records of at most {limit:,} bytes ({LIMIT}={limit})"
        for name, limit in sorted(limits.items())
        if limit < wanted
    ]


async def check_record_limits(admin: AIOKafkaAdminClient, settings: Settings) -> dict[str, int]:
    """Raise ClaimstreamError if a topic in `sized_topics` takes records smaller than
    `max_record_bytes`; return each topic's limit as the broker answered it."""
    names = sized_topics(settings)
    try:
        described = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, name) for name in names]
        )
    except Exception as exc:  # a broker that cannot say must not keep the worker from starting
        log.warning("cannot check the record limit (%s) of topics %s: %s", LIMIT, names, exc)
        return {}
    limits = _limits(described)
    problems = too_small(limits, settings)
    if not problems:
        return limits
    smallest, least = min(limits.values()), settings.least_record_bytes()
    lower = (
        f"or set max_record_bytes={smallest} (CLAIMSTREAM_MAX_RECORD_BYTES)"
        if smallest >= least
        else f"max_record_bytes cannot go below {least:,} at these per-key bounds"
    )
    raise ClaimstreamError(
        "; ".join(problems)
        + f": the worker sends records of up to max_record_bytes={settings.max_record_bytes:,}"
        " (a decision repeats its key's kept claims), and one a topic refuses would stop its "
        f"partition. Raise the topic's {LIMIT} (kafka-configs.sh --alter --entity-type topics "
        f"--entity-name TOPIC --add-config {LIMIT}={settings.max_record_bytes}), {lower}"
    )


def _limits(described: Any) -> dict[str, int]:
    """Each described topic's `max.message.bytes`, where the broker answered one."""
    limits: dict[str, int] = {}
    for response in described:
        for error_code, error_message, _type, name, entries in (r[:5] for r in response.resources):
            if error_code:
                log.warning("cannot check the record limit of topic %s: %s", name, error_message)
                continue
            value = {entry[0]: entry[1] for entry in entries}.get(LIMIT)
            if value is not None and str(value).isdigit():
                limits[name] = int(value)
    return limits
