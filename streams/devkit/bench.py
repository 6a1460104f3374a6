"""`claimstream bench`: claimstream next to the raw Kafka limit, on the same generated claims.

One broker is started for the run. The same Avro claims (a realistic mix: many subjects, several
fields, contended keys, stale claims, conflicts, bad records) are consumed twice:
- the limit: a plain aiokafka consumer that decodes each claim and produces one record per claim;
- claimstream: a real worker process arbitrating them end to end.
Then a fixed offered load at half claimstream's rate measures claim-to-decision latency, and the
pure engine is timed alone. The last line printed is one JSON object with the figures.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import fastavro
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from streams.client import ensure_topics
from streams.codec import parsed_schema
from streams.core.contracts import Claim, Decision
from streams.core.engine import arbitrate
from streams.core.errors import ContractError, RejectedInput
from streams.core.intake import admit, parse_claim
from streams.core.journal import encode_state
from streams.core.keystate import KeyState, Limits, add_claim, state_key
from streams.core.policy import Policy, load_policy
from streams.devkit.brokers import free_port, start_broker
from streams.devkit.synthetic import generate_claims
from streams.metrics import STAGES
from streams.packaged import example_path
from streams.pipeline import partition_of
from streams.registry import FolderRegistry, WireCodec
from streams.settings import Guarantee, Settings, Topics

CODEC = WireCodec(FolderRegistry())
PAID = "order.payment_status"  # the field the latency, soak and engine phases use
SOURCES = ["billing-api", "crm", "reporting-replica", "billing-cache"]


def payment(
    claim_id: str,
    subject: str,
    observed_at: datetime,
    value: str = "paid",
    source: str = "billing-api",
) -> Claim:
    return Claim(
        claim_id=claim_id,
        subject=subject,
        field=PAID,
        status="present",
        value=value,
        source=source,
        observed_at=observed_at,
    )


async def offer(producer: AIOKafkaProducer, topic: str, claim: Claim) -> None:
    key = state_key(claim.subject, claim.field).encode()
    await producer.send(topic, CODEC.encode(topic, claim), key=key)


async def keep_pace(started: float, sent: int, rate: float) -> None:
    """Sleep until the `sent`-th record is due at `rate` per second from `started`."""
    ahead = started + sent / rate - time.perf_counter()
    if ahead > 0:
        await asyncio.sleep(ahead)


@dataclass(frozen=True)
class Workload:
    records: list[tuple[bytes, bytes]]
    claims: list[Claim]


def workload(count: int, subjects: int, seed: int, topic: str) -> Workload:
    """Generated claims as (key, Avro value); claims the contract refuses become garbage bytes."""
    now = datetime.now(UTC)
    rng = random.Random(seed)
    records, claims = [], []
    for data in generate_claims(count, now, seed=seed, subjects=subjects, bad_share=0.02):
        try:
            claim = parse_claim(data)
        except ContractError:
            records.append((b"bad", rng.randbytes(40)))
            continue
        claims.append(claim)
        records.append((state_key(claim.subject, claim.field).encode(), CODEC.encode(topic, claim)))
    return Workload(records, claims)


async def create_topics(bootstrap: str, names: list[str], partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1) for name in names])
    finally:
        await admin.close()


async def fill(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, linger_ms=10, max_batch_size=512 * 1024, acks=1
    )
    await producer.start()
    try:
        futures = [await producer.send(topic, value, key=key) for key, value in records]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


@dataclass(frozen=True)
class Throughput:
    """Claims per second, and the CPU time the consuming process spent per claim: on a machine
    shared with other work the rates swing with the load, the CPU cost per claim much less."""

    per_s: float
    cpu_us: float


async def _raw_clients(
    bootstrap: str, source: str, group_prefix: str
) -> tuple[AIOKafkaConsumer, AIOKafkaProducer]:
    """The started consumer (a fresh group reading `source` from the start) and producer the
    raw loops share."""
    consumer = AIOKafkaConsumer(
        source,
        bootstrap_servers=bootstrap,
        group_id=f"{group_prefix}-{uuid.uuid4().hex[:6]}",
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=4 * 1024 * 1024,
    )
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, linger_ms=5, max_batch_size=256 * 1024, acks=1
    )
    await consumer.start()
    await producer.start()
    return consumer, producer


async def raw_limit(bootstrap: str, source: str, sink: str, expected: int) -> Throughput:
    """Batched consume + Avro decode + one produced record per claim: claims per second."""
    consumer, producer = await _raw_clients(bootstrap, source, "raw")
    seen, started, cpu_started = 0, None, 0.0
    try:
        while seen < expected:
            batch = await consumer.getmany(timeout_ms=1000, max_records=5000)
            if started is None and batch:
                started, cpu_started = time.perf_counter(), time.process_time()
            futures = []
            for messages in batch.values():
                for message in messages:
                    try:
                        claim = CODEC.decode(Claim, message.value)
                        out = claim.claim_id.encode()
                    except RejectedInput:
                        out = b"dead"
                    futures.append(await producer.send(sink, out, key=message.key))
                    seen += 1
            if futures:
                await asyncio.gather(*futures)
                await consumer.commit()
        assert started is not None
        cpu_us = (time.process_time() - cpu_started) / seen * 1e6
        return Throughput(seen / (time.perf_counter() - started), cpu_us)
    finally:
        await consumer.stop()
        await producer.stop()


async def raw_lean_limit(bootstrap: str, source: str, sink: str, expected: int) -> Throughput:
    """The fastest loop a person could write: batched consume, fastavro to a dict (no model),
    one record out per claim produced per partition with `send_batch`: claims per second."""
    consumer, producer = await _raw_clients(bootstrap, source, "raw-lean")
    schema = parsed_schema("Claim")
    partitions = len(await producer.partitions_for(sink))
    seen, started, cpu_started = 0, None, 0.0
    try:
        while seen < expected:
            batch = await consumer.getmany(timeout_ms=1000, max_records=5000)
            if started is None and batch:
                started, cpu_started = time.perf_counter(), time.process_time()
            outgoing: dict[int, Any] = {}
            futures = []
            for messages in batch.values():
                for message in messages:
                    try:
                        body = io.BytesIO(message.value[5:])
                        record: Any = fastavro.schemaless_reader(body, schema, None)
                        out = record["claim_id"].encode()
                    except Exception:
                        out = b"dead"
                    partition = partition_of(message.key, partitions)
                    builder = outgoing.get(partition)
                    if (
                        builder is None
                        or builder.append(key=message.key, value=out, timestamp=None) is None
                    ):
                        if builder is not None:  # full: send it, start the next
                            futures.append(
                                await producer.send_batch(builder, sink, partition=partition)
                            )
                        builder = outgoing[partition] = producer.create_batch()
                        builder.append(key=message.key, value=out, timestamp=None)
                    seen += 1
            for partition, builder in outgoing.items():
                futures.append(await producer.send_batch(builder, sink, partition=partition))
            if futures:
                await asyncio.gather(*futures)
                await consumer.commit()
        assert started is not None
        cpu_us = (time.process_time() - cpu_started) / seen * 1e6
        return Throughput(seen / (time.perf_counter() - started), cpu_us)
    finally:
        await consumer.stop()
        await producer.stop()


def _metric(text: str, name: str) -> float:
    """The sum of a metric's samples (`name` may carry a full label set)."""
    prefixes = (name + " ",) if name.endswith("}") else (name + "{", name + " ")
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefixes)
    )


