"""The bench's rollout phase: a worker restarted on a new policy moves every key it holds to it,
and what that costs live claims meanwhile.

It follows the phases that filled a worker (the default ones, or the scale phase's N keys). The
keys are those on the decisions topic so far (each decided under the worker's policy, A). The
worker is stopped and started again on the same app id, data dir and store with policy B: A's
text under a new `version:`, two sources' authorities swapped on the fields the bench's claims
use, so that a key's belief may change, not only its version (the policy topic's lead time is
set to 0: B is in force from the worker's start). From the moment its /readyz answers 200, the
decisions topic is read until every key has a decision under B (a decision is matched to a key
by its record key, to B by the version's bytes in its Avro: decoded only now and then, to check
that match); meanwhile claims on fresh keys are offered at the latency phase's rate
(`load.latency`, at most `LIVE_MAX_S`), and the worker's `claimstream_policy_sweep_remaining`
is read until it shows 0 (its sweep has looked at every key and found none left on A). Then a
short run of the same offered load, the sweep over, gives the latency without one.

What is measured is the sweep, not a wave of keys going stale: before the worker is stopped,
the earlier phases' payment statuses are let go stale (60 s after the phase began, every one of
them was observed before) and the worker's timers read until none is due. Run at once, the
rollout met the latency phase's keys coming due (106,763 timer ticks during the sweep, the
worker's CPU at 93%): that is the timers' pacing, which the latency phase measures. For the same
reason the offered claims are seat counts, a field that never goes stale.

Figures: `rollout_keys`, `rollout_keys_per_s`, `rollout_s` (readiness to the last key's
decision under B), `rollout_live_p50_ms`/`rollout_live_p99_ms` (the fresh claims offered
meanwhile) beside `rollout_baseline_p50_ms`/`rollout_baseline_p99_ms` (`rollout_p99_ratio`),
and the sweep's own signs.

The merge phase (`merge`) measures aliases taking effect the same way, with the helpers here:
`earlier_timers_fired`, `LiveLoad` and `live_figures`, `decisions_reader` and `watch_decisions`
(any `Awaited` keys), `until_every_key` and `settled` (a sweep gauge read to 0).
"""

from __future__ import annotations

import asyncio
import math
import os
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml
from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from streams.core.records.contracts import Decision
from streams.core.records.policy import policy_from_text
from streams.devkit.bench.load import Offered, latency, percentiles
from streams.devkit.bench.worker import BenchWorker, Signs, worker_env
from streams.devkit.bench.workload import CODEC, PAID, SEATS, seats
from streams.settings import Settings
from streams.topic_names import Topics

SWAPS: dict[str, tuple[str, str]] = {
    PAID: ("billing-api", "reporting-replica"),  # the default phases' and the latency phase's
    SEATS: ("crm", "billing-cache"),  # the scale phase's and the live load's
}
"""Per field, the two sources whose authorities policy B swaps."""
BASELINE_S = 10.0
"""The offered load's run once the sweep is over: the latency without one, same worker."""
LIVE_MIN_S = 1.0
"""The offered load runs at least this long, however short the sweep."""
LIVE_MAX_S = 120.0
"""And at most this long, however long the sweep: each of its claims is a key more."""
SWEEP_METRIC = "claimstream_policy_sweep_remaining"
LOOK_S = 1.0
"""Between two reads of the sweep's gauge (a /metrics scrape costs the worker a few ms)."""
STUCK_S = 180.0
"""A rollout that re-decides no key for this long has failed the phase."""
SETTLE_S = 120.0
"""How long after the last key's decision under B the sweep's gauge may take to show 0."""
IDLE_END_S = 10.0
"""Reading a topic to its end: this long with nothing returned ends it."""
CHECK_EVERY = 1000
"""One decision in this many (and the first) matched to B is decoded to check the match."""


