"""The pipeline on real brokers: what streams out equals what `claimstream replay` computes."""

from __future__ import annotations

import asyncio
import math
import random
import time
import urllib.parse
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from streams.core.keys.state import state_key
from streams.core.records.contracts import Claim, Decision
from streams.devkit.brokers import KafkaBroker, TansuBroker
from streams.pipeline.rekey import partition_of
from tests.stream.support import (
    CODEC,
    Deployment,
    changelog_partitions,
    expected_decisions,
    metric_sum,
    produce,
    publishable,
    read_topic,
    records,
    wait_for_decisions,
    warm_up,
    write_policy,
)

pytestmark = pytest.mark.integration


def misplaced(deployment: Deployment, sent: list[Any]) -> int:
    """Records keyed right but sent to another partition than the key's own."""
    return sum(
        1
        for key, _, _, *partition in sent
        if partition and partition[0] != partition_of(key, deployment.partitions)
    )


def publish_and_follow(
    bootstrap: str, deployment: Deployment, claims: list[dict[str, Any]], rng: random.Random
) -> tuple[int, dict[tuple[str, str], str], int, dict[tuple[str, str], Decision], list[Decision]]:
    """Publish `claims`, then follow the decisions until every key reaches the replay's final
    one: (sent, expected ids, rejected, latest decisions, every decision)."""
    outgoing = records(deployment, claims, rng)
    sent = asyncio.run(produce(bootstrap, deployment.topics.claims, outgoing))
    assert misplaced(deployment, outgoing) > 0  # the CRC32 case is exercised
    expected, rejected = expected_decisions(deployment, claims)
    latest, every = asyncio.run(
        wait_for_decisions(bootstrap, deployment.topics.decisions, expected)
    )
    return sent, expected, rejected, latest, every


@pytest.mark.parametrize(
    ("broker_kind", "store", "cache"),
    [
        ("kafka", "memory://", 100_000),
        # A state cache far smaller than the 400 keys: most keys are decoded again on use.
        ("kafka", "rocksdb://", 32),
        ("tansu", "memory://", 100_000),
    ],
)
def test_streamed_decisions_equal_offline_replay(
    request: pytest.FixtureRequest,
    deployment_factory: Any,
    tmp_path: Path,
    broker_kind: str,
    store: str,
    cache: int,
) -> None:
    broker: KafkaBroker | TansuBroker = request.getfixturevalue(broker_kind)
    # Each way of deciding the incremental path treats apart: conflicts that block, surface or
    # go to the newest, floats with a tolerance, and a field that counts independent sources.
    policy = write_policy(
        tmp_path / "policy.yaml",
        **{
            "order.payment_status": {"freshness": "10m"},
            "account.balance": {"freshness": "10m"},
            "customer.email_verified": {"min_independent_sources": 2},
            "contract.seats": {"on_conflict": "most_recent"},
        },
    )
    # Replay keeps every claim; a worker keeps max_claims_per_key per key. The promise holds for
    # keys within that bound (the busiest key here has 19 claims), so the bound is raised above it.
    deployment: Deployment = deployment_factory(
        broker.bootstrap, policy, store=store, state_cache_keys=cache, max_claims_per_key=32
    )
    worker = deployment.worker().start()
    try:
        # Epoch changes, and claim ids reused for the same and for other content, included.
        claims = publishable(2400, seed=11, now=datetime.now(UTC), reused_id_share=0.04)
        sent, expected, rejected, latest, every = publish_and_follow(
            broker.bootstrap, deployment, claims, random.Random(5)
        )
        mismatched = {
            k: (latest.get(k), v)
            for k, v in expected.items()
            if k not in latest or latest[k].decision_id != v
        }
        assert not mismatched, (
            f"{len(mismatched)} of {len(expected)} keys differ: {list(mismatched.items())[:3]}"
        )
        assert set(latest) == set(expected)
        dead = asyncio.run(read_topic(broker.bootstrap, deployment.topics.dead_letters, idle_s=2))
        metrics = worker.get("/metrics")
        accepted = metric_sum(metrics, "claimstream_claims_accepted_total")
        assert len(dead) == rejected
        assert accepted + len(dead) == sent
        # A key's state lives on its own partition only, whatever partitioner placed its claims.
        journaled = changelog_partitions(broker.bootstrap, deployment)
        split = {
            k: p for k, p in journaled.items() if p != {partition_of(k, deployment.partitions)}
        }
        assert not split, (
            f"{len(split)} keys journaled off their partition: {list(split.items())[:3]}"
        )
        hops = metric_sum(metrics, 'claimstream_rekey_hops_total{cause="partition"}')
        assert hops > 0
        print(
            f"differential[{broker_kind},{store},cache={cache}]: sent={sent} "
            f"keys={len(expected)} decisions={len(every)} dead_letters={len(dead)} "
            f"partition_hops={hops:.0f} journaled_keys={len(journaled)}"
        )
    finally:
        worker.stop()
    assert "Traceback" not in worker.log_tail(400), worker.log_tail()


