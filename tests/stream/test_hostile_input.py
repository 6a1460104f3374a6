"""Hostile input on a real worker (Apache Kafka): every record is decided or dead-lettered with a
reason, nothing wedges a partition, no decision repeats past what the guarantee allows, and the
worker stays ready throughout.

The records come from tests/support/hostile.py: hypothesis draws, derandomized, three batches of
one record of every kind (valid, extreme and broken claims and resolutions, 315 records),
published to the tools' claims topic, the users' and the resolutions topic, interleaved with
ordinary claims (streams.devkit.synthetic) on keys of their own, some of them keyed by the
producer's own scheme or placed by librdkafka's partitioner. Once every input partition's
committed offset (the arbiter's group) has reached its end, under each guarantee:
- each hostile record is dead-lettered (matched by its `hostile.n` header) for a reason its kind
  allows, or decided: its claim is kept in its key's state on the changelog (or refused there as
  a conflicting duplicate, or cited by a decision, or its key is full), its resolution likewise,
  and its key has a decision; the counts by outcome and by dead-letter reason are printed;
- each ordinary key's last decision is the one `claimstream replay` gives for the ordinary claims,
  and the ordinary records dead-lettered are as many as replay rejects;
- per key, a decision record repeats only right after itself (a redelivered claim re-sends its
  key's decision), under exactly once no more often than claims were redelivered to the key; a
  decision id always carries the same decision;
- `/readyz` answered 200 at every poll from before the first record to the end, and the worker's
  log holds no traceback.

The cases it found stand on their own below: a key whose claims carry 100 KB replicas; an idle
exactly-once worker whose committed offsets stop at the transaction markers of the re-keyed
topic; a resolution sent to a claims topic with the header the worker's own hops carry.
"""

from __future__ import annotations

import asyncio
import collections
import json
import random
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from streams.core.keys.journal import decode_state
from streams.core.keys.state import KeyState, state_key
from streams.core.records.contracts import Claim, Decision, Resolution
from streams.devkit.brokers import KafkaBroker
from streams.settings import Settings
from streams.state.keystore import RESERVED
from tests.stream.support import (
    CODEC,
    Deployment,
    WorkerProcess,
    expected_decisions,
    publishable,
    read_topic,
    records,
    start_ready,
    wait_for_decisions,
)
from tests.support.hostile import (
    CLAIMS,
    DEAD,
    DECIDED,
    RESOLUTIONS,
    USER_CLAIMS,
    Hostile,
    drawn,
    fingerprint,
    materialize,
)

pytestmark = pytest.mark.integration

BATCHES = 3  # of one record per kind: 105 records each
ORDINARY = 240
CAUGHT_UP_S = 90.0


# -- the worker's readiness, polled all along ------------------------------------------------------


class ReadyPoller(threading.Thread):
    """Asks `/readyz` every `every_s` seconds until stopped, keeping every answer that is not
    200 (a status, or the error of no answer)."""

    def __init__(self, worker: WorkerProcess, every_s: float = 0.25) -> None:
        super().__init__(daemon=True)
        self.url = f"http://127.0.0.1:{worker.web_port}/readyz"
        self.every_s = every_s
        self.polls = 0
        self.failures: list[tuple[float, str]] = []
        self._halt = threading.Event()
        self.since = time.monotonic()

    def run(self) -> None:
        while not self._halt.is_set():
            try:
                with urllib.request.urlopen(self.url, timeout=5) as response:
                    answer = str(response.status)
            except urllib.error.HTTPError as exc:
                answer = f"{exc.code} {exc.read().decode(errors='replace')[:300]}"
            except OSError as exc:
                answer = f"no answer ({type(exc).__name__}: {exc})"
            self.polls += 1
            if answer != "200":
                self.failures.append((round(time.monotonic() - self.since, 1), answer))
            self._halt.wait(self.every_s)

    def stop(self) -> None:
        self._halt.set()
        if self.is_alive():
            self.join(timeout=10)


# -- the broker's side -----------------------------------------------------------------------------


def input_partitions(deployment: Deployment) -> list[TopicPartition]:
    topics = deployment.topics
    return [
        TopicPartition(topic, p) for topic in topics.inputs() for p in range(deployment.partitions)
    ]


