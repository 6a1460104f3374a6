"""The documented ACL table, enforced on a real Apache Kafka broker (SCRAM + StandardAuthorizer).

`ROWS` mirrors the table "Topics and the ACLs each principal needs" of the how-to page "Secure the
topics" (docs/how-to/secure-the-topics.md; a check parses the page so
the two cannot drift); each principal (`worker`, `steward`, `producer`, `consumer`) is granted
exactly what its rows and the table's preamble give it, and nothing else. A worker logged in as
`worker` (refused nothing it asks for) then decides a conflict the producer's claims raise; the
producer cannot write a resolution or an alias record, the steward can, and the consumer reads
both beliefs but cannot write one: "a resolution comes only through a topic only stewards may
write" holds on the wire.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAuthorizationFailedError
from pydantic import SecretStr

from streams.client import ClaimPublisher, DecisionFeed, build_resolution, publish_resolutions
from streams.core.records.contracts import Decision
from streams.devkit.brokers import KafkaBroker
from streams.settings import Settings
from streams.topic_names import Topics
from streams.worker.retention import retention_wanted, topic_configs
from streams.worker.size_check import sized_topics
from tests.stream.support import REPO, Deployment, write_policy

pytestmark = pytest.mark.integration

WORKER, STEWARD, PRODUCER, CONSUMER = "worker", "steward", "producer", "consumer"
FIELD = "order.payment_status"
SUBJECT = "invoice:acl-1"


@dataclass(frozen=True)
class Row:
    """One row of the documented table: its cells as written, and the principals they name here."""

    topics: tuple[str, ...]
    written_by: str
    read_by: str
    writers: frozenset[str] = frozenset()
    readers: frozenset[str] = frozenset()


def _row(topics: str, written_by: str, read_by: str, writers: str = "", readers: str = "") -> Row:
    names, who_writes, who_reads = topics.split(), writers.split(), readers.split()
    return Row(tuple(names), written_by, read_by, frozenset(who_writes), frozenset(who_reads))


# Principals absent from a row (user-assertion producers, operators) are not users here.
ROWS = (
    _row("claims.tools", "tool producers", "workers", PRODUCER, WORKER),
    _row("claims.users", "user-assertion producers", "workers", "", WORKER),
    _row("<prefix><principal>", "that principal only", "workers"),  # no principal topics here
    _row(
        "claims.resolutions",
        "stewards (console workers, `claimstream resolve`)",
        "workers",
        STEWARD,
        WORKER,
    ),
    _row("claims.subject-aliases", "stewards (`claimstream alias`)", "workers", STEWARD, WORKER),
    _row(
        "claims.policies",
        "stewards (`claimstream policy publish`), workers (their policy file's new version)",
        "workers, stewards",
        f"{STEWARD} {WORKER}",
        f"{WORKER} {STEWARD}",
    ),
    _row(
        "claims.erasures",
        "the DPO and stewards (`claimstream erase`, console workers)",
        "workers, the DPO",
        STEWARD,
        f"{WORKER} {STEWARD}",
    ),
    _row(
        "claims.erasure-receipts",
        "workers",
        "workers, the DPO (`claimstream erase status`)",
        WORKER,
        f"{WORKER} {STEWARD}",
    ),
    _row(
        "claims.subject-keys",
        "producers that seal personal fields, workers (tombstones)",
        "producers that seal, workers, the DPO",
        f"{PRODUCER} {WORKER}",
        f"{PRODUCER} {WORKER} {STEWARD}",
    ),
    _row("claims.decisions", "workers", "consumers", WORKER, CONSUMER),
    _row("claims.dead-letters", "workers", "operators", WORKER),
    _row(
        "claims.epoch-changes claims.reobserve-requests claims.escalations",
        "workers",
        "consumers, producers that re-observe",
        WORKER,
        f"{CONSUMER} {PRODUCER}",
    ),
    _row("claimstream-rekeyed", "workers only", "workers", WORKER, WORKER),
    _row("claimstream-outcomes", "workers only", "workers", WORKER, WORKER),
    _row("<app_id>-key-state-changelog", "workers only", "workers", WORKER, WORKER),
    _row(
        "<app_id>-field-outcomes-changelog <app_id>-__assignor-__leader",
        "workers only",
        "workers",
        WORKER,
        WORKER,
    ),
)
WORKER_GROUPS = ("<app_id>", "<app_id>-arbiter")
ACL_PAGE = REPO / "docs" / "how-to" / "secure-the-topics.md"
TABLE_HEADING = "## Topics and the ACLs each principal needs"


def documented_table() -> tuple[str, list[tuple[tuple[str, ...], str, str]]]:
    """The table's preamble (whitespace collapsed) and its rows: (topics, written by, read by)."""
    text = ACL_PAGE.read_text()
    section = text.split(TABLE_HEADING, 1)[1].split("\n#", 1)[0]
    preamble, _, table = section.partition("\n|")
    rows = []
    for line in ("|" + table).splitlines()[2:]:  # after the header and its --- line
        if not line.startswith("|"):
            break
        topics, written_by, read_by, _notes = (cell.strip() for cell in line.strip("|").split("|"))
        rows.append((tuple(re.findall(r"`([^`]+)`", topics)), written_by, read_by))
    return " ".join(preamble.split()), rows


