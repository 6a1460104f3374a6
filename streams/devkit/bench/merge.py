"""The bench's merge phase: subject aliases taking effect on a worker that holds both spellings'
keys, and what that costs live claims meanwhile.

It runs on a worker the earlier phases filled (after the latency phase, before the rollout),
or on any running worker. `pairs` pairs of keys get a seat count each: the alias spelling's key
(`<prefix>-alias-<n>`) from crm, a system of record, and the canonical key (`<prefix>-<n>`)
from billing-cache, a cache, with another value. Once the worker has decided them, claims on
fresh keys are offered at the rollout phase's rate (`rollout.LiveLoad`), and one alias a pair
(`<prefix>-alias-<n>` names `<prefix>-<n>`) is published to the aliases topic, all taking
effect at one instant `lead_s` ahead (the records `publish_alias` writes, sent by one producer).
At that instant the worker's sweep ticks each alias key; its claim goes through the rekeyed
topic to the canonical key, which decides over both (crm's value wins now: its decision names
the alias spelling as the claim's `sent_about`), and the alias key emits a last decision saying
`merged into '<prefix>-<n>'`. A pair is merged once the decisions topic holds both decisions;
then `claimstream_alias_regroups_pending` is read until it shows 0 and
`claimstream_alias_moves_total` until it grew by `pairs`, and a short run of the same load, the
merge over, gives the latency without it.

As the rollout phase does, it first lets the earlier phases' payment statuses go stale and
waits for the worker's due timers (`rollout.earlier_timers_fired`): what is measured is the
merge, not a wave of keys coming due. Last, a sample of pairs is checked on the decisions topic
(the alias key's last decision says where its evidence went, and lists none; the canonical
key's lists both claims, the alias's naming its spelling) and through the worker's web API
(`GET /api/decisions/<subject>|<field>`, for both spellings): the phase fails otherwise.

Figures: `merge_pairs`, `merge_s` (from the aliases' instant to the last pair merged),
`merge_keys_per_s` (alias keys merged a second over `merge_s`), `merge_first_s` (the instant to
the first pair merged: how long the worker took to take the aliases in), `merge_sweep_keys_per_s`
(from the first pair to the last), `merge_live_p50_ms`/`merge_live_p99_ms` beside
`merge_baseline_p50_ms`/`merge_baseline_p99_ms` and their `merge_p99_ratio`, and the worker's
signs over the merge (`merge_stalls`).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition

from streams.core.keys.state import state_key
from streams.core.records.contracts import Decision
from streams.core.timeline.aliases import AliasChange
from streams.devkit.bench.rollout import (
    BASELINE_S,
    CHECK_EVERY,
    LiveLoad,
    decisions_reader,
    earlier_timers_fired,
    live_figures,
    phase_pids,
    settled,
    until_every_key,
    watch_decisions,
    wound_down,
)
from streams.devkit.bench.scale import publish
from streams.devkit.bench.worker import BenchWorker, Signs
from streams.devkit.bench.workload import CODEC, SEATS, seats
from streams.pipeline.alias_records import alias_record
from streams.settings import Settings
from streams.wire.kafka import client_options

DEFAULT_PAIRS = 10_000
LEAD_S = 2.0
"""The aliases take effect this long after they are published."""
ALIAS_VALUE, CANONICAL_VALUE = 40, 25
"""The alias key's seat count (crm's) and the canonical key's (billing-cache's)."""
PENDING_METRIC = "claimstream_alias_regroups_pending"
STUCK_S = 600.0
"""A merge that merges no pair for this long has failed the phase (generous: the worker takes
the whole alias history in before the first pair moves)."""
LIVE_MAX_S = 300.0
"""The live load runs at most this long after the aliases' instant (each of its claims is a key
more): longer than the rollout's, to cover the worker taking the aliases in as well."""
FILL_S = 300.0
"""How long the worker may take to decide the pairs' claims."""
SAMPLE = 20
"""Pairs checked one by one once the phase is over (the first and the last among them)."""
MERGED = b"merged into"


