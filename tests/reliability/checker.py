"""A history checker in the spirit of Jepsen's Kafka checks.

A run records every claim whose publication the broker acknowledged, then reads back everything
the pipeline emitted and the state it journaled. The checker proves what the README promises:
each acknowledged claim is on the input topic, and either dead-lettered or found where the
pipeline keeps admitted claims (its key's state in the changelog, which the history API serves;
or, once the per-key bound dropped it, the evidence of a decision that cited it); repeated
decisions are identical; and the final decisions equal an offline replay of what the broker
holds. Each line also gives the longest pause in decisions while input waited, and how many
generations the arbiter's consumer group went through.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import random
import re
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment
from aiokafka.errors import KafkaError

from streams.core.keys.journal import decode_state
from streams.core.keys.state import KeyState, state_key
from streams.core.reading.replay import ReplayResult, replay
from streams.core.records.contracts import Claim, Decision
from streams.core.records.policy import Policy, load_policy
from streams.devkit.brokers import KafkaCluster
from streams.pipeline.outputs import ERROR_HEADER_PREFIX
from streams.settings import Settings
from streams.state.keystore import RESERVED
from tests.stream.support import CODEC, Deployment, read_topic, write_policy

EXACTLY_ONCE_FAULTS = pytest.mark.exactly_once_faults
"""The exactly-once fault scenarios: `scripts/repeat-exactly-once.sh` runs them many times in a
row, and the CI runs them twice more after the suite (`-m exactly_once_faults`)."""

GUARANTEES = ["at_least_once", pytest.param("exactly_once", marks=EXACTLY_ONCE_FAULTS)]
"""A fault scenario's guarantees, as `parametrize("guarantee", GUARANTEES)`."""


ORIGIN_HEADERS = ("topic", "partition", "offset")
"""The error headers that name the input record a dead letter is of."""


def isolation_of(guarantee: str) -> str:
    """How a scenario's checker reads what a worker under `guarantee` wrote."""
    return "read_committed" if guarantee == "exactly_once" else "read_uncommitted"


@dataclass
class History:
    sent: int = 0
    acked: list[Claim] = field(default_factory=list)


def under_load(
    bootstrap: str,
    topic: str,
    claims: list[Claim],
    rate: float,
    history: History,
    fault: Callable[[], Awaitable[object]],
) -> None:
    """Publish `claims` at `rate`/s while `fault()` runs, until both are done."""

    async def both() -> None:
        await asyncio.gather(publish_steadily(bootstrap, topic, claims, rate, history), fault())

    asyncio.run(both())


async def publish_steadily(
    bootstrap: str, topic: str, claims: list[Claim], rate: float, history: History
) -> None:
    """Publish at `rate` claims/s, recording which ones the broker acknowledged."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=True,
        request_timeout_ms=30000,
        retry_backoff_ms=200,
    )
    await producer.start()
    pending: list[tuple[Claim, asyncio.Future[Any]]] = []
    started = time.perf_counter()
    try:
        for n, claim in enumerate(claims):
            key = state_key(claim.subject, claim.field).encode()
            history.sent += 1
            try:
                future = await producer.send(topic, CODEC.encode(topic, claim), key=key)
                pending.append((claim, future))
            except KafkaError:
                continue
            ahead = started + (n + 1) / rate - time.perf_counter()
            if ahead > 0:
                await asyncio.sleep(ahead)
        for claim, future in pending:
            try:
                await future
                history.acked.append(claim)
            except KafkaError:
                pass
    finally:
        await producer.stop()


@dataclass
class Verdict:
    scenario: str
    sent: int
    acked: int
    decisions: int
    dead_letters: int
    duplicates: int
    lost: int
    recovery_s: float
    problems: list[str]
    max_pause_s: float = 0.0
    generations: int = 0
    repeated_dead_letters: int = 0

    def line(self) -> str:
        return (
            f"checker: scenario={self.scenario} sent={self.sent} acked={self.acked} "
            f"decisions={self.decisions} dead_letters={self.dead_letters} "
            f"duplicates={self.duplicates} lost={self.lost} recovery_s={self.recovery_s:.1f} "
            f"max_pause_s={self.max_pause_s:.1f} generations={self.generations} "
            f"repeated_dead_letters={self.repeated_dead_letters}"
        )


@dataclass
class Observed:
    """What the run left on the broker, with the times records were written."""

    stored: list[Claim]
    decisions: list[Decision]
    dead_letters: list[Any]
    states: list[KeyState]
    # (partition, write time): a key's claims and decisions share a partition number
    claim_times_ms: list[tuple[int, int]] = field(default_factory=list)
    decision_times_ms: list[tuple[int, int]] = field(default_factory=list)
    generations: int = 0


def max_pause_by_partition(
    claim_times_ms: Iterable[tuple[int, int]], decision_times_ms: Iterable[tuple[int, int]]
) -> float:
    """The longest pause of any partition: while one worker restores, the others keep deciding,
    so a pause only shows partition by partition."""
    claims: dict[int, list[int]] = {}
    decisions: dict[int, list[int]] = {}
    for partition, written in claim_times_ms:
        claims.setdefault(partition, []).append(written)
    for partition, written in decision_times_ms:
        decisions.setdefault(partition, []).append(written)
    return max(
        (max_pause_s(times, decisions.get(partition, [])) for partition, times in claims.items()),
        default=0.0,
    )


def max_pause_s(claim_times_ms: Iterable[int], decision_times_ms: Iterable[int]) -> float:
    """The longest stretch in which input waited and no decision came out: from the first claim
    published after a decision (or before the first one) to the next decision."""
    claims = sorted(claim_times_ms)
    longest, previous = 0, None
    for decided in sorted(decision_times_ms):
        waiting = 0 if previous is None else bisect.bisect_right(claims, previous)
        if waiting < len(claims) and claims[waiting] < decided:
            longest = max(longest, decided - claims[waiting])
        previous = decided
    return longest / 1000


STABILIZED = re.compile(r"Stabilized group (\S+) generation (\d+)")


def generations(group: str, broker_logs: Iterable[Path]) -> int:
    """Generations the group went through, from the coordinators' logs (the coordinator moves
    with its __consumer_offsets partition's leader, so every broker's log counts)."""
    seen = {
        int(match[2])
        for path in broker_logs
        for match in STABILIZED.finditer(path.read_text(errors="replace"))
        if match[1] == group
    }
    return len(seen)


def latest_states(records: Iterable[Any]) -> list[KeyState]:
    """Each key's last state on the changelog (a record without a value deletes the key); a
    task-level record (the source ledger) is not a key's state."""
    latest: dict[bytes, bytes | None] = {}
    for record in records:
        if not record.key.startswith(RESERVED):
            latest[record.key] = record.value
    return [decode_state(data) for data in latest.values() if data is not None]