def bad_records(deployment: Deployment) -> list[tuple[str, bytes | None, bytes | None]]:
    """Each kind of bad input, with the reason it must be dead-lettered for."""
    topic = deployment.topics.claims
    good = Claim(
        claim_id="ok",
        subject="inv:1",
        field="order.payment_status",
        status="present",
        value="paid",
        source="billing-api",
        observed_at=datetime.now(UTC),
    )
    body = CODEC.encode(topic, good)
    decision = Decision(
        decision_id="d",
        subject="s",
        field="f",
        outcome="insufficient",
        action="block",
        policy_version="v",
        reason="r",
        decided_at=datetime.now(UTC),
    )

    def variant(**changes: Any) -> bytes:
        return CODEC.encode(
            topic,
            good.model_copy(
                update={"claim_id": f"bad-{len(changes)}-{random.random()}", **changes}
            ),
        )

    return [
        ("malformed", b"k1", bytes(random.Random(1).randbytes(64))),
        ("malformed", b"k2", b""),
        ("malformed", b"k3", None),
        ("malformed", b"k4", body[:-3]),
        ("unknown_schema", b"k5", b"\x00\x7f\xff\xff\xff" + body[5:]),
        ("unknown_schema", b"k6", CODEC.encode(topic, decision)),
        ("unknown_source", b"k7", variant(source="mallory")),
        ("invalid_value", b"k8", variant(value="settled")),
        ("empty_value", b"k9", variant(value="")),
        ("unit_mismatch", b"k10", variant(field="api.latency", value=3.0, unit="kg")),
        ("invalid_value", b"k11", variant(field="api.latency", value=math.nan, unit="ms")),
        ("type_mismatch", b"k12", variant(field="contract.seats", value="forty")),
        ("future_observation", b"k13", variant(observed_at=datetime(2999, 1, 1, tzinfo=UTC))),
        ("unknown_field", b"k14", variant(field="order.colour")),
        ("malformed", b"k15", "not avro at all \udcff".encode("utf-8", "surrogateescape")),
        ("invalid_value", b"k16", variant(field="api.latency", value=math.inf, unit="ms")),
        ("invalid_value", b"k17", variant(observed_at=datetime(1960, 1, 1, tzinfo=UTC))),
        ("too_large", b"k18", variant(field="customer.shipping_address", value="x" * 100_000)),
        ("malformed", b"k19", body.replace(b"paid", b"pa\xff\xfe")),  # invalid UTF-8 inside Avro
    ]


