"""Confluent's own client against a real worker: claims framed by confluent-kafka's
`AvroSerializer` (auto-registering, looking up, or pinned to the latest version) and placed by
librdkafka's partitioners are each decided once, on their key's own partition; decisions read
with `AvroDeserializer`. The schema registry is the dev kit's server."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from streams.core.keys.state import state_key
from streams.core.reading.replay import replay
from streams.core.records.contracts import Claim
from streams.core.records.policy import load_policy
from streams.devkit.brokers import KafkaBroker
from streams.devkit.registry_server import RegistryServer, serve_registry
from streams.pipeline.rekey import partition_of
from streams.wire.codec import expanded_schema, to_avro
from streams.wire.registry import FolderRegistry
from tests.stream.support import (
    Deployment,
    changelog_partitions,
    crc32_partition,
    metric_sum,
    warm_up,
)

pytestmark = pytest.mark.integration

SUBJECTS = [f"interop-{n}" for n in range(16)]
# Each key gets one claim from each producer: (source, value) per field, in producer order.
SOURCES = {
    "order.payment_status": [
        ("billing-api", "paid"),
        ("reporting-replica", "unpaid"),
        ("ledger-service", "paid"),
    ],
    "api.latency": [("apm-agent", 120.0), ("synthetic-probe", 120.3), ("chat", 150.0)],
}
# How each producer is configured, as teams commonly run them: the serializer's registration
# mode and librdkafka's partitioner (None: its default, `consistent_random`, CRC32 of the key).
PRODUCERS = [
    ("auto-register", {"auto.register.schemas": True}, None),
    ("lookup", {"auto.register.schemas": False}, "murmur2_random"),
    (
        "latest-version",
        {"auto.register.schemas": False, "use.latest.version": True},
        "murmur2_random",
    ),
]


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[RegistryServer]:
    server, thread = serve_registry("127.0.0.1", 0, FolderRegistry(), tmp_path / "registry.json")
    yield server
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def claims_by_producer(now: datetime) -> list[list[Claim]]:
    batches: list[list[Claim]] = [[] for _ in PRODUCERS]
    for subject in SUBJECTS:
        for field_name, observations in SOURCES.items():
            for index, (source, value) in enumerate(observations):
                batches[index].append(
                    Claim(
                        claim_id=f"{subject}-{field_name}-{index}",
                        subject=subject,
                        field=field_name,
                        status="present",
                        value=value,
                        unit="ms" if field_name == "api.latency" else None,
                        source=source,
                        observed_at=now - timedelta(seconds=index),
                    )
                )
    return batches


def publish(
    bootstrap: str,
    registry_url: str,
    topic: str,
    claims: list[Claim],
    serializer_conf: dict[str, Any],
    partitioner: str | None,
) -> dict[bytes, int]:
    """Send `claims` as a librdkafka producer with Confluent's serializer: key -> partition."""
    serializer = AvroSerializer(
        SchemaRegistryClient({"url": registry_url}),
        json.dumps(expanded_schema("Claim")),
        lambda claim, _ctx: to_avro(claim),
        conf=serializer_conf,
    )
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "acks": "all"}
    if partitioner is not None:
        conf["partitioner"] = partitioner
    producer = Producer(conf)
    placed: dict[bytes, int] = {}
    failures: list[str] = []

    def delivered(error: Any, message: Any) -> None:
        if error is not None:
            failures.append(str(error))
        else:
            placed[message.key()] = message.partition()

    context = SerializationContext(topic, MessageField.VALUE)
    for claim in claims:
        key = state_key(claim.subject, claim.field).encode()
        producer.produce(topic, serializer(claim, context), key, on_delivery=delivered)
    assert producer.flush(30) == 0
    assert not failures, failures[:3]
    assert len(placed) == len(claims)
    return placed


