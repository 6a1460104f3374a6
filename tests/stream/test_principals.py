"""Source authenticity by Kafka principal, end to end: SCRAM logins, ACLs, and the worker
refusing a source published under the wrong principal."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import TopicAuthorizationFailedError

from streams.core.keys.state import state_key
from streams.core.records.contracts import Claim, Decision
from streams.devkit.brokers import KafkaBroker
from tests.stream.support import CODEC, REPO, Deployment

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def secured() -> Iterator[KafkaBroker]:
    users = {"alice": secrets.token_urlsafe(12), "mallory": secrets.token_urlsafe(12)}
    with KafkaBroker(partitions=4, scram_users=users, acls=True) as broker:
        yield broker


async def send(broker: KafkaBroker, user: str, topic: str, claim: Claim) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=broker.bootstrap, request_timeout_ms=8000, **broker.client_security(user)
    )
    await producer.start()
    try:
        key = state_key(claim.subject, claim.field).encode()
        await producer.send_and_wait(topic, CODEC.encode(topic, claim), key=key)
    finally:
        await producer.stop()


async def read(broker: KafkaBroker, topic: str, want: int, timeout_s: float = 60) -> list[Any]:
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=broker.bootstrap,
        auto_offset_reset="earliest",
        **broker.client_security("admin"),
    )
    await consumer.start()
    got: list[Any] = []
    try:
        deadline = time.monotonic() + timeout_s
        while len(got) < want and time.monotonic() < deadline:
            for messages in (await consumer.getmany(timeout_ms=500)).values():
                got.extend(messages)
    finally:
        await consumer.stop()
    return got


def test_a_source_is_accepted_only_from_its_principal(secured: KafkaBroker, tmp_path: Path) -> None:
    policy_data = yaml.safe_load((REPO / "examples" / "policy.yaml").read_text())
    policy_data["sources"]["billing-api"]["principal"] = "alice"
    policy_data["sources"]["crm"]["principal"] = "mallory"  # mallory may speak only for crm
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(policy_data))
    deployment = Deployment(bootstrap=secured.bootstrap, workdir=tmp_path, policy=policy)
    prefix = f"{deployment.name}.claims.from."
    admin = secured.client_security("admin")
    worker = deployment.worker()
    original_env = deployment.env

    def env(web_port: int, data_dir: Path) -> dict[str, str]:
        values = original_env(web_port, data_dir)
        values.update(
            {
                "CLAIMSTREAM_PRINCIPAL_TOPIC_PREFIX": prefix,
                "CLAIMSTREAM_SECURITY_PROTOCOL": admin["security_protocol"],
                "CLAIMSTREAM_SASL_MECHANISM": admin["sasl_mechanism"],
                "CLAIMSTREAM_SASL_USERNAME": admin["sasl_plain_username"],
                "CLAIMSTREAM_SASL_PASSWORD": admin["sasl_plain_password"],
            }
        )
        return values

    deployment.env = env  # type: ignore[method-assign]
    worker.start()
    try:
        secured.allow("alice", "WRITE", f"{prefix}alice")
        secured.allow("mallory", "WRITE", f"{prefix}mallory")
        now = datetime.now(UTC)
        honest = Claim(
            claim_id="a-1",
            subject="inv:77",
            field="order.payment_status",
            status="present",
            value="paid",
            source="billing-api",
            observed_at=now,
        )
        spoofed = honest.model_copy(update={"claim_id": "m-1", "value": "refunded"})
        asyncio.run(send(secured, "alice", f"{prefix}alice", honest))
        with pytest.raises(TopicAuthorizationFailedError):
            asyncio.run(send(secured, "mallory", f"{prefix}alice", spoofed))
        asyncio.run(send(secured, "mallory", f"{prefix}mallory", spoofed))

        decisions = [
            CODEC.decode(Decision, m.value)
            for m in asyncio.run(read(secured, deployment.topics.decisions, 1))
        ]
        assert [(d.outcome, d.value) for d in decisions] == [("resolved", "paid")]
        (dead,) = asyncio.run(read(secured, deployment.topics.dead_letters, 1))
        headers = {k: v.decode() for k, v in dead.headers}
        assert headers["claimstream.error.reason"] == "unauthenticated"
        detail = headers["claimstream.error.detail"]
        assert detail.startswith(
            "spoofed source: 'billing-api' publishes only as principal 'alice'"
        )
        assert detail.endswith(f"not on {prefix}mallory")
        logs = worker.log_tail(400)
        assert admin["sasl_plain_password"] not in logs  # secrets never logged
    finally:
        worker.stop()