def rollout_policy(base: Path, version: str, swaps: Mapping[str, tuple[str, str]] = SWAPS) -> str:
    """The YAML of the policy at `base` under `version`, with on each field of `swaps` its two
    sources' authorities swapped (the field's own override of a source's class, else the
    source's): checked to be a valid policy."""
    policy = yaml.safe_load(base.read_text(encoding="utf-8"))
    policy["version"] = version
    sources, fields = policy.get("sources", {}), policy.get("fields", {})
    for field_name, (one, other) in swaps.items():
        rules = fields.get(field_name)
        if rules is None or one not in sources or other not in sources:
            continue  # a policy without them: nothing to swap there
        authorities = dict(rules.get("authorities") or {})
        of = {s: authorities.get(s, sources[s]["authority"]) for s in (one, other)}
        authorities[one], authorities[other] = of[other], of[one]
        rules["authorities"] = authorities
    text = yaml.safe_dump(policy, sort_keys=False)
    policy_from_text(text, f"policy {version}")  # fails here, not in the worker
    return text


async def decided_keys(
    bootstrap: str, topic: str
) -> tuple[set[bytes], dict[TopicPartition, int], int]:
    """The distinct keys of `topic`'s records (read committed) to its end, the end offsets, and
    how many records were read."""
    consumer = AIOKafkaConsumer(
        topic,  # subscribed at first: its metadata, `topic`'s partitions
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        isolation_level="read_committed",
        max_partition_fetch_bytes=8 * 1024 * 1024,
        fetch_max_bytes=32 * 1024 * 1024,
    )
    await consumer.start()
    keys: set[bytes] = set()
    read = 0
    try:
        partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        consumer.unsubscribe()
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        left = {tp for tp in partitions if ends[tp] > 0}
        idle_since = time.monotonic()
        while left:
            batch = await consumer.getmany(*left, timeout_ms=500, max_records=50_000)
            for messages in batch.values():
                keys.update(m.key for m in messages if m.key is not None)
                read += len(messages)
            for tp in list(left):
                if await consumer.position(tp) >= ends[tp]:
                    left.discard(tp)
            if batch:
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since > IDLE_END_S:
                break  # the rest can only be transaction markers or aborted records
    finally:
        await consumer.stop()
    return keys, ends, read


@dataclass
class RolloutWatch:
    """The decisions under `version` of `keys`, as they are read: which keys have one yet."""

    keys: set[bytes]
    version: str
    remaining: set[bytes] = field(init=False)
    decisions: int = 0  # decisions under `version` of `keys` (a key may have more than one)
    others: int = 0  # decisions of `keys` under another version (before it took effect)
    first_at: float = 0.0  # perf_counter time of the first decision under `version`
    done_at: float = 0.0  # when every key had one
    checked: int = 0  # decisions decoded to check the match

    def __post_init__(self) -> None:
        self.remaining = set(self.keys)
        self._marker = self.version.encode()

    def see(self, messages: Iterable[ConsumerRecord[bytes, bytes]], now: float) -> None:
        keys, remaining, marker = self.keys, self.remaining, self._marker
        for message in messages:
            key, value = message.key, message.value
            if key not in keys or value is None:
                continue
            if marker not in value:
                self.others += 1
                continue
            if self.decisions % CHECK_EVERY == 0:
                decided = CODEC.decode(Decision, value).policy_version
                if decided != self.version:
                    raise AssertionError(f"{key!r}: decided under {decided}, not {self.version}")
                self.checked += 1
            self.decisions += 1
            self.first_at = self.first_at or now
            remaining.discard(key)
        if not remaining:
            self.done_at = self.done_at or now

    def awaiting(self) -> str:
        return f"re-decided under {self.version}"


