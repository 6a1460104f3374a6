"""A policy previewed against live state on Apache Kafka: two workers, twenty keys decided under
policy A, then `POST /api/policy/preview` (and `claimstream policy preview`) with policy B.

B swaps crm's and the order form's authorities on `contract.seats`, makes `service.retry_timeout`
degrade instead of block, and drops the source `chat`. The worker asked answers for both workers'
keys: per field, the flips are exactly those of the keys whose decision under B (replay with B
taking effect at the preview's instant) says something else than under A, each example key's
before and after are those decisions, chat's kept claims are counted as refused with the
loader's reason. And nothing moved: the decisions and changelog topics hold the same records as
before, every key still answers its decision under A, and A is still in force.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiokafka import AIOKafkaProducer

from streams.cli.main import main
from streams.core.keys.state import state_key
from streams.core.reading.preview_report import Gist
from streams.core.reading.replay import replay_with_clock
from streams.core.records.contracts import Claim, Decision
from streams.core.records.policy import load_policy
from streams.core.timeline.aliases import AliasChange, AliasHistory
from streams.core.timeline.rollout import InForce, PolicyHistory
from streams.devkit.brokers import KafkaBroker
from tests.stream.support import CODEC, REPO, Deployment, read_topic, start_ready

SEATS, TIMEOUT = "contract.seats", "service.retry_timeout"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _policy(path: Path, version: str) -> Path:
    policy = yaml.safe_load((REPO / "examples" / "policy.yaml").read_text())
    policy["version"] = version
    a = version == "A"
    policy["fields"][SEATS]["authorities"] = {
        "crm": "system_of_record" if a else "cached",
        "order-form": "cached" if a else "system_of_record",
    }
    policy["fields"][TIMEOUT]["on_conflict"] = "block" if a else "degrade"
    if not a:
        del policy["sources"]["chat"]
    path.write_text(yaml.safe_dump(policy))
    return path


def _claims(start: datetime) -> list[Claim]:
    """Ten seat counts crm and the order form disagree on, five retry timeouts two systems of
    record disagree on, five seat counts crm and chat agree on."""
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


async def _publish(claims: list[Claim], deployment: Deployment) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=deployment.bootstrap, acks="all")
    await producer.start()
    try:
        topic = deployment.topics.claims
        for claim in claims:
            key = state_key(claim.subject, claim.field).encode()
            stamp = int(claim.observed_at.timestamp() * 1000)
            await producer.send_and_wait(
                topic, CODEC.encode(topic, claim), key=key, timestamp_ms=stamp
            )
    finally:
        await producer.stop()


def _final(claims: list[Claim], history: PolicyHistory, now: datetime) -> dict[str, Decision]:
    """Each key's last decision, as replay with the clock gives it."""
    timed = replay_with_clock([c.model_dump_json() for c in claims], history, now)
    assert timed.rejections == []
    return {
        state_key(e.decision.subject, e.decision.field): e.decision
        for e in timed.emitted
        if not e.escalation
    }


def _records(deployment: Deployment, topic: str) -> list[tuple[bytes, bytes]]:
    found = asyncio.run(read_topic(deployment.bootstrap, topic, idle_s=1.5))
    return sorted((r.key or b"", r.value or b"") for r in found)


