"""What the worker's topics keep: the configs they are created with, and what counts as short."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from streams.settings import Settings
from streams.worker.retention import DAY_MS, shortfall, topic_configs


def test_every_topic_the_worker_creates_has_explicit_configs() -> None:
    settings = Settings(app_id="cs")
    topics = settings.topics
    configs = topic_configs(settings, ["claims.from.alice"])
    compacted = {"cleanup.policy": "compact"}
    assert configs[settings.changelog_topic] == compacted
    assert configs[topics.decisions] == compacted
    for history in (topics.resolutions, topics.policies, topics.aliases):  # kept forever
        assert configs[history] == {
            "cleanup.policy": "delete",
            "retention.ms": "-1",
            "retention.bytes": "-1",
        }, history
    audited = [topics.claims, topics.user_claims, "claims.from.alice", topics.dead_letters]
    for name in [*audited, topics.epoch_changes, topics.reobserve, topics.escalations]:
        assert configs[name] == {
            "cleanup.policy": "delete",
            "retention.ms": str(30 * DAY_MS),
            "retention.bytes": "-1",
        }, name
    assert configs[topics.rekeyed]["retention.ms"] == str(7 * DAY_MS)
    assert configs[topics.outcomes]["retention.ms"] == str(7 * DAY_MS)
    assert set(configs) >= {settings.changelog_topic, *topics.model_dump().values()}


def test_the_audit_horizon_is_a_setting() -> None:
    forever = topic_configs(Settings(audit_retention_days=-1))
    assert forever[Settings().topics.claims]["retention.ms"] == "-1"
    year = topic_configs(Settings(audit_retention_days=365))
    assert year[Settings().topics.dead_letters]["retention.ms"] == str(365 * DAY_MS)
    with pytest.raises(ValidationError, match="keeps nothing"):
        Settings(audit_retention_days=0)


@pytest.mark.parametrize(
    ("configs", "wanted_ms", "problem"),
    [
        ({"retention.ms": str(DAY_MS)}, 30 * DAY_MS, "keeps records 1 days (retention.ms="),
        ({"retention.ms": str(DAY_MS)}, -1, "keeps records 1 days"),
        ({"retention.ms": "-1", "cleanup.policy": "compact,delete"}, -1, "is compacted"),
        ({"retention.ms": "-1", "retention.bytes": "1000"}, -1, "past 1000 bytes"),
        ({"retention.ms": str(31 * DAY_MS), "retention.bytes": "-1"}, 30 * DAY_MS, None),
        ({"retention.ms": "-1", "retention.bytes": "-1"}, -1, None),
    ],
)
def test_a_topic_keeping_less_than_wanted_is_named(
    configs: dict[str, str], wanted_ms: int, problem: str | None
) -> None:
    found = shortfall("t", configs, wanted_ms)
    if problem is None:
        assert found is None
    else:
        assert found is not None
        assert problem in found
