"""A policy rollout re-decides every key, quiet ones included, on every store and guarantee.

Twenty keys are decided under policy A by four workers at once on one Apache Kafka broker
(memory and RocksDB stores, at least once and exactly once). The workers stop cleanly and start
again with policy B, and nothing is published after: B swaps two sources' authorities on
`contract.seats`, makes `service.retry_timeout` degrade instead of block, and drops the source
`chat`, whose kept claims B then refuses. Then, key by key, each deployment's decisions topic
holds what `replay_with_clock` gives for the same claims under the policy history (A, then B from
the instant the worker says it took effect), and its web API answers the replay's last decision:
every key re-decided under B, none left on A, a refused claim named with its reason.
"""

from __future__ import annotations

import asyncio
import time
import urllib.parse
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from aiokafka import AIOKafkaProducer

from streams.core.keys.state import state_key
from streams.core.reading.replay import replay_with_clock
from streams.core.records.contracts import Claim, Decision
from streams.core.records.policy import load_policy
from streams.core.timeline.rollout import InForce, PolicyHistory
from streams.devkit.brokers import KafkaBroker
from tests.stream.support import (
    CODEC,
    REPO,
    ByKey,
    Deployment,
    WorkerProcess,
    decisions_by_key,
    every_store_and_guarantee,
    sent_of,
    start_ready,
    without_repeats,
)

SEATS, TIMEOUT = "contract.seats", "service.retry_timeout"
LEAD_S = 2.0  # a policy takes effect this long after a worker publishes its file's new version


def _policy(path: Path, version: str, *, crm: str, order_form: str, on_conflict: str) -> Path:
    policy = yaml.safe_load((REPO / "examples" / "policy.yaml").read_text())
    policy["version"] = version
    policy["fields"][SEATS]["authorities"] = {"crm": crm, "order-form": order_form}
    policy["fields"][TIMEOUT]["on_conflict"] = on_conflict
    if version == "B":
        del policy["sources"]["chat"]
    path.write_text(yaml.safe_dump(policy))
    return path


def _claims(start: datetime) -> list[Claim]:
    """Ten seat counts crm and the order form disagree on (A believes crm, B the order form),
    five retry timeouts two systems of record disagree on (A blocks, B degrades), five seat
    counts crm and chat agree on (B refuses chat's)."""
    claims: list[dict[str, Any]] = []
    for n in range(10):
        claims += [
            {"subject": f"contract:{n}", "field": SEATS, "value": 12, "source": "crm"},
            {"subject": f"contract:{n}", "field": SEATS, "value": 15, "source": "order-form"},
        ]
    for n in range(5):
        claims += [
            {"subject": f"service:{n}", "field": TIMEOUT, "value": 30, "unit": "s",
             "source": "config-service"},
            {"subject": f"service:{n}", "field": TIMEOUT, "value": 45, "unit": "s",
             "source": "billing-export"},
            {"subject": f"contract:chat{n}", "field": SEATS, "value": 12, "source": "crm"},
            {"subject": f"contract:chat{n}", "field": SEATS, "value": 12, "source": "chat"},
        ]  # fmt: skip
    return [
        Claim.model_validate(
            {
                **data,
                "claim_id": f"c{n}",
                "status": "present",
                "observed_at": start + timedelta(milliseconds=50 * n),
            }
        )
        for n, data in enumerate(claims)
    ]


async def _publish(claims: list[Claim], deployments: list[Deployment]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=deployments[0].bootstrap, acks="all")
    await producer.start()
    try:
        for claim in claims:
            key = state_key(claim.subject, claim.field).encode()
            stamp = int(claim.observed_at.timestamp() * 1000)
            for deployment in deployments:
                topic = deployment.topics.claims
                await producer.send_and_wait(
                    topic, CODEC.encode(topic, claim), key=key, timestamp_ms=stamp
                )
    finally:
        await producer.stop()


def _replayed(claims: list[Claim], history: PolicyHistory, now: datetime) -> ByKey:
    timed = replay_with_clock([c.model_dump_json() for c in claims], history, now)
    assert timed.rejections == []
    by_key: ByKey = {}
    for emitted in timed.emitted:
        assert not emitted.escalation
        decision = emitted.decision
        by_key.setdefault((decision.subject, decision.field), []).append(sent_of(decision))
    return by_key


