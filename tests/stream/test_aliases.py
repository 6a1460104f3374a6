"""An alias merges what both spellings hold and a retraction splits it back, on every store and
guarantee, through a SIGKILL in the middle of the merge.

Five pairs of keys on one Apache Kafka broker, four deployments (memory and RocksDB stores, at
least once and exactly once): crm says `Acme Corp i|contract.seats` is 40+i, order-form says
`acme-i|contract.seats` is 25+i, both systems of record, so each key is resolved. An alias
`Acme Corp i` -> `acme-i` takes effect a few seconds later for every pair (published ahead, as a
steward would), and every worker is SIGKILLed just after, while the sweep moves the evidence; a
crm claim about `ACME CORP 3` arrives after the merge; the alias of three pairs is retracted
later. Then, key by key:

- the merged pairs' canonical keys are in conflict with both claims, each naming the spelling
  it was sent about, and their alias keys' last decision says where the evidence went;
- the split pairs are decided as before the merge (the alias never was);
- the topics, the web API and replay with the alias history (`claimstream replay --clock
  --alias-history`) say the same belief;
- exactly once, no decision is sent twice, whatever the kill interrupted.
"""

from __future__ import annotations

import asyncio
import time
import urllib.parse
from datetime import UTC, datetime, timedelta
from pathlib import Path

from aiokafka import AIOKafkaProducer

from streams.core.keys.state import state_key
from streams.core.reading.replay import replay_with_clock
from streams.core.records.contracts import Claim, Decision
from streams.core.records.policy import load_policy
from streams.core.timeline.aliases import AliasChange, AliasHistory
from streams.devkit.brokers import KafkaBroker
from streams.settings import Settings
from streams.worker.alias_log import publish_alias, published_history
from tests.stream.support import (
    CODEC,
    Deployment,
    WorkerProcess,
    every_store_and_guarantee,
    read_topic,
    sent_of,
    start_ready,
    write_policy,
)

PAIRS = 5
SPLIT = 3  # the pairs whose alias is retracted again
SEATS = "contract.seats"
MERGE_AT_S, KILL_AT_S, LATE_CLAIM_AT_S, SPLIT_AT_S, END_AT_S = 6.0, 6.3, 9.0, 14.0, 22.0


def _alias(i: int) -> str:
    return f"Acme Corp {i}"


def _canonical(i: int) -> str:
    return f"acme-{i}"


def _claims(start: datetime) -> list[tuple[float, Claim]]:
    said = []
    for i in range(PAIRS):
        for n, (subject, source, seats) in enumerate(
            [(_alias(i), "crm", 40 + i), (_canonical(i), "order-form", 25 + i)]
        ):
            at_s = 0.5 + 0.1 * n
            said.append((at_s, _claim(f"p{i}-{n}", subject, source, seats, start, at_s)))
    late = _claim("p3-late", _alias(3).upper(), "crm", 43, start, LATE_CLAIM_AT_S)
    return [*said, (LATE_CLAIM_AT_S, late)]


def _claim(
    claim_id: str, subject: str, source: str, seats: int, start: datetime, at_s: float
) -> Claim:
    return Claim(
        claim_id=claim_id,
        subject=subject,
        field=SEATS,
        status="present",
        value=seats,
        source=source,
        observed_at=start + timedelta(seconds=at_s),
    )


def _changes(start: datetime) -> list[AliasChange]:
    merged = start + timedelta(seconds=MERGE_AT_S)
    split = start + timedelta(seconds=SPLIT_AT_S)
    return [
        *(AliasChange(_alias(i), _canonical(i), merged, "ana") for i in range(PAIRS)),
        *(AliasChange(_alias(i), None, split, "ana") for i in range(SPLIT)),
    ]


def _settings(deployment: Deployment) -> Settings:
    return Settings(broker=f"kafka://{deployment.bootstrap}", topics=deployment.topics)


async def _publish(start: datetime, deployments: list[Deployment]) -> None:
    """Every claim at its instant, stamped with it, keyed by the subject it names."""
    producer = AIOKafkaProducer(bootstrap_servers=deployments[0].bootstrap, acks="all")
    await producer.start()
    try:
        for at_s, claim in _claims(start):
            await asyncio.sleep(max(0.0, start.timestamp() + at_s - time.time()))
            key = state_key(claim.subject, claim.field).encode()
            stamp = int(claim.observed_at.timestamp() * 1000)
            for deployment in deployments:
                topic = deployment.topics.claims
                await producer.send_and_wait(
                    topic, CODEC.encode(topic, claim), key=key, timestamp_ms=stamp
                )
    finally:
        await producer.stop()


async def _kill_during_the_merge(start: datetime, workers: list[WorkerProcess]) -> None:
    await asyncio.sleep(max(0.0, start.timestamp() + KILL_AT_S - time.time()))
    await asyncio.gather(*(asyncio.to_thread(w.kill) for w in workers))
    await asyncio.gather(*(asyncio.to_thread(w.start) for w in workers))


