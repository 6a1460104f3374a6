"""The bench's scale phase: one worker holding N keys, and what that size costs it.

It runs after the default phases (or alone), on the same broker. The claims are made lean: one
Avro claim is encoded per round and copied with each key's number written into it, and they are
produced in per-partition batches, so publishing a million takes seconds, not the minutes a
model per claim would. Round 0 gives each of the N keys its first claim; round 1 gives a
second claim to `probe` keys drawn among them: the same source's later observation of a changed
value, which supersedes the first (an update, the common case of a key at size; one observed at
the same instant would open a value conflict and its timers instead). Every store asked for
(`rocksdb`, and `memory` beside it when asked) gets a worker of its own app id reading that one
claims topic:
- the fill (new keys) and the probe (keys at size) are timed as claims per second;
- RSS and the data dir's bytes per key are read once it has processed everything;
- it is SIGKILLed and restarted with its data dir, and timed until /readyz answers 200;
- it is stopped, its data dir removed, and restarted: a full restore from the changelog,
  timed the same way, and the changelog's records (and keys) per second of the worker's own
  restore time (its `claimstream_restore_seconds`, without the process's start);
- with `rollout`, new keys saturate it once (`load.latency`), and it is restarted on a new
  policy with half that rate offered meanwhile: how fast it moves the N keys (`rollout`).
The field is one without freshness, so N keys never go stale together and re-decide by time.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from streams.core.keys.state import state_key
from streams.core.records.contracts import Claim
from streams.devkit.bench.load import latency, send_batched
from streams.devkit.bench.rollout import payments_stale_in_s, rollout_phase
from streams.devkit.bench.worker import BenchWorker, processed_marks, worker_env
from streams.devkit.bench.workload import CODEC, SEATS
from streams.devkit.brokers import free_port
from streams.settings import Settings
from streams.topic_names import Topics
from streams.worker.topics import ensure_topics

DEFAULT_KEYS = 1_000_000
FIELD = SEATS  # freshness none: no key re-decides by time alone
SUBJECT = "scale-{:010d}"  # fixed width: a key's number replaces the template's bytes in place
TEMPLATE_NUMBER = 0
PROBE_CLAIMS = 100_000
UPDATE_AFTER = timedelta(seconds=30)  # the probe's claims are observed this long after the fill's


@dataclass(frozen=True)
class Scale:
    """What the scale phase was asked for: `only` skips the default phases."""

    keys: int = DEFAULT_KEYS
    stores: tuple[str, ...] = ("rocksdb",)
    probe: int = PROBE_CLAIMS
    only: bool = False
    rollout: bool = True


def lean_claims(
    topic: str, round_no: int, numbers: Iterable[int], observed_at: datetime
) -> Iterator[tuple[bytes, bytes]]:
    """(key, Avro value) of round `round_no`'s claim for each key number: the same bytes as
    `CODEC.encode` of that claim, made by rewriting one encoded template."""
    placeholder = SUBJECT.format(TEMPLATE_NUMBER)
    template = Claim(
        claim_id=f"{placeholder}-{round_no}",
        subject=placeholder,
        field=FIELD,
        status="present",
        value=round_no + 1,
        source="crm",
        observed_at=observed_at,
    )
    value = CODEC.encode(topic, template)
    key = state_key(placeholder, FIELD).encode()
    marker = placeholder.encode()
    for number in numbers:
        subject = SUBJECT.format(number).encode()
        yield key.replace(marker, subject), value.replace(marker, subject)


async def publish(bootstrap: str, topic: str, records: Iterable[tuple[bytes, bytes]]) -> int:
    """Produce `records` in per-partition batches (each key on its default partition, where the
    worker owns it: no re-key hop); the number sent once all are acknowledged."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, linger_ms=20, max_batch_size=512 * 1024, acks=1
    )
    await producer.start()
    sent = 0

    def counted() -> Iterator[tuple[bytes, bytes]]:
        nonlocal sent
        for record in records:
            sent += 1
            yield record

    try:
        partitions = len(await producer.partitions_for(topic))
        await asyncio.gather(*await send_batched(producer, topic, partitions, counted(), None))
    finally:
        await producer.stop()
    return sent


