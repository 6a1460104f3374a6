"""Time decides on every store and guarantee: what a worker sends is replay's with the clock in it.

A seeded history in which time matters (claims whose freshness runs out, a fresh claim after
the key went insufficient, conflicts that escalate, a conflict a person resolves first, one
whose resolution is undone, one settled only once a second steward approves it, and an approval
refused as stale because new evidence arrived after its steward looked, redeliveries) is
published in real time, each record stamped with its own instant, to four
workers at once on one Apache Kafka broker: memory and RocksDB stores, at least once and exactly
once. Each worker is stopped cleanly and restarted, then SIGKILLed and restarted, while the
history runs. Then, key by key, the decisions and escalations on the topics are those
`replay_with_clock` gives for the same records (under exactly once with no repeat; at least once
may repeat a record already sent, never send another), each worker's web API answers the
replay's last decision, and `claimstream audit export` as of an instant after the kill, from the
topics alone, believes each key's last decision on the topic by then.
"""

from __future__ import annotations

import asyncio
import io
import json
import random
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer

from streams.audit.export import Progress, export
from streams.core.admission.intake import admit
from streams.core.keys.belief import basis_now
from streams.core.keys.state import state_key
from streams.core.keys.transitions import add_claim
from streams.core.reading.replay import replay_with_clock
from streams.core.records.contracts import Claim, Outcome, RejectReason, Resolution
from streams.core.records.policy import Policy, load_policy
from streams.devkit.brokers import KafkaBroker
from streams.settings import Settings
from tests.stream.support import (
    CODEC,
    Deployment,
    Sent,
    WorkerProcess,
    decisions_by_key,
    every_store_and_guarantee,
    sent_of,
    start_ready,
    without_repeats,
    write_policy,
)

SEED = 20261204
FRESHNESS_S = 8  # order.payment_status
ESCALATE_S = 10  # contract.seats
KEYS_PER_CASE = 5
RESTART_AT_S, KILL_AT_S, END_AT_S = 6.0, 14.0, 26.0
AUDIT_AS_OF_S = 16.0  # after the restart and the kill, steward cases settled, timers pending


REVIEWED = "contract.reviewed_seats"  # a resolution counts once another steward approves it


@dataclass(frozen=True)
class Event:
    """A record of the history: stamped with the instant `at_s` seconds after the start (a claim
    observed then, a resolution decided then), published `late_s` after it (a redelivery)."""

    at_s: float
    case: str
    subject: str
    field: str
    record: dict[str, Any]
    resolution: bool = False
    late_s: float = 0.0


def _history(rng: random.Random) -> list[Event]:
    events: list[Event] = []
    numbers = iter(range(1_000_000))

    def claim(at_s: float, case: str, subject: str, field: str, **fields: Any) -> Event:
        record = {"claim_id": f"c{next(numbers)}", "status": "present", **fields}
        return Event(round(at_s, 3), case, subject, field, record)

    for i in range(KEYS_PER_CASE):
        a = rng.randint(10, 30) / 10  # each key starts 1-3 s in
        paid = {"source": "billing-api", "value": "paid"}
        payment = "order.payment_status"
        events.append(claim(a, "expires", f"expires-{i}", payment, **paid))
        events += [
            claim(a, "two_claims", f"two-{i}", payment, **paid),
            claim(a + 2.5, "two_claims", f"two-{i}", payment, **paid),
        ]
        events += [
            claim(a, "fresh_after_expiry", f"again-{i}", payment, **paid),
            claim(a + FRESHNESS_S + 3, "fresh_after_expiry", f"again-{i}", payment, **paid),
        ]
        for case in ("escalates", "resolved_first"):
            subject = f"{case}-{i}"
            events += [
                claim(a, case, subject, "contract.seats", source="crm", value=12),
                claim(a + 1, case, subject, "contract.seats", source="order-form", value=15),
            ]
        resolution = {"resolution_id": f"r{i}", "value": 12, "decided_by": "steward"}
        events.append(
            Event(
                a + 4, "resolved_first", f"resolved_first-{i}", "contract.seats", resolution, True
            )
        )
        events += _steward_cases(a, i, claim)
    # Redeliveries: a producer retried after a lost acknowledgement.
    claims = [e for e in events if not e.resolution]
    events += [
        Event(e.at_s, e.case, e.subject, e.field, e.record, late_s=0.2)
        for e in rng.sample(claims, 8)
    ]
    return sorted(events, key=lambda e: e.at_s + e.late_s)


