"""Test support for the streaming tests: worker processes and topic readers on real brokers, the
claims the tests publish and what they should come to."""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from streams.client import ClaimPublisher
from streams.core.admission.intake import parse_claim
from streams.core.keys.state import state_key
from streams.core.reading.replay import replay
from streams.core.records.contracts import Claim, Decision, RejectReason
from streams.core.records.errors import ContractError
from streams.core.records.policy import load_policy
from streams.devkit.brokers import free_port
from streams.devkit.synthetic import generate_claims
from streams.settings import Settings
from streams.state.keystore import RESERVED
from streams.topic_names import Topics
from streams.wire import codec
from streams.wire.registry import FolderRegistry, WireCodec

REPO = Path(__file__).resolve().parents[2]
CODEC = WireCodec(FolderRegistry())


@dataclass
class Deployment:
    """One isolated pipeline on a shared broker: its own app id and topic names."""

    bootstrap: str
    workdir: Path
    policy: Path
    store: str = "memory://"
    partitions: int = 4
    guarantee: str = "at_least_once"
    state_cache_keys: int = 100_000
    max_claims_per_key: int = 16
    schema_registry: str | None = None  # None: the schemas/ folder
    static_membership: bool = False
    settings: dict[str, str] = field(default_factory=dict)  # more CLAIMSTREAM_* settings
    name: str = field(default_factory=lambda: f"cs{uuid.uuid4().hex[:8]}")

    @property
    def topics(self) -> Topics:
        return Topics(**{k: f"{self.name}.{v}" for k, v in Topics().model_dump().items()})

    def env(self, web_port: int, data_dir: Path, **overrides: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                "CLAIMSTREAM_BROKER": f"kafka://{self.bootstrap}",
                "CLAIMSTREAM_APP_ID": self.name,
                "CLAIMSTREAM_POLICY": str(self.policy),
                "CLAIMSTREAM_STORE": self.store,
                "CLAIMSTREAM_DATA_DIR": str(data_dir),
                "CLAIMSTREAM_WEB_PORT": str(web_port),
                "CLAIMSTREAM_PARTITIONS": str(self.partitions),
                "CLAIMSTREAM_PROCESSING_GUARANTEE": self.guarantee,
                "CLAIMSTREAM_LOG_LEVEL": "warn",
                "CLAIMSTREAM_EXPIRY_INTERVAL_S": "0.5",
                "CLAIMSTREAM_STATE_CACHE_KEYS": str(self.state_cache_keys),
                "CLAIMSTREAM_MAX_CLAIMS_PER_KEY": str(self.max_claims_per_key),
            }
        )
        if self.schema_registry is not None:
            env["CLAIMSTREAM_SCHEMA_REGISTRY"] = self.schema_registry
        env.update({f"CLAIMSTREAM_{name.upper()}": value for name, value in self.settings.items()})
        for name, topic in self.topics.model_dump().items():
            env[f"CLAIMSTREAM_TOPIC_{name.upper()}"] = topic
        return {**env, **overrides}

    def worker(self, index: int = 0, **env: str) -> WorkerProcess:
        """Worker `index`; `env` adds settings for this worker only (CLAIMSTREAM_...). With
        static membership it keeps one group instance id (like a StatefulSet pod's name)."""
        if self.static_membership:
            env.setdefault("CLAIMSTREAM_INSTANCE_ID", f"worker-{index}")
        return WorkerProcess(self, self.workdir / f"worker-{index}", env)


STORES_AND_GUARANTEES = [
    ("memory://", "at_least_once"),
    ("memory://", "exactly_once"),
    ("rocksdb://", "at_least_once"),
    ("rocksdb://", "exactly_once"),
]


def every_store_and_guarantee(
    bootstrap: str, workdir: Path, policy: Path, **options: Any
) -> list[Deployment]:
    """One deployment a store and guarantee on one broker, each in a folder of its own, its
    workers in static membership (a worker restarted gets its partitions back at once)."""
    return [
        Deployment(
            bootstrap=bootstrap,
            workdir=workdir / store.rstrip(":/") / guarantee,
            policy=policy,
            store=store,
            guarantee=guarantee,
            static_membership=True,
            **options,
        )
        for store, guarantee in STORES_AND_GUARANTEES
    ]


