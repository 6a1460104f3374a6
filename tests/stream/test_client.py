"""The client side against a real worker: `claimstream publish`, `claimstream tail`, the gate."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from streams.client import DecisionFeed
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
