"""A worker whose schema registry fails while a claim's escalation is encoded, on real brokers:
the task is reloaded from its changelog and its batch read again, nothing of the failed batch
is sent twice, and the claim is dead-lettered, not applied."""

from __future__ import annotations

import asyncio
import random
import time
import urllib.parse
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from http import HTTPStatus
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from streams.core.keys.state import state_key
from streams.core.records.contracts import Claim, Decision
from streams.devkit import registry_server
from streams.devkit.brokers import KafkaBroker
from streams.wire.registry import FolderRegistry, WireCodec
from tests.stream.support import Deployment, read_topic, write_policy

CODEC = WireCodec(FolderRegistry())


def _failing(subject: str, failures: int) -> type[registry_server._Handler]:
    """The registry's handler, answering 503 to the first `failures` requests about `subject`."""
    path = f"/subjects/{urllib.parse.quote(subject, safe='')}"
    failed = [0]

    class Failing(registry_server._Handler):
        def _dispatch(self, method: str) -> None:
            if self.path.startswith(path) and failed[0] < failures:
                failed[0] += 1
                self._reply(HTTPStatus.SERVICE_UNAVAILABLE, {"error_code": 50301, "message": ""})
                return
            super()._dispatch(method)

    return Failing


async def _produce(
    bootstrap: str, topic: str, records: Iterable[tuple[bytes, bytes, float]]
) -> None:
    """(key, value, timestamp) records, sent in one go."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=50, acks="all")
    await producer.start()
    try:
        futures = [
            await producer.send(topic, value, key=key, timestamp_ms=int(at * 1000))
            for key, value, at in records
        ]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


def _claim(n: int, value: str, source: str, at: datetime) -> Claim:
    return Claim(
        claim_id=f"e{n}-{random.random()}",
        subject="inv:emit",
        field="order.payment_status",
        status="present",
        value=value,
        source=source,
        observed_at=at - timedelta(seconds=1),
    )


def test_a_claim_whose_escalation_cannot_be_encoded_is_dead_lettered_and_time_escalates_later(
    kafka: KafkaBroker, tmp_path: Path
) -> None:
    server, thread = registry_server.serve_registry("127.0.0.1", 0, FolderRegistry())
    policy = write_policy(
        tmp_path / "policy.yaml",
        **{"order.payment_status": {"freshness": "1h", "escalate_after": "5m"}},
    )
    deployment = Deployment(
        bootstrap=kafka.bootstrap, workdir=tmp_path, policy=policy, schema_registry=server.url
    )
    topics = deployment.topics
    # Every attempt at the escalation fails (the worker retries each record three times).
    server.RequestHandlerClass = _failing(f"{topics.escalations}-value", 3)
    worker = deployment.worker().start()
    try:
        now = datetime.now(UTC)
        opened = now - timedelta(minutes=20)
        # Paid and overdue from two systems of record: a conflict open for 20 minutes when the
        # third claim arrives; the key's escalation timer fires first, on a copy of its state.
        claims = [
            (_claim(1, "paid", "billing-api", opened), opened),
            (_claim(2, "overdue", "billing-export", opened), opened),
            (_claim(3, "paid", "billing-api", now), now),
        ]
        key = state_key("inv:emit", "order.payment_status").encode()
        values = [CODEC.encode(topics.claims, c) for c, _ in claims]
        asyncio.run(
            _produce(
                kafka.bootstrap,
                topics.claims,
                [
                    (key, value, at.timestamp())
                    for value, (_, at) in zip(values, claims, strict=True)
                ],
            )
        )
        escalations: list[Any] = []
        deadline = time.monotonic() + 90
        while not escalations and time.monotonic() < deadline:
            escalations = asyncio.run(
                read_topic(kafka.bootstrap, topics.escalations, idle_s=1, max_s=3)
            )
        # The key's timer escalates it once the registry answers again, without the third claim.
        (escalation,) = escalations
        escalated = CODEC.decode(Decision, escalation.value)
        first, second = (c.claim_id for c, _ in claims[:2])
        assert {e.claim_id for e in escalated.evidence} == {first, second}

        (letter,) = asyncio.run(read_topic(kafka.bootstrap, topics.dead_letters, idle_s=1))
        headers = {name: value.decode() for name, value in letter.headers}
        assert (letter.key, letter.value) == (key, values[2])
        assert headers["claimstream.error.reason"] == "processing_failed"
        assert "escalations-value failed with HTTP 503" in headers["claimstream.error.detail"]
        assert headers["claimstream.error.attempts"] == "3"
        # The failed batch sent nothing: each decision once, made when the batch was read again.
        decisions = asyncio.run(read_topic(kafka.bootstrap, topics.decisions, idle_s=1))
        outcomes = [CODEC.decode(Decision, d.value).outcome for d in decisions]
        assert outcomes == ["resolved", "conflict"]

        quoted = urllib.parse.quote(key.decode(), safe="")
        current = worker.get(f"/api/decisions/{quoted}")
        assert {e["claim_id"] for e in current["decision"]["evidence"]} == {first, second}
        # Nothing had changed the key's state in place when the records failed: no reload.
        assert "reloads from its changelog" not in worker.log_path.read_text()
    finally:
        worker.stop()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


async def _topic_overrides(bootstrap: str, topic: str) -> dict[str, str]:
    """The topic's own configs (not the broker's defaults)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        (described,) = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic)]
        )
    finally:
        await admin.close()
    entries = described.resources[0][4]
    # (name, value, read_only, config_source, is_sensitive, synonyms); 1: the topic's own
    return {name: value for name, value, _, source, *_ in entries if source == 1}