def _steward_cases(a: float, i: int, claim: Callable[..., Event]) -> list[Event]:
    """A resolution undone; a proposal approved by another steward across a restart; an
    approval whose steward looked before new evidence arrived (stale: the proposal goes back)."""
    seats = "contract.seats"
    events = [
        claim(a, "undone", f"undone-{i}", seats, source="crm", value=12),
        claim(a + 1, "undone", f"undone-{i}", seats, source="order-form", value=15),
        Event(a + 3, "undone", f"undone-{i}", seats, _said(f"u{i}", "alice", value=12), True),
        Event(a + 7, "undone", f"undone-{i}", seats, _said(f"uu{i}", "bob", "undo", f"u{i}"), True),
    ]
    for case, approved_at in (("approved", a + 11), ("stale", a + 7)):
        subject = f"{case}-{i}"
        events += [
            claim(a, case, subject, REVIEWED, source="crm", value=12),
            claim(a + 1, case, subject, REVIEWED, source="order-form", value=15),
            Event(a + 3, case, subject, REVIEWED, _said(f"p{i}", "alice", value=12), True),
            Event(
                approved_at,
                case,
                subject,
                REVIEWED,
                _said(f"ok{i}", "bob", "approve", f"p{i}", basis_at=a + 2),
                True,
            ),
        ]
    events.append(claim(a + 5, "stale", f"stale-{i}", REVIEWED, source="crm", value=13))
    return events


def _said(
    statement_id: str, by: str, act: str = "resolve", target: str | None = None, **more: Any
) -> dict[str, Any]:
    """A steward's statement; `basis_at`: the second the approving steward looked at the key."""
    return {"resolution_id": statement_id, "decided_by": by, "act": act, "target_id": target} | more


def _records(history: list[Event], start: datetime, policy: Policy) -> list[Claim | Resolution]:
    """Each event's record, in the history's order."""
    return [_model(event, start, history, policy) for event in history]


def _model(
    event: Event, start: datetime, history: list[Event], policy: Policy
) -> Claim | Resolution:
    at = start + timedelta(seconds=event.at_s)
    common = {"subject": event.subject, "field": event.field}
    if not event.resolution:
        return Claim.model_validate({**event.record, **common, "observed_at": at})
    record = dict(event.record)
    looked = record.pop("basis_at", None)
    if looked is not None:  # what the key's decision was when its steward looked
        looked_at = start + timedelta(seconds=looked)
        decision_id, digest = _basis(event, start, history, policy, looked_at)
        record |= {"resolves_decision_id": decision_id, "basis_digest": digest}
    return Resolution.model_validate({**record, **common, "decided_at": at})


def _basis(
    event: Event, start: datetime, history: list[Event], policy: Policy, looked: datetime
) -> tuple[str, str]:
    """The key's decision and evidence digest at `looked`, from its claims until then."""
    rules = policy.rules_for(event.field)
    assert rules is not None
    state = None
    for earlier in history:
        at = start + timedelta(seconds=earlier.at_s)
        if earlier.subject == event.subject and not earlier.resolution and at <= looked:
            claim = _model(earlier, start, history, policy)
            assert isinstance(claim, Claim)
            state = add_claim(state, admit(claim, policy, at), rules, policy.version, at).state
    assert state is not None
    basis = basis_now(state, rules, policy.version, looked)
    assert basis is not None
    return basis