Span = dict[str, tuple[int, int]]
"""Input partitions, `topic[p]`, with their committed offset and their end."""


async def lagging(deployment: Deployment) -> tuple[Span, Span]:
    """The input partitions whose committed offset (the arbiter's group) is short of their end,
    and those short by transaction markers alone: under exactly once a transactional topic (the
    re-keyed one, which the worker writes) ends in markers no consumer is ever given, so a
    partition there is behind only where a committed record lies past its committed offset."""
    tps = input_partitions(deployment)
    exactly_once = deployment.guarantee == "exactly_once"
    admin = AIOKafkaAdminClient(bootstrap_servers=deployment.bootstrap)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=deployment.bootstrap,
        isolation_level="read_committed" if exactly_once else "read_uncommitted",
        enable_auto_commit=False,
    )
    await admin.start()
    await consumer.start()
    try:
        ends = await consumer.end_offsets(tps)
        committed = await admin.list_consumer_group_offsets(
            f"{deployment.name}-arbiter", partitions=tps
        )
        short = {}
        for tp in tps:
            meta = committed.get(tp)
            offset = meta.offset if meta is not None else -1
            if ends[tp] > 0 and offset < ends[tp]:
                short[tp] = (offset, ends[tp])
        unread = await records_between(consumer, short) if exactly_once else {}
    except KafkaError as exc:
        return {f"(offsets: {type(exc).__name__})": (-1, -1)}, {}
    finally:
        await consumer.stop()
        await admin.close()
    name = {tp: f"{tp.topic}[{tp.partition}]" for tp in tps}
    behind = {name[tp]: at for tp, at in short.items() if unread.get(tp, 1)}
    markers = {name[tp]: at for tp, at in short.items() if not unread.get(tp, 1)}
    return behind, markers


async def records_between(
    consumer: AIOKafkaConsumer, spans: dict[TopicPartition, tuple[int, int]]
) -> dict[TopicPartition, int]:
    """How many records a consumer is given from each span's first offset to its end."""
    if not spans:
        return {}
    consumer.assign(list(spans))
    for tp, (start, _) in spans.items():
        consumer.seek(tp, max(start, 0))
    found = dict.fromkeys(spans, 0)
    empty = 0
    while empty < 2:  # two empty fetches in a row: nothing more is given
        batch = await consumer.getmany(timeout_ms=300)
        empty = 0 if batch else empty + 1
        for tp, messages in batch.items():
            found[tp] += sum(1 for m in messages if m.offset < spans[tp][1])
    return found


def wait_caught_up(deployment: Deployment, worker: WorkerProcess, timeout_s: float) -> float:
    """Until every input partition's committed offset has reached its end, twice in a row (a
    re-keyed record or a timer's tick moves an end on); the seconds it took."""
    started = time.monotonic()
    settled = 0
    behind: dict[str, tuple[int, int]] = {}
    while settled < 2:
        if time.monotonic() - started > timeout_s:
            pytest.fail(
                f"input partitions not committed to their end after {timeout_s:.0f} s: {behind}\n"
                f"/readyz: {worker.get('/readyz', attempts=1)}\n{worker.diagnosis()}"
            )
        behind, _ = asyncio.run(lagging(deployment))
        settled = settled + 1 if not behind else 0
        time.sleep(1)
    return time.monotonic() - started


async def publish(bootstrap: str, outgoing: list[tuple[Any, ...]]) -> None:
    """Send (topic, key, value, headers, partition) records in order; every send acknowledged."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks="all")
    await producer.start()
    try:
        futures = [
            await producer.send(topic, value, key=key, headers=list(headers), partition=partition)
            for topic, key, value, headers, partition in outgoing
        ]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


def latest_states(records: list[Any]) -> dict[tuple[str, str], KeyState]:
    """Each key's last state on the changelog (a record with no value deletes it)."""
    latest: dict[bytes, bytes | None] = {}
    for record in records:
        if not record.key.startswith(RESERVED):
            latest[record.key] = record.value
    states = [decode_state(value) for value in latest.values() if value is not None]
    return {(state.subject, state.field): state for state in states}


