"""Two stewards' work on a real worker and broker, through the console's write API and the
command line: proposals in bulk, each answered on its own; an author's own approvals refused
where the steward sees them; a second steward's approvals in bulk, each naming the basis it saw;
the queue's tasks taken, listed and released, filtered by who holds them; the gauges of reviews
waiting."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from streams.core.keys.state import state_key
from streams.devkit.brokers import KafkaBroker
from streams.settings import Settings
from tests.stream.support import REPO, Deployment, WorkerProcess, publish_claims, write_policy

pytestmark = pytest.mark.integration

FIELD = "contract.reviewed_seats"
ALICE, BOB = "alice-console-token-01", "bob-console-token-0123"
KEYS = 200


def until(
    what: str, check: Callable[[], bool], worker: WorkerProcess, timeout_s: float = 90
) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"{what}\n{worker.log_tail()}"
        time.sleep(0.5)


def path_of(subject: str) -> str:
    return "/api/decisions/" + urllib.parse.quote(state_key(subject, FIELD), safe="")


def gauge(worker: WorkerProcess, name: str) -> float:
    for line in worker.get("/metrics").splitlines():
        if line.startswith(f'{name}{{field="{FIELD}"}}'):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} for {FIELD} is not exposed")


def test_two_stewards_review_in_bulk_and_share_the_queue(
    kafka: KafkaBroker, tmp_path: Path
) -> None:
    policy = write_policy(
        tmp_path / "policy.yaml",
        **{FIELD: {"type": "integer", "freshness": "none", "review": {"approvals": 1}}},
    )
    deployment = Deployment(bootstrap=kafka.bootstrap, workdir=tmp_path, policy=policy)
    settings = Settings(broker=kafka.bootstrap, topics=deployment.topics)
    worker = deployment.worker(0, CLAIMSTREAM_STEWARD_TOKENS=f"alice:{ALICE},bob:{BOB}").start()
    subjects = [f"contract:{n}" for n in range(KEYS + 1)]
    now = datetime.now(UTC).isoformat()
    claims = [
        {"claim_id": f"{s}-{source}", "subject": s, "field": FIELD, "status": "present",
         "value": value, "source": source, "observed_at": now}
        for s in subjects
        for source, value in (("crm", 12), ("order-form", 15))
    ]  # fmt: skip
    try:
        assert worker.get("/api/console", token=BOB)["steward"] == "bob"
        assert worker.get("/api/console")["steward"] is None
        asyncio.run(publish_claims(settings, claims))
        queue = f"/api/conflicts?field={urllib.parse.quote(FIELD)}"
        until("every key a conflict", lambda: _open(worker, queue) == KEYS + 1, worker)

        proposed = [{"subject": s, "field": FIELD, "value": 12} for s in subjects[:KEYS]]
        status, answer = worker.post("/api/resolutions/batch", {"statements": proposed}, ALICE)
        assert (status, answer["accepted"], answer["refused"]) == (200, KEYS, 0), answer
        ids = [r["resolution"]["resolution_id"] for r in answer["results"]]
        until(
            "every proposal waiting",
            lambda: gauge(worker, "claimstream_reviews_waiting") == KEYS,
            worker,
        )
        # A proposal changes no belief: the conflicts stay open until a second steward approves.
        assert _open(worker, queue) == KEYS + 1

        def approval(subject: str, proposal: str) -> dict[str, Any]:
            basis = worker.get(path_of(subject))["basis"]
            return {
                "subject": subject, "field": FIELD, "act": "approve", "target_id": proposal,
                "resolves_decision_id": basis["decision_id"],
                "basis_digest": basis["evidence_digest"],
            }  # fmt: skip

        approvals = [approval(s, p) for s, p in zip(subjects[:KEYS], ids, strict=True)]
        own = worker.post("/api/resolutions/batch", {"statements": approvals[:2]}, ALICE)[1]
        assert [r["refused"] for r in own["results"]] == ["review_refused"] * 2, own
        assert "its author's approval does not count" in own["results"][0]["error"]
        status, answer = worker.post("/api/resolutions/batch", {"statements": approvals}, BOB)
        assert (status, answer["accepted"]) == (200, KEYS), answer
        assert [r["index"] for r in answer["results"]] == list(range(KEYS))
        until("every approved key resolved", lambda: _open(worker, queue) == 1, worker)
        assert worker.get(path_of(subjects[0]))["decision"]["reason"] == "manual"
        until("none waiting", lambda: gauge(worker, "claimstream_reviews_waiting") == 0, worker)

        # The last conflict is a task: bob takes it; alice cannot, and sees it is bob's.
        last = subjects[-1]
        take = {"subject": last, "field": FIELD, "act": "assign", "assignee": "bob"}
        assert worker.post("/api/resolutions", take, BOB)[0] == 202
        mine = f"{queue}&assignee=bob"
        until("bob's task listed", lambda: _open(worker, mine) == 1, worker)
        assert _open(worker, f"{queue}&unassigned=1") == 0
        grab = {"subject": last, "field": FIELD, "act": "assign", "assignee": "alice"}
        status, refused = worker.post("/api/resolutions", grab, ALICE)
        assert (status, refused["refused"]) == (409, "review_refused"), refused
        assert "the task is bob's until" in refused["error"]

        listed = _cli(deployment, worker, "review", "queue", "--mine", "bob")
        assert f"{state_key(last, FIELD)}  conflict" in listed, listed
        assert "held by bob until" in listed
        _cli(deployment, worker, "review", "release", state_key(last, FIELD), "--by", "bob")
        until("the task released", lambda: _open(worker, f"{queue}&unassigned=1") == 1, worker)

        shown = _cli(deployment, worker, "review", "show", state_key(subjects[0], FIELD))
        assert f"in_force   resolve = 12  {ids[0]} by alice" in shown, shown
        assert "recorded   approve " in shown
        assert worker.restarts() == 0
    finally:
        worker.stop()


def _open(worker: WorkerProcess, queue: str) -> int:
    answer = worker.get(queue) or {}
    return len(answer.get("open_conflicts", ()))


def _cli(deployment: Deployment, worker: WorkerProcess, *args: str) -> str:
    env = deployment.env(0, deployment.workdir / "cli")
    url = f"http://127.0.0.1:{worker.web_port}"
    done = subprocess.run(
        [sys.executable, "-m", "streams.cli", *args, "--url", url],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=60,
        check=True,
    )
    return done.stdout