async def _publish(
    history: list[Event],
    records: list[Claim | Resolution],
    start: datetime,
    deployments: list[Deployment],
) -> None:
    """Each record to every deployment at its instant, stamped with it."""
    producer = AIOKafkaProducer(bootstrap_servers=deployments[0].bootstrap, acks="all")
    await producer.start()
    try:
        for event, model in zip(history, records, strict=True):
            at = start + timedelta(seconds=event.at_s)
            await asyncio.sleep(max(0.0, at.timestamp() + event.late_s - time.time()))
            key = state_key(event.subject, event.field).encode()
            for deployment in deployments:
                topics = deployment.topics
                topic = topics.resolutions if event.resolution else topics.claims
                stamp = int(at.timestamp() * 1000)
                await producer.send_and_wait(
                    topic, CODEC.encode(topic, model), key=key, timestamp_ms=stamp
                )
    finally:
        await producer.stop()


async def _faults(start: datetime, workers: list[WorkerProcess]) -> None:
    """A clean restart of every worker, then a SIGKILL and a restart."""

    async def at(seconds: float, action: Callable[[WorkerProcess], Any]) -> None:
        await asyncio.sleep(max(0.0, start.timestamp() + seconds - time.time()))
        await asyncio.gather(*(asyncio.to_thread(action, w) for w in workers))

    await at(RESTART_AT_S, WorkerProcess.stop)
    await at(RESTART_AT_S, WorkerProcess.start)
    await at(KILL_AT_S, WorkerProcess.kill)
    await at(KILL_AT_S, WorkerProcess.start)


@dataclass
class Replayed:
    """Replay's records per key, in order, and what each key's case is."""

    decisions: dict[tuple[str, str], list[Sent]]
    escalations: dict[tuple[str, str], list[Sent]]
    outcomes: dict[tuple[str, str], list[Outcome]]
    cases: dict[str, str]


def _replayed(
    history: list[Event], records: list[Claim | Resolution], now: datetime, policy: Policy
) -> Replayed:
    claims = [r.model_dump_json() for r in records if isinstance(r, Claim)]
    resolutions = [r.model_dump_json() for r in records if isinstance(r, Resolution)]
    timed = replay_with_clock(claims, policy, now, resolutions)
    # The only refusals: the stale approvals, one a key of that case.
    assert [r.reason for r in timed.rejections] == [RejectReason.STALE_DECISION] * KEYS_PER_CASE
    assert all("is sent back to its author" in r.detail for r in timed.rejections)
    assert timed.rejected_resolutions == []
    replayed = Replayed({}, {}, {}, {e.subject: e.case for e in history})
    for emitted in timed.emitted:
        d = emitted.decision
        key = (d.subject, d.field)
        if emitted.escalation:
            replayed.escalations.setdefault(key, []).append(sent_of(d))
        else:
            sent = replayed.decisions.setdefault(key, [])
            if sent_of(d) not in sent:  # a redelivery's repeat is no new belief
                replayed.outcomes.setdefault(key, []).append(d.outcome)
            sent.append(sent_of(d))
    return replayed


