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

from streams.core.contracts import Claim, Decision
from streams.core.keystate import state_key
from streams.devkit import registry_server
from streams.devkit.brokers import KafkaBroker
from streams.registry import FolderRegistry, WireCodec
from tests.stream.conftest import write_policy
from tests.stream.support import Deployment, read_topic

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


def test_a_claim_whose_escalation_cannot_be_encoded_reloads_its_task_and_is_dead_lettered(
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
        # third claim arrives, which escalates it.
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
        assert "reloads from its changelog" in worker.log_path.read_text()
    finally:
        worker.stop()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
