"""Claims too large to repeat never wedge a partition, on Apache Kafka with its default record
limit (`max.message.bytes` 1 MiB).

An upstream bug sends twelve claims on one key, each with a 150-200 KB replica; as many through
each other text a decision or a key's state repeats (scope, lineage, an attribute, trace_id,
producer, a string value). Beside them: a key whose claims are each within the bounds but
together pass its byte budget, and forty ordinary keys on every partition. Then every oversized
claim is on the dead-letter topic as `too_large` naming its field, every ordinary key has
replay's decision, the budgeted key decided each of its claims and said which it dropped, no
record the worker sent passes the limit, and every input partition's committed offset reaches
its end. Before the bounds, the first key's decision passed 1 MiB after a handful of claims and
its partition's commit failed for good.

A worker whose topics take smaller records than `max_record_bytes` refuses to start.
"""

from __future__ import annotations

import asyncio
import random
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError

from streams.core.keys.state import state_key
from streams.core.reading.replay import replay
from streams.core.records.contracts import Claim, Decision
from streams.core.records.policy import load_policy
from streams.devkit.brokers import KafkaBroker
from tests.stream.support import CODEC, Deployment, produce, read_topic, write_policy

LIMIT = 1_048_576  # max_record_bytes's default; Kafka's max.message.bytes is 1,048,588
ASTRAL = "\U0001f600"  # four bytes in UTF-8
# Each text a decision or a key's state repeats -> the claim fields that carry it, oversized.
OVERSIZED: dict[str, Any] = {
    "replica": lambda text: {"replica": text},
    "scope": lambda text: {"scope": text},
    "lineage": lambda text: {"lineage": text},
    "attribute 'note'": lambda text: {"attributes": {"note": text}},
    "trace_id": lambda text: {"trace_id": text},
    "producer": lambda text: {"producer": text},
    "the value": lambda text: {"field": "customer.shipping_address", "value": text},
}


def _claim(claim_id: str, subject: str, observed_at: datetime, **fields: Any) -> Claim:
    data: dict[str, Any] = {
        "claim_id": claim_id,
        "subject": subject,
        "field": "order.payment_status",
        "status": "present",
        "value": "paid",
        "source": "billing-api",
        "observed_at": observed_at,
    }
    return Claim.model_validate({**data, **fields})


def _oversized(now: datetime, rng: random.Random) -> dict[str, list[Claim]]:
    """Per field named as a dead letter names it: twelve claims on one key, each 150-200 KB."""
    return {
        name: [
            _claim(
                f"big-{n}-{name.split()[0]}",
                f"heavy:{name.split()[0]}",
                now + timedelta(milliseconds=n),
                **{"source": "crm", **carry("r" * rng.randint(150_000, 200_000))},
            )
            for n in range(12)
        ]
        for name, carry in OVERSIZED.items()
    }


def _budgeted(now: datetime) -> list[Claim]:
    """Twelve claims within every bound that weigh about 200 KB each in four-byte characters: a
    key keeps two of them (its byte budget, about 450 KB at the default bounds)."""
    return [
        _claim(
            f"full-{n:02d}",
            "customer:full",
            now + timedelta(milliseconds=n),
            field="customer.shipping_address",
            source="crm",
            value=f"{n:04d}" + ASTRAL * 4092,
            attributes={f"{i:03d}": ASTRAL * 1024 for i in range(32)},
        )
        for n in range(12)
    ]


async def _committed_to_end(bootstrap: str, group: str, topic: str, partitions: int) -> bool:
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await admin.start()
    await consumer.start()
    try:
        ends = await consumer.end_offsets(tps)
        committed = await admin.list_consumer_group_offsets(group, partitions=tps)
        return all(tp in committed and committed[tp].offset == ends[tp] for tp in tps)
    except KafkaError:  # the group not there yet
        return False
    finally:
        await consumer.stop()
        await admin.close()


def _sizes(records: list[Any]) -> list[int]:
    return [len(r.key or b"") + len(r.value or b"") for r in records]


