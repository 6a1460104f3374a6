"""Settings that size durability and group membership, and variables that name no setting."""

from __future__ import annotations

import logging

import pytest

from streams.core.records.errors import ClaimstreamError
from streams.settings import (
    load_settings,
    setting_variables,
    unknown_variables,
    warn_unknown_variables,
)
from streams.wire.registry import HttpRegistry, registry_for
from streams.worker.app import faust_settings


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


def test_an_unknown_variable_is_reported_with_the_closest_setting(
    caplog: pytest.LogCaptureFixture,
) -> None:
    env = {
        "CLAIMSTREAM_WEB_PROT": "7000",  # a typo of CLAIMSTREAM_WEB_PORT, value never logged
        "CLAIMSTREAM_TOPIC_DECISONS": "mine.decisions",
        "CLAIMSTREAM_WEB_PORT": "6066",
        "CLAIMSTREAM_TOPIC_CLAIMS": "mine.claims",
        "CLAIMSTREAM_SETTINGS": "worker.yaml",
        "CLAIMSTREAM_BIND_ADDRESS": "0.0.0.0",  # docker-compose's, not the worker's
        "OTHER_WEB_PROT": "1",
    }
    assert unknown_variables(env) == [
        ("CLAIMSTREAM_TOPIC_DECISONS", "CLAIMSTREAM_TOPIC_DECISIONS"),
        ("CLAIMSTREAM_WEB_PROT", "CLAIMSTREAM_WEB_PORT"),
    ]
    with caplog.at_level(logging.WARNING, logger="streams.settings"):
        warn_unknown_variables(env)
    messages = [record.getMessage() for record in caplog.records]
    assert messages == [
        "CLAIMSTREAM_TOPIC_DECISONS is not a setting and is ignored; the closest setting is "
        "CLAIMSTREAM_TOPIC_DECISIONS",
        "CLAIMSTREAM_WEB_PROT is not a setting and is ignored; the closest setting is "
        "CLAIMSTREAM_WEB_PORT",
    ]
    assert "7000" not in caplog.text
    assert "mine.decisions" not in caplog.text


def test_every_setting_and_topic_has_its_variable() -> None:
    variables = setting_variables()
    assert "CLAIMSTREAM_SASL_PASSWORD" in variables
    assert "CLAIMSTREAM_TOPIC_OUTCOMES" in variables
    assert unknown_variables(dict.fromkeys(variables, "x")) == []


SECRETS = {
    "CLAIMSTREAM_SCHEMA_REGISTRY": "https://registry.example.test:8081",
    "CLAIMSTREAM_SCHEMA_REGISTRY_USERNAME": "svc",
    "CLAIMSTREAM_SCHEMA_REGISTRY_PASSWORD": "registry-s3cret",
    "CLAIMSTREAM_SASL_PASSWORD": "sasl-s3cret",
    "CLAIMSTREAM_STEWARD_TOKENS": "steward-token-s3cret-0001",
}


def test_credentials_are_secret_settings_never_printed(caplog: pytest.LogCaptureFixture) -> None:
    settings = load_settings(env=SECRETS)
    registry = registry_for(settings)
    assert isinstance(registry, HttpRegistry)
    assert registry._headers["Authorization"] == "Basic c3ZjOnJlZ2lzdHJ5LXMzY3JldA=="
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("streams").warning("settings: %s %r", settings, settings)
    printed = [repr(settings), str(settings), settings.model_dump_json(), caplog.text]
    for secret in ("registry-s3cret", "sasl-s3cret", "steward-token-s3cret-0001"):
        assert not [text for text in printed if secret in text], secret


def test_a_password_in_the_registry_url_is_refused_without_printing_it() -> None:
    with pytest.raises(ClaimstreamError, match="schema_registry_password") as refused:
        load_settings(env={"CLAIMSTREAM_SCHEMA_REGISTRY": "https://svc:url-s3cret@registry:8081"})
    assert "url-s3cret" not in str(refused.value)
    plain = load_settings(env={"CLAIMSTREAM_SCHEMA_REGISTRY": "http://schema-registry:8081"})
    assert plain.schema_registry == "http://schema-registry:8081"