def test_the_table_here_is_the_documented_table() -> None:
    preamble, rows = documented_table()
    assert rows == [(row.topics, row.written_by, row.read_by) for row in ROWS]
    groups = ", ".join(f"`{group}`" for group in WORKER_GROUPS)
    assert f"READ on their consumer groups ({groups})" in preamble
    assert "Producers, stewards and consumers need DESCRIBE too" in preamble
    assert "the workers need CREATE where they create topics" in preamble
    assert "DESCRIBE_CONFIGS on the topics whose retention they check" in preamble


def deployed_name(name: str, deployment: Deployment) -> str | None:
    """A documented topic name as this deployment spells it; None for principal topics (unused)."""
    defaults = {default: field for field, default in Topics().model_dump().items()}
    if name in defaults:
        return str(getattr(deployment.topics, defaults[name]))
    if name.startswith("<app_id>"):
        return deployment.name + name.removeprefix("<app_id>")
    return None


def grants(deployment: Deployment) -> dict[tuple[str, frozenset[str]], list[str]]:
    """(principal, operations) -> topics, from `ROWS`: WRITE for writers, READ for readers,
    DESCRIBE for both, and CREATE for the workers on what they write (the topics others write
    are created beforehand)."""
    per_topic: dict[tuple[str, str], set[str]] = {}
    for row in ROWS:
        for documented_name in row.topics:
            topic = deployed_name(documented_name, deployment)
            if topic is None:
                continue
            for principal in row.writers:
                ops = {"Write", "Describe"} | ({"Create"} if principal == WORKER else set())
                per_topic.setdefault((principal, topic), set()).update(ops)
            for principal in row.readers:
                per_topic.setdefault((principal, topic), set()).update({"Read", "Describe"})
    grouped: dict[tuple[str, frozenset[str]], list[str]] = {}
    for (principal, topic), ops in per_topic.items():
        grouped.setdefault((principal, frozenset(ops)), []).append(topic)
    return grouped


def not_written_by_workers(deployment: Deployment) -> list[str]:
    inputs = [name for row in ROWS if WORKER not in row.writers for name in row.topics]
    return [topic for name in inputs if (topic := deployed_name(name, deployment)) is not None]


@pytest.fixture(scope="module")
def broker() -> Iterator[KafkaBroker]:
    users = {user: secrets.token_urlsafe(16) for user in (WORKER, STEWARD, PRODUCER, CONSUMER)}
    with KafkaBroker(partitions=2, scram_users=users, acls=True) as secured:
        yield secured


def settings_as(broker: KafkaBroker, user: str, deployment: Deployment) -> Settings:
    security = broker.client_security(user)
    return Settings(
        broker=broker.bootstrap,
        topics=deployment.topics,
        partitions=deployment.partitions,
        security_protocol=security["security_protocol"],
        sasl_mechanism=security["sasl_mechanism"],
        sasl_username=user,
        sasl_password=SecretStr(security["sasl_plain_password"]),
    )


async def create_as_admin(broker: KafkaBroker, settings: Settings, names: list[str]) -> None:
    configs = topic_configs(settings)
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap, **broker.client_security())
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(n, settings.partitions, 1, topic_configs=configs.get(n, {})) for n in names]
        )
    finally:
        await admin.close()


