"""A history checker in the spirit of Jepsen's Kafka checks.

A run records every claim whose publication the broker acknowledged, then reads back everything
the pipeline emitted. The checker proves that each acknowledged claim is accounted for (stored by
the broker, and either dead-lettered or reflected in its key's final decision), that repeated
decisions are identical, and that the final decisions equal an offline replay of what the broker
holds.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from streams.core.contracts import Claim, Decision
from streams.core.keystate import state_key
from streams.core.policy import Policy
from streams.core.replay import ReplayResult, replay
from tests.stream.support import CODEC, read_topic


@dataclass
class History:
    sent: int = 0
    acked: list[Claim] = field(default_factory=list)


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

    def line(self) -> str:
        return (
            f"checker: scenario={self.scenario} sent={self.sent} acked={self.acked} "
            f"decisions={self.decisions} dead_letters={self.dead_letters} "
            f"duplicates={self.duplicates} lost={self.lost} recovery_s={self.recovery_s:.1f}"
        )


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


def offline_replay(policy: Policy, stored: list[Claim]) -> ReplayResult:
    """What `claimstream replay` decides for everything the broker holds."""
    return replay(
        (json.dumps(c.model_dump(mode="json")) for c in stored), policy, datetime.now(UTC)
    )


def check(
    scenario: str,
    expected: ReplayResult,
    history: History,
    stored: list[Claim],
    decisions: list[Decision],
    dead_letters: list[Any],
    recovery_s: float,
) -> Verdict:
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
        problems.append(f"{len(wrong_keys)} keys' final decisions differ from the offline replay")
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
    )


def workload(count: int, seed: int) -> list[Claim]:
    """Valid claims over a few hundred keys, with contention, staleness and policy rejections."""
    from streams.core.errors import ContractError
    from streams.core.intake import parse_claim
    from streams.devkit.synthetic import generate_claims

    claims = []
    for data in generate_claims(count, datetime.now(UTC), seed=seed, subjects=count // 8):
        try:
            claims.append(parse_claim(data))
        except ContractError:
            continue
    random.Random(seed).shuffle(claims)
    return claims
