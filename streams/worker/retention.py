"""What each of the worker's topics keeps, and for how long: the configs a topic is created with,
and the warning at start when an existing topic keeps less than the audit horizon.

Sits at the start of the data flow: `streams.worker.topics.ensure_topics` creates the topics with
`topic_configs` before the worker (or the bench) starts, then calls `warn_short_retention` on the
ones that already existed; `streams.worker.app` declares the same configs on the Faust topics
it reads.
"Every claim can be found on the input topic" holds for `Settings.audit_retention_days`: input
topics, dead letters and the event topics keep every record that long; decisions, the key-state
changelog are compacted (the latest record per key, forever); resolutions, policies, aliases,
erasures and their receipts are kept forever (a key's past resolutions still decide it, and they
are the stewards' audit trail; every policy, alias change and erasure with its instant is what
replay is given). The data subjects' keys are compacted with a bounded lag: a destroyed key's
wrapped copies are gone within `subject_key_compaction_lag_hours` (`wire.subject_keys`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from streams.settings import Settings
from streams.wire.subject_keys import subject_key_topic_config

log = logging.getLogger(__name__)

DAY_MS = 24 * 3600 * 1000
INTERNAL_RETENTION_MS = 7 * DAY_MS
"""Topics whose records are hops inside the pipeline (re-keyed claims and ticks, outcome
counts): read within seconds; a week covers a worker group down over a long weekend."""
COMPACTED = {"cleanup.policy": "compact"}


def audit_retention_ms(settings: Settings) -> int:
    """The audit horizon in milliseconds; -1 is forever."""
    days = settings.audit_retention_days
    return -1 if days < 0 else days * DAY_MS


def topic_configs(settings: Settings, extra: Iterable[str] = ()) -> dict[str, dict[str, str]]:
    """Each topic the worker creates -> its configs; `extra`: more input topics (principals')."""
    topics = settings.topics
    configs = dict.fromkeys((settings.changelog_topic, topics.decisions), COMPACTED)
    configs[topics.subject_keys] = subject_key_topic_config(settings)
    for name, kept_ms in retention_wanted(settings, extra).items():
        configs[name] = {
            "cleanup.policy": "delete",
            "retention.ms": str(kept_ms),
            "retention.bytes": "-1",
        }
    return configs


def retention_wanted(settings: Settings, extra: Iterable[str] = ()) -> dict[str, int]:
    """The topics kept by time -> how long, in milliseconds (-1: forever)."""
    topics = settings.topics
    audited = (
        topics.claims,
        topics.user_claims,
        *extra,
        topics.dead_letters,
        topics.epoch_changes,
        topics.reobserve,
        topics.escalations,
    )
    return {
        topics.resolutions: -1,
        topics.policies: -1,  # every version with its instant: what replay is given
        topics.aliases: -1,  # every change with its instant: likewise
        topics.erasures: -1,  # an erasure outlives what it erased
        topics.erasure_receipts: -1,
        **dict.fromkeys(audited, audit_retention_ms(settings)),
        topics.rekeyed: INTERNAL_RETENTION_MS,
        topics.outcomes: INTERNAL_RETENTION_MS,
    }


def kept_for(retention_ms: int) -> str:
    return "forever" if retention_ms < 0 else f"{retention_ms / DAY_MS:g} days"


def shortfall(name: str, configs: Mapping[str, str | None], wanted_ms: int) -> str | None:
    """Why a topic keeps less than `wanted_ms` (-1: forever), or None if it keeps enough."""
    policy = configs.get("cleanup.policy") or "delete"
    if "compact" in policy:
        return f"topic {name} is compacted (cleanup.policy={policy}): only a key's latest record"
    retention_ms = int(configs.get("retention.ms") or -1)
    if retention_ms >= 0 and (wanted_ms < 0 or retention_ms < wanted_ms):
        return f"topic {name} keeps records {kept_for(retention_ms)} (retention.ms={retention_ms})"
    retention_bytes = int(configs.get("retention.bytes") or -1)
    if retention_bytes >= 0:
        return f"topic {name} drops records past {retention_bytes} bytes a partition"
    return None


async def warn_short_retention(
    admin: AIOKafkaAdminClient, settings: Settings, existing: Iterable[str], extra: Iterable[str]
) -> list[str]:
    """Warn of each existing topic that keeps its records for less than it should (the audit
    horizon, or forever for resolutions); returns the warnings. A broker that refuses to describe
    configs (no DescribeConfigs ACL) is warned of and the worker starts: retention is the
    broker's to keep, this check only reports."""
    present = set(existing)
    wanted = {
        name: kept_ms
        for name, kept_ms in retention_wanted(settings, extra).items()
        if name in present
    }
    if not wanted:
        return []
    try:
        described = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, name) for name in sorted(wanted)]
        )
    except Exception as exc:  # the check must never keep a worker from starting
        log.warning("cannot check the retention of topics %s: %s", sorted(wanted), exc)
        return []
    warnings = []
    for response in described:
        for error_code, error_message, _type, name, entries in _resources(response):
            if error_code:
                log.warning("cannot check the retention of topic %s: %s", name, error_message)
                continue
            problem = shortfall(name, {entry[0]: entry[1] for entry in entries}, wanted[name])
            if problem is None:
                continue
            warnings.append(problem)
            log.warning(
                "%s; claimstream keeps it %s (audit_retention_days=%d): records past that "
                "can no longer be replayed or audited. Raise it: kafka-configs.sh --alter "
                "--entity-type topics --entity-name %s --add-config retention.ms=%d",
                problem,
                kept_for(wanted[name]),
                settings.audit_retention_days,
                name,
                wanted[name],
            )
    return warnings


def _resources(response: Any) -> list[tuple[Any, ...]]:
    """(error code, message, type, name, config entries) per topic, whatever the response's
    version (entries are (name, value, ...) tuples in every version)."""
    return [tuple(resource[:5]) for resource in response.resources]