async def offsets(bootstrap: str, topic: str) -> tuple[int, int]:
    """The sum over `topic`'s partitions of their first and their end offsets."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap)  # its metadata: `topic`'s
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        first = await consumer.beginning_offsets(partitions)
        end = await consumer.end_offsets(partitions)
    finally:
        await consumer.stop()
    return sum(first.values()), sum(end.values())


async def committed(bootstrap: str, group: str, topic: str) -> int:
    """The sum of `group`'s committed offsets on `topic`."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        held = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    return sum(meta.offset for tp, meta in held.items() if tp.topic == topic and meta.offset > 0)


def scale_phase(bootstrap: str, base: Settings, scale: Scale, work_dir: Path) -> dict[str, Any]:
    """Publish the N keys' claims once, then measure a worker on each store asked for."""
    claims_topic = f"{base.app_id}.scale-claims"
    observed_at = datetime.now(UTC) - timedelta(minutes=1)
    probed = random.Random(7).sample(range(1, scale.keys + 1), min(scale.probe, scale.keys))
    settings = [_store_settings(base, store, claims_topic, work_dir) for store in scale.stores]
    for each in settings:
        asyncio.run(ensure_topics(each))
    records = itertools.chain(
        lean_claims(claims_topic, 0, range(1, scale.keys + 1), observed_at),
        lean_claims(claims_topic, 1, probed, observed_at + UPDATE_AFTER),
    )
    started = time.perf_counter()
    total = asyncio.run(publish(bootstrap, claims_topic, records))
    publish_s = time.perf_counter() - started
    print(f"bench: scale {total:,} claims on {scale.keys:,} keys published in {publish_s:.1f}s")
    figures: dict[str, Any] = {
        "keys": scale.keys,
        "probe_claims": len(probed),
        "publish_claims_per_s": round(total / max(publish_s, 1e-6)),
    }
    for store, each in zip(scale.stores, settings, strict=True):
        figures[store] = _measure_store(bootstrap, each, scale.keys, len(probed), scale.rollout)
    return figures


def _store_settings(base: Settings, store: str, claims_topic: str, work_dir: Path) -> Settings:
    app_id = f"{base.app_id}-scale-{store}"
    names = {k: f"{app_id}.{v}" for k, v in Topics().model_dump().items()}
    return base.model_copy(
        update={
            "app_id": app_id,
            "topics": Topics(**{**names, "claims": claims_topic}),
            "store": f"{store}://",
            "data_dir": work_dir / f"scale-{store}",
            "log_level": "info",  # its log (beside the data dir) tells what each restore read
            "web_port": free_port(),
            # Static membership: the restarted worker takes its partitions back at once, as a
            # StatefulSet pod does, instead of waiting out the killed one's session.
            "instance_id": f"{app_id}-0",
        }
    )


