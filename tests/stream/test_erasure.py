"""A data subject erased on request, on Apache Kafka, on both stores: gone from everything
served, never read back, unreadable in the logs, with a receipt.

`user:8812` has a conflict between two systems of record on its seats, which a steward
resolves, and a shipping address (a personal field: sealed by the client under the subject's
key) two sources agree on, and a third sends about `User 8812`, an alias of it; `user:7` has
the same and is not erased. A data-protection officer runs `claimstream erase user:8812
--reason ...`; it waits until a steward approves it in the console (`POST /api/erasures`).
Then:

- each of the subject's keys sent one `erased` decision (no value, no evidence, the request's
  id) and the web API answers 410 erased for it, as of now and as of an instant before the
  erasure, and for its history; the MCP tool answers erased; the console shows it erased in
  Chromium;
- SIGKILL and restart: still erased; a second deployment reading the same topics from their
  earliest offset decides `user:7` again and never sends a value of `user:8812`;
- the audit export answers the subject's keys erased, and so does `claimstream replay --clock
  --erasures` of the claims sent, given `erase history`;
- the subject's keys are destroyed: `erase status` holds the receipt, names the keys erased,
  and finds the sealed values on the claims and decisions topics, none of which opens;
- a claim made after the erasure is decided as new.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml
from playwright.sync_api import sync_playwright

from streams.agents.tools import FactTools
from streams.audit.export import Progress, export
from streams.client import ClaimPublisher, FactsClient
from streams.core.records.contracts import Claim, Decision, Outcome, Resolution
from streams.core.timeline.aliases import AliasChange
from streams.devkit.brokers import KafkaBroker
from streams.settings import Settings
from streams.wire.personal import DeploymentKey, is_sealed
from streams.wire.subject_keys import SubjectKeys
from streams.worker.alias_log import publish_alias
from tests.stream.browser import CHROMIUM, CHROMIUM_ARGS
from tests.stream.support import CODEC, REPO, Deployment, WorkerProcess, read_topic

SEATS, ADDRESS = "contract.seats", "customer.shipping_address"
ERASED, KEPT, ALIAS = "user:8812", "user:7", "User 8812"  # the alias names the erased subject
DEPLOYMENT_KEY_ID, DEPLOYMENT_KEY_VAR = "deployment-1", "ERASURE_TEST_DEPLOYMENT_KEY"
DEPLOYMENT_SECRET = base64.b64encode(b"k" * 32).decode()
ANA_TOKEN = "ana-steward-token-of-the-erasure-test"


def _policy(path: Path) -> Path:
    policy = yaml.safe_load((REPO / "examples" / "policy.yaml").read_text())
    policy["fields"][ADDRESS]["personal"] = True
    # An erasure needs a second steward's approval; the seats' resolutions none.
    policy.setdefault("defaults", {})["review"] = {"approvals": 1}
    policy["fields"][SEATS]["review"] = {"approvals": 0}
    path.write_text(yaml.safe_dump(policy))
    return path


def _claims(subject: str, at: datetime, n: str = "") -> list[Claim]:
    def claim(claim_id: str, field: str, source: str, value: Any) -> Claim:
        return Claim(
            claim_id=f"{subject}-{claim_id}{n}", subject=subject, field=field, status="present",
            value=value, source=source, observed_at=at,
        )  # fmt: skip

    return [
        claim("config", SEATS, "config-service", 20417),
        claim("export", SEATS, "billing-export", 20423),  # two systems of record: a conflict
        claim("crm-address", ADDRESS, "crm", "1 Main St, Springfield"),
        claim("billing-address", ADDRESS, "billing-api", "1 Main St, Springfield"),
    ]


async def _publish(settings: Settings, claims: list[Claim], resolve: bool = False) -> None:
    setting, env = _deployment_key()
    keys = SubjectKeys(settings, DeploymentKey.from_setting(setting, env))
    publisher = ClaimPublisher(settings, personal_fields=frozenset({ADDRESS}), subject_keys=keys)
    async with publisher:
        for claim in claims:
            await (await publisher.publish(claim))
        if resolve:
            for subject in (ERASED, KEPT):
                resolution = Resolution(
                    resolution_id=f"r-{subject}", subject=subject, field=SEATS, value=20423,
                    decided_by="ana", decided_at=datetime.now(UTC),
                )  # fmt: skip
                await (await publisher.resolve(resolution))


def _deployment_key() -> tuple[str, dict[str, str]]:
    return f"{DEPLOYMENT_KEY_ID}:{DEPLOYMENT_KEY_VAR}", {DEPLOYMENT_KEY_VAR: DEPLOYMENT_SECRET}


def _claimstream(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streams.cli", *args],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def _answer(worker: WorkerProcess, key: str, query: str = "") -> tuple[int, Any]:
    quoted = urllib.parse.quote(key, safe="")
    url = f"http://127.0.0.1:{worker.web_port}/api/decisions/{quoted}{query}"
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return reply.status, json.load(reply)
    except urllib.error.HTTPError as refused:
        return refused.code, json.load(refused)


def _until(what: str, check: Any, timeout_s: float = 60) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found or time.monotonic() > deadline:
            assert found, f"{what}: not within {timeout_s} s"
            return found
        time.sleep(0.5)


def _decisions(deployment: Deployment) -> list[Decision]:
    records = asyncio.run(
        read_topic(deployment.bootstrap, deployment.topics.decisions, idle_s=1.5,
                   isolation_level="read_committed")
    )  # fmt: skip
    return [CODEC.decode(Decision, record.value) for record in records]


@pytest.mark.parametrize(
    ("store", "guarantee"), [("memory://", "at_least_once"), ("rocksdb://", "exactly_once")]
)
def test_an_erased_subject_is_gone_from_everything_served_and_never_read_back(
    kafka: KafkaBroker, tmp_path: Path, store: str, guarantee: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    setting, _ = _deployment_key()
    deployment = Deployment(
        bootstrap=kafka.bootstrap, workdir=tmp_path, policy=_policy(tmp_path / "policy.yaml"),
        store=store, guarantee=guarantee, static_membership=True,
        settings={
            "deployment_key": setting, "policy_lead_s": "1", "policy_poll_s": "0.5",
            "steward_tokens": f"ana:{ANA_TOKEN}",
        },
    )  # fmt: skip
    monkeypatch.setenv(DEPLOYMENT_KEY_VAR, DEPLOYMENT_SECRET)  # the workers' and commands' too
    settings = Settings(
        broker=f"kafka://{deployment.bootstrap}", topics=deployment.topics,
        deployment_key=setting, policy=deployment.policy, policy_lead_s=1,
    )  # fmt: skip
    worker = deployment.worker(0).start()
    replayer = None
    try:
        merged = datetime.now(UTC)
        for steward in ("ana", "bo"):  # made by one steward, approved by another
            asyncio.run(publish_alias(settings, AliasChange(ALIAS, ERASED, merged, steward)))
        time.sleep(1.0)  # in force, and read by the worker, before the claims it covers
        before = datetime.now(UTC)
        sent = _claims(ERASED, before) + _claims(KEPT, before) + _claims(ALIAS, before)[2:3]
        asyncio.run(_publish(settings, sent))
        _until("the conflict", lambda: _answer(worker, f"{ERASED}|{SEATS}")[0] == 200)
        asyncio.run(_publish(settings, [], resolve=True))
        _until(
            "the resolution",
            lambda: _answer(worker, f"{ERASED}|{SEATS}")[1]["decision"]["resolution_id"],
        )
        env = deployment.env(0, tmp_path / "cli")
        asked = _claimstream(env, "erase", ERASED, "--reason", "Art. 17 request 2026-118",
                             "--by", "dpo")  # fmt: skip
        assert asked.returncode == 0, asked.stderr
        erasure_id = json.loads(asked.stdout)["erasure_id"]
        time.sleep(1.5)  # past its instant: it waits for a steward's approval all the same
        assert _answer(worker, f"{ERASED}|{SEATS}")[0] == 200
        waiting = _claimstream(env, "erase", "status", erasure_id)
        assert json.loads(waiting.stdout)["state"] == "waiting", waiting.stderr
        status, approved = worker.post("/api/erasures", {"approve": erasure_id}, ANA_TOKEN)
        assert (status, approved["by"]) == (202, "ana"), approved
        erased_at = datetime.fromisoformat(approved["at"])
        erased = _until(
            "an erased decision per key",
            lambda: [d for d in _decisions(deployment) if d.outcome is Outcome.ERASED] or None,
        )
        assert {(d.subject, d.field, d.resolution_id, d.value, d.evidence) for d in erased} == {
            (ERASED, SEATS, erasure_id, None, ()),
            (ERASED, ADDRESS, erasure_id, None, ()),
        }
        assert {d.decided_at for d in erased} == {erased_at}
        _check_served(worker, before, erasure_id, settings)
        worker.kill()
        worker.start()
        _until("restored", lambda: worker.get("/readyz", attempts=1))
        _check_served(worker, before, erasure_id, settings)
        count = len(_decisions(deployment))
        replayer = deployment.worker(1, CLAIMSTREAM_APP_ID=f"{deployment.name}-replay")
        _check_replayed(deployment, replayer.start(), count)
        _check_audit(settings, tmp_path, erasure_id)
        status = _until("the receipt", lambda: _status(env, erasure_id))
        _check_receipt(status, erasure_id)
        _check_replay(env, tmp_path, sent, deployment.policy, erasure_id)
        after = datetime.now(UTC)
        asyncio.run(_publish(settings, _claims(ERASED, after, n="-new")[2:3]))
        _, answer = _until(
            "the claim after",
            lambda: (found := _answer(worker, f"{ERASED}|{ADDRESS}"))[0] == 200 and found,
        )
        assert [e["claim_id"] for e in answer["decision"]["evidence"]] == [
            f"{ERASED}-crm-address-new"
        ]
        assert is_sealed(answer["decision"]["value"])
    finally:
        worker.stop()
        if replayer is not None:
            replayer.stop()
    assert "Traceback" not in worker.log_tail(400), worker.log_tail()


def _check_served(
    worker: WorkerProcess, before: datetime, erasure_id: str, settings: Settings
) -> None:
    """The web API (now, as of before the erasure, history), the MCP tool and the console."""
    earlier = "?as_of=" + urllib.parse.quote(before.isoformat(), safe="")
    for subject, field in ((ERASED, SEATS), (ERASED, ADDRESS), (ALIAS, ADDRESS)):
        for query in ("", earlier):
            code, answer = _answer(worker, f"{subject}|{field}", query)
            assert code == 410, answer
            assert (answer["erased"], answer["erasure_id"]) == (True, erasure_id)
            assert "value" not in json.dumps(answer)
        code, _ = _answer(worker, f"{subject}|{field}", "/history")
        assert code == 410
    assert _answer(worker, f"{KEPT}|{SEATS}")[1]["decision"]["value"] == 20423
    tools = FactTools(
        FactsClient(f"http://127.0.0.1:{worker.web_port}"), settings, allow_writes=False
    )
    fact = asyncio.run(tools.get_fact(ERASED, SEATS))
    assert (fact.outcome, fact.erasure_id, fact.value, fact.evidence) == (
        Outcome.ERASED, erasure_id, None, [],
    )  # fmt: skip
    with sync_playwright() as driver:
        browser = driver.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        try:
            page = browser.new_page()
            key = urllib.parse.quote(f"{ERASED}|{SEATS}", safe="")
            page.goto(f"http://127.0.0.1:{worker.web_port}/ui/#/key/{key}")
            panel = page.wait_for_selector(f"[data-erased='{erasure_id}']", timeout=30_000)
            assert panel is not None
            assert "20423" not in panel.inner_text()
        finally:
            browser.close()


def _check_replayed(deployment: Deployment, replayer: WorkerProcess, count: int) -> None:
    """A second deployment (its own group and changelog) reads every input topic from its
    earliest offset: it decides `user:7` again and sends nothing of `user:8812` but erased."""
    decisions = _until(
        "the replay's decisions",
        lambda: (
            (found := _decisions(deployment)[count:])
            and any(d.subject == KEPT for d in found)
            and found
        ),
    )
    assert all(d.outcome is Outcome.ERASED for d in decisions if d.subject == ERASED)
    assert _answer(replayer, f"{ERASED}|{SEATS}")[0] == 410


def _check_audit(settings: Settings, tmp_path: Path, erasure_id: str) -> None:
    asyncio.run(
        export(
            settings, tmp_path / "audit", as_of=datetime.now(UTC), progress=Progress(io.StringIO())
        )
    )
    rows = pq.read_table(tmp_path / "audit" / "beliefs.parquet").to_pylist()
    mine = {r["field"]: r for r in rows if r["subject"] == ERASED}
    assert {f: (r["outcome"], r["value"], r["resolution_id"]) for f, r in mine.items()} == {
        SEATS: ("erased", None, erasure_id),
        ADDRESS: ("erased", None, erasure_id),
    }
    evidence = pq.read_table(tmp_path / "audit" / "evidence.parquet").to_pylist()
    assert not [r for r in evidence if r["subject"] == ERASED]


def _check_replay(
    env: dict[str, str], tmp_path: Path, sent: list[Claim], policy: Path, erasure_id: str
) -> None:
    """`claimstream replay --clock --erasures` of the claims sent, with the erasures in effect
    (`erase history`): each key of the subject says it was erased, and nothing else."""
    history = _claimstream(env, "erase", "history")
    assert history.returncode == 0, history.stderr
    (tmp_path / "erasures.jsonl").write_text(history.stdout)
    claims = tmp_path / "claims.jsonl"
    claims.write_text("".join(claim.model_dump_json() + "\n" for claim in sent))
    now = datetime.now(UTC).isoformat()
    replayed = _claimstream(
        env, "replay", "--clock", "--now", now, "--policy", str(policy), str(claims),
        "--erasures", str(tmp_path / "erasures.jsonl"),
    )  # fmt: skip
    assert replayed.returncode == 0, replayed.stderr
    told = [json.loads(line) for line in replayed.stdout.splitlines()]
    mine = {(d["field"], d["outcome"], d["resolution_id"]) for d in told if d["subject"] == ERASED}
    assert mine == {(SEATS, "erased", erasure_id)}  # its addresses: refused, in plain text here
    assert {d["subject"] for d in told} == {ERASED, KEPT}


def _status(env: dict[str, str], erasure_id: str) -> dict[str, Any] | None:
    found = _claimstream(env, "erase", "status", erasure_id)
    assert found.returncode == 0, found.stderr
    status: dict[str, Any] = json.loads(found.stdout)
    return status if status.get("receipt") else None


def _check_receipt(status: dict[str, Any], erasure_id: str) -> None:
    receipt, check = status["receipt"], status["decryption_check"]
    assert status["keys_erased"] == [f"{ERASED}|{SEATS}", f"{ERASED}|{ADDRESS}"]
    assert (status["state"], receipt["erasure_id"], receipt["requested_by"]) == (
        "erased", erasure_id, "dpo",
    )  # fmt: skip
    # The subject's keys and its alias's: each spelling's producers sealed under its own.
    assert {key.split("|")[0] for key in receipt["keys_destroyed"]} == {"user:8812", "user 8812"}
    assert receipt["personal_fields"] == [ADDRESS]
    assert {c["topic"].rsplit(".", 1)[-1] for c in receipt["copies"]} >= {"tools", "decisions"}
    assert "Main St" not in json.dumps(status)
    assert check["sealed_values_found"] >= 1  # both sources sent one address: sealed alike
    assert check["checked_with_deployment_key"]
    assert (check["still_open"], check["keys_remaining"], check["decryption_fails"]) == (
        0,
        [],
        True,
    )