# -- what a hostile record came to -----------------------------------------------------------------


def decoded(item: Hostile) -> Claim | Resolution | None:
    """What the worker's codec reads from the record, or None where it cannot."""
    try:
        if item.model == "Claim":
            return CODEC.decode(Claim, item.value)
        return CODEC.decode(Resolution, item.value)
    except Exception:
        return None


def kept(
    item: Hostile,
    states: dict[tuple[str, str], KeyState],
    decisions: dict[tuple[str, str], list[Decision]],
    limits: Settings,
) -> tuple[str, str] | None:
    """The key that keeps `item` (admitted and kept, or accounted for by a key's bound), or None
    where no key does."""
    record = decoded(item)
    if record is None:
        return None
    key = (record.subject, record.field)
    state = states.get(key)
    if not decisions.get(key):
        return None  # every admitted record's key has been decided at least once
    if isinstance(record, Resolution):
        held = {r.resolution_id for r in state.resolutions} if state else set()
        cited = {d.resolution_id for d in decisions[key]}
        full = state is not None and len(state.resolutions) >= limits.resolutions_per_key
        return key if record.resolution_id in held | cited or full else None
    held = set()
    if state is not None:
        held = {c.claim.claim_id for c in state.claims} | set(state.disputed)
        held |= {r.claim.claim_id for r in state.refused}
    cited = {e.claim_id for d in decisions[key] for e in d.evidence}
    full = state is not None and len(state.claims) >= limits.max_claims_per_key
    return key if record.claim_id in held | cited or full else None


def decision_repeats(
    by_key: dict[tuple[str, str], list[Decision]],
    guarantee: str,
    redelivered: collections.Counter[tuple[str, str]],
) -> list[str]:
    """Problems with repeated decision records. A redelivered claim re-sends its key's current
    decision unchanged (README, The streaming pipeline), so a record may follow itself, and under
    exactly once only as often as claims were redelivered to its key; a record sent again after
    other decisions, a decision id sent again with another date, or a decision id carrying two
    decisions is always wrong."""
    problems = []
    meaning: dict[str, str] = {}
    for key, sent in by_key.items():
        seen: set[tuple[str, str]] = set()
        previous: tuple[str, str] | None = None
        again = 0
        for decision in sent:
            record = (decision.decision_id, decision.decided_at.isoformat())
            said = json.dumps(
                [
                    decision.outcome,
                    decision.conflict_kind,
                    decision.status,
                    repr(decision.value),
                    decision.action,
                    decision.reason,
                ]
            )
            if meaning.setdefault(decision.decision_id, said) != said:
                problems.append(f"{decision.decision_id} carries two decisions: {said}")
            if previous is not None and previous[0] == record[0]:
                again += 1
                if previous != record:
                    problems.append(f"{key}: {record} right after {previous}")
            elif record in seen:
                problems.append(f"{key}: {record} sent again after other decisions")
            seen.add(record)
            previous = record
        if guarantee == "exactly_once" and again > redelivered[key]:
            problems.append(f"{key}: {again} repeats for {redelivered[key]} redelivered claims")
    return problems


def redeliveries(claims: list[dict[str, Any]]) -> collections.Counter[tuple[str, str]]:
    """Per key, the claims sent again with the content they were first sent with."""
    sent: set[str] = set()
    again: collections.Counter[tuple[str, str]] = collections.Counter()
    for claim in claims:
        text = json.dumps(claim, sort_keys=True)
        if text in sent:
            again[(claim["subject"], claim["field"])] += 1
        sent.add(text)
    return again


@dataclass
class Tally:
    """What the hostile records came to."""

    outcomes: collections.Counter[tuple[str, str]] = field(default_factory=collections.Counter)
    reasons: collections.Counter[str] = field(default_factory=collections.Counter)
    wrong: list[tuple[Any, ...]] = field(default_factory=list)  # what its kind forbids
    unaccounted: list[tuple[Any, ...]] = field(default_factory=list)  # neither decided nor dead
    stray: list[dict[str, str]] = field(default_factory=list)  # dead letters of no record sent
    ordinary_dead: int = 0