def _measure_store(
    bootstrap: str, settings: Settings, keys: int, probe: int, rollout: bool = True
) -> dict[str, Any]:
    env = worker_env(settings)
    worker = BenchWorker(settings, env, worker_log(settings))
    try:
        marks = processed_marks(worker, [keys, keys + probe])
        fill_s, probe_s = marks.at[0] - marks.first, marks.at[1] - marks.at[0]
        fill_cpu_s, probe_cpu_s = (
            marks.cpu_at[0] - marks.cpu_first,
            marks.cpu_at[1] - marks.cpu_at[0],
        )
        group, topic = f"{settings.app_id}-arbiter", settings.topics.claims
        end = asyncio.run(offsets(bootstrap, topic))[1]
        until(lambda: asyncio.run(committed(bootstrap, group, topic)) >= end, "input committed")
        measured: dict[str, Any] = {
            "fill_claims_per_s": round(keys / max(fill_s, 1e-6)),
            "claims_per_s": round(probe / max(probe_s, 1e-6)),
            "fill_cpu_us_per_claim": round(fill_cpu_s / keys * 1e6, 1),
            "cpu_us_per_claim": round(probe_cpu_s / probe * 1e6, 1),
            "rss_bytes": worker.rss(),
            "peak_rss_bytes": worker.peak_rss(),
            "disk_bytes_per_key": round(disk_bytes(settings.data_dir) / keys, 1),
        }
        print(f"bench: scale {settings.store} at size {measured}")
        worker.kill()
        worker, measured["restart_ready_s"] = ready_after_start(settings, env)
        worker.stop()
        shutil.rmtree(settings.data_dir)
        first, end = asyncio.run(offsets(bootstrap, settings.changelog_topic))
        worker, ready_s = ready_after_start(settings, env)
        restore_s = worker.restore_seconds()  # the restore alone, without the process's start
        restarts = {
            "restart_ready_s": measured["restart_ready_s"],
            "full_restore_ready_s": ready_s,
            "full_restore_s": round(restore_s, 1),
            "restore_records": end - first,
            "restore_records_per_s": round((end - first) / max(restore_s, 1e-6)),
            "restore_keys_per_s": round(keys / max(restore_s, 1e-6)),
        }
        print(f"bench: scale {settings.store} restarts {restarts}")
        print(f"bench: scale {settings.store} full restore: {restore_log(settings)}")
        measured |= restarts
        if rollout:
            saturated = asyncio.run(latency(bootstrap, settings.topics, 1e9, 4000)).rate
            print(f"bench: scale {settings.store} new-key decisions saturate at {saturated:,.0f}/s")
            measured["new_key_saturation_per_s"] = round(saturated)
            measured |= rollout_phase(
                bootstrap,
                worker,
                saturated / 2,
                worker_log(settings),
                stale_in_s=payments_stale_in_s(settings),
            )
            print(f"bench: scale {settings.store} rollout: {sweep_log(settings)}")
    finally:
        worker.stop()
        shutil.rmtree(settings.data_dir, ignore_errors=True)
    return measured


def ready_after_start(settings: Settings, env: dict[str, str]) -> tuple[BenchWorker, float]:
    """A worker started on `settings`, and the seconds until its /readyz answered 200."""
    started = shown = time.perf_counter()
    worker = BenchWorker(settings, env, worker_log(settings))

    def ready() -> bool:
        nonlocal shown
        if time.perf_counter() - shown >= 15:  # a long restore shows its progress
            shown = time.perf_counter()
            remaining = worker.restore_records_remaining()
            print(f"bench: scale {settings.store} restoring, {remaining:,} records to read")
        return worker.ready()

    until(ready, "ready", worker)
    return worker, round(time.perf_counter() - started, 1)


def worker_log(settings: Settings) -> Path:
    return settings.data_dir.with_suffix(".log")


def restore_log(settings: Settings) -> str:
    """The worker's last log line on its tasks' restore (how many keys, in how long)."""
    lines = worker_log(settings).read_text(encoding="utf-8", errors="replace").splitlines()
    return next((line for line in reversed(lines) if "arbiter: tasks" in line), "(none)")


def sweep_log(settings: Settings) -> str:
    """The worker's log lines on its rollout sweep's passes, in short."""
    lines = worker_log(settings).read_text(encoding="utf-8", errors="replace").splitlines()
    passes = [line for line in lines if "policy sweep:" in line]
    return f"{len(passes)} sweep lines, last: {passes[-1] if passes else '(none)'}"


def until(
    done: Callable[[], bool], what: str, worker: BenchWorker | None = None, timeout_s: float = 1800
) -> None:
    """Wait for `done()`, failing when `worker` exits first or `timeout_s` passes."""
    deadline = time.monotonic() + timeout_s
    while not done():
        if worker is not None and worker.proc.poll() is not None:
            raise RuntimeError(f"the worker exited with {worker.proc.returncode} before {what}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"not {what} after {timeout_s:.0f}s")
        time.sleep(0.2)


def disk_bytes(folder: Path) -> int:
    """Bytes the folder's files occupy on disk (allocated blocks, as `du` counts them)."""
    return sum(path.stat().st_blocks * 512 for path in folder.rglob("*") if path.is_file())