class BenchWorker:
    def __init__(self, settings: Settings, env: dict[str, str]) -> None:
        self.settings = settings
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "streams.cli", "worker"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def metrics(self) -> str:
        try:
            url = f"http://127.0.0.1:{self.settings.web_port}/metrics"
            with urllib.request.urlopen(url, timeout=10) as response:
                return str(response.read().decode())
        except OSError:
            return ""

    def processed(self) -> float:
        text = self.metrics()
        return _metric(text, "claimstream_claims_accepted_total") + _metric(
            text, "claimstream_claims_rejected_total"
        )

    def cpu_seconds(self) -> float:
        """User and system CPU time of the worker process so far (all its threads)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def peak_rss(self) -> int:
        return self._status_bytes("VmHWM:")

    def rss(self) -> int:
        return self._status_bytes("VmRSS:")

    def stage_seconds(self) -> dict[str, float]:
        text = self.metrics()
        return {
            stage: _metric(text, f'claimstream_stage_seconds_total{{stage="{stage}"}}')
            for stage in STAGES
        }

    def state_keys(self) -> int:
        return int(_metric(self.metrics(), "claimstream_state_keys"))

    def _status_bytes(self, field: str) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1]) * 1024
        return 0

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def claimstream_rate(worker: BenchWorker, expected: int, timeout_s: float) -> Throughput:
    """Claims per second from the first processed claim to the last (startup excluded)."""
    deadline = time.monotonic() + timeout_s
    first: tuple[float, float, float] | None = None
    while time.monotonic() < deadline:
        done = worker.processed()
        now, cpu = time.perf_counter(), worker.cpu_seconds()
        if first is None and done > 0:
            first = (now, done, cpu)
        if done >= expected and first is not None:
            claims = max(done - first[1], 1.0)
            return Throughput(claims / max(now - first[0], 1e-6), (cpu - first[2]) / claims * 1e6)
        time.sleep(0.2)
    raise TimeoutError(f"worker processed {worker.processed():.0f} of {expected} claims")


async def latency(
    bootstrap: str, topics: Topics, rate: float, total: int
) -> tuple[list[float], float]:
    """Offer `total` claims at `rate`/s on fresh keys (each one yields a decision): the latency
    of every decision, and the decisions per second the worker kept up with."""
    consumer = AIOKafkaConsumer(
        topics.decisions, bootstrap_servers=bootstrap, auto_offset_reset="latest"
    )
    await consumer.start()
    await asyncio.sleep(1.0)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0, acks=1)
    await producer.start()
    tag = uuid.uuid4().hex[:6]
    latencies: list[float] = []
    started = time.perf_counter()
    finished = started

    async def send_all() -> None:
        for n in range(total):
            fresh = payment(f"lat-{tag}-{n}", f"lat-{tag}-{n}", datetime.now(UTC))
            await offer(producer, topics.claims, fresh)
            await keep_pace(started, n + 1, rate)

    async def collect() -> None:
        nonlocal finished
        deadline = time.monotonic() + total / rate + 60
        while len(latencies) < total and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=200)
            received = time.time()
            for messages in batch.values():
                for message in messages:
                    # Two fields, not a validated Decision: this process shares the machine
                    # with the worker it measures.
                    decision = CODEC.decode_record(Decision, message.value)
                    if decision["subject"].startswith(f"lat-{tag}-"):
                        latencies.append(received - decision["decided_at"].timestamp())
                        finished = time.perf_counter()

    try:
        await asyncio.gather(send_all(), collect())
    finally:
        await producer.stop()
        await consumer.stop()
    return latencies, len(latencies) / max(finished - started, 1e-6)


async def soak(
    bootstrap: str, topics: Topics, worker: BenchWorker, rate: float, seconds: float, keys: int
) -> list[tuple[float, int, int]]:
    """Offer claims at a steady `rate`/s for `seconds` on `keys` keys, each claim newer than
    the last for its key: with bounded history, memory must level off. Samples (elapsed s,
    worker RSS, tracked keys) every 30 s."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks=1)
    await producer.start()
    rng = random.Random(5)
    samples: list[tuple[float, int, int]] = []
    started = time.perf_counter()
    next_sample, sent = started, 0
    try:
        while (elapsed := time.perf_counter() - started) < seconds:
            claim = payment(
                f"soak-{sent}",
                f"soak-{sent % keys}",
                datetime.now(UTC),
                value=rng.choice(["paid", "paid", "unpaid"]),
                source=rng.choice(SOURCES),
            )
            await offer(producer, topics.claims, claim)
            sent += 1
            if time.perf_counter() >= next_sample:
                samples.append((round(elapsed), worker.rss(), worker.state_keys()))
                print(f"bench: soak t={elapsed:.0f}s rss={samples[-1][1]} keys={samples[-1][2]}")
                next_sample += 30
            await keep_pace(started, sent, rate)
        await producer.flush()
        await asyncio.sleep(2)
        samples.append((round(time.perf_counter() - started), worker.rss(), worker.state_keys()))
    finally:
        await producer.stop()
    return samples


