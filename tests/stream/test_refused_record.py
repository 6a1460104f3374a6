"""No record wedges a partition: a claim whose decision the broker refuses for good is found and
dead-lettered with the broker's error, its task reads on, and no other key is held back or sent
again, under both guarantees, on Apache Kafka.

The decisions topic accepts records of at most 1,500 bytes. One key gathers claims until its
decision (which repeats every kept claim as evidence) passes that; forty ordinary keys, on every
partition, get one claim each. Then every ordinary key has replay's decision, once (at least
once: repeats of it only), each claim of the heavy key is in a decision's evidence or on the
dead-letter topic as `processing_failed` naming the broker's error, every input partition's
committed offset reaches its end, and the worker is ready.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaError

from streams.core.keys.state import state_key
from streams.core.reading.replay import replay
from streams.core.records.contracts import Claim, Decision
from streams.core.records.policy import load_policy
from streams.devkit.brokers import KafkaBroker
from tests.stream.support import CODEC, Deployment, produce, read_topic, write_policy

LIMIT = 1500  # bytes: the decisions topic's max.message.bytes
HEAVY = ("contract:heavy", "contract.seats")


async def _limit(bootstrap: str, topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        config = {"max.message.bytes": str(LIMIT)}
        await admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, config)])
    finally:
        await admin.close()


def _claims(now: datetime) -> tuple[list[Claim], list[Claim]]:
    """The heavy key's claims (a new seat count each, from a stream of crm replicas), and one
    claim for each ordinary key."""
    heavy = [
        Claim(
            claim_id=f"heavy-{n}",
            subject=HEAVY[0],
            field=HEAVY[1],
            status="present",
            value=10 + n,
            source="crm",
            replica=f"crm-replica-{n:02d}-" + "r" * 60,
            observed_at=now + timedelta(milliseconds=n),
        )
        for n in range(14)
    ]
    ordinary = [
        Claim(
            claim_id=f"plain-{n}",
            subject=f"invoice:{n}",
            field="order.payment_status",
            status="present",
            value="paid",
            source="billing-api",
            observed_at=now,
        )
        for n in range(40)
    ]
    return heavy, ordinary


async def _committed_to_end(bootstrap: str, group: str, topic: str, partitions: int) -> bool:
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await admin.start()
    await consumer.start()
    try:
        ends = await consumer.end_offsets(tps)
        committed = await admin.list_consumer_group_offsets(group, partitions=tps)
        return all(committed[tp].offset == ends[tp] for tp in tps if ends[tp] > 0)
    except KafkaError:  # the group not there yet
        return False
    finally:
        await consumer.stop()
        await admin.close()


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_a_claim_whose_decision_the_broker_refuses_is_dead_lettered_and_nothing_else_waits(
    kafka: KafkaBroker, tmp_path: Path, guarantee: str
) -> None:
    deployment = Deployment(
        bootstrap=kafka.bootstrap,
        workdir=tmp_path / "worker",
        policy=write_policy(tmp_path / "policy.yaml"),
        guarantee=guarantee,
        settings={"task_stall_timeout_s": "5", "lag_interval_s": "0.5"},
    )
    worker = deployment.worker(0)
    heavy, ordinary = _claims(datetime.now(UTC))
    topics = deployment.topics
    try:
        worker.start()
        asyncio.run(_limit(kafka.bootstrap, topics.decisions))
        records = [
            (state_key(c.subject, c.field).encode(), CODEC.encode(topics.claims, c), [])
            for c in [*heavy, *ordinary]
        ]
        asyncio.run(produce(kafka.bootstrap, topics.claims, records))
        group = f"{deployment.name}-arbiter"
        deadline = time.monotonic() + 90
        while not asyncio.run(
            _committed_to_end(kafka.bootstrap, group, topics.claims, deployment.partitions)
        ):
            assert time.monotonic() < deadline, worker.log_tail(60)
            time.sleep(1)
        isolation = "read_committed" if guarantee == "exactly_once" else "read_uncommitted"
        decisions = [
            CODEC.decode(Decision, r.value)
            for r in asyncio.run(read_topic(kafka.bootstrap, topics.decisions, idle_s=2,
                                            isolation_level=isolation))
        ]  # fmt: skip
        letters = asyncio.run(read_topic(kafka.bootstrap, topics.dead_letters, idle_s=2))
        ready = worker.get("/readyz")
    finally:
        worker.stop()
    expected = replay([c.model_dump_json() for c in ordinary], load_policy(deployment.policy),
                      datetime.now(UTC))  # fmt: skip
    by_key: dict[tuple[str, str], list[str]] = {}
    for decision in decisions:
        by_key.setdefault((decision.subject, decision.field), []).append(decision.decision_id)
    for want in expected.decisions:
        sent = by_key.get((want.subject, want.field), [])
        assert set(sent) == {want.decision_id}, (want.subject, sent)
        if guarantee == "exactly_once":
            assert len(sent) == 1, (want.subject, sent)
    refused = [
        r
        for r in letters
        if dict(r.headers).get("claimstream.error.reason") == b"processing_failed"
    ]
    assert refused, "no claim was refused: the limit let every decision through"
    details = [dict(r.headers)["claimstream.error.detail"].decode() for r in refused]
    assert all("MessageSizeTooLarge" in detail for detail in details), details
    dead = {CODEC.decode(Claim, r.value).claim_id for r in refused}
    evidenced = {e.claim_id for d in decisions if (d.subject, d.field) == HEAVY for e in d.evidence}
    assert {c.claim_id for c in heavy} <= dead | evidenced, (dead, evidenced)
    assert ready is not None, worker.log_tail()
    assert ready["status"] == "ok", ready
    print(
        f"refused[{guarantee}]: heavy claims dead-lettered={len(dead)} decisions={len(decisions)}"
    )
