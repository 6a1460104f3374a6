"""The client side against a real worker: `claimstream publish`, `tail` and `resolve`, the gate."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from streams.client import DecisionFeed
from streams.core.records.contracts import Decision, Outcome
from streams.devkit.brokers import KafkaBroker
from streams.settings import load_settings
from tests.stream.support import REPO, Deployment

pytestmark = pytest.mark.integration


def cli(deployment: Deployment, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = deployment.env(0, deployment.workdir / "cli")
    return subprocess.run(
        [sys.executable, "-m", "streams.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
        check=True,
    )


async def gate_when_decided(deployment: Deployment, expected: int) -> tuple[Any, Any]:
    settings = load_settings(env=deployment.env(0, deployment.workdir / "feed"))
    async with DecisionFeed(settings) as feed:
        seen = 0
        deadline = time.monotonic() + 90
        async for _ in feed.decisions():
            seen += 1
            if seen >= expected or time.monotonic() > deadline:
                break
        return (
            feed.gate("invoice:1", ["order.payment_status"]),
            feed.gate("invoice:2", ["order.payment_status", "account.balance"]),
        )


def test_publish_tail_and_the_plan_gate(
    kafka: KafkaBroker, deployment_factory: Any, tmp_path: Path
) -> None:
    deployment: Deployment = deployment_factory(kafka.bootstrap)
    worker = deployment.worker().start()
    try:
        now = datetime.now(UTC).isoformat()
        lines = [
            {
                "claim_id": "p1",
                "subject": "invoice:1",
                "field": "order.payment_status",
                "status": "present",
                "value": "paid",
                "source": "billing-api",
                "observed_at": now,
            },
            {
                "claim_id": "p2",
                "subject": "invoice:2",
                "field": "order.payment_status",
                "status": "present",
                "value": "paid",
                "source": "billing-api",
                "observed_at": now,
            },
            {
                "claim_id": "p3",
                "subject": "invoice:2",
                "field": "order.payment_status",
                "status": "present",
                "value": "overdue",
                "source": "billing-export",
                "observed_at": now,
            },
        ]
        published = cli(deployment, "publish", "-", stdin="\n".join(json.dumps(x) for x in lines))
        assert "3 claims sent" in published.stderr
        paid, disputed = asyncio.run(gate_when_decided(deployment, expected=3))
        assert paid.runnable
        assert not disputed.runnable
        assert disputed.blocked_by["order.payment_status"].startswith("conflict")
        assert disputed.blocked_by["account.balance"] == "no decision yet"
        tailed = cli(deployment, "tail", "decisions", "--count", "3", "--timeout", "20")
        decisions = [json.loads(line) for line in tailed.stdout.splitlines()]
        assert [d["outcome"] for d in decisions if d["subject"] == "invoice:2"][-1] == "conflict"
    finally:
        worker.stop()


async def decision_when(
    deployment: Deployment,
    subject: str,
    field: str,
    done: Callable[[Decision], bool],
    timeout_s: float = 90,
) -> Decision:
    """The first decision about subject and field that is `done`, following the decisions topic."""
    settings = load_settings(env=deployment.env(0, deployment.workdir / "feed"))
    async with DecisionFeed(settings) as feed:

        async def follow() -> Decision:
            async for decision in feed.decisions():
                if (decision.subject, decision.field) == (subject, field) and done(decision):
                    return decision
            raise AssertionError("the decisions feed ended")

        return await asyncio.wait_for(follow(), timeout_s)


def test_resolve_and_a_batch_of_resolutions_close_conflicts(
    kafka: KafkaBroker, deployment_factory: Any, tmp_path: Path
) -> None:
    deployment: Deployment = deployment_factory(kafka.bootstrap)
    worker = deployment.worker().start()
    seats = "contract.seats"  # never stale: the claims' fixed date keeps them fresh
    observed = "2026-11-29T12:00:00Z"

    def claim(subject: str, source: str, **fields: object) -> str:
        return json.dumps(
            {"claim_id": f"{subject}-{source}", "subject": subject, "field": seats}
            | {"source": source, "observed_at": observed, "status": "present"}
            | fields
        )

    try:
        # Two sources of record disagree about the value (initech) and about existence (hooli).
        cli(
            deployment,
            "publish",
            stdin="\n".join(
                [
                    claim("initech", "crm", value=12),
                    claim("initech", "order-form", value=15),
                    claim("hooli", "crm", value=30),
                    claim("hooli", "order-form", status="not_found"),
                ]
            ),
        )
        for subject in ("initech", "hooli"):
            conflict = asyncio.run(
                decision_when(deployment, subject, seats, lambda d: d.outcome is Outcome.CONFLICT)
            )
            assert conflict.action.value == "block"

        resolved = cli(
            deployment,
            "resolve",
            "initech",
            seats,
            "--value",
            "12",
            "--by",
            "renewals-team",
            "--note",
            "the signed contract says 12",
        )
        sent = json.loads(resolved.stdout)
        closed = asyncio.run(
            decision_when(deployment, "initech", seats, lambda d: d.resolution_id is not None)
        )
        assert (closed.outcome, closed.reason, closed.value) == (Outcome.RESOLVED, "manual", 12)
        assert closed.resolution_id == sent["resolution_id"]

        batch = tmp_path / "resolutions.jsonl"
        batch.write_text(
            json.dumps(
                {"subject": "hooli", "field": seats, "status": "not_found", "decided_by": "legal"}
            )
            + "\n"
        )
        published = cli(deployment, "publish", "--resolutions", str(batch))
        assert "1 resolutions sent" in published.stderr
        assert "claims sent" not in published.stderr
        gone = asyncio.run(
            decision_when(deployment, "hooli", seats, lambda d: d.resolution_id is not None)
        )
        assert (gone.outcome, gone.reason, gone.status.value) == (
            Outcome.RESOLVED,
            "manual",
            "not_found",
        )
    finally:
        worker.stop()