def test_time_decides_alike_on_every_store_and_guarantee_across_restarts(
    kafka: KafkaBroker, tmp_path: Path
) -> None:
    policy = write_policy(
        tmp_path / "policy.yaml",
        **{
            "order.payment_status": {"freshness": f"{FRESHNESS_S}s", "escalate_after": "1h"},
            "contract.seats": {"freshness": "none", "escalate_after": f"{ESCALATE_S}s"},
            REVIEWED: {
                "type": "integer",
                "freshness": "none",
                "escalate_after": "1h",
                "review": {"approvals": 1},
            },
        },
    )
    deployments = every_store_and_guarantee(kafka.bootstrap, tmp_path, policy)
    workers = [d.worker() for d in deployments]
    history = _history(random.Random(SEED))
    try:
        asyncio.run(start_ready(workers))
        start = datetime.fromtimestamp(round(time.time() + 1.0), UTC)
        records = _records(history, start, load_policy(policy))
        asyncio.run(_run(history, records, start, deployments, workers))
        time.sleep(max(0.0, start.timestamp() + END_AT_S - time.time()))
        now = datetime.now(UTC)
        replayed = _replayed(history, records, now, load_policy(policy))
        _check_the_table(replayed)
        for deployment, worker in zip(deployments, workers, strict=True):
            _check_deployment(deployment, worker, replayed)
            _check_export(deployment, start + timedelta(seconds=AUDIT_AS_OF_S), tmp_path)
    finally:
        for worker in workers:
            worker.stop()
    for worker in workers:
        assert "Traceback" not in worker.log_tail(400), worker.log_tail()


async def _run(
    history: list[Event],
    records: list[Claim | Resolution],
    start: datetime,
    deployments: list[Deployment],
    workers: list[WorkerProcess],
) -> None:
    await asyncio.gather(_publish(history, records, start, deployments), _faults(start, workers))


def _check_the_table(replayed: Replayed) -> None:
    """Replay's decisions have the shape the operator's table expects, for every key of every
    case (so this test cannot pass on a history in which time decided nothing)."""
    resolved, insufficient = Outcome.RESOLVED, Outcome.INSUFFICIENT
    wanted = {
        # resolved, then insufficient once its freshness ran out
        "expires": ([resolved, insufficient], 0),
        # resolved; insufficient once the later claim ran out too
        "two_claims": ([resolved, insufficient], 0),
        # a fresh claim after the key went insufficient: resolved again, and out again
        "fresh_after_expiry": ([resolved, insufficient, resolved, insufficient], 0),
        # crm's 12, then a conflict with order-form's 15, escalated 10 s later
        "escalates": ([resolved, Outcome.CONFLICT], 1),
        # the same conflict, resolved by a person before it escalates
        "resolved_first": ([resolved, Outcome.CONFLICT, resolved], 0),
        # resolved by a person, then undone: the conflict again, escalated 10 s on
        "undone": ([resolved, Outcome.CONFLICT, resolved, Outcome.CONFLICT], 1),
        # a proposal changes nothing; its approval, across a restart, resolves the conflict
        "approved": ([resolved, Outcome.CONFLICT, resolved], 0),
        # new evidence before the approval (the same conflict, with other evidence): the
        # approval is stale, the proposal goes back, the conflict stays
        "stale": ([resolved, Outcome.CONFLICT], 0),
    }
    counts = dict.fromkeys(wanted, 0)
    for key, outcomes in replayed.outcomes.items():
        case = replayed.cases[key[0]]
        if (outcomes, len(replayed.escalations.get(key, []))) == wanted[case]:
            counts[case] += 1
    assert counts == dict.fromkeys(wanted, KEYS_PER_CASE)