def unaccounted(
    acked: Iterable[Claim],
    rejected_ids: set[str],
    decisions: Iterable[Decision],
    states: Iterable[KeyState],
    max_claims: int,
) -> set[str]:
    """Admitted claims found nowhere the README says they are: not in their key's state, not
    cited by any decision, and not dropped by the per-key bound (a key holding `max_claims`)."""
    cited = {evidence.claim_id for d in decisions for evidence in d.evidence}
    held: set[str] = set()
    full: set[tuple[str, str]] = set()
    for state in states:
        held |= {admitted.claim.claim_id for admitted in state.claims} | set(state.disputed)
        if len(state.claims) >= max_claims:
            full.add((state.subject, state.field))
    found = rejected_ids | cited | held
    return {
        c.claim_id for c in acked if c.claim_id not in found and (c.subject, c.field) not in full
    }


async def wait_for_final(
    bootstrap: str, topic: str, expected: dict[tuple[str, str], str], timeout_s: float
) -> list[Decision]:
    """Read decisions until every key's latest one is the expected one (or time runs out)."""
    deadline = time.monotonic() + timeout_s
    while True:
        records = await read_topic(bootstrap, topic, idle_s=2, max_s=30)
        decisions = [CODEC.decode(Decision, r.value) for r in records]
        latest = {(d.subject, d.field): d.decision_id for d in decisions}
        if all(latest.get(k) == v for k, v in expected.items()) or time.monotonic() > deadline:
            return decisions
        await asyncio.sleep(2)


def repeated_dead_letters(dead_letters: list[Any]) -> int:
    """Dead letters of an input record (its topic, partition and offset, from the error headers)
    already dead-lettered: what a redelivery repeats at least once, never exactly once."""
    origins = []
    for message in dead_letters:
        headers = dict(message.headers)
        origin = tuple(headers.get(ERROR_HEADER_PREFIX + name) for name in ORIGIN_HEADERS)
        if None not in origin:
            origins.append(origin)
    return len(origins) - len(set(origins))


def offline_replay(policy: Policy, stored: list[Claim]) -> ReplayResult:
    """What `claimstream replay` decides for everything the broker holds."""
    return replay(
        (json.dumps(c.model_dump(mode="json")) for c in stored), policy, datetime.now(UTC)
    )