_LOCAL_REPR = re.compile(r"^\s{4,}\w+ = ")
STARTED: list[WorkerProcess] = []
"""The workers the running test started: a failing test's report shows what each was doing."""


class WorkerProcess:
    """A `claimstream worker` subprocess; stopped (or killed) only by the test that started it."""

    def __init__(
        self, deployment: Deployment, data_dir: Path, env: dict[str, str] | None = None
    ) -> None:
        self.deployment = deployment
        self.data_dir = data_dir
        self.env = env or {}
        self.web_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.with_suffix(".log")

    def start(self) -> WorkerProcess:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "streams.cli", "worker"],
            env=self.deployment.env(self.web_port, self.data_dir, **self.env),
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        if self not in STARTED:
            STARTED.append(self)
        deadline = time.monotonic() + 120  # a loaded CI machine has taken over 60 s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited early:\n{self.log_tail()}")
            if self.get("/healthz", attempts=1) is not None:
                return self
            time.sleep(0.3)
        raise RuntimeError(f"worker web API did not come up in 120 s:\n{self.diagnosis()}")

    def get(self, path: str, attempts: int = 3, token: str | None = None) -> Any:
        """GET a web API path (as the steward `token` names, where given); None if the worker
        does not answer (the web server shares the worker's event loop, so a busy moment is
        retried)."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        request = urllib.request.Request(f"http://127.0.0.1:{self.web_port}{path}", headers=headers)
        for attempt in range(attempts):
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    body = response.read()
            except OSError:
                if attempt + 1 < attempts:
                    time.sleep(1)
                continue
            return body.decode() if path == "/metrics" else json.loads(body)
        return None

    def post(self, path: str, body: dict[str, Any], token: str) -> tuple[int, Any]:
        """POST a JSON body as the steward `token` names: the status and the JSON answer."""
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.web_port}{path}",
            data=json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as reply:
                return reply.status, json.load(reply)
        except urllib.error.HTTPError as refused:
            return refused.code, json.load(refused)

    def restarts(self) -> int:
        """Agents Faust restarted after a crash (an agent that raised); 0 for a healthy worker."""
        return self.log_tail(100000).count("Crashed reason=")

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def diagnosis(self) -> str:
        """The log's tail, then every task's and thread's stack (the worker prints them on
        SIGUSR1), without the locals' reprs."""
        if self.proc is None:
            return "(never started)"
        before = self.log_tail(30)
        if self.proc.poll() is not None:
            return f"{self.data_dir.name}: exited with {self.proc.returncode}\n{before}"
        size = self.log_path.stat().st_size if self.log_path.exists() else 0
        self.proc.send_signal(signal.SIGUSR1)
        time.sleep(1)
        with self.log_path.open("rb") as log:
            log.seek(size)
            dumped = log.read().decode(errors="replace").splitlines()
        stacks = [line for line in dumped if not _LOCAL_REPR.match(line)][:200]
        return "\n".join(
            [
                f"{self.data_dir.name}: running, pid {self.proc.pid}; /healthz: {self.health()}",
                before,
                "-- stacks --",
                *stacks,
            ]
        )

    def health(self) -> str:
        """What /healthz answers, failing or not (`get` treats a 503 as no answer)."""
        url = f"http://127.0.0.1:{self.web_port}/healthz"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return f"{response.status} {response.read().decode(errors='replace')[:300]}"
        except urllib.error.HTTPError as exc:
            return f"{exc.code} {exc.read().decode(errors='replace')[:300]}"
        except OSError as exc:
            return f"no answer ({type(exc).__name__}: {exc})"

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def crc32_partition(key: bytes, partitions: int) -> int:
    """Where librdkafka's default partitioner (`consistent_random`) puts a keyed record."""
    return zlib.crc32(key) % partitions


