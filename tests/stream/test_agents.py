"""Agents against a real worker on Apache Kafka fed by the demo: the MCP server through the MCP
SDK's own client (stdio and streamable HTTP), the consumer side (`FactsClient`, `DecisionFeed`,
`publish_and_wait`, `claimstream get`) and the agent story in examples/."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

from streams.client import ClaimPublisher, DecisionFeed, FactsClient
from streams.core.records.contracts import Action
from streams.devkit.brokers import KafkaBroker, free_port
from streams.devkit.demo import MARCH_12, scenario_claims
from streams.settings import Settings
from tests.stream.support import REPO, Deployment, WorkerProcess, write_policy

pytestmark = pytest.mark.integration

PAYMENT = "order.payment_status"
EMAIL = "customer.email_verified"
DISPUTED = "invoice:42"  # the demo's two systems of record that split
TOOLS = {
    "get_fact",
    "get_fact_as_of",
    "check_plan",
    "list_conflicts",
    "explain_fact",
    "record_observation",
    "record_user_assertion",
    "propose_resolution",
}


class Cluster:
    def __init__(self, deployment: Deployment, worker: WorkerProcess) -> None:
        self.deployment, self.worker = deployment, worker
        self.api = f"http://127.0.0.1:{worker.web_port}"
        self.env = deployment.env(0, deployment.workdir / "agents")

    @property
    def settings(self) -> Settings:
        return Settings(broker=self.deployment.bootstrap, topics=self.deployment.topics)

    def mcp_command(self, *args: str, api: str | None = None) -> list[str]:
        return [sys.executable, "-m", "streams.cli", "mcp", "--api", api or self.api, *args]


def decided(worker: WorkerProcess, subject: str, field: str) -> Any:
    key = urllib.parse.quote(f"{subject}|{field}", safe="")
    return worker.get(f"/api/decisions/{key}", attempts=1)


async def seed(cluster: Cluster, now: datetime) -> None:
    at = now.isoformat()
    email = [
        {"claim_id": "email-crm", "subject": "cust:9", "field": EMAIL, "status": "present",
         "value": True, "source": "crm", "observed_at": at},
        {"claim_id": "email-form", "subject": "cust:9", "field": EMAIL, "status": "present",
         "value": False, "source": "order-form", "observed_at": at},
    ]  # fmt: skip
    claims = scenario_claims(now) + email
    async with (
        ClaimPublisher(cluster.settings) as tools,
        ClaimPublisher(cluster.settings, user_assertions=True) as users,
    ):
        await tools.alias("Acme Corp", "acme")
        await tools.publish_many(c for c in claims if c.get("source_class") != "user")
        await users.publish_many(c for c in claims if c.get("source_class") == "user")


@pytest.fixture(scope="module")
def cluster(kafka: KafkaBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    workdir = tmp_path_factory.mktemp("agents")
    policy = write_policy(workdir / "policy.yaml", **{PAYMENT: {"freshness": "10m"}})
    deployment = Deployment(bootstrap=kafka.bootstrap, workdir=workdir, policy=policy)
    worker = deployment.worker(0)
    try:
        worker.start()
        found = Cluster(deployment, worker)
        asyncio.run(seed(found, datetime.now(UTC)))
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            acme = decided(worker, "Acme Corp", "contract.seats")
            email = decided(worker, "cust:9", EMAIL)
            if decided(worker, DISPUTED, PAYMENT) and acme and email:
                break
            time.sleep(0.5)
        assert acme, "the alias did not reach the worker in 90 s"
        assert acme["key"] == "acme|contract.seats"
        yield found
    finally:
        worker.stop()


@asynccontextmanager
async def stdio_session(cluster: Cluster, *args: str, api: str | None = None) -> AsyncIterator[Any]:
    command = cluster.mcp_command(*args, api=api)
    server = StdioServerParameters(
        command=command[0], args=command[1:], env=cluster.env, cwd=str(REPO)
    )
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def structured(result: CallToolResult) -> Any:
    assert not result.is_error, result.content
    return result.structured_content


def error_text(result: CallToolResult) -> str:
    assert result.is_error, result.structured_content
    return " ".join(getattr(block, "text", "") for block in result.content)


async def test_over_stdio_an_agent_reads_facts_and_gates_its_plan(cluster: Cluster) -> None:
    async with stdio_session(cluster) as session:
        listed = (await session.list_tools()).tools
        assert {tool.name for tool in listed} == TOOLS
        for tool in listed:
            assert len(tool.description or "") > 60, tool.name
            assert tool.input_schema["type"] == "object"
            assert tool.output_schema is not None
            assert tool.output_schema["type"] == "object"

        fact = structured(
            await session.call_tool("get_fact", {"subject": DISPUTED, "field": PAYMENT})
        )
        assert (fact["outcome"], fact["action"]) == ("conflict", "block")
        sides = {e["source"]: e["value"] for e in fact["evidence"]}
        assert sides == {"billing-api": "paid", "billing-export": "overdue"}
        assert {e["authority"] for e in fact["evidence"]} == {"system_of_record"}
        assert "billing-api" in fact["warning"]
        assert "billing-export" in fact["warning"]
        assert "Do not run" in fact["warning"]

        alias = structured(
            await session.call_tool("get_fact", {"subject": "Acme Corp", "field": "contract.seats"})
        )
        assert (alias["key"], alias["outcome"], alias["value"]) == (
            "acme|contract.seats",
            "resolved",
            25,
        )
        assert alias["warning"] is None

        plan = [
            {"name": "refund", "reads": [f"{DISPUTED}|{PAYMENT}"]},
            {"name": "seats", "reads": ["acme|contract.seats"]},
            {"name": "summary", "reads": [f"cust:9|{EMAIL}"]},
        ]
        check = structured(await session.call_tool("check_plan", {"steps": plan}))
        assert check["runnable"] == ["seats"]
        blocked = {step["name"]: step for step in check["blocked"]}
        assert blocked["refund"]["then"] == "stop"
        assert blocked["refund"]["facts"] == [
            {"key": f"{DISPUTED}|{PAYMENT}", "outcome": "conflict", "action": "block",
             "reason": fact["reason"]}
        ]  # fmt: skip
        assert blocked["summary"]["then"] == "degrade"

        text = structured(
            await session.call_tool("explain_fact", {"subject": DISPUTED, "field": PAYMENT})
        )
        assert text["text"].startswith(f"{DISPUTED} {PAYMENT}")
        conflicts = structured(await session.call_tool("list_conflicts", {"field": PAYMENT}))
        assert f"{DISPUTED}|{PAYMENT}" in {row["key"] for row in conflicts["open_conflicts"]}

        # Bad input is an isError result that says what is wrong; the server goes on.
        unknown = error_text(
            await session.call_tool("get_fact", {"subject": DISPUTED, "field": "order.colour"})
        )
        assert "unknown field 'order.colour'" in unknown
        assert PAYMENT in unknown
        malformed = error_text(
            await session.call_tool("check_plan", {"steps": [{"name": "x", "reads": [DISPUTED]}]})
        )
        assert "subject|field" in malformed
        kind = error_text(await session.call_tool("list_conflicts", {"kind": "vibes"}))
        assert "cross_epoch" in kind
        claim = {
            "subject": "invoice:41",
            "field": PAYMENT,
            "value": "paid",
            "source": "billing-api",
        }
        refused = error_text(await session.call_tool("record_observation", {"claim": claim}))
        assert "--allow-writes" in refused
        nothing = error_text(
            await session.call_tool("get_fact", {"subject": "invoice:nope", "field": PAYMENT})
        )
        assert "nothing is known" in nothing
        assert structured(
            await session.call_tool("get_fact", {"subject": "acme", "field": "contract.seats"})
        )

    async with stdio_session(cluster, api=f"http://127.0.0.1:{free_port()}") as session:
        down = error_text(
            await session.call_tool("get_fact", {"subject": DISPUTED, "field": PAYMENT})
        )
        assert "cannot reach the worker's web API" in down


def wait_for_port(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise AssertionError("the MCP server's HTTP port did not open in 30 s")


async def test_over_http_a_recorded_claim_is_read_back_in_its_decision(cluster: Cluster) -> None:
    port = free_port()
    proc = subprocess.Popen(
        cluster.mcp_command("--allow-writes", "--http", f"127.0.0.1:{port}"),
        env=cluster.env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for_port(port, proc)
        async with (
            streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            before = structured(
                await session.call_tool("get_fact", {"subject": "invoice:41", "field": PAYMENT})
            )
            # It only corroborates the resolved "paid": no new decision, yet it is placed.
            claim = {"subject": "invoice:41", "field": PAYMENT, "value": "paid",
                     "source": "ledger-service", "claim_id": "agent-corroborates"}  # fmt: skip
            recorded = structured(
                await session.call_tool("record_observation", {"claim": claim, "wait_s": 30})
            )
            assert recorded["placed"] is True
            assert recorded["fact"]["decision_id"] == before["decision_id"]
            roles = {e["claim_id"]: e["role"] for e in recorded["fact"]["evidence"]}
            assert roles["agent-corroborates"] == "winner"  # the newest agreeing claim
            assert "corroborating" in roles.values()  # billing-api's earlier "paid"

            said = {"subject": DISPUTED, "field": PAYMENT, "value": "paid", "source": "chat",
                    "claim_id": "user-says-paid"}  # fmt: skip
            user = structured(
                await session.call_tool("record_user_assertion", {"claim": said, "wait_s": 30})
            )
            assert user["topic"] == cluster.deployment.topics.user_claims
            mine = [e for e in user["fact"]["evidence"] if e["claim_id"] == "user-says-paid"]
            assert mine[0]["authority"] == "asserted"
            assert user["fact"]["outcome"] == "conflict"  # an assertion settles nothing

            # An agent may ask a person to settle the conflict, never settle it: its proposal
            # waits for a steward's approval, and no tool approves.
            asked = {"subject": DISPUTED, "field": PAYMENT, "value": "paid",
                     "note": "the ledger shows it", "proposed_by": "billing-agent"}  # fmt: skip
            proposed = structured(await session.call_tool("propose_resolution", asked))
            assert proposed["proposed_by"] == "agent:billing-agent"
            assert proposed["on_decision"] == user["fact"]["decision_id"]
            history = f"/api/decisions/{urllib.parse.quote(proposed['key'], safe='')}/history"
            deadline = time.monotonic() + 30
            while not (cluster.worker.get(history) or {}).get("steward_log"):
                assert time.monotonic() < deadline, cluster.worker.log_tail()
                time.sleep(0.3)
            (waiting,) = cluster.worker.get(history)["steward_log"]
            assert (waiting["act"], waiting["standing"], waiting["needs"]) == (
                "propose",
                "pending",
                1,
            )
            still = structured(
                await session.call_tool("get_fact", {"subject": DISPUTED, "field": PAYMENT})
            )
            assert still["outcome"] == "conflict"
            approve = {
                "subject": DISPUTED,
                "field": PAYMENT,
                "target_id": proposed["resolution_id"],
            }
            assert "approve_resolution" in error_text(
                await session.call_tool("approve_resolution", approve)
            )
            settled = {**asked, "subject": "invoice:41"}
            assert "not in dispute" in error_text(
                await session.call_tool("propose_resolution", settled)
            )

            bad_status = {**claim, "status": "maybe", "claim_id": "bad-status"}
            assert "status" in error_text(
                await session.call_tool("record_observation", {"claim": bad_status})
            )
            lineage = {**claim, "lineage": "mine"}
            assert "lineage" in error_text(
                await session.call_tool("record_observation", {"claim": lineage})
            )
            unknown = {**claim, "field": "order.colour"}
            assert "unknown field" in error_text(
                await session.call_tool("record_observation", {"claim": unknown})
            )
            too_long = error_text(
                await session.call_tool("record_observation", {"claim": claim, "wait_s": 600})
            )
            assert "wait_s" in too_long
    finally:
        proc.terminate()
        proc.wait(timeout=30)


async def test_the_consumer_side_reads_gates_and_reads_its_own_claim(cluster: Cluster) -> None:
    facts = FactsClient(cluster.api)
    acme = await facts.get_fact("Acme Corp", "contract.seats")
    assert acme is not None
    assert (acme.subject, acme.value) == ("acme", 25)
    assert await facts.get_fact("invoice:nope", PAYMENT) is None

    for group in (None, "agents-feed", "agents-feed"):  # the group commits nothing: read again
        async with DecisionFeed(cluster.settings, group_id=group) as feed:
            await feed.caught_up()
            refund = feed.gate(DISPUTED, [PAYMENT])
            summary = feed.gate("cust:9", [EMAIL])
            seats = feed.gate("acme", ["contract.seats"])
        assert not refund.runnable
        assert not refund.degraded
        assert refund.actions == {PAYMENT: Action.BLOCK}
        assert refund.blocked_by[PAYMENT].startswith("conflict")
        assert summary.degraded
        assert summary.actions == {EMAIL: Action.DEGRADE}
        assert seats.runnable

    now = datetime.now(UTC).isoformat()
    claim = {"claim_id": "client-reads-back", "subject": "Acme Corp", "field": "contract.seats",
             "status": "present", "value": 25, "source": "crm", "observed_at": now,
             "valid_from": MARCH_12}  # fmt: skip
    async with ClaimPublisher(cluster.settings) as publisher:
        placed = await publisher.publish_and_wait(claim, facts, wait_s=30)
    assert placed is not None
    assert placed.subject == "acme"
    assert "client-reads-back" in {e.claim_id for e in placed.evidence}


def test_claimstream_get_and_the_agent_story(cluster: Cluster) -> None:
    def run(*command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            command, env=cluster.env, cwd=REPO, capture_output=True, text=True, timeout=180
        )

    got = run(
        sys.executable,
        "-m",
        "streams.cli",
        "get",
        "Acme Corp",
        "contract.seats",
        "--api",
        cluster.api,
    )
    assert got.returncode == 0, got.stderr
    assert got.stdout.startswith("acme contract.seats")
    as_json = run(
        sys.executable,
        "-m",
        "streams.cli",
        "get",
        DISPUTED,
        PAYMENT,
        "--json",
        "--api",
        cluster.api,
    )
    assert json.loads(as_json.stdout)["outcome"] == "conflict"
    missing = run(
        sys.executable, "-m", "streams.cli", "get", DISPUTED, "order.colour", "--api", cluster.api
    )
    assert missing.returncode == 2
    assert "unknown field" in missing.stderr

    # The tutorial's program, run as written: it takes the broker and topics from the
    # environment (CLAIMSTREAM_*), as a reader's service would.
    tutorial = (REPO / "docs" / "tutorials" / "publish-from-python.md").read_text()
    snippet = tutorial.split("```python\n", 1)[1].split("```", 1)[0]
    as_written = subprocess.run(
        [sys.executable, "-c", snippet],
        env={**cluster.env, "CLAIMSTREAM_WEB_PORT": str(cluster.worker.web_port)},
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert as_written.returncode == 0, as_written.stderr
    assert as_written.stdout.splitlines()[0] == "conflict"

    story = run(sys.executable, str(REPO / "examples" / "agent_story.py"), "--api", cluster.api)
    assert story.returncode == 0, story.stdout + story.stderr
    assert "the refund runs" in story.stdout
