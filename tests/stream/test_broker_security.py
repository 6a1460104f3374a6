"""Kafka principals on a real Apache Kafka broker: SCRAM proves who publishes, ACLs decide where.

One SCRAM-SHA-256 + StandardAuthorizer broker serves the whole module: alice may write
`claims.from.alice`; mallory is a valid user with no ACL; admin is the only super user.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import stat
from collections.abc import Iterator

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaConnectionError, TopicAuthorizationFailedError

from streams.devkit.brokers import KafkaBroker
from streams.devkit.brokers.probe import acl_visible

pytestmark = pytest.mark.integration

TOPIC = "claims.from.alice"
TOPIC_AUTHORIZATION_FAILED = 29


async def _create_topic(broker: KafkaBroker, user: str, topic: str) -> int:
    """The CreateTopics error code for `topic` (0 = created)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap, **broker.client_security(user))
    await admin.start()
    try:
        response = await admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        await admin.close()
    ((name, error_code, _message),) = response.topic_errors
    assert name == topic
    return int(error_code)


async def _produce(bootstrap: str, topic: str, value: bytes, **security: str) -> int:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=5000, **security)
    await producer.start()
    try:
        return int((await producer.send_and_wait(topic, value)).offset)
    finally:
        await producer.stop()


async def _read_all(broker: KafkaBroker, topic: str, n: int) -> list[bytes]:
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=broker.bootstrap,
        auto_offset_reset="earliest",
        group_id=None,
        **broker.client_security("admin"),
    )
    await consumer.start()
    got: list[bytes] = []
    try:
        for _ in range(40):
            batches = await consumer.getmany(timeout_ms=250)
            got += [r.value for recs in batches.values() for r in recs if r.value is not None]
            if len(got) >= n:
                break
    finally:
        await consumer.stop()
    return got


@pytest.fixture(scope="module")
def secure_kafka() -> Iterator[KafkaBroker]:
    users = {"alice": secrets.token_urlsafe(16), "mallory": secrets.token_urlsafe(16)}
    with KafkaBroker(partitions=1, scram_users=users, acls=True) as broker:
        yield broker


@pytest.fixture(scope="module")
def alice_topic(secure_kafka: KafkaBroker) -> str:
    assert asyncio.run(_create_topic(secure_kafka, "admin", TOPIC)) == 0
    secure_kafka.allow("alice", "Write", TOPIC)
    return TOPIC


async def test_alice_produces_to_her_topic(secure_kafka: KafkaBroker, alice_topic: str) -> None:
    security = secure_kafka.client_security("alice")
    await _produce(secure_kafka.bootstrap, alice_topic, b"from alice", **security)
    assert b"from alice" in await _read_all(secure_kafka, alice_topic, 1)


async def test_mallory_is_not_authorized(secure_kafka: KafkaBroker, alice_topic: str) -> None:
    """mallory logs in fine (a real user) but no ACL lets her publish as alice."""
    security = secure_kafka.client_security("mallory")
    with pytest.raises(TopicAuthorizationFailedError):
        await _produce(secure_kafka.bootstrap, alice_topic, b"spoofed by mallory", **security)
    assert b"spoofed by mallory" not in await _read_all(secure_kafka, alice_topic, 1)


async def test_alice_may_not_read_what_she_may_write(
    secure_kafka: KafkaBroker, alice_topic: str
) -> None:
    consumer = AIOKafkaConsumer(
        alice_topic,
        bootstrap_servers=secure_kafka.bootstrap,
        auto_offset_reset="earliest",
        group_id=None,
        **secure_kafka.client_security("alice"),
    )

    async def poll() -> None:
        for _ in range(20):
            await consumer.getmany(timeout_ms=250)

    await consumer.start()
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            await poll()
    finally:
        await consumer.stop()


@pytest.mark.parametrize("user", ["alice", "nobody"])
async def test_a_wrong_password_never_logs_in(
    secure_kafka: KafkaBroker, user: str, caplog: pytest.LogCaptureFixture
) -> None:
    security = secure_kafka.client_security("alice") | {
        "sasl_plain_username": user,
        "sasl_plain_password": "not-" + secrets.token_urlsafe(8),
    }
    with caplog.at_level(logging.ERROR, logger="aiokafka"), pytest.raises(KafkaConnectionError):
        await _produce(secure_kafka.bootstrap, TOPIC, b"intruder", **security)
    assert "SaslAuthenticationFailed" in caplog.text