def account(
    hostile: list[Hostile],
    letters: list[Any],
    states: dict[tuple[str, str], KeyState],
    decisions: dict[tuple[str, str], list[Decision]],
    limits: Settings,
) -> Tally:
    """Each hostile record dead-lettered (by its `hostile.n` header, with a reason in the
    headers) for a reason its kind allows, or kept by its key and decided."""
    tally = Tally()
    dead: dict[int, set[str]] = collections.defaultdict(set)
    for letter in letters:
        headers = {k: v.decode(errors="replace") for k, v in letter.headers}
        reason = headers.get("claimstream.error.reason")
        assert reason, headers
        assert headers.get("claimstream.error.detail"), headers
        if "hostile.n" in headers:
            dead[int(headers["hostile.n"])].add(reason)
        elif "ordinary" in headers:
            tally.ordinary_dead += 1
        else:
            tally.stray.append(headers)
    for item in hostile:
        reasons = dead.get(item.n, set())
        tally.reasons.update(reasons)
        if len(reasons) > 1:
            tally.wrong.append((item.n, item.kind, f"dead-lettered for {sorted(reasons)}"))
        if reasons:
            reason = min(reasons)
            tally.outcomes[(item.category, f"dead:{reason}")] += 1
            if item.expect == DECIDED or (item.reasons and reason not in item.reasons):
                tally.wrong.append((item.n, item.kind, item.topic, f"dead-lettered: {reason}"))
        elif kept(item, states, decisions, limits) is not None:
            tally.outcomes[(item.category, "decided")] += 1
            if item.expect == DEAD:
                tally.wrong.append((item.n, item.kind, item.topic, "decided", sorted(item.reasons)))
        else:
            tally.unaccounted.append((item.n, item.category, item.kind, item.topic, item.key))
    return tally


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_hostile_records_are_decided_or_dead_lettered_and_the_worker_keeps_up(
    kafka: KafkaBroker, deployment_factory: Any, guarantee: str
) -> None:
    started = time.monotonic()
    deployment: Deployment = deployment_factory(
        kafka.bootstrap, guarantee=guarantee, max_claims_per_key=16
    )
    topics = deployment.topics
    names = {
        CLAIMS: topics.claims,
        USER_CLAIMS: topics.user_claims,
        RESOLUTIONS: topics.resolutions,
    }
    worker = deployment.worker()
    poller = ReadyPoller(worker)
    try:
        asyncio.run(start_ready([worker]))
        poller.start()
        now = datetime.now(UTC)
        drafts = drawn(BATCHES)
        hostile = materialize(drafts, now)
        ordinary = publishable(ORDINARY, seed=23, now=now, reused_id_share=0.04)
        assert not {c["subject"] for c in ordinary} & {h.subject for h in hostile}
        # The ordinary claims between the hostile ones, each stream in its own order.
        rng = random.Random(29)
        plain = [
            (topics.claims, key, value, [("ordinary", b"1")], *partition)
            for key, value, _, *partition in records(deployment, ordinary, rng)
        ]
        outgoing: list[tuple[Any, ...]] = []
        pending = [(names[h.topic], h.key, h.value, h.headers) for h in hostile]
        while pending or plain:
            take = plain if plain and (not pending or rng.random() < 0.45) else pending
            outgoing.append(take.pop(0))
        asyncio.run(publish(kafka.bootstrap, [(*r, None)[:5] for r in outgoing]))
        published_s = time.monotonic() - started
        caught_up_s = wait_caught_up(deployment, worker, CAUGHT_UP_S)
        expected, rejected = expected_decisions(deployment, ordinary)
        latest, _ = asyncio.run(
            wait_for_decisions(kafka.bootstrap, topics.decisions, expected, timeout_s=30)
        )
        isolation = "read_committed" if guarantee == "exactly_once" else "read_uncommitted"
        decision_records = asyncio.run(
            read_topic(kafka.bootstrap, topics.decisions, idle_s=2, isolation_level=isolation)
        )
        letters = asyncio.run(
            read_topic(kafka.bootstrap, topics.dead_letters, idle_s=2, isolation_level=isolation)
        )
        changelog = asyncio.run(
            read_topic(
                kafka.bootstrap,
                Settings(app_id=deployment.name).changelog_topic,
                idle_s=2,
                isolation_level=isolation,
            )
        )
        still_behind, markers = asyncio.run(lagging(deployment))
        health = worker.get("/healthz")
    finally:
        poller.stop()
        worker.stop()

    decisions: dict[tuple[str, str], list[Decision]] = {}
    for record in decision_records:
        decision = CODEC.decode(Decision, record.value)
        decisions.setdefault((decision.subject, decision.field), []).append(decision)
    states = latest_states(changelog)
    limits = Settings(max_claims_per_key=16)

    tally = account(hostile, letters, states, decisions, limits)
    missed = {k: v for k, v in expected.items() if k not in latest or latest[k].decision_id != v}
    redelivered = redeliveries(ordinary)
    for item in hostile:
        if item.kind == "redelivery" and item.subject is not None and item.field is not None:
            redelivered[(item.subject, item.field)] += 1
    repeats = decision_repeats(decisions, guarantee, redelivered)
    repeated = sum(
        len(v) - len({(d.decision_id, d.decided_at) for d in v}) for v in decisions.values()
    )
    log = worker.log_tail(100_000)
    print(
        f"hostile[{guarantee}]: draws={fingerprint(drafts)} records={len(hostile)} "
        f"{dict(collections.Counter(h.category for h in hostile))} "
        f"topics={dict(collections.Counter(h.topic for h in hostile))} "
        f"ordinary={len(ordinary)} keys={len(decisions)} decisions={len(decision_records)} "
        f"repeats={repeated} published_s={published_s:.1f} caught_up_s={caught_up_s:.1f} "
        f"readyz_polls={poller.polls} run_s={time.monotonic() - started:.1f}"
    )
    if markers:
        print(f"hostile[{guarantee}] committed short of the end by markers only: {markers}")
    print(f"hostile[{guarantee}] dead letters by reason: {dict(sorted(tally.reasons.items()))}")
    print(f"hostile[{guarantee}] outcomes: {dict(sorted(tally.outcomes.items()))}")

    assert not tally.unaccounted, (
        f"{len(tally.unaccounted)} records neither decided nor dead-lettered: "
        f"{tally.unaccounted[:10]}"
    )
    assert not tally.wrong, (
        f"{len(tally.wrong)} records came to what their kind forbids: {tally.wrong[:10]}"
    )
    assert not tally.stray, f"dead letters that name no record sent: {tally.stray[:3]}"
    assert not missed, f"{len(missed)} ordinary keys differ from replay: {list(missed.items())[:3]}"
    assert tally.ordinary_dead == rejected, (tally.ordinary_dead, rejected)
    assert not still_behind, still_behind
    assert not repeats, repeats[:5]
    assert poller.polls > 10
    assert not poller.failures, poller.failures[:5]
    assert health is not None, "no /healthz answer"
    assert health["status"] == "ok", health
    assert worker.restarts() == 0
    assert "Traceback" not in log, log[max(0, log.index("Traceback") - 2000) :][:6000]


