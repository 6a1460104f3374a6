"""The record limit at start: `max_record_bytes` must leave room for the largest claim beside the
rest of a key's state, and the topics that carry a key's largest records must take it."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import ValidationError

from streams.core.records.bounds import MAX_CLAIM_BYTES, RECORD_BYTES
from streams.core.records.errors import ClaimstreamError
from streams.settings import Settings
from streams.worker.size_check import check_record_limits, sized_topics


class _Admin:
    """DescribeConfigs answered from a table: topic -> its max.message.bytes (None: an error)."""

    def __init__(self, limits: dict[str, int | None], fails: bool = False) -> None:
        self.limits = limits
        self.fails = fails

    async def describe_configs(self, resources: list[Any]) -> list[Any]:
        if self.fails:
            raise RuntimeError("DescribeConfigs is not allowed")
        answered = []
        for resource in resources:
            limit = self.limits[resource.name]
            if limit is None:
                answered.append((29, "no DescribeConfigs ACL", 2, resource.name, []))
            else:
                entries = [("max.message.bytes", str(limit), False, 5, False, [])]
                answered.append((0, None, 2, resource.name, entries))
        return [SimpleNamespace(resources=answered)]


def _check(admin: _Admin, settings: Settings) -> dict[str, int]:
    return asyncio.run(check_record_limits(admin, settings))  # type: ignore[arg-type]


def test_topics_at_kafkas_default_limit_take_the_default_record() -> None:
    settings = Settings()
    limits = dict.fromkeys(sized_topics(settings), 1_048_588)
    assert _check(_Admin(dict(limits)), settings) == limits


def test_a_topic_below_max_record_bytes_stops_the_worker_and_says_how_to_fix_it() -> None:
    settings = Settings()
    limits: dict[str, int | None] = dict.fromkeys(sized_topics(settings), 1_048_588)
    limits[settings.topics.decisions] = 900_000
    with pytest.raises(ClaimstreamError) as caught:
        _check(_Admin(limits), settings)
    message = str(caught.value)
    assert f"topic {settings.topics.decisions} takes records of at most 900,000 bytes" in message
    assert "--add-config max.message.bytes=1048576" in message
    assert "or set max_record_bytes=900000" in message
    # A setting the topic takes passes.
    assert _check(_Admin(limits), Settings(max_record_bytes=900_000))[settings.topics.decisions]
    limits[settings.topics.decisions] = 500_000  # below what the per-key bounds need
    least = settings.least_record_bytes()
    with pytest.raises(ClaimstreamError, match=f"cannot go below {least:,} at these per-key"):
        _check(_Admin(limits), settings)


def test_a_broker_that_does_not_say_lets_the_worker_start(caplog: pytest.LogCaptureFixture) -> None:
    settings = Settings()
    with caplog.at_level(logging.WARNING):
        assert _check(_Admin({}, fails=True), settings) == {}
        unanswered = dict.fromkeys(sized_topics(settings))
        assert _check(_Admin(unanswered), settings) == {}
    assert "cannot check the record limit" in caplog.text


def test_max_record_bytes_must_hold_the_largest_claim_beside_the_rest_of_a_key() -> None:
    settings = Settings()
    assert settings.max_record_bytes == RECORD_BYTES
    least = settings.least_record_bytes()
    assert settings.key_limits().max_claim_bytes == RECORD_BYTES - (least - MAX_CLAIM_BYTES)
    assert Settings(max_record_bytes=least).key_limits().max_claim_bytes == MAX_CLAIM_BYTES
    with pytest.raises(ValidationError, match=f"raise it to {least:,}"):
        Settings(max_record_bytes=least - 1)
    with pytest.raises(ValidationError, match="lower resolutions_per_key"):
        Settings(decision_history_per_key=40)
    with pytest.raises(ValidationError):
        Settings(max_record_bytes=RECORD_BYTES + 1)  # past the producers' request size