def check(
    scenario: str,
    expected: ReplayResult,
    history: History,
    observed: Observed,
    recovery_s: float,
    max_claims: int,
) -> Verdict:
    stored, decisions, dead_letters = observed.stored, observed.decisions, observed.dead_letters
    claim_partition = {
        (claim.subject, claim.field): partition
        for claim, (partition, _) in zip(stored, observed.claim_times_ms, strict=False)
    }
    stored_ids = {c.claim_id for c in stored}
    problems = []
    lost_ids = {c.claim_id for c in history.acked} - stored_ids
    if lost_ids:
        problems.append(f"{len(lost_ids)} acknowledged claims are not on the input topic")

    latest: dict[tuple[str, str], Decision] = {}
    for decision in decisions:
        latest[(decision.subject, decision.field)] = decision
    wrong_keys = {
        (d.subject, d.field)
        for d in expected.decisions
        if latest.get((d.subject, d.field)) is None
        or latest[(d.subject, d.field)].decision_id != d.decision_id
    }
    if wrong_keys:
        partitions = sorted({claim_partition[key] for key in wrong_keys if key in claim_partition})
        problems.append(
            f"{len(wrong_keys)} keys' final decisions differ from the offline replay "
            f"(input partitions {partitions}); e.g. "
            f"{describe_keys(sorted(wrong_keys)[:3], expected, latest, observed)}"
        )
    # A claim is lost if the broker dropped it or its key never reached the decision that
    # accounts for it.
    lost_ids |= {c.claim_id for c in history.acked if (c.subject, c.field) in wrong_keys}
    rejected_ids = {r.claim_id for r in expected.rejections}
    dead_ids = set()
    for message in dead_letters:
        try:
            dead_ids.add(CODEC.decode(Claim, message.value).claim_id)
        except Exception:
            continue
    missing_dead = rejected_ids - dead_ids
    if missing_dead:
        problems.append(f"{len(missing_dead)} rejected claims are missing from the dead letters")
        lost_ids |= missing_dead & {c.claim_id for c in history.acked}
    nowhere = unaccounted(history.acked, rejected_ids, decisions, observed.states, max_claims)
    if nowhere:
        problems.append(
            f"{len(nowhere)} admitted claims are in no key state, no decision's evidence, "
            "and no key the per-key bound trimmed"
        )
        lost_ids |= nowhere

    # A duplicate is a decision that repeats the key's previous one (what consumers drop); a
    # belief that returns later (A, B, A) is a change, not a duplicate. One key's decisions share
    # a partition, so topic order is the emission order.
    previous: dict[tuple[str, str], str] = {}
    duplicates = 0
    for d in decisions:
        key = (d.subject, d.field)
        duplicates += previous.get(key) == d.decision_id
        previous[key] = d.decision_id
    beliefs: dict[str, set[str]] = {}
    for d in decisions:
        beliefs.setdefault(d.decision_id, set()).add(
            json.dumps([d.outcome, d.conflict_kind, d.status, repr(d.value), d.action, d.reason])
        )
    if any(len(v) > 1 for v in beliefs.values()):
        problems.append("a repeated decision id carried a different decision")
    return Verdict(
        scenario=scenario,
        sent=history.sent,
        acked=len(history.acked),
        decisions=len(decisions),
        dead_letters=len(dead_letters),
        duplicates=duplicates,
        lost=len(lost_ids),
        recovery_s=recovery_s,
        problems=problems,
        max_pause_s=max_pause_by_partition(observed.claim_times_ms, observed.decision_times_ms),
        generations=observed.generations,
        repeated_dead_letters=repeated_dead_letters(dead_letters),
    )


def describe_keys(
    keys: list[tuple[str, str]],
    expected: ReplayResult,
    latest: dict[tuple[str, str], Decision],
    observed: Observed,
) -> list[str]:
    """What a wrong key looks like: the replay's belief, the last emitted one, and how many
    claims the input and the key's journaled state hold."""
    wanted = {(d.subject, d.field): d for d in expected.decisions}
    states = {(s.subject, s.field): s for s in observed.states}
    found = []
    for key in keys:
        want, got, state = wanted.get(key), latest.get(key), states.get(key)
        found.append(
            f"{key}: replay {want.outcome if want else None}/{want.value if want else None} "
            f"({len(want.evidence) if want else 0} claims), emitted "
            f"{got.outcome if got else None}/{got.value if got else None} "
            f"({len(got.evidence) if got else 0} claims), input "
            f"{sum((c.subject, c.field) == key for c in observed.stored)} claims, state "
            f"{len(state.claims) if state else None} claims"
        )
    return found