@dataclass(frozen=True)
class Pairs:
    """The phase's keys: `count` pairs under `prefix` (a run's own, so a broker can hold
    more than one run's)."""

    prefix: str
    count: int

    def alias(self, n: int) -> str:
        return f"{self.prefix}-alias-{n:06d}"

    def canonical(self, n: int) -> str:
        return f"{self.prefix}-{n:06d}"

    def spellings(self, n: int) -> tuple[str, str]:
        """Pair `n`'s alias spelling and its canonical subject."""
        return self.alias(n), self.canonical(n)

    def key(self, subject: str) -> bytes:
        return state_key(subject, SEATS).encode()

    def sample(self) -> list[int]:
        step = max(1, self.count // SAMPLE)
        return sorted({*range(0, self.count, step), self.count - 1})


@dataclass
class MergeWatch:
    """The pairs' decisions as they are read: a pair is merged once its alias key's decision
    says `merged into` and its canonical key's names the alias spelling (its claim's
    `sent_about`). `keys` and `remaining` are the alias keys; the last decision of each sampled
    key is kept for the check."""

    pairs: Pairs
    keys: set[bytes] = field(init=False)
    remaining: set[bytes] = field(init=False)
    first_at: float = 0.0  # perf_counter time of the first pair merged
    done_at: float = 0.0  # when every pair was
    alias_decisions: int = 0  # decisions of alias keys saying `merged into`
    canonical_decisions: int = 0  # decisions of canonical keys naming the alias spelling
    checked: int = 0  # decisions decoded to check the match
    last: dict[bytes, bytes] = field(default_factory=dict)

    def __post_init__(self) -> None:
        pairs = self.pairs
        by_alias = {pairs.key(pairs.alias(n)): pairs.alias(n) for n in range(pairs.count)}
        self.keys = set(by_alias)
        self.remaining = set(by_alias)
        self._spelling = {key: subject.encode() for key, subject in by_alias.items()}
        self._alias_of = {
            pairs.key(pairs.canonical(n)): pairs.key(pairs.alias(n)) for n in range(pairs.count)
        }
        self._unmoved = set(by_alias)  # alias keys without their `merged into` decision
        self._ungathered = set(by_alias)  # alias keys whose canonical key has not named them
        sampled = pairs.sample()
        self._sampled = {pairs.key(pairs.alias(n)) for n in sampled} | {
            pairs.key(pairs.canonical(n)) for n in sampled
        }

    def see(self, messages: Iterable[ConsumerRecord[bytes, bytes]], now: float) -> None:
        for message in messages:
            key, value = message.key, message.value
            if key is None or value is None:
                continue
            if key in self.keys:
                alias, done = key, MERGED in value
                if done:
                    self.alias_decisions += 1
                    self._unmoved.discard(alias)
            elif (alias := self._alias_of.get(key)) is not None:
                done = self._spelling[alias] in value
                if done:
                    self.canonical_decisions += 1
                    self._ungathered.discard(alias)
            else:
                continue
            if key in self._sampled:
                self.last[key] = value
            if done and (self.alias_decisions + self.canonical_decisions) % CHECK_EVERY == 1:
                self._check(key, alias, value)
            if alias not in self._unmoved and alias not in self._ungathered:
                self.remaining.discard(alias)
                self.first_at = self.first_at or now
        if not self.remaining:
            self.done_at = self.done_at or now

    def _check(self, key: bytes, alias: bytes, value: bytes) -> None:
        """The match by bytes, checked on the decoded decision."""
        decision = CODEC.decode(Decision, value)
        spelling = self._spelling[alias].decode()
        if key == alias:
            ok = MERGED.decode() in decision.reason
        else:
            ok = spelling in {e.sent_about for e in decision.evidence}
        if not ok:
            raise AssertionError(f"{key!r}: matched as merged but decided {decision}")
        self.checked += 1

    def awaiting(self) -> str:
        return "merged (alias key: `merged into`; canonical key: the alias's claim)"


def merge_phase(
    bootstrap: str,
    worker: BenchWorker,
    rate: float,
    pairs: int = DEFAULT_PAIRS,
    lead_s: float = LEAD_S,
    baseline_s: float = BASELINE_S,
    broker_pid: int | None = None,
    stale_in_s: float = 0.0,
) -> dict[str, Any]:
    """On running `worker`: `pairs` pairs of keys filled, then an alias a pair taking effect
    `lead_s` after it is published, with `rate` claims/s of live load on other keys; the
    figures of the merge and of that load after it (with `broker_pid`, the broker's CPU
    meanwhile too). `stale_in_s`: as `rollout_phase`'s. Fails unless a sample of the pairs is
    merged as it should be."""
    settings = worker.settings
    waited_s = earlier_timers_fired(worker, stale_in_s)
    if waited_s >= 1:
        print(f"bench: merge waited {waited_s:.0f} s for the earlier phases' keys to go stale")
    keys = Pairs(f"merge{uuid.uuid4().hex[:6]}", pairs)
    filled_s = _fill(bootstrap, worker, keys)
    print(f"bench: merge of {pairs:,} alias keys into theirs ({filled_s:.1f} s to decide both)")
    ends = asyncio.run(_decisions_end(bootstrap, settings.topics.decisions))
    watch = MergeWatch(keys)
    measured = asyncio.run(
        _merge(bootstrap, worker, watch, ends, rate, lead_s, baseline_s, broker_pid)
    )
    checked = _verify(worker, watch)
    figures = {
        "merge_pairs": pairs,
        "merge_waited_for_timers_s": round(waited_s, 1),
        "merge_fill_s": round(filled_s, 1),
        **measured,
        "merge_alias_decisions": watch.alias_decisions,
        "merge_canonical_decisions": watch.canonical_decisions,
        "merge_checked_pairs": checked,
    }
    print(f"bench: merge {figures}")
    return figures


def _claims(topic: str, keys: Pairs) -> Iterator[tuple[bytes, bytes]]:
    """Each pair's two seat counts, observed a minute ago."""
    observed_at = datetime.now(UTC) - timedelta(minutes=1)
    for n in range(keys.count):
        alias, canonical = keys.spellings(n)
        said = seats(alias, alias, observed_at, ALIAS_VALUE)
        kept = seats(canonical, canonical, observed_at, CANONICAL_VALUE).model_copy(
            update={"source": "billing-cache"}
        )
        for claim in (said, kept):
            yield keys.key(claim.subject), CODEC.encode(topic, claim)


def _fill(bootstrap: str, worker: BenchWorker, keys: Pairs) -> float:
    """Publish the pairs' claims and wait until the worker processed them: seconds taken."""
    began = time.monotonic()
    before = worker.processed()
    topic = worker.settings.topics.claims
    sent = asyncio.run(publish(bootstrap, topic, _claims(topic, keys)))
    while worker.processed() < before + sent:
        worker.alive("the merge phase's claims were decided")
        if time.monotonic() - began > FILL_S:
            raise TimeoutError(f"the merge phase's {sent:,} claims not processed in {FILL_S} s")
        time.sleep(0.2)
    return time.monotonic() - began


async def _decisions_end(bootstrap: str, topic: str) -> dict[TopicPartition, int]:
    """The decisions topic's end offsets, a moment after the worker processed the fill (its
    last decisions on their way)."""
    await asyncio.sleep(1.0)
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap)  # its metadata: `topic`'s
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        return dict(await consumer.end_offsets(partitions))
    finally:
        await consumer.stop()