async def test_a_plaintext_client_is_refused(secure_kafka: KafkaBroker) -> None:
    with pytest.raises(KafkaConnectionError):
        await _produce(secure_kafka.bootstrap, TOPIC, b"anonymous")


async def test_admin_creates_topics_and_users_cannot(secure_kafka: KafkaBroker) -> None:
    assert await _create_topic(secure_kafka, "admin", "claims.created-by-admin") == 0
    code = await _create_topic(secure_kafka, "mallory", "claims.created-by-mallory")
    assert code == TOPIC_AUTHORIZATION_FAILED


def test_allow_validates_its_arguments(secure_kafka: KafkaBroker) -> None:
    with pytest.raises(ValueError, match="operation"):
        secure_kafka.allow("alice", "Steal", TOPIC)
    with pytest.raises(ValueError, match="principal"):
        secure_kafka.allow("Group:x y", "Write", TOPIC)
    with pytest.raises(ValueError, match="topic"):
        secure_kafka.allow("alice", "Write", "no spaces allowed")
    with pytest.raises(ValueError, match="no SCRAM user 'eve'"):
        secure_kafka.client_security("eve")


def test_allow_grants_many_operations_on_consumer_groups(secure_kafka: KafkaBroker) -> None:
    with pytest.raises(ValueError, match="group"):
        secure_kafka.allow("alice", "Read", groups=["no spaces allowed"])
    with pytest.raises(ValueError, match="needs an operation"):
        secure_kafka.allow("alice", [], TOPIC)
    secure_kafka.allow("alice", ["Read", "Describe"], groups=["alice-readers"])
    admin = (secure_kafka.admin_user, secure_kafka.client_security()["sasl_plain_password"])
    for operation in ("read", "describe"):
        assert acl_visible(
            secure_kafka.port, admin, "User:alice", operation, ("group", "alice-readers")
        )
    assert not acl_visible(
        secure_kafka.port, admin, "User:alice", "read", ("topic", "alice-readers")
    )


def test_passwords_stay_out_of_logs_and_world_readable_files(secure_kafka: KafkaBroker) -> None:
    passwords = [
        secure_kafka.client_security(user)["sasl_plain_password"]
        for user in ("admin", "alice", "mallory")
    ]
    for log in (secure_kafka.log_path, secure_kafka.data_dir / "admin.log"):
        text = log.read_text(errors="replace")
        assert text  # the check means nothing on an empty file
        assert not [p for p in passwords if p in text], f"a password leaked into {log.name}"
    for name in ("server.properties", "admin-client.properties", "admin.secret"):
        mode = stat.S_IMODE(os.stat(secure_kafka.data_dir / name).st_mode)
        assert mode == 0o600, f"{name} is {oct(mode)}"
    assert secure_kafka.admin_password is not None
    assert secure_kafka.admin_password not in repr(secure_kafka)


def test_unsecured_broker_has_no_sasl_settings() -> None:
    broker = KafkaBroker()
    try:
        assert broker.security_protocol == "PLAINTEXT"
        with pytest.raises(RuntimeError, match="without scram_users or acls"):
            broker.client_security("admin")
        with pytest.raises(RuntimeError, match="acls=True"):
            broker.allow("alice", "Write", TOPIC)
    finally:
        broker.close()


def test_reserved_and_unsafe_user_names_are_refused() -> None:
    with pytest.raises(ValueError, match="reserved"):
        KafkaBroker(scram_users={"admin": "x"})
    with pytest.raises(ValueError, match="names and passwords"):
        KafkaBroker(scram_users={"alice": 'pass"word'})


async def test_restart_keeps_users_and_acls(secure_kafka: KafkaBroker, alice_topic: str) -> None:
    """Last in the module: the credentials and ACLs live in the metadata log on disk."""
    admin_password = secure_kafka.admin_password
    secure_kafka.restart()
    assert secure_kafka.admin_password == admin_password
    await _produce(
        secure_kafka.bootstrap,
        alice_topic,
        b"after restart",
        **secure_kafka.client_security("alice"),
    )
    with pytest.raises(TopicAuthorizationFailedError):
        await _produce(
            secure_kafka.bootstrap, alice_topic, b"x", **secure_kafka.client_security("mallory")
        )
