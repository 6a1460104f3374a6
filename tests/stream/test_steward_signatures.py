"""On a real worker and broker: where the policy's `stewards` section requires signatures, an
unsigned resolution is dead-lettered `unauthenticated` and an unsigned alias record passed over
(the aliases topic is a history every worker reads whole), and the steward's signed ones are
applied (the resolution, the alias); the console signs what a steward's token writes with that
steward's key, and refuses a steward it holds no key for."""

from __future__ import annotations

import asyncio
import time
import urllib.parse
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from streams.client import ClaimPublisher, build_resolution, publish_resolutions
from streams.core.admission.authenticity import sign
from streams.core.keys.state import state_key
from streams.settings import Settings
from tests.stream.support import REPO, Deployment, publish_claims, read_topic

SECRET = "ann-steward-secret-ann-steward-secret!"
ANN_TOKEN, BO_TOKEN = "ann-console-token-0123", "bo-console-token-012345"
FIELD = "order.payment_status"


def stewarded_policy(path: Path) -> Path:
    policy = yaml.safe_load((REPO / "examples" / "policy.yaml").read_text())
    policy["fields"][FIELD]["freshness"] = "10m"
    policy["stewards"] = {
        "required": True,
        "keys": [
            {"key_id": "ann-1", "algorithm": "hmac-sha256", "secret_env": "ANN_KEY",
             "sources": ["ann"]},
        ],
    }  # fmt: skip
    path.write_text(yaml.safe_dump(policy))
    return path


def signer(value: bytes) -> list[tuple[str, bytes]]:
    return sign(value, "ann-1", "hmac-sha256", SECRET.encode(), datetime.now(UTC))


def test_unsigned_steward_records_are_refused_and_signed_ones_applied(
    kafka: Any, tmp_path: Path
) -> None:
    deployment = Deployment(
        bootstrap=kafka.bootstrap, workdir=tmp_path, policy=stewarded_policy(tmp_path / "p.yaml")
    )
    settings = Settings(broker=kafka.bootstrap, topics=deployment.topics)
    worker = deployment.worker(
        0,
        ANN_KEY=SECRET,
        CLAIMSTREAM_STEWARD_TOKENS=f"ann:{ANN_TOKEN},bo:{BO_TOKEN}",
        CLAIMSTREAM_STEWARD_SIGNING_KEYS="ann:ann-1:ANN_KEY",
    ).start()
    subject = "invoice:77"
    key = state_key(subject, FIELD)
    path = "/api/decisions/" + urllib.parse.quote(key, safe="")
    try:
        now = datetime.now(UTC)
        claims = [
            {"claim_id": "a", "subject": subject, "field": FIELD, "status": "present",
             "value": "paid", "source": "billing-api", "observed_at": now.isoformat()},
            {"claim_id": "b", "subject": subject, "field": FIELD, "status": "present",
             "value": "overdue", "source": "billing-export", "observed_at": now.isoformat()},
        ]  # fmt: skip

        async def feed() -> None:
            async with ClaimPublisher(settings) as publisher:
                await publisher.publish_many(claims)
                await publisher.alias("INV-77", subject)  # unsigned: passed over

        asyncio.run(feed())
        deadline = time.monotonic() + 60
        while (worker.get(path) or {}).get("decision", {}).get("outcome") != "conflict":
            assert time.monotonic() < deadline, worker.log_tail()
            time.sleep(0.5)

        def made(by: str) -> Any:
            return build_resolution(
                None, subject, FIELD, decided_by=by, value="paid",
                decided_at=datetime.now(UTC) + timedelta(seconds=1),
            )  # fmt: skip

        asyncio.run(publish_resolutions(settings, [made("ann")]))  # unsigned: refused
        asyncio.run(publish_resolutions(settings, [made("mallory")], signer))  # not her key
        dead = asyncio.run(read_topic(kafka.bootstrap, deployment.topics.dead_letters, idle_s=3))
        refused = sorted(
            (m.topic, dict(m.headers)["claimstream.error.reason"].decode(), m.key) for m in dead
        )
        assert [(reason, k) for _, reason, k in refused] == [
            ("unauthenticated", key.encode()),
            ("unauthenticated", key.encode()),
        ], refused
        # The aliases topic is a history every worker reads whole: an unproven change is passed
        # over by each alike (as a policy's is), not dead-lettered, and the worker says why.
        (passed,) = worker.get("/api/aliases")["passed_over"]
        assert (passed["alias"], "unsigned" in passed["error"]) == ("INV-77", True), passed
        assert worker.get(path)["decision"]["outcome"] == "conflict"

        async def steward() -> None:
            async with ClaimPublisher(settings) as publisher:
                await publisher.alias("INV-77", subject, signer, steward="ann")

        asyncio.run(publish_resolutions(settings, [made("ann")], signer))
        asyncio.run(steward())
        aliased = "/api/decisions/" + urllib.parse.quote(state_key("INV-77", FIELD), safe="")
        deadline = time.monotonic() + 60
        while (worker.get(aliased) or {}).get("decision", {}).get("reason") != "manual":
            assert time.monotonic() < deadline, worker.log_tail()
            time.sleep(0.5)
        history = worker.get(path + "/history")
        assert [r["decided_by"] for r in history["resolutions"]] == ["ann"]

        # From the console: bo's token is good, but no key signs for bo; ann's writes are signed.
        other = "invoice:78"
        asyncio.run(publish_claims(settings, [{**c, "subject": other} for c in claims]))
        other_path = "/api/decisions/" + urllib.parse.quote(state_key(other, FIELD), safe="")
        deadline = time.monotonic() + 60
        while (worker.get(other_path) or {}).get("decision", {}).get("outcome") != "conflict":
            assert time.monotonic() < deadline, worker.log_tail()
            time.sleep(0.5)
        body = {"subject": other, "field": FIELD, "value": "paid", "note": "checked"}
        status, answer = worker.post("/api/resolutions", body, BO_TOKEN)
        assert (status, answer["refused"]) == (403, "unsigned"), answer
        status, answer = worker.post("/api/resolutions", body, ANN_TOKEN)
        assert status == 202, answer
        while (worker.get(other_path) or {}).get("decision", {}).get("reason") != "manual":
            assert time.monotonic() < deadline, worker.log_tail()
            time.sleep(0.5)
        history = worker.get(other_path + "/history")
        assert [r["decided_by"] for r in history["resolutions"]] == ["ann"]
        assert worker.restarts() == 0
    finally:
        worker.stop()