def engine_rate(policy: Policy, keys: int = 20000) -> float:
    """The pure engine alone: decisions per second for keys of 3 claims."""
    now = datetime.now(UTC)
    rules = policy.rules_for(PAID)
    assert rules is not None
    rng = random.Random(3)
    batches = []
    for k in range(keys):
        claims = [
            payment(
                f"e{k}-{i}",
                f"s{k}",
                now - timedelta(seconds=rng.randrange(90)),
                value=rng.choice(["paid", "paid", "unpaid"]),
                source=rng.choice(SOURCES),
            )
            for i in range(3)
        ]
        batches.append([admit(c, policy, now) for c in claims])
    started = time.perf_counter()
    for n, admitted in enumerate(batches):
        arbitrate(f"s{n}", PAID, admitted, rules, policy.version, now)
    return keys / (time.perf_counter() - started)


def state_bytes_per_key(policy: Policy, claims: list[Claim]) -> float:
    """Average serialized size of a key's state after the workload (what changelog and RocksDB
    hold per key)."""
    now = datetime.now(UTC)
    states: dict[str, KeyState] = {}
    for claim in claims:
        rules = policy.rules_for(claim.field)
        try:
            admitted = admit(claim, policy, now)
        except ContractError:
            continue
        assert rules is not None
        key = state_key(claim.subject, claim.field)
        step = add_claim(states.get(key), admitted, rules, policy.version, now, Limits())
        states[key] = step.state
    sizes = [len(encode_state(state)) for state in states.values()]
    return statistics.fmean(sizes)