async def produce(bootstrap: str, topic: str, records: Iterable[tuple[Any, ...]]) -> int:
    """Send (key, value, headers[, partition]) records; without a partition, the key's murmur2
    partition (the Java client's default partitioner)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks="all")
    await producer.start()
    try:
        futures = [
            await producer.send(
                topic,
                value,
                key=key,
                headers=headers,
                partition=partition[0] if partition else None,
            )
            for key, value, headers, *partition in records
        ]
        await asyncio.gather(*futures)
        return len(futures)
    finally:
        await producer.stop()


async def read_topic(
    bootstrap: str,
    topic: str,
    idle_s: float = 3.0,
    max_s: float = 60.0,
    isolation_level: str = "read_uncommitted",
) -> list[Any]:
    """Every record on `topic`, read until it has been quiet for `idle_s`."""
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        isolation_level=isolation_level,
    )
    await consumer.start()
    records: list[Any] = []
    try:
        started = last = time.monotonic()
        while time.monotonic() - last < idle_s and time.monotonic() - started < max_s:
            batch = await consumer.getmany(timeout_ms=500)
            for messages in batch.values():
                records.extend(messages)
                last = time.monotonic()
    finally:
        await consumer.stop()
    return records


def changelog_partitions(bootstrap: str, deployment: Deployment) -> dict[bytes, set[int]]:
    """Every changelog partition each key's state was journaled to (a task-level record, such
    as the source ledger every task keeps, is not a key's state)."""
    journal = asyncio.run(read_topic(bootstrap, f"{deployment.name}-key-state-changelog", idle_s=2))
    where: dict[bytes, set[int]] = {}
    for record in journal:
        if not record.key.startswith(RESERVED):
            where.setdefault(record.key, set()).add(record.partition)
    return where