def workload(count: int, seed: int) -> list[Claim]:
    """Valid claims over a few hundred keys, with contention, staleness and policy rejections."""
    from streams.core.admission.intake import parse_claim
    from streams.core.records.errors import ContractError
    from streams.devkit.synthetic import generate_claims

    claims = []
    for data in generate_claims(count, datetime.now(UTC), seed=seed, subjects=count // 8):
        try:
            claims.append(parse_claim(data))
        except ContractError:
            continue
    random.Random(seed).shuffle(claims)
    return claims


def judge(
    scenario: str,
    deployment: Deployment,
    history: History,
    recovery_started: float,
    broker_logs: list[Path],
    isolation_level: str = "read_uncommitted",
) -> Verdict:
    bootstrap = deployment.bootstrap
    claim_records = asyncio.run(read_topic(bootstrap, deployment.topics.claims, idle_s=2))
    stored = [CODEC.decode(Claim, r.value) for r in claim_records]
    policy = load_policy(deployment.policy)

    expected = offline_replay(policy, stored)
    wanted = {(d.subject, d.field): d.decision_id for d in expected.decisions}
    asyncio.run(wait_for_final(bootstrap, deployment.topics.decisions, wanted, timeout_s=150))
    recovery_s = time.monotonic() - recovery_started
    decisions_raw = asyncio.run(
        read_topic(
            bootstrap, deployment.topics.decisions, idle_s=2, isolation_level=isolation_level
        )
    )
    changelog = asyncio.run(
        read_topic(bootstrap, changelog_of(deployment), idle_s=2, isolation_level=isolation_level)
    )
    observed = Observed(
        stored=stored,
        decisions=[CODEC.decode(Decision, r.value) for r in decisions_raw],
        dead_letters=asyncio.run(
            read_topic(
                bootstrap, deployment.topics.dead_letters, idle_s=2, isolation_level=isolation_level
            )
        ),
        states=latest_states(changelog),
        claim_times_ms=[(r.partition, r.timestamp) for r in claim_records],
        decision_times_ms=[(r.partition, r.timestamp) for r in decisions_raw],
        generations=generations(arbiter_group(deployment), broker_logs),
    )
    max_claims = int(deployment.settings.get("max_claims_per_key", Settings().max_claims_per_key))
    verdict = check(scenario, expected, history, observed, recovery_s, max_claims)
    print(verdict.line())
    return verdict


def changelog_of(deployment: Deployment) -> str:
    return Settings(app_id=deployment.name).changelog_topic


def arbiter_group(deployment: Deployment) -> str:
    return f"{deployment.name}-arbiter"


async def members_partitions(bootstrap: str, group: str) -> tuple[str, list[set[int]]]:
    """The group's state and the partitions (of its first topic) each member holds, as the
    coordinator sees them."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        (response,) = await admin.describe_consumer_groups([group])
    except KafkaError:  # no coordinator yet (the group is new, or its broker just went)
        return "", []
    finally:
        await admin.close()
    _error, _group, state, *_, members = response.groups[0][:6]
    held = []
    for member in members:
        raw = member[-1]
        topics = ConsumerProtocolMemberAssignment.decode(raw).assignment if raw else []
        held.append(set(topics[0][1]) if topics else set())
    return state, held


async def until_group(
    bootstrap: str,
    group: str,
    wanted: Callable[[list[set[int]]], bool],
    what: str,
    timeout_s: float = 120.0,
) -> None:
    """Poll the coordinator until the group is stable with members holding what `wanted` says."""
    deadline = time.monotonic() + timeout_s
    seen: tuple[str, list[set[int]]] = ("", [])
    while time.monotonic() < deadline:
        seen = await members_partitions(bootstrap, group)
        if seen[0] == "Stable" and wanted(seen[1]):
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"group {group} never got {what} in {timeout_s:.0f}s; last seen {seen}")


async def leaders(bootstrap: str, topics: list[str]) -> dict[str, list[int]]:
    """Each topic's partition leaders (by partition order)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        described = await admin.describe_topics(topics)
    finally:
        await admin.close()
    return {
        topic["topic"]: [
            p["leader"] for p in sorted(topic["partitions"], key=lambda p: p["partition"])
        ]
        for topic in described
    }


async def busiest_leader(cluster: KafkaCluster, topics: list[str]) -> tuple[int, int]:
    """The node leading the most partitions of `topics` among those leading some of each, and
    how many it leads."""
    leading = await leaders(cluster.bootstrap, topics)
    candidates = [
        node.node_id
        for node in cluster.nodes
        if all(node.node_id in topic_leaders for topic_leaders in leading.values())
    ]
    assert candidates, f"no broker leads a partition of every topic: {leading}"
    counts = {n: sum(ls.count(n) for ls in leading.values()) for n in candidates}
    victim = max(counts, key=lambda n: counts[n])
    return victim, counts[victim]


def deployment_on(bootstrap: str, tmp_path: Path, **options: Any) -> Deployment:
    policy = write_policy(
        tmp_path / "policy.yaml",
        **{"order.payment_status": {"freshness": "10m"}, "account.balance": {"freshness": "10m"}},
    )
    return Deployment(
        bootstrap=bootstrap, workdir=tmp_path, policy=policy, store="rocksdb://", **options
    )