# -- the cases the property test found, each on its own --------------------------------------------


def readyz(worker: WorkerProcess) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{worker.web_port}/readyz", timeout=5) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


Latest = dict[tuple[str, str], Decision]


def decisions_until(
    bootstrap: str, topic: str, done: Any, timeout_s: float = 60
) -> tuple[Latest, list[Decision]]:
    """Every decision on `topic` and each key's latest, read again until `done(latest)` (or
    until time runs out: the caller's assertions then say what is missing)."""
    deadline = time.monotonic() + timeout_s
    while True:
        every = [
            CODEC.decode(Decision, r.value)
            for r in asyncio.run(read_topic(bootstrap, topic, idle_s=1, max_s=10))
        ]
        latest = {(d.subject, d.field): d for d in every}
        if done(latest) or time.monotonic() > deadline:
            return latest, every
        time.sleep(0.5)


def seat_claims(subject: str, count: int, now: datetime, **extra: Any) -> list[Claim]:
    """A new seat count each, from the contract's system of record: each claim changes the
    key's belief, so each sends a decision that cites every claim the key keeps."""
    return [
        Claim(
            claim_id=f"{subject}-{n}",
            subject=subject,
            field="contract.seats",
            status="present",
            value=10 + n,
            source="crm",
            observed_at=now + timedelta(milliseconds=n),
            **extra,
        )
        for n in range(count)
    ]