def test_oversized_claims_are_dead_lettered_and_no_partition_is_stuck(
    kafka: KafkaBroker, tmp_path: Path
) -> None:
    rng = random.Random(7)
    now = datetime.now(UTC)
    oversized, budgeted = _oversized(now, rng), _budgeted(now)
    ordinary = [_claim(f"plain-{n}", f"invoice:{n}", now) for n in range(40)]
    deployment = Deployment(
        bootstrap=kafka.bootstrap,
        workdir=tmp_path / "worker",
        policy=write_policy(tmp_path / "policy.yaml"),
    )
    topics = deployment.topics
    claims = [*(c for heavy in oversized.values() for c in heavy), *budgeted, *ordinary]
    rng.shuffle(claims)
    in_order = iter(budgeted)  # the budgeted key's claims arrive newest last: each one wins
    claims = [next(in_order) if c.subject == "customer:full" else c for c in claims]
    worker = deployment.worker(0)
    try:
        worker.start()
        records = [
            (state_key(c.subject, c.field).encode(), CODEC.encode(topics.claims, c), [])
            for c in claims
        ]
        asyncio.run(produce(kafka.bootstrap, topics.claims, records))
        group = f"{deployment.name}-arbiter"
        deadline = time.monotonic() + 120
        while not asyncio.run(
            _committed_to_end(kafka.bootstrap, group, topics.claims, deployment.partitions)
        ):
            assert time.monotonic() < deadline, f"a partition is stuck:\n{worker.log_tail(60)}"
            time.sleep(1)
        decided = asyncio.run(read_topic(kafka.bootstrap, topics.decisions, idle_s=2))
        letters = asyncio.run(read_topic(kafka.bootstrap, topics.dead_letters, idle_s=2))
        changelog = asyncio.run(
            read_topic(kafka.bootstrap, f"{deployment.name}-key-state-changelog", idle_s=2)
        )
        assert worker.alive, worker.log_tail()
    finally:
        worker.stop()

    # Every oversized claim is dead-lettered too_large, naming the field it passed the bound in.
    why: dict[str, str] = {}
    for letter in letters:
        headers = {name: value.decode() for name, value in letter.headers}
        claim = CODEC.decode(Claim, letter.value)
        why[claim.claim_id] = (
            f"{headers['claimstream.error.reason']}: {headers['claimstream.error.detail']}"
        )
    for name, heavy in oversized.items():
        for claim in heavy:
            said = why.get(claim.claim_id, "")
            assert said.startswith("too_large: "), (claim.claim_id, said[:200])
            assert f"{name} is " in said, (claim.claim_id, said[:200])
    assert set(why) == {c.claim_id for heavy in oversized.values() for c in heavy}

    decisions = [CODEC.decode(Decision, r.value) for r in decided]
    # Every ordinary key has replay's decision.
    expected = replay(
        [c.model_dump_json() for c in ordinary], load_policy(deployment.policy), datetime.now(UTC)
    )
    latest = {(d.subject, d.field): d.decision_id for d in decisions}
    for want in expected.decisions:
        assert latest.get((want.subject, want.field)) == want.decision_id, want.subject
    # The budgeted key decided each claim, and said which it dropped to stay within its budget.
    full = [d for d in decisions if d.subject == "customer:full"]
    assert {e.claim_id for d in full for e in d.evidence if e.role == "winner"} == {
        c.claim_id for c in budgeted
    }
    assert all(len(d.evidence) <= 2 for d in full)
    assert any("claims dropped to keep the key within" in d.reason for d in full)
    # No record the worker sent passes the limit; the decisions topic grew by what was decided.
    largest = max(_sizes(decided)), max(_sizes(changelog)), max(_sizes(letters))
    assert max(largest) <= LIMIT
    assert len(decided) <= len(budgeted) + len(ordinary)  # a decision per admitted claim, at most
    total = sum(_sizes(decided))
    print(
        f"oversized claims: {len(why)} dead-lettered too_large; {len(decided)} decisions, "
        f"{total:,} bytes in all; largest decision {largest[0]:,} bytes, changelog record "
        f"{largest[1]:,}, dead letter {largest[2]:,}"
    )


@pytest.mark.parametrize("topic", ["decisions", "changelog"])
def test_a_worker_refuses_to_start_when_a_topic_takes_smaller_records(
    kafka: KafkaBroker, tmp_path: Path, topic: str
) -> None:
    deployment = Deployment(
        bootstrap=kafka.bootstrap, workdir=tmp_path, policy=write_policy(tmp_path / "policy.yaml")
    )
    name = (
        deployment.topics.decisions
        if topic == "decisions"
        else f"{deployment.name}-key-state-changelog"
    )

    async def create() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap)
        await admin.start()
        try:
            configs = {"max.message.bytes": "500000", "cleanup.policy": "compact"}
            await admin.create_topics(
                [NewTopic(name, deployment.partitions, 1, topic_configs=configs)]
            )
        finally:
            await admin.close()

    asyncio.run(create())
    worker = deployment.worker()
    with pytest.raises(RuntimeError, match="worker exited early"):
        worker.start()
    log = worker.log_path.read_text()
    assert f"topic {name} takes records of at most 500,000 bytes" in log
    assert "cannot go below" in log