def run(
    claims: int,
    subjects: int,
    broker_kind: str,
    partitions: int,
    latency_s: float,
    soak_s: float = 0.0,
    guarantee: Guarantee = Guarantee.AT_LEAST_ONCE,
) -> dict[str, Any]:
    policy = load_policy(example_path("policy.yaml"))
    work_dir = Path(tempfile.mkdtemp(prefix="claimstream-bench-"))
    name = f"bench{uuid.uuid4().hex[:6]}"
    topics = Topics(**{k: f"{name}.{v}" for k, v in Topics().model_dump().items()})
    broker = start_broker(broker_kind, partitions=partitions)
    try:
        settings = Settings(
            app_id=name,
            broker=f"kafka://{broker.bootstrap}",
            partitions=partitions,
            topics=topics,
            web_port=free_port(),
            data_dir=work_dir / "state",
            log_level="error",
            processing_guarantee=guarantee,
        )
        asyncio.run(ensure_topics(settings))
        load = workload(claims, subjects, seed=1, topic=topics.claims)
        print(f"bench: {len(load.records)} claims ({len(load.claims)} valid) on {broker_kind}")
        raw_in, raw_out = f"{name}.raw-in", f"{name}.raw-out"
        asyncio.run(create_topics(broker.bootstrap, [raw_in, raw_out], partitions))
        asyncio.run(fill(broker.bootstrap, raw_in, load.records))
        asyncio.run(fill(broker.bootstrap, topics.claims, load.records))
        raw = asyncio.run(raw_limit(broker.bootstrap, raw_in, raw_out, len(load.records)))
        print(f"bench: raw aiokafka {raw.per_s:,.0f} claims/s, {raw.cpu_us:.0f} µs CPU a claim")
        lean = asyncio.run(raw_lean_limit(broker.bootstrap, raw_in, raw_out, len(load.records)))
        print(f"bench: raw lean aiokafka {lean.per_s:,.0f} claims/s, {lean.cpu_us:.0f} µs CPU")

        env = dict(os.environ)
        env.update({f"CLAIMSTREAM_{k.upper()}": str(v) for k, v in _env_settings(settings).items()})
        env.update({f"CLAIMSTREAM_TOPIC_{k.upper()}": v for k, v in topics.model_dump().items()})
        worker = BenchWorker(settings, env)
        try:
            ours = claimstream_rate(worker, len(load.records), timeout_s=900)
            print(
                f"bench: claimstream {ours.per_s:,.0f} claims/s, {ours.cpu_us:.0f} µs CPU a claim"
            )
            stage_us = {
                stage: round(seconds / len(load.records) * 1e6, 1)
                for stage, seconds in worker.stage_seconds().items()
            }
            print(f"bench: µs per claim by stage {stage_us}")
            # New keys cost more than the mixed workload's average (each one is a decision), so
            # the saturating rate for the latency phase is measured on new keys first.
            _, saturated = asyncio.run(latency(broker.bootstrap, topics, 1e9, 4000))
            print(f"bench: new-key decisions saturate at {saturated:,.0f}/s")
            lat, _ = asyncio.run(
                latency(broker.bootstrap, topics, saturated / 2, int(saturated / 2 * latency_s))
            )
            rss = worker.peak_rss()
            if soak_s > 0:
                samples = asyncio.run(
                    soak(broker.bootstrap, topics, worker, saturated / 4, soak_s, keys=5000)
                )
        finally:
            worker.stop()
    finally:
        broker.close()  # stops it and removes its data folder
        shutil.rmtree(work_dir, ignore_errors=True)
    soaked: dict[str, Any] = {}
    if soak_s > 0:
        # Growth is measured from the middle of the run: the keys take minutes to fill their
        # bounded claims and decision history (measured: about 4 minutes at these rates).
        settled = next(s for s in samples if s[0] >= soak_s / 2)
        soaked = {
            "soak_s": soak_s,
            "soak_offered_per_s": round(saturated / 4),
            "soak_rss_settled_bytes": settled[1],
            "soak_rss_end_bytes": samples[-1][1],
            "soak_rss_growth_pct": round((samples[-1][1] / settled[1] - 1) * 100, 1),
            "soak_keys_end": samples[-1][2],
        }
    quantiles = statistics.quantiles(lat, n=100) if len(lat) >= 2 else [float("nan")] * 99
    engine = engine_rate(policy)
    return {
        "broker": broker_kind,
        "claims": len(load.records),
        "subjects": subjects,
        "guarantee": guarantee.value,
        "raw_claims_per_s": round(raw.per_s),
        "raw_lean_claims_per_s": round(lean.per_s),
        "claimstream_claims_per_s": round(ours.per_s),
        "raw_cpu_us_per_claim": round(raw.cpu_us, 1),
        "raw_lean_cpu_us_per_claim": round(lean.cpu_us, 1),
        "claimstream_cpu_us_per_claim": round(ours.cpu_us, 1),
        "cpu_ratio": round(raw.cpu_us / ours.cpu_us, 3),
        "stage_us": stage_us,
        "ratio": round(ours.per_s / raw.per_s, 3),
        "new_key_saturation_per_s": round(saturated),
        "latency_offered_per_s": round(saturated / 2),
        "latency_samples": len(lat),
        "p50_ms": round(quantiles[49] * 1000, 1),
        "p99_ms": round(quantiles[98] * 1000, 1),
        "peak_rss_bytes": rss,
        "bytes_per_key": round(state_bytes_per_key(policy, load.claims)),
        "engine_decisions_per_s": round(engine),
        **soaked,
    }


def _env_settings(settings: Settings) -> dict[str, object]:
    return {
        "app_id": settings.app_id,
        "broker": settings.broker,
        "partitions": settings.partitions,
        "web_port": settings.web_port,
        "data_dir": settings.data_dir,
        "log_level": settings.log_level,
        "processing_guarantee": settings.processing_guarantee.value,
    }


def main(
    claims: int,
    subjects: int,
    broker_kind: str,
    partitions: int,
    latency_s: float,
    soak_s: float = 0.0,
    guarantee: Guarantee = Guarantee.AT_LEAST_ONCE,
) -> int:
    result = run(claims, subjects, broker_kind, partitions, latency_s, soak_s, guarantee)
    print(json.dumps(result, sort_keys=True))
    return 0