async def wait_for_decisions(
    bootstrap: str, topic: str, expected: dict[tuple[str, str], str], timeout_s: float = 120.0
) -> tuple[dict[tuple[str, str], Decision], list[Decision]]:
    """Follow the decisions topic until every key's latest decision id is the expected one."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    latest: dict[tuple[str, str], Decision] = {}
    every: list[Decision] = []
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            for messages in batch.values():
                for message in messages:
                    decision = CODEC.decode(Decision, message.value)
                    # The worker assembles decision records from parts: byte for byte the
                    # record the codec writes from the Decision it reads back as.
                    assert message.value[5:] == codec.encode(decision), decision.decision_id
                    every.append(decision)
                    latest[(decision.subject, decision.field)] = decision
            if all(k in latest and latest[k].decision_id == v for k, v in expected.items()):
                break
    finally:
        await consumer.stop()
    return latest, every


# -- what the tests publish, and what it should come to --------------------------------------------


def write_policy(path: Path, **field_options: dict[str, object]) -> Path:
    """The example policy with some fields' options replaced (e.g. a shorter freshness), or
    fields added."""
    policy = yaml.safe_load((REPO / "examples" / "policy.yaml").read_text())
    for field_name, options in field_options.items():
        policy["fields"].setdefault(field_name, {}).update(options)
    path.write_text(yaml.safe_dump(policy))
    return path


def publishable(
    count: int, seed: int, now: datetime, reused_id_share: float = 0.0
) -> list[dict[str, Any]]:
    """Generated claims that survive the Avro contract (policy-level faults stay in)."""
    kept = []
    for data in generate_claims(
        count,
        now,
        seed=seed,
        subjects=count // 6,
        epochs=True,
        reused_id_share=reused_id_share,
    ):
        try:
            parse_claim(data)
        except ContractError:
            continue
        kept.append(data)
    return kept


def records(deployment: Deployment, claims: list[dict[str, Any]], rng: random.Random) -> list[Any]:
    """Avro records: a third keyed by the producer's own scheme, so the worker must re-key them;
    a third keyed right but placed by librdkafka's default partitioner (CRC32 of the key), so
    the worker must move those that CRC32 and murmur2 place apart; the rest as Kafka's Java
    client places them. Every record of a claim id takes the same route, so records reusing an
    id arrive in the order they were sent (the stream keeps the first of conflicting ones)."""
    out = []
    routes: dict[str, float] = {}
    for data in claims:
        claim = Claim.model_validate(data)
        key = state_key(claim.subject, claim.field).encode()
        value = CODEC.encode(deployment.topics.claims, claim)
        draw = routes.setdefault(claim.claim_id, rng.random())
        if draw < 0.33:
            out.append((claim.claim_id.encode(), value, []))
        elif draw < 0.66:
            out.append((key, value, [], crc32_partition(key, deployment.partitions)))
        else:
            out.append((key, value, []))
    return out


def expected_decisions(
    deployment: Deployment, claims: list[dict[str, Any]]
) -> tuple[dict[tuple[str, str], str], int]:
    """Replay's final decision ids, and how many records the stream must dead-letter: replay
    rejects every version of a conflicting duplicate, the stream all but the first to arrive
    (the first was admitted before the conflict showed, then withdrawn)."""
    policy = load_policy(deployment.policy)
    result = replay((json.dumps(c) for c in claims), policy, datetime.now(UTC))
    disputed = {
        (r.claim_id, r.claim["subject"], r.claim["field"])
        for r in result.rejections
        if r.reason is RejectReason.CONFLICTING_DUPLICATE
    }
    expected = {(d.subject, d.field): d.decision_id for d in result.decisions}
    return expected, len(result.rejections) - len(disputed)


def one_claim(n: int, value: str, source: str = "billing-api", **extra: Any) -> Claim:
    return Claim(
        claim_id=f"t{n}-{random.random()}",
        subject="inv:timer",
        field="order.payment_status",
        status="present",
        value=value,
        source=source,
        observed_at=datetime.now(UTC),
        **extra,
    )


# -- a worker's progress ---------------------------------------------------------------------------


def metric_sum(text: str, name: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") or line.startswith(name + " ")
    )


def warm_up(bootstrap: str, deployment: Deployment) -> None:
    """Wait until the worker owns its partitions, so timings measure processing, not joining."""
    claim = Claim(
        claim_id="warm-up",
        subject="warm-up",
        field="order.payment_status",
        status="present",
        value="paid",
        source="billing-api",
        observed_at=datetime.now(UTC),
    )
    key = state_key(claim.subject, claim.field).encode()
    asyncio.run(
        produce(
            bootstrap,
            deployment.topics.claims,
            [(key, CODEC.encode(deployment.topics.claims, claim), [])],
        )
    )
    deadline = time.monotonic() + 60
    latest: dict[Any, Any] = {}
    while ("warm-up", "order.payment_status") not in latest and time.monotonic() < deadline:
        latest, _ = asyncio.run(
            wait_for_decisions(bootstrap, deployment.topics.decisions, {}, timeout_s=1)
        )
    assert ("warm-up", "order.payment_status") in latest


Sent = tuple[str, str]
"""A decision on a topic as the differential tests compare it: (decision_id, decided_at)."""
ByKey = dict[tuple[str, str], list[Sent]]


def sent_of(decision: Decision) -> Sent:
    return decision.decision_id, decision.decided_at.isoformat()


def decisions_by_key(bootstrap: str, topic: str, guarantee: str) -> ByKey:
    """Each key's decisions on `topic`, in order (read committed under exactly once)."""
    isolation = "read_committed" if guarantee == "exactly_once" else "read_uncommitted"
    records = asyncio.run(read_topic(bootstrap, topic, idle_s=2, isolation_level=isolation))
    by_key: ByKey = {}
    for record in records:
        decision = CODEC.decode(Decision, record.value)
        by_key.setdefault((decision.subject, decision.field), []).append(sent_of(decision))
    return by_key


def without_repeats(by_key: ByKey) -> ByKey:
    """Each key's records with a repeat of one already sent left out: a redelivered claim's
    decision, sent again exactly as first sent, or a batch sent again after a restart."""
    return {key: list(dict.fromkeys(sent)) for key, sent in by_key.items()}


async def start_ready(workers: list[WorkerProcess]) -> None:
    """Start every worker and wait until each owns its partitions (`/readyz` answers 200)."""

    def ready(worker: WorkerProcess) -> None:
        worker.start()
        deadline = time.monotonic() + 120
        while worker.get("/readyz", attempts=1) is None:
            assert time.monotonic() < deadline, worker.diagnosis()
            time.sleep(0.3)

    await asyncio.gather(*(asyncio.to_thread(ready, w) for w in workers))


async def publish_claims(settings: Settings, claims: list[dict[str, Any]]) -> None:
    """Publish claims (as dicts) with the project's own publisher."""
    async with ClaimPublisher(settings) as publisher:
        await publisher.publish_many(claims)