def rollout_phase(
    bootstrap: str,
    worker: BenchWorker,
    rate: float,
    log: Path | None = None,
    baseline_s: float = BASELINE_S,
    broker_pid: int | None = None,
    stale_in_s: float = 0.0,
) -> dict[str, Any]:
    """`worker` (on policy A, its keys decided) is stopped and started again with policy B:
    the figures of its move to B at `rate` claims/s of live load, and of that load after it
    (with `broker_pid`, the broker's CPU meanwhile too). The restarted worker is stopped before
    this returns. `stale_in_s`: when the claims offered so far are all stale (`payments_stale_in_s`
    after payment statuses), waited for first with the worker's due timers."""
    settings = worker.settings
    waited_s = earlier_timers_fired(worker, stale_in_s)
    if waited_s >= 1:
        print(f"bench: rollout waited {waited_s:.0f} s for the earlier phases' keys to go stale")
    worker.stop()
    keys, ends, read = asyncio.run(decided_keys(bootstrap, settings.topics.decisions))
    was = policy_from_text(settings.policy.read_text(encoding="utf-8")).version
    version = f"{was}-rollout-{uuid.uuid4().hex[:6]}"
    policy_b = settings.data_dir.parent / f"{settings.app_id}-policy-b.yaml"
    policy_b.write_text(rollout_policy(settings.policy, version), encoding="utf-8")
    env = worker_env(settings) | {
        "CLAIMSTREAM_POLICY": str(policy_b),
        "CLAIMSTREAM_POLICY_LEAD_S": "0",  # the sweep measured, not a lead time
    }
    print(f"bench: rollout of {len(keys):,} keys ({read:,} decisions read) to policy {version}")
    watch = RolloutWatch(keys, version)
    measured = asyncio.run(
        _rollout(bootstrap, settings, env, log, watch, ends, rate, baseline_s, broker_pid)
    )
    figures = {
        "rollout_keys": len(keys),
        "rollout_version": version,
        "rollout_decisions": watch.decisions,
        "rollout_waited_for_timers_s": round(waited_s, 1),
        **measured,
    }
    print(f"bench: rollout {figures}")
    return figures


def payments_stale_in_s(settings: Settings) -> float:
    """How long a payment status stays fresh under the worker's policy (0: never stale)."""
    rules = policy_from_text(settings.policy.read_text(encoding="utf-8")).rules_for(PAID)
    freshness = rules.freshness if rules is not None else None
    return freshness.total_seconds() if freshness is not None else 0.0


def earlier_timers_fired(worker: BenchWorker, stale_in_s: float) -> float:
    """Seconds waited until `stale_in_s` passed and no timer of the worker is due: what a phase
    measures then is its own work, not a wave of the earlier phases' keys going stale."""
    began = time.monotonic()
    stale_at = began + stale_in_s
    while time.monotonic() < stale_at or worker.timers_due() > 0:
        worker.alive("the earlier phases' timers")
        if time.monotonic() > stale_at + SETTLE_S:
            raise TimeoutError(f"timers still due {SETTLE_S:.0f} s after the keys went stale")
        time.sleep(0.5)
    return time.monotonic() - began


