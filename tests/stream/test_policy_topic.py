"""One switch-over for a cluster: a policy published on the policy topic moves every key, on
every worker, at the instant it takes effect, and a SIGKILL in the middle of the rollout leaves
no key behind.

Two deployments on one Apache Kafka broker (memory store at exactly once, RocksDB at least
once), two workers each, decide 600 keys under policy A. `claimstream policy publish B --in 4s`
rolls B out; one worker of each deployment is SIGKILLed in the middle of its rollout sweep (paced
to one tick a turn, its gauge showing keys left) and started again. Then both workers of a
deployment say B took effect at the same instant, every key is on B, and the decisions topic
holds, key by key, what replay gives under the history that `claimstream policy history` prints
(under exactly once with no repeat).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml
from aiokafka import AIOKafkaProducer

from streams.core.keys.state import state_key
from streams.core.reading.replay import replay_with_clock
from streams.core.records.contracts import Claim
from streams.core.timeline.policy_history import history_from_lines
from streams.devkit.brokers import KafkaBroker
from tests.stream.support import (
    CODEC,
    REPO,
    ByKey,
    Deployment,
    WorkerProcess,
    decisions_by_key,
    metric_sum,
    sent_of,
    start_ready,
    without_repeats,
)

KEYS = 600
LEAD = "4s"
SEATS = "contract.seats"


def _policy(path: Path, version: str, crm: str, order_form: str) -> Path:
    policy = yaml.safe_load((REPO / "examples" / "policy.yaml").read_text())
    policy["version"] = version
    policy["fields"][SEATS]["authorities"] = {"crm": crm, "order-form": order_form}
    path.write_text(yaml.safe_dump(policy))
    return path


def _claims(start: datetime) -> list[Claim]:
    """Seat counts crm and the order form disagree on: A believes crm, B the order form."""
    claims = []
    for n in range(KEYS):
        for m, (source, value) in enumerate((("crm", 12), ("order-form", 15))):
            claims.append(
                Claim.model_validate(
                    {
                        "claim_id": f"c{n}-{m}",
                        "subject": f"contract:{n}",
                        "field": SEATS,
                        "status": "present",
                        "value": value,
                        "source": source,
                        "observed_at": start + timedelta(milliseconds=2 * n + m),
                    }
                )
            )
    return claims


async def _publish(claims: list[Claim], deployments: list[Deployment]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=deployments[0].bootstrap, acks="all")
    await producer.start()
    try:
        for claim in claims:
            key = state_key(claim.subject, claim.field).encode()
            stamp = int(claim.observed_at.timestamp() * 1000)
            for deployment in deployments:
                topic = deployment.topics.claims
                await producer.send(topic, CODEC.encode(topic, claim), key=key, timestamp_ms=stamp)
        await producer.flush()
    finally:
        await producer.stop()


def _cli(deployment: Deployment, *args: str) -> str:
    """`claimstream ARGS` against the deployment's broker and topics; its standard output."""
    env = {**os.environ, "CLAIMSTREAM_TOPIC_POLICIES": deployment.topics.policies}
    done = subprocess.run(
        [sys.executable, "-m", "streams.cli", *args, "--broker", deployment.bootstrap],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _expected(deployment: Deployment, claims: list[Claim]) -> ByKey:
    """Replay's decisions under the history the policy topic holds."""
    lines = _cli(deployment, "policy", "history").splitlines()
    history = history_from_lines(lines)
    now = datetime.now(UTC)
    timed = replay_with_clock([c.model_dump_json() for c in claims], history, now)
    assert timed.rejections == []
    by_key: ByKey = {}
    for emitted in timed.emitted:
        d = emitted.decision
        by_key.setdefault((d.subject, d.field), []).append(sent_of(d))
    return by_key


def test_a_published_policy_moves_every_key_at_one_instant_through_a_sigkill(
    kafka: KafkaBroker, tmp_path: Path
) -> None:
    policy_a = _policy(tmp_path / "a.yaml", "A", "system_of_record", "cached")
    policy_b = _policy(tmp_path / "b.yaml", "B", "cached", "system_of_record")
    deployments = [
        Deployment(
            bootstrap=kafka.bootstrap,
            workdir=tmp_path / store.rstrip(":/"),
            policy=policy_a,
            store=store,
            guarantee=guarantee,
            static_membership=True,
            settings={"expiry_ticks_per_batch": "1"},  # a sweep slow enough to interrupt
        )
        for store, guarantee in (("memory://", "exactly_once"), ("rocksdb://", "at_least_once"))
    ]
    workers = {d.name: [d.worker(0), d.worker(1)] for d in deployments}
    everyone = [w for pair in workers.values() for w in pair]
    claims = _claims(datetime.fromtimestamp(round(time.time()), UTC))
    try:
        asyncio.run(start_ready(everyone))
        asyncio.run(_publish(claims, deployments))
        for deployment in deployments:
            _settled(deployment, _expected(deployment, claims), "under A")
        for deployment in deployments:
            _cli(deployment, "policy", "publish", str(policy_b), "--in", LEAD)
        time.sleep(5.0)  # B takes effect, the sweeps begin
        for deployment in deployments:
            victim = workers[deployment.name][1]
            left = metric_sum(victim.get("/metrics"), "claimstream_policy_sweep_remaining")
            victim.kill()
            assert left > 0, f"{deployment.name}: the sweep was over before the SIGKILL"
            print(f"policy topic[{deployment.store}]: SIGKILL with {left:.0f} keys to sweep")
        asyncio.run(start_ready([workers[d.name][1] for d in deployments]))
        for deployment in deployments:
            pair = workers[deployment.name]
            sinces = {_in_force(w, "B") for w in pair}
            assert len(sinces) == 1, f"{deployment.name}: workers disagree on B's instant {sinces}"
            expected = _expected(deployment, claims)
            assert all(sent[-1][1] >= next(iter(sinces)) for sent in expected.values())
            got = _settled(deployment, expected, "after the rollout to B")
            print(f"policy topic[{deployment.store},{deployment.guarantee}]: keys={len(got)}")
    finally:
        for worker in everyone:
            worker.stop()
    for worker in everyone:
        assert "Traceback" not in worker.log_tail(400), worker.log_tail()


def _in_force(worker: WorkerProcess, version: str) -> str:
    """The instant `version` took effect, as the worker says, once it is in force there."""
    deadline = time.monotonic() + 30
    while (health := worker.get("/healthz"))["policy_version"] != version:
        assert time.monotonic() < deadline, health
        time.sleep(0.3)
    return str(health["policy_since"])


def _settled(deployment: Deployment, expected: ByKey, when: str) -> ByKey:
    guarantee = deployment.guarantee
    seen = (lambda sent: sent) if guarantee == "exactly_once" else without_repeats
    deadline = time.monotonic() + 90
    while True:
        got = decisions_by_key(deployment.bootstrap, deployment.topics.decisions, guarantee)
        if seen(got) == seen(expected) or time.monotonic() > deadline:
            break
    differing = {
        k: (seen(got).get(k), v) for k, v in seen(expected).items() if seen(got).get(k) != v
    }
    label = f"{deployment.store},{guarantee} {when}"
    assert not differing, f"{label}: {len(differing)} keys differ: {list(differing.items())[:2]}"
    assert seen(got).keys() == seen(expected).keys(), label
    return got