@pytest.mark.parametrize("broker_kind", ["kafka", "tansu"])
def test_bad_records_are_dead_lettered_and_the_worker_keeps_going(
    request: pytest.FixtureRequest, deployment_factory: Any, broker_kind: str
) -> None:
    broker = request.getfixturevalue(broker_kind)
    deployment: Deployment = deployment_factory(broker.bootstrap)
    worker = deployment.worker().start()
    try:
        warm_up(broker.bootstrap, deployment)
        bad = bad_records(deployment)
        now = datetime.now(UTC)
        good = [
            Claim(
                claim_id=f"g{n}",
                subject=f"inv:{n}",
                field="order.payment_status",
                status="present",
                value="paid",
                source="billing-api",
                observed_at=now,
            )
            for n in range(len(bad))
        ]
        mixed: list[Any] = []
        for (reason, key, value), claim in zip(bad, good, strict=True):
            mixed.append((key, value, [("reason-expected", reason.encode())]))
            mixed.append(
                (
                    state_key(claim.subject, claim.field).encode(),
                    CODEC.encode(deployment.topics.claims, claim),
                    [],
                )
            )
        # A reused claim_id with a different payload, after the original.
        reused = good[0].model_copy(update={"value": "overdue"})
        mixed.append(
            (
                state_key(reused.subject, reused.field).encode(),
                CODEC.encode(deployment.topics.claims, reused),
                [("reason-expected", b"conflicting_duplicate")],
            )
        )
        bad.append(("conflicting_duplicate", b"", mixed[-1][1]))
        asyncio.run(produce(broker.bootstrap, deployment.topics.claims, mixed))
        expected = {(c.subject, c.field): None for c in good}
        expected[("warm-up", "order.payment_status")] = None
        started = time.monotonic()
        latest, _ = asyncio.run(
            wait_for_decisions(broker.bootstrap, deployment.topics.decisions, {}, timeout_s=2)
        )
        deadline = time.monotonic() + 90
        while len(latest) < len(expected) and time.monotonic() < deadline:
            more, _ = asyncio.run(
                wait_for_decisions(broker.bootstrap, deployment.topics.decisions, {}, timeout_s=2)
            )
            latest.update(more)
        assert set(latest) == set(expected), "every good claim between bad ones was decided"
        # The reused claim_id counts for nothing: its key is left with no claim at all.
        reused_key = (reused.subject, reused.field)
        assert (latest[reused_key].outcome, latest[reused_key].reason) == (
            "insufficient",
            "no_claims",
        )
        assert all(d.outcome == "resolved" for k, d in latest.items() if k != reused_key)
        dead = asyncio.run(read_topic(broker.bootstrap, deployment.topics.dead_letters, idle_s=2))
        assert len(dead) == len(bad)
        for message in dead:
            headers = {k: v.decode() for k, v in message.headers}
            assert headers["claimstream.error.reason"] == headers["reason-expected"], headers
            assert headers["claimstream.error.topic"] == deployment.topics.claims
            assert int(headers["claimstream.error.offset"]) >= 0
            assert "claimstream.error.partition" in headers
            assert headers["claimstream.error.detail"]
        assert {m.value for m in dead} == {value for _, _, value in bad}
        inputs = {
            (m.partition, m.offset): m.timestamp
            for m in asyncio.run(read_topic(broker.bootstrap, deployment.topics.claims, idle_s=1))
        }
        delays_ms = [
            m.timestamp
            - inputs[
                (
                    int(dict(m.headers)["claimstream.error.partition"]),
                    int(dict(m.headers)["claimstream.error.offset"]),
                )
            ]
            for m in dead
        ]
        assert max(delays_ms) < 1000, delays_ms  # each bad record dead-lettered within a second
        assert worker.alive
        assert worker.restarts() == 0
        assert worker.get("/healthz")["status"] == "ok"
        print(
            f"dead letters[{broker_kind}]: {len(dead)} bad records in "
            f"{time.monotonic() - started:.1f}s"
        )
    finally:
        worker.stop()


def test_two_workers_share_the_partitions(kafka: KafkaBroker, deployment_factory: Any) -> None:
    deployment: Deployment = deployment_factory(kafka.bootstrap)
    first, second = deployment.worker(0).start(), deployment.worker(1).start()
    try:
        time.sleep(8)  # let the group settle with both members
        claims = publishable(1200, seed=23, now=datetime.now(UTC))
        _, expected, _, latest, _ = publish_and_follow(
            kafka.bootstrap, deployment, claims, random.Random(2)
        )
        assert {k: d.decision_id for k, d in latest.items()} == expected
        shares = [
            metric_sum(w.get("/metrics"), "claimstream_claims_accepted_total")
            for w in (first, second)
        ]
        assert all(share > 0 for share in shares), shares
        # Either worker answers for any key: the owner directly, the other by forwarding.
        routed = 0
        for subject, field_name in sorted(expected)[:12]:
            path = "/api/decisions/" + urllib.parse.quote(f"{subject}|{field_name}", safe="")
            emitted = [w.get(path)["last_emitted"] for w in (first, second)]
            assert emitted[0] == emitted[1]
            assert emitted[0]["decision_id"] == expected[(subject, field_name)]
            routed += 1
        print(f"two workers: accepted {shares}, {routed} keys answered by both workers")
    finally:
        first.stop()
        second.stop()