def test_a_rollout_re_decides_every_key_on_every_store_and_guarantee(
    kafka: KafkaBroker, tmp_path: Path
) -> None:
    policy_a = _policy(tmp_path / "a.yaml", "A", crm="system_of_record", order_form="cached",
                       on_conflict="block")  # fmt: skip
    policy_b = _policy(tmp_path / "b.yaml", "B", crm="cached", order_form="system_of_record",
                       on_conflict="degrade")  # fmt: skip
    in_force = tmp_path / "policy.yaml"
    in_force.write_text(policy_a.read_text())
    deployments = every_store_and_guarantee(
        kafka.bootstrap, tmp_path, in_force, settings={"policy_lead_s": str(LEAD_S)}
    )
    workers = [d.worker() for d in deployments]
    start = datetime.fromtimestamp(round(time.time()), UTC)
    claims = _claims(start)
    try:
        asyncio.run(start_ready(workers))
        asyncio.run(_publish(claims, deployments))
        under_a = PolicyHistory.of(load_policy(policy_a))
        before = _replayed(claims, under_a, datetime.now(UTC))
        assert len(before) == 20
        for deployment in deployments:
            _wait_for(deployment, before, f"{deployment.store},{deployment.guarantee} under A")
        for worker in workers:
            worker.stop()
        in_force.write_text(policy_b.read_text())
        asyncio.run(start_ready(workers))
        for deployment, worker in zip(deployments, workers, strict=True):
            _check_rollout(deployment, worker, claims, load_policy(policy_a), load_policy(policy_b))
    finally:
        for worker in workers:
            worker.stop()
    for worker in workers:
        assert "Traceback" not in worker.log_tail(400), worker.log_tail()


def _wait_for(deployment: Deployment, expected: ByKey, label: str) -> ByKey:
    """The deployment's decisions, once they are `expected` (repeats left out under at least
    once) or 60 s have passed."""
    guarantee = deployment.guarantee
    seen = (lambda sent: sent) if guarantee == "exactly_once" else without_repeats
    deadline = time.monotonic() + 60
    while True:
        got = decisions_by_key(deployment.bootstrap, deployment.topics.decisions, guarantee)
        if seen(got) == seen(expected) or time.monotonic() > deadline:
            break
    differing = {
        k: (seen(got).get(k), v) for k, v in seen(expected).items() if seen(got).get(k) != v
    }
    assert not differing, f"{label}: {len(differing)} keys differ: {list(differing.items())[:2]}"
    assert seen(got).keys() == seen(expected).keys(), label
    return got


def _check_rollout(
    deployment: Deployment, worker: WorkerProcess, claims: list[Claim], a: Any, b: Any
) -> None:
    label = f"{deployment.store},{deployment.guarantee}"
    deadline = time.monotonic() + 30
    while (health := worker.get("/healthz"))["policy_version"] != "B":
        assert time.monotonic() < deadline, f"{label}: policy B not in force: {health}"
        time.sleep(0.3)
    since = datetime.fromisoformat(health["policy_since"])
    history = PolicyHistory([InForce(datetime(1970, 1, 1, tzinfo=UTC), a), InForce(since, b)])
    expected = _replayed(claims, history, datetime.now(UTC) + timedelta(seconds=1))
    got = _wait_for(deployment, expected, f"{label} after the rollout to B")
    moved = [sent for sent in expected.values() if sent[-1][1] >= since.isoformat()]
    assert len(moved) == 20, f"{label}: replay re-decided {len(moved)} of 20 keys at B"
    answers = {}
    for subject, field in expected:
        key = urllib.parse.quote(f"{subject}|{field}", safe="")
        answer = worker.get(f"/api/decisions/{key}")
        answers[(subject, field)] = answer["decision"] if answer else None
    assert {k: a["decision_id"] if a else None for k, a in answers.items()} == {
        k: v[-1][0] for k, v in expected.items()
    }, label
    assert {a["policy_version"] for a in answers.values() if a} == {"B"}, label
    refused = [Decision.model_validate(a) for k, a in answers.items() if "chat" in k[0]]
    assert len(refused) == 5
    for decision in refused:
        assert "kept claims policy B refuses" in decision.reason, decision.reason
        assert "unknown_source" in decision.reason, decision.reason
    metrics = worker.get("/metrics")
    assert "claimstream_policy_sweep_remaining 0.0" in metrics, label
    print(f"rollout[{label}]: keys={len(expected)} re-decided={len(moved)} on topic={len(got)}")