async def _publish_aliases(settings: Settings, keys: Pairs, at: datetime) -> None:
    """One alias a pair taking effect at `at`: the records `publish_alias` writes, through one
    producer (one each would take a producer's start and stop a pair)."""
    producer = AIOKafkaProducer(**client_options(settings), acks="all", linger_ms=5)
    await producer.start()
    try:
        sent = []
        for n in range(keys.count):
            key, value, headers = alias_record(AliasChange(keys.alias(n), keys.canonical(n), at))
            sent.append(
                await producer.send(settings.topics.aliases, value, key=key, headers=headers)
            )
        await asyncio.gather(*sent)
    finally:
        await producer.stop()


async def _merge(
    bootstrap: str,
    worker: BenchWorker,
    watch: MergeWatch,
    ends: Mapping[TopicPartition, int],
    rate: float,
    lead_s: float,
    baseline_s: float,
    broker_pid: int | None,
) -> dict[str, Any]:
    """Publish the aliases with the live load on, then watch the pairs merge."""
    consumer = await decisions_reader(bootstrap, ends)
    load = LiveLoad(bootstrap, worker.settings.topics, rate)
    watching = asyncio.create_task(watch_decisions(consumer, watch))
    pairs = watch.pairs.count
    try:
        moves_before = await asyncio.to_thread(worker.alias_moves)
        load.begin.set()
        shown = await asyncio.to_thread(Signs.of, worker, phase_pids(worker, broker_pid))
        published = time.perf_counter()
        at = datetime.now(UTC) + timedelta(seconds=lead_s)
        await _publish_aliases(worker.settings, watch.pairs, at)
        in_force = published + lead_s  # the aliases' instant, on this clock
        published_s = time.perf_counter() - published
        most, ended = await until_every_key(
            worker, watch, watching, load.end, in_force + LIVE_MAX_S, PENDING_METRIC, STUCK_S
        )
        load.end.set()  # the live load ends with the last pair, not the gauges' 0
        signs = await asyncio.to_thread(shown.since, worker)

        def unsettled(worker: BenchWorker) -> int | None:
            pending = worker.alias_regroups_pending()
            short = pairs - (worker.alias_moves() - moves_before)
            return None if pending is None else max(pending, short, 0)

        settled_at = await settled(worker, unsettled, f"{PENDING_METRIC} or moves short")
        moves = await asyncio.to_thread(worker.alias_moves)
        offered, baseline = await load.measured(baseline_s)
    finally:
        await wound_down(load, watching, consumer)
    merge_s = max(watch.done_at - in_force, 1e-6)
    live_s, merged_live = (ended[0] - in_force, ended[1]) if ended else (merge_s, pairs)
    after_s = max(watch.done_at - ended[0], 1e-6) if ended else None
    return {
        "merge_lead_s": lead_s,
        "merge_publish_s": round(published_s, 2),
        "merge_first_s": round(watch.first_at - in_force, 2),
        "merge_s": round(merge_s, 2),
        "merge_keys_per_s": round(pairs / merge_s),
        "merge_sweep_keys_per_s": round(pairs / max(watch.done_at - watch.first_at, 1e-6)),
        "merge_live_keys_per_s": round(merged_live / max(live_s, 1e-6)),
        "merge_after_live_keys_per_s": round((pairs - merged_live) / after_s) if after_s else None,
        "merge_settled_s": round(settled_at - in_force, 1),
        "merge_regroups_pending_max": most,
        "merge_alias_moves": moves - moves_before,
        **live_figures("merge_", rate, offered, baseline),
        "merge_stalls": signs,
    }


