"""Settings that size durability and group membership."""

from __future__ import annotations

import pytest

from streams.app import faust_settings
from streams.core.errors import ClaimstreamError
from streams.settings import load_settings


def test_an_instance_id_makes_both_consumer_groups_static() -> None:
    settings = load_settings(env={"CLAIMSTREAM_INSTANCE_ID": "claimstream-worker-2"})
    assert settings.instance_id == "claimstream-worker-2"
    assert faust_settings(settings)["consumer_group_instance_id"] == "claimstream-worker-2"
    assert load_settings(env={}).instance_id is None  # dynamic unless asked


def test_min_insync_replicas_cannot_exceed_the_replication_factor() -> None:
    replicated = load_settings(
        env={"CLAIMSTREAM_REPLICATION_FACTOR": "3", "CLAIMSTREAM_MIN_INSYNC_REPLICAS": "2"}
    )
    assert (replicated.replication_factor, replicated.min_insync_replicas) == (3, 2)
    with pytest.raises(ClaimstreamError, match="no write could succeed"):
        load_settings(env={"CLAIMSTREAM_MIN_INSYNC_REPLICAS": "2"})