def _check_deployment(deployment: Deployment, worker: WorkerProcess, replayed: Replayed) -> None:
    """The deployment's topics and web API say what replay says, key by key."""
    decisions, escalations = replayed.decisions, replayed.escalations
    bootstrap, topics, guarantee = deployment.bootstrap, deployment.topics, deployment.guarantee
    label = f"{deployment.store},{guarantee}"
    # Exactly once: the topics hold replay's records, repeats included (a redelivered claim's
    # decision is sent again as first sent), and nothing else. At least once: the same once a
    # record sent again is left out.
    seen = (lambda sent: sent) if guarantee == "exactly_once" else without_repeats
    deadline = time.monotonic() + 60
    while True:
        on_decisions = decisions_by_key(bootstrap, topics.decisions, guarantee)
        if seen(on_decisions) == seen(decisions) or time.monotonic() > deadline:
            break
    expected = seen(decisions)
    got = seen(on_decisions)
    differing = {k: (got.get(k), v) for k, v in expected.items() if got.get(k) != v}
    assert not differing, f"{label}: {len(differing)} keys differ: {list(differing.items())[:2]}"
    assert got.keys() == expected.keys()
    on_escalations = decisions_by_key(bootstrap, topics.escalations, guarantee)
    assert seen(on_escalations) == seen(escalations), label
    repeated = sum(map(len, on_decisions.values())) - sum(
        map(len, without_repeats(on_decisions).values())
    )
    answers = {}
    for subject, field in decisions:
        key = urllib.parse.quote(f"{subject}|{field}", safe="")
        answer = worker.get(f"/api/decisions/{key}")
        answers[(subject, field)] = answer["decision"]["decision_id"] if answer else None
    assert answers == {k: v[-1][0] for k, v in decisions.items()}, label
    _check_stewards(worker, replayed, label)
    print(
        f"time[{label}]: keys={len(decisions)} decisions={sum(map(len, decisions.values()))} "
        f"escalations={sum(map(len, escalations.values()))} repeated={repeated}"
    )


def _check_export(deployment: Deployment, as_of: datetime, tmp_path: Path) -> None:
    """`claimstream audit export` as of an instant of the history, from the deployment's topics
    alone: each key's belief is its last decision on the topic at or before the instant, and
    the steward cases' statements stand as the workers hold them."""
    settings = Settings(
        broker=f"kafka://{deployment.bootstrap}",
        topics=deployment.topics,
        max_claims_per_key=deployment.max_claims_per_key,
    )
    out = tmp_path / "audit" / deployment.name
    quiet = Progress(io.StringIO())
    asyncio.run(export(settings, out, as_of=as_of, fmt="jsonl", progress=quiet))
    on_topic = decisions_by_key(deployment.bootstrap, deployment.topics.decisions, "exactly_once")
    believed = {
        key: [d for d, at in sent if datetime.fromisoformat(at) <= as_of][-1]
        for key, sent in on_topic.items()
        if any(datetime.fromisoformat(at) <= as_of for _, at in sent)
    }
    beliefs = [json.loads(line) for line in (out / "beliefs.jsonl").read_text().splitlines()]
    label = f"{deployment.store},{deployment.guarantee}"
    assert {(b["subject"], b["field"]): b["decision_id"] for b in beliefs} == believed, label
    statements = [json.loads(line) for line in (out / "statements.jsonl").read_text().splitlines()]
    standing = {(s["subject"], s["resolution_id"]): s["standing"] for s in statements}
    for i in range(KEYS_PER_CASE):
        assert standing[(f"approved-{i}", f"p{i}")] == "in_force", label
        assert standing[(f"stale-{i}", f"p{i}")] == "sent_back", label
        assert standing[(f"undone-{i}", f"u{i}")] == "undone", label


def _check_stewards(worker: WorkerProcess, replayed: Replayed, label: str) -> None:
    """Where each steward case's statements stand in the worker's key state, restarts and all:
    the approved proposal in force, the stale one sent back, the undone resolution kept."""
    wanted = {
        "approved": {"p": "in_force", "ok": "recorded"},
        "stale": {"p": "sent_back"},
        "undone": {"u": "undone", "uu": "applied"},
    }
    for subject, field in replayed.decisions:
        case = replayed.cases[subject]
        if case not in wanted:
            continue
        i = subject.rsplit("-", 1)[1]
        key = urllib.parse.quote(f"{subject}|{field}", safe="")
        history = worker.get(f"/api/decisions/{key}/history")
        assert history is not None, (label, subject)
        standing = {r["resolution_id"]: "in_force" for r in history["resolutions"]} | {
            s["resolution_id"]: s["standing"] for s in history["steward_log"]
        }
        expected = {f"{prefix}{i}": s for prefix, s in wanted[case].items()}
        assert standing == expected, (label, subject)