async def _rollout(
    bootstrap: str,
    settings: Settings,
    env: dict[str, str],
    log: Path | None,
    watch: RolloutWatch,
    ends: Mapping[TopicPartition, int],
    rate: float,
    baseline_s: float,
    broker_pid: int | None,
) -> dict[str, Any]:
    """Start the worker on B, then watch its decisions and sweep with the live load on."""
    consumer = await decisions_reader(bootstrap, ends)
    load = LiveLoad(bootstrap, settings.topics, rate)
    watching = asyncio.create_task(watch_decisions(consumer, watch))
    worker: BenchWorker | None = None
    try:
        started = time.perf_counter()
        worker = BenchWorker(settings, env, log)
        while not await asyncio.to_thread(worker.ready):
            worker.alive("ready")
            if time.perf_counter() - started > 600:
                raise TimeoutError("the worker on policy B was not ready after 600 s")
            await asyncio.sleep(0.05)
        ready_at = time.perf_counter()
        load.begin.set()
        before_ready = len(watch.keys) - len(watch.remaining)
        shown = await asyncio.to_thread(Signs.of, worker, phase_pids(worker, broker_pid))
        most, ended = await until_every_key(
            worker, watch, watching, load.end, ready_at + LIVE_MAX_S, SWEEP_METRIC
        )
        load.end.set()  # the live load ends with the last key, not the gauge's 0
        signs = await asyncio.to_thread(shown.since, worker)
        settled_at = await settled(worker, BenchWorker.sweep_remaining, SWEEP_METRIC)
        offered, baseline = await load.measured(baseline_s)
    finally:
        await wound_down(load, watching, consumer)
        if worker is not None:
            worker.stop()
    # From readiness, or the first decision under B if the worker moved keys before /readyz
    # was seen to answer (a task's sweep starts once it is installed).
    began = min(ready_at, watch.first_at or ready_at)
    rollout_s = watch.done_at - began
    # While the offered load ran, and after (when the keys took longer than `LIVE_MAX_S`).
    live_s, moved_live = (ended[0] - began, ended[1]) if ended else (rollout_s, len(watch.keys))
    after: dict[str, int | None] = {"rollout_after_live_keys_per_s": None}
    if ended:
        after_s = max(watch.done_at - ended[0], 1e-6)
        after["rollout_after_live_keys_per_s"] = round((len(watch.keys) - moved_live) / after_s)
    if before_ready:
        print(f"bench: rollout: {before_ready:,} keys moved before /readyz answered")
    return {
        "rollout_s": round(rollout_s, 2),
        "rollout_keys_per_s": round(len(watch.keys) / max(rollout_s, 1e-6)),
        "rollout_live_keys_per_s": round(moved_live / max(live_s, 1e-6)),
        **after,
        "rollout_ready_s": round(ready_at - started, 1),
        "rollout_sweep_done_s": round(settled_at - ready_at, 1),
        "rollout_sweep_remaining_max": most,
        "rollout_old_policy_decisions": watch.others,
        **live_figures("rollout_", rate, offered, baseline),
        "rollout_stalls": signs,
    }


class Awaited(Protocol):
    """Keys waited for on the decisions topic (`RolloutWatch`, the merge phase's watch): those
    not seen done yet, and when the last was."""

    keys: set[bytes]
    remaining: set[bytes]
    done_at: float

    def see(self, messages: Iterable[ConsumerRecord[bytes, bytes]], now: float) -> None: ...

    def awaiting(self) -> str:
        """What a key left is waiting for, for a failure's message."""
        ...