def follow_decisions(
    bootstrap: str, registry_url: str, topic: str, expected: dict[tuple[str, str], str]
) -> tuple[dict[tuple[str, str], dict[str, Any]], list[tuple[bytes, int]], list[str]]:
    """Read decisions with Confluent's deserializer until every key's latest is the expected one:
    (latest decision per key, (key, partition) of every decision record, consumer errors)."""
    deserializer = AvroDeserializer(SchemaRegistryClient({"url": registry_url}))
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"interop-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    placed: list[tuple[bytes, int]] = []
    errors: list[str] = []
    context = SerializationContext(topic, MessageField.VALUE)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                if message is not None:
                    errors.append(str(message.error()))
                if all(latest.get(k, {}).get("decision_id") == v for k, v in expected.items()):
                    break
                continue
            decision = deserializer(message.value(), context)
            latest[(decision["subject"], decision["field"])] = decision
            placed.append((message.key(), message.partition()))
    finally:
        consumer.close()
    return latest, placed, errors


def test_confluent_clients_claims_are_decided_once_on_their_owner_partition(
    kafka: KafkaBroker, deployment_factory: Any, registry: RegistryServer
) -> None:
    deployment: Deployment = deployment_factory(kafka.bootstrap, schema_registry=registry.url)
    topic, partitions = deployment.topics.claims, deployment.partitions
    worker = deployment.worker().start()
    try:
        warm_up(kafka.bootstrap, deployment)  # the worker owns its partitions: one warm-up key
        batches = claims_by_producer(datetime.now(UTC))
        # In this order: the lookup and latest-version producers need the subject registered.
        placements = [
            publish(kafka.bootstrap, registry.url, topic, batch, conf, partitioner)
            for batch, (_, conf, partitioner) in zip(batches, PRODUCERS, strict=True)
        ]
        # librdkafka placed the records as its partitioners are documented to.
        crc_placed, *murmur_placed = placements
        assert crc_placed == {k: crc32_partition(k, partitions) for k in crc_placed}
        for placed in murmur_placed:
            assert placed == {k: partition_of(k, partitions) for k in placed}
        misplaced = sum(1 for k, p in crc_placed.items() if p != partition_of(k, partitions))
        assert misplaced > 0

        claims = [claim for batch in batches for claim in batch]
        policy = load_policy(deployment.policy)
        lines = (claim.model_dump_json() for claim in claims)
        expected = {
            (d.subject, d.field): d.decision_id
            for d in replay(lines, policy, datetime.now(UTC)).decisions
        }
        assert len(expected) == len(SUBJECTS) * len(SOURCES)
        latest, decision_records, errors = follow_decisions(
            kafka.bootstrap, registry.url, deployment.topics.decisions, expected
        )
        decided = {k: latest[k]["decision_id"] for k in expected if k in latest}
        assert decided == expected, (errors[:5], worker.log_tail())
        assert all(p == partition_of(k, partitions) for k, p in decision_records)

        metrics = worker.get("/metrics")
        # Each claim decided exactly once: accepted once, moved once when CRC32 placed it
        # elsewhere, and every key's state journaled on its own partition only.
        assert metric_sum(metrics, "claimstream_claims_accepted_total") == len(claims) + 1
        assert metric_sum(metrics, 'claimstream_rekey_hops_total{cause="partition"}') == misplaced
        assert metric_sum(metrics, 'claimstream_rekey_hops_total{cause="key"}') == 0
        journaled = changelog_partitions(kafka.bootstrap, deployment)
        keys = [state_key(s, f).encode() for s, f in expected]
        assert set(keys) <= set(journaled)
        assert journaled == {k: {partition_of(k, partitions)} for k in journaled}
        # One schema lineage: all three serializer modes resolved to the same version.
        client = SchemaRegistryClient({"url": registry.url})
        assert client.get_versions(f"{topic}-value") == [1]
        print(
            f"interop[claimstream registry]: {len(claims)} claims from 3 librdkafka producers, "
            f"{misplaced} placed off their key's partition by CRC32 and moved once, "
            f"{len(decision_records)} decisions decoded with AvroDeserializer"
        )
    finally:
        worker.stop()
    assert "Traceback" not in worker.log_tail(400), worker.log_tail()
