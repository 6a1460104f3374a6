"""Crash and restart, timers, escalation, the web API and `claimstream dev`, on real brokers."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
import urllib.parse
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from streams.core.keys.state import state_key
from streams.core.records.contracts import Decision
from streams.devkit.brokers import KafkaBroker, free_port
from tests.stream.support import (
    CODEC,
    REPO,
    Deployment,
    expected_decisions,
    one_claim,
    produce,
    publishable,
    read_topic,
    records,
    wait_for_decisions,
    write_policy,
)

pytestmark = pytest.mark.integration


def test_a_killed_worker_restarts_from_its_changelog_and_loses_no_decision(
    kafka: KafkaBroker, deployment_factory: Any
) -> None:
    deployment: Deployment = deployment_factory(kafka.bootstrap, store="rocksdb://")
    worker = deployment.worker().start()
    rng = random.Random(9)
    claims = publishable(3000, seed=31, now=datetime.now(UTC))
    first, second = claims[:1500], claims[1500:]
    try:
        asyncio.run(
            produce(kafka.bootstrap, deployment.topics.claims, records(deployment, first, rng))
        )
        time.sleep(1.5)
        worker.kill()  # SIGKILL mid-stream: no chance to commit or flush anything more
        asyncio.run(
            produce(kafka.bootstrap, deployment.topics.claims, records(deployment, second, rng))
        )
        restarted_at = time.monotonic()
        worker.start()
        expected, _ = expected_decisions(deployment, claims)
        latest, every = asyncio.run(
            wait_for_decisions(kafka.bootstrap, deployment.topics.decisions, expected)
        )
        recovery_s = time.monotonic() - restarted_at
        lost = {k for k, v in expected.items() if k not in latest or latest[k].decision_id != v}
        assert not lost, f"{len(lost)} keys lost their final decision"
        previous: dict[tuple[str, str], str] = {}
        duplicates = 0
        for d in every:  # a repeat of the key's previous decision is what consumers drop
            duplicates += previous.get((d.subject, d.field)) == d.decision_id
            previous[(d.subject, d.field)] = d.decision_id
        by_id: dict[str, set[tuple[object, ...]]] = {}
        for d in every:
            by_id.setdefault(d.decision_id, set()).add(
                (d.outcome, d.conflict_kind, d.status, repr(d.value), d.action)
            )
        assert all(len(v) == 1 for v in by_id.values()), (
            "a repeated decision id must repeat the same decision"
        )
        print(
            f"crash: sent={len(claims)} decisions={len(every)} duplicates={duplicates} "
            f"lost={len(lost)} recovery_s={recovery_s:.1f}"
        )
    finally:
        worker.stop()


def test_freshness_expiry_emits_insufficient_within_seconds(
    kafka: KafkaBroker, tmp_path: Path, deployment_factory: Any
) -> None:
    policy = write_policy(tmp_path / "short.yaml", **{"order.payment_status": {"freshness": "3s"}})
    deployment: Deployment = deployment_factory(kafka.bootstrap, policy=policy)
    worker = deployment.worker().start()
    try:
        claim = one_claim(1, "paid")
        key = state_key(claim.subject, claim.field).encode()
        asyncio.run(
            produce(
                kafka.bootstrap,
                deployment.topics.claims,
                [(key, CODEC.encode(deployment.topics.claims, claim), [])],
            )
        )
        deadline = time.monotonic() + 60
        outcomes: list[Decision] = []
        while time.monotonic() < deadline and [d.outcome for d in outcomes][-1:] != [
            "insufficient"
        ]:
            _, outcomes = asyncio.run(
                wait_for_decisions(kafka.bootstrap, deployment.topics.decisions, {}, timeout_s=1)
            )
        assert [d.outcome for d in outcomes] == ["resolved", "insufficient"]
        expired = outcomes[1]
        assert expired.reason == "no_fresh_claims"
        assert expired.supersedes == outcomes[0].decision_id
        # Decided as of the moment the claim went stale, not whenever the timer happened to run.
        # Exactly as old as the 3 s budget is still fresh: stale one microsecond later.
        assert expired.decided_at == claim.observed_at + timedelta(seconds=3, microseconds=1)
    finally:
        worker.stop()


def test_conflicts_open_too_long_are_escalated_and_the_web_api_answers(
    kafka: KafkaBroker, tmp_path: Path, deployment_factory: Any
) -> None:
    policy = write_policy(
        tmp_path / "escalate.yaml",
        **{"order.payment_status": {"freshness": "10m", "escalate_after": "2s"}},
    )
    deployment: Deployment = deployment_factory(kafka.bootstrap, policy=policy)
    worker = deployment.worker().start()
    try:
        paid, overdue = one_claim(1, "paid"), one_claim(2, "overdue", source="billing-export")
        key = state_key(paid.subject, paid.field).encode()
        topic = deployment.topics.claims
        asyncio.run(
            produce(
                kafka.bootstrap, topic, [(key, CODEC.encode(topic, c), []) for c in (paid, overdue)]
            )
        )
        escalations: list[Any] = []
        deadline = time.monotonic() + 60
        while not escalations and time.monotonic() < deadline:
            escalations = asyncio.run(
                read_topic(kafka.bootstrap, deployment.topics.escalations, idle_s=1, max_s=3)
            )
        assert len(escalations) == 1
        escalated = CODEC.decode(Decision, escalations[0].value)
        assert (escalated.outcome, escalated.conflict_kind) == ("conflict", "value")

        quoted = urllib.parse.quote(key.decode(), safe="")
        current = worker.get(f"/api/decisions/{quoted}")
        assert current["decision"]["outcome"] == "conflict"
        assert {e["claim_id"] for e in current["decision"]["evidence"]} == {
            paid.claim_id,
            overdue.claim_id,
        }
        history = worker.get(f"/api/decisions/{quoted}/history")
        assert [d["outcome"] for d in history["decisions"]][-1] == "conflict"
        conflicts = worker.get("/api/conflicts?field=order.payment_status")
        assert [c["key"] for c in conflicts["open_conflicts"]] == [key.decode()]
        metrics = worker.get("/metrics")
        assert 'claimstream_escalations_total{field="order.payment_status"} 1.0' in metrics
        assert 'claimstream_open_conflicts{field="order.payment_status"} 1.0' in metrics
        assert "inv:timer" not in metrics  # no subject ever becomes a label
        assert worker.get("/api/decisions/nobody%7Corder.payment_status") is None
        # Counted by the field-stats agent from the outcomes topic, so it may trail the decision;
        # the answer covers the current and previous minute, so a minute turning cannot empty it.
        deadline = time.monotonic() + 30
        outcomes = worker.get("/api/fields/order.payment_status/outcomes")
        while not outcomes["counts"].get("conflict/value") and time.monotonic() < deadline:
            time.sleep(0.5)
            outcomes = worker.get("/api/fields/order.payment_status/outcomes")
        assert outcomes["counts"].get("conflict/value", 0) >= 1, outcomes
        listed = worker.get("/")["endpoints"]
        queue = "GET /api/conflicts[?field=F&kind=K&source=S&min_age_s=N"
        assert f"{queue}&assignee=A&unassigned=1&overdue=1]" in listed
        assert worker.get("/api")["endpoints"] == listed
    finally:
        worker.stop()


def test_dev_prints_decisions_for_every_scenario_and_serves_metrics(tmp_path: Path) -> None:
    web_port = free_port()
    env = dict(os.environ, CLAIMSTREAM_WEB_PORT=str(web_port), CLAIMSTREAM_LOG_LEVEL="error")
    proc = subprocess.Popen(
        [sys.executable, "-m", "streams.cli", "dev", "--rounds", "2", "--round-seconds", "8"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    metrics = ""
    try:
        deadline = time.monotonic() + 60
        while not metrics and time.monotonic() < deadline:
            time.sleep(1)
            try:
                import urllib.request

                with urllib.request.urlopen(f"http://127.0.0.1:{web_port}/metrics", timeout=5) as r:
                    metrics = r.read().decode()
            except OSError:
                continue
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=30)
    assert proc.returncode == 0, output[-3000:]
    assert "claimstream_decisions_total" in metrics
    decisions = [line for line in output.splitlines() if line.startswith("decision:")]
    text = "\n".join(decisions)
    assert "invoice:42 order.payment_status: sources disagree (value conflict)" in text
    assert "svc:checkout service.retry_timeout: quarantined (cross_epoch)" in text
    assert "svc:checkout service.retry_timeout: is 5.0 s" in text
    assert "globex contract.seats: is 40 (decided by a person" in text
    assert "acme contract.seats: is 25" in text
    assert "invoice:43 order.payment_status: is 'unpaid'" in text
    assert "api:checkout api.latency: sources disagree (semantic conflict)" in text
    assert "dev: broker stopped" in output
    console = f"dev: steward console on http://127.0.0.1:{web_port}/ui/ (steward token: "
    assert console in output