class LiveLoad:
    """Fresh seat counts (a field that never goes stale) offered at `rate` from `begin` until
    `end` is set (at least `LIVE_MIN_S`), then the same load with nothing else under way: the
    baseline. Made inside the running event loop; its clients start at once."""

    def __init__(self, bootstrap: str, topics: Topics, rate: float) -> None:
        self.bootstrap, self.topics, self.rate = bootstrap, topics, rate
        self.begin, self.end = asyncio.Event(), asyncio.Event()
        self.task = asyncio.create_task(
            latency(
                bootstrap, topics, rate, int(rate * 86_400), self.begin, self.end, LIVE_MIN_S, seats
            )
        )

    async def measured(self, baseline_s: float) -> tuple[Offered, Offered]:
        """Ends the live load: what it measured, then the baseline's `baseline_s`."""
        self.end.set()
        offered = await self.task
        total = max(2, int(self.rate * baseline_s))
        return offered, await latency(self.bootstrap, self.topics, self.rate, total, make=seats)

    async def cancel(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


async def wound_down(load: LiveLoad, watching: asyncio.Task[Any], consumer: Any) -> None:
    """A phase's live load, its watch of the decisions and the watch's consumer, stopped."""
    await load.cancel()
    watching.cancel()
    await asyncio.gather(watching, return_exceptions=True)
    await consumer.stop()


def live_figures(prefix: str, rate: float, offered: Offered, baseline: Offered) -> dict[str, Any]:
    """The live load's figures beside its baseline's, each named after `prefix`."""
    live, base = (
        percentiles(f"{prefix}live_", offered.latencies),
        percentiles(f"{prefix}baseline_", baseline.latencies),
    )
    ratio = live[f"{prefix}live_p99_ms"] / base[f"{prefix}baseline_p99_ms"]
    return {
        f"{prefix}offered_per_s": round(rate),
        f"{prefix}live_s": round(offered.offered_s, 1),
        f"{prefix}live_samples": len(offered.latencies),
        **live,
        **percentiles(f"{prefix}live_worker_", offered.in_worker),
        f"{prefix}baseline_samples": len(baseline.latencies),
        **base,
        f"{prefix}p99_ratio": round(ratio, 2) if math.isfinite(ratio) else None,
    }


def phase_pids(worker: BenchWorker, broker_pid: int | None) -> dict[str, int]:
    """The processes whose CPU a phase reports: the worker, this one (the load), the broker."""
    pids = {"worker": worker.proc.pid, "load": os.getpid()}
    if broker_pid is not None:
        pids["broker"] = broker_pid
    return pids


async def decisions_reader(bootstrap: str, ends: Mapping[TopicPartition, int]) -> AIOKafkaConsumer:
    """A started consumer of the decisions from `ends` on (read committed)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        isolation_level="read_committed",
        max_partition_fetch_bytes=8 * 1024 * 1024,
    )
    await consumer.start()
    consumer.assign(list(ends))
    for tp, end in ends.items():
        consumer.seek(tp, end)
    return consumer


async def watch_decisions(consumer: AIOKafkaConsumer, watch: Awaited) -> None:
    while not watch.done_at:
        batch = await consumer.getmany(timeout_ms=200, max_records=20_000)
        now = time.perf_counter()
        for messages in batch.values():
            watch.see(messages, now)
        watch.see((), now)  # no key at all: done at once


async def until_every_key(
    worker: BenchWorker,
    watch: Awaited,
    watching: asyncio.Task[None],
    live: asyncio.Event,
    live_until: float,
    gauge: str,
    stuck_s: float = STUCK_S,
) -> tuple[int, tuple[float, int] | None]:
    """Wait for every key `watch` awaits, reading the worker's `gauge` meanwhile; `live` is set
    (the offered load ends) at `live_until` if the keys take longer. The gauge's largest value
    seen, and when `live` was set with how many keys were done by then (None: not set). Fails
    when the worker exits or no key is done for `stuck_s`."""
    most, left, progressed = 0, len(watch.remaining), time.monotonic()
    ended: tuple[float, int] | None = None
    while not watching.done():
        await asyncio.wait({watching}, timeout=LOOK_S)
        if ended is None and time.perf_counter() >= live_until and watch.remaining:
            live.set()
            ended = (time.perf_counter(), len(watch.keys) - len(watch.remaining))
        worker.alive("every key done")
        shown = await asyncio.to_thread(worker.gauge, gauge)
        most = max(most, shown or 0)
        if len(watch.remaining) < left:
            left, progressed = len(watch.remaining), time.monotonic()
        elif time.monotonic() - progressed > stuck_s:
            due = await asyncio.to_thread(worker.timers_due)
            raise TimeoutError(
                f"{left:,} of {len(watch.keys):,} keys not {watch.awaiting()} in {stuck_s:.0f} s "
                f"(e.g. {sorted(watch.remaining)[:3]}); {gauge} {shown}, "
                f"claimstream_timers_due {due}"
            )
    watching.result()  # its failure, if it failed
    return most, ended


async def settled(
    worker: BenchWorker, left: Callable[[BenchWorker], int | None], what: str
) -> float:
    """When `left` (a gauge of the worker's sweep) first read 0, called once every key awaited
    is done. The sweep's gauges are refreshed at most every `expiry_interval_s`: a 0 read sooner
    may be from before the sweep began. Till the last pass it shows more than 0 (each pass that
    sent ticks is followed, after a pause, by another over every key)."""
    fresh_from = time.perf_counter() + worker.settings.expiry_interval_s + 0.5
    deadline = time.monotonic() + SETTLE_S
    while True:
        looked = time.perf_counter()
        shown = await asyncio.to_thread(left, worker)
        if shown == 0 and looked >= fresh_from:
            return looked
        worker.alive("the sweep's end")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} still {shown} {SETTLE_S:.0f} s after every key")
        await asyncio.sleep(0.25)