def _verify(worker: BenchWorker, watch: MergeWatch) -> int:
    """Check a sample of pairs on the decisions topic and through the worker's web API: the
    number checked, or AssertionError naming every pair that is not merged as it should be."""
    keys, wrong = watch.pairs, []
    for n in keys.sample():
        alias, canonical = keys.spellings(n)
        held = {alias: alias, canonical: None}  # claim id -> the spelling it was sent about
        last_alias = watch.last.get(keys.key(alias))
        last_canonical = watch.last.get(keys.key(canonical))
        if last_alias is None or last_canonical is None:
            wrong.append(f"{n}: no decision read for {alias if last_alias is None else canonical}")
            continue
        left = CODEC.decode(Decision, last_alias)
        if f"merged into {canonical!r}" not in left.reason or left.evidence:
            wrong.append(f"{n}: {alias}'s last decision: {left.reason!r}, {left.evidence}")
        gathered = CODEC.decode(Decision, last_canonical)
        if _spellings(gathered.evidence) != held:
            wrong.append(f"{n}: {canonical}'s last decision lists {gathered.evidence}")
        for asked in (canonical, alias):  # an alias answers for its canonical key
            answer = worker.decision(f"{asked}|{SEATS}")
            if answer is None or answer["subject"] != canonical:
                wrong.append(f"{n}: GET /api/decisions/{asked}|{SEATS}: {answer}")
            elif _spellings(Decision.model_validate(answer).evidence) != held:
                wrong.append(f"{n}: GET /api/decisions/{asked}|{SEATS} lists {answer['evidence']}")
    if wrong:
        raise AssertionError(
            f"merge: {len(wrong)} problems in {len(keys.sample())} pairs checked: "
            + "; ".join(wrong[:10])
        )
    return len(keys.sample())


def _spellings(evidence: Iterable[Any]) -> dict[str, str | None]:
    return {e.claim_id: e.sent_about for e in evidence}