def plain_claims(count: int, now: datetime) -> list[Claim]:
    return [
        Claim(
            claim_id=f"plain-{n}",
            subject=f"invoice:{n}",
            field="order.payment_status",
            status="present",
            value="paid",
            source="billing-api",
            observed_at=now,
        )
        for n in range(count)
    ]


def keyed(deployment: Deployment, claims: list[Claim], topic: str | None = None) -> list[Any]:
    topic = topic or deployment.topics.claims
    return [
        (topic, state_key(c.subject, c.field).encode(), CODEC.encode(topic, c), [], None)
        for c in claims
    ]


def test_a_key_whose_claims_carry_100_kb_replicas_does_not_wedge_its_partition(
    kafka: KafkaBroker, deployment_factory: Any
) -> None:
    deployment: Deployment = deployment_factory(
        kafka.bootstrap, settings={"task_stall_timeout_s": "5", "lag_interval_s": "0.5"}
    )
    worker = deployment.worker()
    poller = ReadyPoller(worker)
    now = datetime.now(UTC)
    heavy = [
        claim.model_copy(update={"replica": f"{n:02d}" + "r" * 100_000})
        for n, claim in enumerate(seat_claims("hx:replicas", 12, now))
    ]
    plain = plain_claims(40, now)
    try:
        asyncio.run(start_ready([worker]))
        poller.start()
        asyncio.run(publish(kafka.bootstrap, keyed(deployment, [*heavy, *plain])))
        deadline = time.monotonic() + 45
        behind: Span = {"(not asked yet)": (-1, -1)}
        while behind and time.monotonic() < deadline:
            time.sleep(1)
            behind, _ = asyncio.run(lagging(deployment))
        status = readyz(worker)
        letters = asyncio.run(read_topic(kafka.bootstrap, deployment.topics.dead_letters, idle_s=2))
        records_ = asyncio.run(read_topic(kafka.bootstrap, deployment.topics.decisions, idle_s=2))
    finally:
        poller.stop()
        worker.stop()
    decisions = [CODEC.decode(Decision, r.value) for r in records_]
    decided = {(d.subject, d.field) for d in decisions}
    cited = {e.claim_id for d in decisions for e in d.evidence}
    dead = {CODEC.decode(Claim, m.value).claim_id for m in letters}
    reasons = collections.Counter(
        dict(m.headers).get("claimstream.error.reason", b"").decode() for m in letters
    )
    print(
        f"100 KB replicas: behind={behind} readyz={status[0]} dead_letters={dict(reasons)} "
        f"plain_decided={sum((c.subject, c.field) in decided for c in plain)}/{len(plain)} "
        f"readyz_failures={poller.failures[:4]}"
    )
    assert not behind, f"partitions wedged: {behind}; /readyz {status}"
    # Refused at intake or decided: never a claim whose records the broker refuses.
    assert "processing_failed" not in reasons, dict(reasons)
    assert not poller.failures, poller.failures[:3]
    assert all((c.subject, c.field) in decided for c in plain)
    assert all(c.claim_id in cited | dead for c in heavy), sorted(
        c.claim_id for c in heavy if c.claim_id not in cited | dead
    )
    assert "Traceback" not in worker.log_tail(100_000)