def test_an_alias_merges_and_its_retraction_splits_on_every_store_and_guarantee(
    kafka: KafkaBroker, tmp_path: Path
) -> None:
    policy = write_policy(tmp_path / "policy.yaml", **{SEATS: {"escalate_after": "1h"}})
    deployments = every_store_and_guarantee(kafka.bootstrap, tmp_path, policy)
    workers = [d.worker() for d in deployments]
    try:
        asyncio.run(start_ready(workers))
        start = datetime.fromtimestamp(round(time.time() + 1.0), UTC)
        changes = _changes(start)

        async def run() -> None:
            for deployment in deployments:  # published ahead of their instants
                for change in changes:
                    await publish_alias(_settings(deployment), change)
            await asyncio.gather(
                _publish(start, deployments), _kill_during_the_merge(start, workers)
            )

        asyncio.run(run())
        time.sleep(max(0.0, start.timestamp() + END_AT_S - time.time()))
        for deployment, worker in zip(deployments, workers, strict=True):
            _check(deployment, worker, start)
    finally:
        for worker in workers:
            worker.stop()
    for worker in workers:
        assert "Traceback" not in worker.log_tail(400), worker.log_tail()


Belief = tuple[str, object, str | None]


def _belief(decision: Decision) -> Belief:
    """What a key believes (the evidence a decision lists depends on the order its claims
    arrived in: a claim that leaves the belief as it was sends no decision)."""
    kind = decision.conflict_kind.value if decision.conflict_kind else None
    return decision.outcome.value, decision.value, kind


def _spellings(worker: WorkerProcess, subject: str) -> dict[str, str | None]:
    """Each claim the key of `subject` holds now, with the spelling it was sent about."""
    key = urllib.parse.quote(f"{subject}|{SEATS}", safe="")
    evidence = worker.get(f"/api/decisions/{key}")["decision"]["evidence"]
    return {e["claim_id"]: e["sent_about"] for e in evidence}


def _check(deployment: Deployment, worker: WorkerProcess, start: datetime) -> None:
    label = f"{deployment.store},{deployment.guarantee}"
    # Replay is given what the topic holds, as `claimstream alias history` prints it.
    history = asyncio.run(published_history(_settings(deployment))).history()
    assert history.changes == AliasHistory(_changes(start)).changes, label
    now = datetime.now(UTC)
    replayed = replay_with_clock(
        [c.model_dump_json() for _, c in _claims(start)],
        load_policy(deployment.policy),
        now,
        aliases=history,
    )
    expected: dict[tuple[str, str], Belief] = {}
    for emitted in replayed.emitted:
        if not emitted.escalation:
            d = emitted.decision
            expected[(d.subject, d.field)] = _belief(d)

    isolation = "read_committed" if deployment.guarantee == "exactly_once" else "read_uncommitted"
    deadline = time.monotonic() + 60
    while True:
        records = asyncio.run(
            read_topic(
                deployment.bootstrap,
                deployment.topics.decisions,
                idle_s=2,
                isolation_level=isolation,
            )
        )
        sent = [CODEC.decode(Decision, r.value) for r in records]
        last = {(d.subject, d.field): d for d in sent}
        got = {key: _belief(d) for key, d in last.items()}
        if got == expected or time.monotonic() > deadline:
            break
    assert got == expected, (
        f"{label}: {[(k, got.get(k), v) for k, v in expected.items() if got.get(k) != v]}"
    )

    for i in range(PAIRS):
        alias, canonical = (_alias(i), SEATS), (_canonical(i), SEATS)
        if i < SPLIT:  # split again: as if the alias had never been
            assert got[alias][:2] == ("resolved", 40 + i), (label, i)
            assert got[canonical][:2] == ("resolved", 25 + i), (label, i)
        else:
            assert got[canonical][0] == "conflict", (label, i)
            held = {f"p{i}-0": _alias(i), f"p{i}-1": None}
            if i == 3:  # sent about the alias after the merge: counts on the canonical key
                held["p3-late"] = _alias(3).upper()
            assert _spellings(worker, _canonical(i)) == held, (label, i)
            assert f"merged into {_canonical(i)!r}" in last[alias].reason, (label, i)
            assert last[alias].evidence == (), (label, i)

    if deployment.guarantee == "exactly_once":  # the kill repeated nothing
        # (An id may come back: a split key returns to the belief it held before the merge.)
        records_sent = [sent_of(d) for d in sent]
        assert len(records_sent) == len(set(records_sent)), f"{label}: a decision sent twice"

    # A read naming a subject answers for the subject it names now: an alias in force, its
    # canonical subject's key.
    for subject, field in expected:
        key = urllib.parse.quote(f"{subject}|{field}", safe="")
        answer = worker.get(f"/api/decisions/{key}")
        assert answer is not None, (label, subject)
        named = (history.canonical(subject, now), field)
        assert answer["decision"]["subject"] == named[0], (label, subject)
        believed = _belief(Decision.model_validate(answer["decision"]))
        assert believed == expected[named], (label, subject)
    merges = worker.get(f"/api/aliases?subject={urllib.parse.quote(_canonical(3))}")
    assert [c["alias"] for c in merges["changes"]] == [_alias(3)], label
    print(f"aliases[{label}]: keys={len(expected)} decisions={len(sent)}")
