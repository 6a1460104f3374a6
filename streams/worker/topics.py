"""The pipeline's topics, created before the worker starts (`claimstream worker`, `dev`, the bench):
each with its partition count, replication, `min.insync.replicas` and the retention or compaction
`retention.py` gives it; then the topics the worker sends its largest records to are checked to
take them (`size_check.py`)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError

from streams.core.records.errors import ClaimstreamError
from streams.settings import Settings
from streams.wire.kafka import client_options
from streams.worker.retention import topic_configs, warn_short_retention
from streams.worker.size_check import check_record_limits

OUTCOMES_KEPT = timedelta(hours=2)
"""How long the per-minute outcome counts (a Faust windowed table) are kept."""


def table_changelogs(settings: Settings) -> dict[str, dict[str, str]]:
    """The Faust tables' changelog topics -> their configs, as Faust declares them. Created with
    the rest: a worker that counted outcomes before Faust had declared its table's changelog
    crashed the counting agent (`PartitionsMismatch`, a changelog of 0 partitions)."""
    kept_ms = str(int(OUTCOMES_KEPT.total_seconds() * 1000))
    return {
        f"{settings.app_id}-field-outcomes-changelog": {
            "cleanup.policy": "compact,delete",
            "retention.ms": kept_ms,
        },
    }


async def ensure_topics(settings: Settings, extra: Iterable[str] = ()) -> list[str]:
    """Create the pipeline's topics (idempotent) with their configs (`retention.py`), and
    warn of an existing one that keeps its records for less. Returns those created."""
    topics = settings.topics
    changelog = settings.changelog_topic
    durability = {"min.insync.replicas": str(settings.min_insync_replicas)}
    extra = list(extra)
    configs = topic_configs(settings, extra) | table_changelogs(settings)
    names = [
        *table_changelogs(settings),
        changelog,
        *topics.inputs(),
        *extra,
        topics.aliases,
        topics.erasures,
        topics.erasure_receipts,
        topics.subject_keys,
        topics.decisions,
        topics.dead_letters,
        topics.epoch_changes,
        topics.reobserve,
        topics.escalations,
        topics.outcomes,
        topics.policies,
    ]
    admin = AIOKafkaAdminClient(**client_options(settings))
    await admin.start()
    created = []
    try:
        existing = set(await admin.list_topics())
        for name in names:
            if name in existing:
                continue
            try:
                await admin.create_topics(
                    [
                        NewTopic(
                            name,
                            # The history topics: one partition, in published order.
                            1 if name in topics.histories() else settings.partitions,
                            settings.replication_factor,
                            topic_configs={**durability, **configs.get(name, {})},
                        )
                    ]
                )
                created.append(name)
            except TopicAlreadyExistsError:
                pass
        await warn_short_retention(admin, settings, existing & set(names), extra)
        await check_record_limits(admin, settings)
    except KafkaError as exc:
        raise ClaimstreamError(f"cannot create topics on {settings.bootstrap}: {exc}") from exc
    finally:
        await admin.close()
    return created