def test_an_idle_exactly_once_worker_commits_its_input_to_the_end_and_stays_ready(
    kafka: KafkaBroker, deployment_factory: Any
) -> None:
    """Claims keyed by their producer's own scheme hop through the re-keyed topic, which the
    worker writes in its transactions; once they are decided and nothing more comes, every
    input partition's committed offset reaches its last record (the marker of the transaction
    that wrote it may follow: it is no record waiting) and /readyz stays 200, however long the
    worker then idles."""
    deployment: Deployment = deployment_factory(
        kafka.bootstrap,
        guarantee="exactly_once",
        settings={"task_stall_timeout_s": "5", "lag_interval_s": "0.5"},
    )
    worker = deployment.worker()
    claims = plain_claims(20, datetime.now(UTC))
    topic = deployment.topics.claims
    try:
        asyncio.run(start_ready([worker]))
        asyncio.run(
            publish(
                kafka.bootstrap,
                [(topic, c.claim_id.encode(), CODEC.encode(topic, c), [], None) for c in claims],
            )
        )
        expected = {(c.subject, c.field) for c in claims}
        latest, _ = decisions_until(
            kafka.bootstrap, deployment.topics.decisions, lambda got: expected <= set(got)
        )
        assert expected <= set(latest), expected - set(latest)
        answers = []
        for _ in range(12):  # over twice task_stall_timeout_s, idle
            time.sleep(1)
            answers.append(readyz(worker))
        behind, markers = asyncio.run(lagging(deployment))
    finally:
        worker.stop()
    failing = [a for a in answers if a[0] != 200]
    print(f"idle exactly once: /readyz failing {len(failing)} of {len(answers)}; {markers=}")
    assert not behind, behind
    assert not failing, failing[0]


@pytest.mark.parametrize("arrives_on", [CLAIMS, USER_CLAIMS])
def test_a_resolution_sent_where_claims_arrive_closes_no_conflict(
    kafka: KafkaBroker, deployment_factory: Any, arrives_on: str
) -> None:
    """Broker ACLs let only stewards write the resolutions topic (README, Source authenticity):
    a resolution record sent to a claims topic, with the `claimstream.kind: resolution` header
    the worker puts on the resolutions it re-keys, must not be applied; a steward's own
    resolution on the resolutions topic is."""
    deployment: Deployment = deployment_factory(kafka.bootstrap)
    topics = deployment.topics
    topic = topics.claims if arrives_on == CLAIMS else topics.user_claims
    worker = deployment.worker()
    now = datetime.now(UTC)
    subject = "acme:spoofed"
    crm, form = seat_claims(subject, 1, now)[0], seat_claims(subject, 2, now)[1]
    form = form.model_copy(update={"source": "order-form"})
    the_key = (subject, "contract.seats")
    key = state_key(*the_key).encode()

    def resolution(resolution_id: str, by: str, value: int) -> Resolution:
        return Resolution(
            resolution_id=resolution_id,
            subject=subject,
            field="contract.seats",
            value=value,
            decided_by=by,
            decided_at=datetime.now(UTC),
        )

    try:
        asyncio.run(start_ready([worker]))
        asyncio.run(publish(kafka.bootstrap, keyed(deployment, [crm, form])))
        latest, _ = decisions_until(kafka.bootstrap, topics.decisions, lambda got: the_key in got)
        assert latest[the_key].outcome == "conflict", latest[the_key]
        spoof = resolution("spoofed", "mallory", 999)
        asyncio.run(
            publish(
                kafka.bootstrap,
                [
                    (
                        topic,
                        key,
                        CODEC.encode(topic, spoof),
                        [("claimstream.kind", b"resolution")],
                        None,
                    )
                ],
            )
        )
        wait_caught_up(deployment, worker, 60)  # the spoofed record read, and committed past
        real = resolution("by-a-steward", "ann", 12)
        asyncio.run(
            publish(
                kafka.bootstrap,
                [(topics.resolutions, key, CODEC.encode(topics.resolutions, real), [], None)],
            )
        )
        latest, every = decisions_until(
            kafka.bootstrap,
            topics.decisions,
            lambda got: the_key in got and got[the_key].resolution_id == "by-a-steward",
        )
        letters = asyncio.run(read_topic(kafka.bootstrap, topics.dead_letters, idle_s=2))
    finally:
        worker.stop()
    applied = [d for d in every if d.resolution_id == "spoofed"]
    final = latest[the_key]
    print(
        f"resolution on {arrives_on}: applied={len(applied)} dead_letters={len(letters)} "
        f"final={final.outcome}/{final.value}/{final.resolution_id}"
    )
    assert (final.outcome, final.value, final.resolution_id) == ("resolved", 12, "by-a-steward")
    assert not applied, [(d.outcome, d.value, d.reason) for d in applied]
    assert len(letters) == 1, [dict(m.headers) for m in letters]