async def _set_topic_configs(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    """Replace the topic's own configs with `configs` (AlterConfigs sets them all at once)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        (response,) = await admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, configs=configs)]
        )
    finally:
        await admin.close()
    assert all(code == 0 for code, *_ in response.resources), response


def test_claims_whose_decisions_the_broker_refuses_are_dead_lettered_and_nothing_is_lost(
    kafka: KafkaBroker, tmp_path: Path
) -> None:
    """At least once, a batch whose decisions the broker refuses for good (larger than the
    decisions topic takes) while it would take the batch's changelog records is rewound, and
    its records isolated (`arbiter.isolation`): each claim whose decision is refused is
    dead-lettered `processing_failed` with the broker's error, undecided, and none is lost: once
    the broker takes decisions again, every claim is in a decision's evidence or on the
    dead-letter topic. The changelog never held a claim whose outputs were not acknowledged,
    or a dead-lettered claim would count in a later decision."""
    policy = write_policy(tmp_path / "policy.yaml")
    deployment = Deployment(bootstrap=kafka.bootstrap, workdir=tmp_path, policy=policy)
    topics = deployment.topics
    worker = deployment.worker().start()
    try:
        overrides = asyncio.run(_topic_overrides(kafka.bootstrap, topics.decisions))
        refusing = overrides | {"max.message.bytes": "64"}
        asyncio.run(_set_topic_configs(kafka.bootstrap, topics.decisions, refusing))
        now = datetime.now(UTC)
        # Per key, a claim and a newer one from the same source: two decisions.
        claims = [
            Claim(
                claim_id=f"refused-{n}-{value}",
                subject=f"inv:refused-{n}",
                field="order.payment_status",
                status="present",
                value=value,
                source="billing-api",
                observed_at=now - timedelta(seconds=age),
            )
            for n in range(20)
            for value, age in (("paid", 2), ("overdue", 1))
        ]
        asyncio.run(
            _produce(
                kafka.bootstrap,
                topics.claims,
                [
                    (
                        state_key(c.subject, c.field).encode(),
                        CODEC.encode(topics.claims, c),
                        now.timestamp(),
                    )
                    for c in claims
                ],
            )
        )
        deadline = time.monotonic() + 60
        while "failed to commit" not in worker.log_path.read_text() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert "failed to commit" in worker.log_path.read_text()
        # The broker refuses until a claim is dead-lettered for it (the batch rewound and its
        # records isolated, each retried first): a fixed wait can end before, on a busy machine.
        deadline = time.monotonic() + 60
        while not _refused(kafka.bootstrap, topics.dead_letters) and time.monotonic() < deadline:
            time.sleep(0.5)
        asyncio.run(_set_topic_configs(kafka.bootstrap, topics.decisions, overrides))
        every = {c.claim_id for c in claims}
        accounted: set[str] = set()
        deadline = time.monotonic() + 90
        while accounted != every and time.monotonic() < deadline:
            records = asyncio.run(read_topic(kafka.bootstrap, topics.decisions, idle_s=1))
            decided = {
                e.claim_id for r in records for e in CODEC.decode(Decision, r.value).evidence
            }
            refused = _refused(kafka.bootstrap, topics.dead_letters)
            accounted = decided | refused
        assert sorted(every - accounted) == []
        assert refused, "the broker refused decisions, and no claim says so"
        # A dead-lettered claim never counts: no decision names it as evidence.
        assert not refused & decided, sorted(refused & decided)
    finally:
        worker.stop()


def _refused(bootstrap: str, dead_letters: str) -> set[str]:
    """The claims dead-lettered because the broker refused their decision for its size."""
    letters = asyncio.run(read_topic(bootstrap, dead_letters, idle_s=1))
    return {
        CODEC.decode(Claim, r.value).claim_id
        for r in letters
        if b"MessageSizeTooLarge" in dict(r.headers).get("claimstream.error.detail", b"")
    }