def _post(url: str, text: str) -> tuple[int, Any]:
    request = urllib.request.Request(f"{url}/api/policy/preview", data=text.encode(), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, json.load(reply)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _answers(worker: Any, keys: list[str]) -> dict[str, str]:
    """Each key's current decision id, as the web API answers it."""
    found = {}
    for key in keys:
        answer = worker.get(f"/api/decisions/{urllib.parse.quote(key, safe='')}")
        found[key] = answer["decision"]["decision_id"]
    return found


def test_a_preview_reports_what_b_would_flip_and_moves_nothing(
    kafka: KafkaBroker, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy_a, policy_b = _policy(tmp_path / "a.yaml", "A"), _policy(tmp_path / "b.yaml", "B")
    deployment = Deployment(bootstrap=kafka.bootstrap, workdir=tmp_path, policy=policy_a)
    workers = [deployment.worker(0), deployment.worker(1)]
    started = time.monotonic()
    claims = _claims(datetime.fromtimestamp(round(time.time()), UTC))
    a, b = load_policy(policy_a), load_policy(policy_b)
    under_a = _final(claims, PolicyHistory.of(a), datetime.now(UTC))
    try:
        asyncio.run(start_ready(workers))
        asyncio.run(_publish(claims, deployment))
        deadline = time.monotonic() + 40
        while True:  # every key decided under A, on whichever worker owns it
            try:
                answers = _answers(workers[0], sorted(under_a))
            except (TypeError, KeyError):
                answers = {}
            if answers == {k: d.decision_id for k, d in under_a.items()}:
                break
            assert time.monotonic() < deadline, answers
            time.sleep(0.5)
        decisions = _records(deployment, deployment.topics.decisions)
        changelog = _records(deployment, f"{deployment.name}-key-state-changelog")
        assert len({key for key, _ in decisions}) == 20

        url = f"http://127.0.0.1:{workers[0].web_port}"
        status, refused = _post(url, "version: [B")
        assert status == 400
        assert "not valid YAML" in refused["error"]
        status, answer = _post(url, policy_b.read_text())
        assert status == 200, answer
        _check_preview(answer, claims, a, b, under_a, workers)

        assert main(["policy", "preview", str(policy_b), "--url", url]) == 0
        shown = capsys.readouterr().out
        assert "policy preview: policy B against 20 keys held by 2 workers (in force: A)" in shown
        assert "15 would flip" in shown
        assert "unknown_source: source 'chat' is not in policy B" in shown
        assert main(["policy", "preview", str(policy_b), "--url", url, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["flipped"] == answer["flipped"]
        _check_alias_preview(url, claims, a, workers, capsys)

        # Nothing was sent and no state changed: the same records, the same answers, A in force.
        assert _records(deployment, deployment.topics.decisions) == decisions
        assert _records(deployment, f"{deployment.name}-key-state-changelog") == changelog
        assert _answers(workers[1], sorted(under_a)) == {
            k: d.decision_id for k, d in under_a.items()
        }
        assert {w.get("/healthz")["policy_version"] for w in workers} == {"A"}
    finally:
        for worker in workers:
            worker.stop()
    for worker in workers:
        assert "Traceback" not in worker.log_tail(400), worker.log_tail()
    print(
        f"policy preview: {answer['flipped']} flips of 20 keys in {time.monotonic() - started:.1f}s"
    )


def _check_alias_preview(
    url: str,
    claims: list[Claim],
    a: Any,
    workers: list[Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An alias previewed across the two workers: a seat count crm and chat agree on merged
    into a contract crm and the order form disagree on, the two keys owned by different
    workers. What would move, and each key's decision after, are what replay decides with the
    alias in force from the preview's instant; a retraction of an alias not in force moves
    nothing."""
    owners = {}
    for subject in [
        *(f"contract:{n}" for n in range(10)),
        *(f"contract:chat{n}" for n in range(5)),
    ]:
        key = urllib.parse.quote(state_key(subject, SEATS), safe="")
        owners[subject] = workers[0].get(f"/api/decisions/{key}")["worker"]
    alias, subject = next(
        (f"contract:chat{i}", f"contract:{n}")
        for i in range(5)
        for n in range(10)
        if owners[f"contract:chat{i}"] != owners[f"contract:{n}"]
    )
    query = urllib.parse.urlencode({"alias": alias, "subject": subject})
    with urllib.request.urlopen(f"{url}/api/aliases/preview?{query}", timeout=60) as reply:
        answer = json.load(reply)
    at = datetime.fromisoformat(answer["at"])
    merged = replay_with_clock(
        [c.model_dump_json() for c in claims],
        a,
        at,
        aliases=AliasHistory([AliasChange(alias, subject, at)]),
    )
    then = {  # each key's last decision by then (one whose belief stays emits none then)
        state_key(e.decision.subject, SEATS): e.decision for e in merged.emitted if not e.escalation
    }
    alias_key, subject_key = state_key(alias, SEATS), state_key(subject, SEATS)
    assert answer["keys_read"] == 2, answer
    assert [(m["from"], m["to"], m["claims"]) for m in answer["moves"]] == [
        (alias_key, subject_key, 2)
    ]
    after = {k["key"]: Gist.from_json(k["after"]) for k in answer["keys"]}
    assert after == {key: Gist.of(then[key]) for key in (alias_key, subject_key)}
    assert then[alias_key].reason.endswith(f"merged into {subject!r}")

    assert main(["alias", "preview", alias, subject, "--url", url]) == 0
    shown = capsys.readouterr().out
    assert f"{alias_key}: 2 claims would move to {subject_key}" in shown
    assert main(["alias", "preview", alias, "--url", url]) == 0
    assert f"claims about {alias!r} already count on {alias!r}: nothing moves" in (
        capsys.readouterr().out
    )


def _check_preview(
    answer: dict[str, Any],
    claims: list[Claim],
    a: Any,
    b: Any,
    under_a: dict[str, Decision],
    workers: list[Any],
) -> None:
    """The preview's counts and examples are what A and B decide, key by key."""
    at = datetime.fromisoformat(answer["at"])
    under_b = _final(claims, PolicyHistory([InForce(EPOCH, a), InForce(at, b)]), at)
    assert sorted(answer["workers"]) == sorted(f"http://127.0.0.1:{w.web_port}" for w in workers)
    assert answer["unanswered"] == []
    assert (answer["policy_version"], answer["in_force"], answer["looked_at"]) == ("B", ["A"], 20)
    assert sum(part["looked_at"] for part in answer["by_worker"]) == 20
    assert all(part["looked_at"] > 0 for part in answer["by_worker"]), answer["by_worker"]
    flipping = {k for k in under_a if Gist.of(under_a[k]) != Gist.of(under_b[k])}
    fields = {f["field"]: f for f in answer["fields"]}
    assert sorted(fields) == [SEATS, TIMEOUT]
    for name, found in fields.items():
        mine = sorted(k for k in flipping if k.endswith(f"|{name}"))
        assert (found["looked_at"], found["not_judged"]) == (
            sum(k.endswith(f"|{name}") for k in under_a),
            0,
        )
        assert found["flipped"] == len(mine), (name, found)
        assert [e["key"] for e in found["examples"]] == mine[:5]
        for example in found["examples"]:
            key = example["key"]
            assert example["before"] == Gist.of(under_a[key]).as_json()
            assert example["after"] == Gist.of(under_b[key]).as_json()
    assert len(flipping) == 15  # ten seat counts (crm -> order form), five timeouts (degrade)
    assert {f["flip"]: f["keys"] for f in fields[TIMEOUT]["flips"]} == {
        "conflict/value (block) -> conflict/value (degrade)": 5
    }
    assert fields[SEATS]["refused_claims"] == 5
    ((refusal,),) = [[r["reason"] for r in fields[SEATS]["refusals"]]]
    assert refusal.startswith("unknown_source: source 'chat' is not in policy B")