async def records_on(broker: KafkaBroker, topic: str, partitions: int) -> list[bytes | None]:
    """Every record value on `topic`, read as admin."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        auto_offset_reset="earliest",
        **broker.client_security(),
    )
    await consumer.start()
    try:
        assigned = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(assigned)
        ends = await consumer.end_offsets(assigned)
        values: list[bytes | None] = []
        while [tp for tp, end in ends.items() if await consumer.position(tp) < end]:
            for messages in (await consumer.getmany(timeout_ms=500)).values():
                values += [m.value for m in messages]
        return values
    finally:
        await consumer.stop()


def belief(consumer: Settings, want_outcome: str, timeout_s: float = 60) -> Decision:
    """The key's latest decision, read by the consumer principal, once its outcome is `want`."""

    async def follow() -> Decision:
        deadline = time.monotonic() + timeout_s
        async with DecisionFeed(consumer) as feed:
            while True:
                await feed.caught_up()
                latest = feed.latest.get((SUBJECT, FIELD))
                if latest is not None and latest.outcome == want_outcome:
                    return latest
                assert time.monotonic() < deadline, f"latest decision: {latest}"
                await asyncio.sleep(0.5)

    return asyncio.run(follow())


def test_only_stewards_change_a_belief(broker: KafkaBroker, tmp_path: Path) -> None:
    policy = write_policy(tmp_path / "policy.yaml", **{FIELD: {"freshness": "10m"}})
    deployment = Deployment(
        bootstrap=broker.bootstrap, workdir=tmp_path, policy=policy, partitions=2
    )
    as_worker = settings_as(broker, WORKER, deployment)
    deployment.settings.update(
        security_protocol=as_worker.security_protocol,
        sasl_mechanism=str(as_worker.sasl_mechanism),
        sasl_username=WORKER,
        sasl_password=broker.client_security(WORKER)["sasl_plain_password"],
    )
    asyncio.run(create_as_admin(broker, as_worker, not_written_by_workers(deployment)))
    for (principal, operations), topics in grants(deployment).items():
        broker.allow(principal, sorted(operations), topics)
    groups = [name.replace("<app_id>", deployment.name) for name in WORKER_GROUPS]
    broker.allow(WORKER, "Read", groups=groups)
    sized = as_worker.model_copy(update={"app_id": deployment.name})  # its changelog's name
    described = {*retention_wanted(as_worker), *sized_topics(sized)}
    broker.allow(WORKER, "DescribeConfigs", sorted(described))
    producer, steward, consumer = (
        settings_as(broker, user, deployment) for user in (PRODUCER, STEWARD, CONSUMER)
    )
    worker = deployment.worker().start()
    try:
        now = datetime.now(UTC)
        claims = [
            {"claim_id": "a", "subject": SUBJECT, "field": FIELD, "status": "present",
             "value": "paid", "source": "billing-api", "observed_at": now.isoformat()},
            {"claim_id": "b", "subject": SUBJECT, "field": FIELD, "status": "present",
             "value": "overdue", "source": "billing-export", "observed_at": now.isoformat()},
        ]  # fmt: skip

        async def publish_claims() -> None:
            async with ClaimPublisher(producer) as publisher:
                await publisher.publish_many(claims)

        asyncio.run(publish_claims())
        assert belief(consumer, "conflict").reason != "manual"

        resolution = build_resolution(
            None, SUBJECT, FIELD, decided_by="ann", value="paid",
            decided_at=datetime.now(UTC) + timedelta(seconds=1),
        )  # fmt: skip

        async def alias_as_producer() -> None:
            async with ClaimPublisher(producer) as publisher:
                await publisher.alias("INV-ACL-1", SUBJECT)

        with pytest.raises(TopicAuthorizationFailedError):
            asyncio.run(publish_resolutions(producer, [resolution]))
        with pytest.raises(TopicAuthorizationFailedError):
            asyncio.run(alias_as_producer())
        assert asyncio.run(records_on(broker, deployment.topics.resolutions, 2)) == []
        assert asyncio.run(records_on(broker, deployment.topics.aliases, 2)) == []

        assert asyncio.run(publish_resolutions(steward, [resolution])) == 1
        resolved = belief(consumer, "resolved")
        assert (resolved.reason, resolved.value) == ("manual", "paid")

        async def overwrite_as_consumer() -> None:
            forger = AIOKafkaProducer(
                bootstrap_servers=broker.bootstrap,
                request_timeout_ms=8000,
                **broker.client_security(CONSUMER),
            )
            await forger.start()
            try:
                await forger.send_and_wait(deployment.topics.decisions, b"forged", key=b"k")
            finally:
                await forger.stop()

        with pytest.raises(TopicAuthorizationFailedError):
            asyncio.run(overwrite_as_consumer())
        assert worker.restarts() == 0, worker.log_tail()
        log = worker.log_tail(1000)
        assert "authorization" not in log.lower(), log  # the table gave the worker all it uses
    finally:
        worker.stop()
