"""An audit export as of a past instant is what the cluster believed then, and provably so.

Two workers of one deployment (exactly once) on one Apache Kafka broker decide a history with
every input that changes a belief: seat counts crm and the order form disagree on (policy A
believes crm), conflicts between two systems of record, one resolved by a steward, two
spellings of three customers merged by an alias, payment statuses whose freshness runs out, and
policy B (which believes the order form) rolled out while they run. The export is taken as of
an instant after all of that, while more claims and a resolution arrive after it. Then:

- key by key, the export's beliefs are the last decision on the decisions topic at or before
  the instant, and the web API's answer as of it (an alias's spelling answered on its
  subject's key); so too as of an instant before the merge and the rollout, each spelling on
  its own key then;
- its evidence names the spelling each claim was sent about, its statements the resolution in
  force, its policies A until B took effect;
- exported again from its snapshot token, every file is byte-identical;
- `audit verify --replay` holds, and fails once a file is edited.

And once retention takes a partition's first records, a cut from before what it still holds is
refused naming the oldest instant that can be exported.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import subprocess
import sys
import time
import urllib.parse
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from streams.audit.export import Progress, export
from streams.audit.verify import verify
from streams.core.keys.state import state_key
from streams.core.records.contracts import Claim, Decision, Resolution
from streams.core.records.errors import ClaimstreamError
from streams.core.timeline.aliases import AliasChange
from streams.devkit.brokers import KafkaBroker
from streams.settings import Settings
from streams.worker.alias_log import publish_alias
from streams.worker.policy_log import publish_policy
from tests.stream.support import (
    CODEC,
    REPO,
    Deployment,
    WorkerProcess,
    read_topic,
    start_ready,
)

SEATS, PAYMENT = "contract.seats", "order.payment_status"
MERGE_AT_S, ROLLOUT_AT_S, AS_OF_S, END_AT_S = 3.0, 5.0, 7.0, 10.0
EARLY_S = 2.5  # after the steward's resolution, before the merge, the expiries and the rollout
FRESHNESS_S = 3


def _policy(path: Path, version: str, believes: str) -> Path:
    """The example policy as `version`, believing `believes` (crm or order-form) on seats."""
    policy = yaml.safe_load((REPO / "examples" / "policy.yaml").read_text())
    policy["version"] = version
    other = "order-form" if believes == "crm" else "crm"
    policy["fields"][SEATS]["authorities"] = {
        believes: "system_of_record",
        other: "cached",
        "config-service": "system_of_record",
        "billing-export": "system_of_record",
    }
    policy["fields"][SEATS]["escalate_after"] = "1h"
    policy["fields"][PAYMENT]["freshness"] = f"{FRESHNESS_S}s"
    path.write_text(yaml.safe_dump(policy))
    return path


Said = tuple[float, Claim | Resolution]


def _history(start: datetime) -> list[Said]:
    """Each record at its second after `start`, in order."""

    def claim(at_s: float, n: str, subject: str, field: str, source: str, value: Any) -> Said:
        at = start + timedelta(seconds=at_s)
        return at_s, Claim(
            claim_id=n, subject=subject, field=field, status="present", value=value,
            source=source, observed_at=at,
        )  # fmt: skip

    def resolved(at_s: float, n: str, subject: str, value: int) -> Said:
        at = start + timedelta(seconds=at_s)
        return at_s, Resolution(
            resolution_id=n, subject=subject, field=SEATS, value=value, decided_by="ana",
            decided_at=at,
        )  # fmt: skip

    said: list[Said] = []
    for i in range(6):  # A believes crm's 12, B the order form's 15
        said += [
            claim(0.5, f"crm-{i}", f"contract:{i}", SEATS, "crm", 12),
            claim(0.5, f"form-{i}", f"contract:{i}", SEATS, "order-form", 15),
        ]
    for i in (6, 7):  # two systems of record disagree: a conflict
        said += [
            claim(0.6, f"config-{i}", f"contract:{i}", SEATS, "config-service", 20),
            claim(0.6, f"export-{i}", f"contract:{i}", SEATS, "billing-export", 21),
        ]
    for i in range(3):  # two spellings, merged at MERGE_AT_S
        said += [
            claim(0.7, f"acme-config-{i}", f"Acme Corp {i}", SEATS, "config-service", 40 + i),
            claim(0.7, f"acme-export-{i}", f"acme-{i}", SEATS, "billing-export", 25 + i),
        ]
    said += [
        claim(1.0, f"paid-{i}", f"order:{i}", PAYMENT, "billing-api", "paid") for i in range(3)
    ]
    said.append(resolved(2.0, "r6", "contract:6", 21))
    # After the export's instant: none of it counts in the export.
    said += [
        claim(8.0, "crm-0-again", "contract:0", SEATS, "crm", 13),
        claim(8.0, "paid-0-again", "order:0", PAYMENT, "billing-api", "paid"),
        resolved(8.5, "r7", "contract:7", 20),
    ]
    return said


async def _publish(deployment: Deployment, start: datetime, policy_b: Path) -> None:
    settings = Settings(broker=f"kafka://{deployment.bootstrap}", topics=deployment.topics)
    merged = start + timedelta(seconds=MERGE_AT_S)
    for i in range(3):  # published ahead of their instant, as a steward would
        await publish_alias(settings, AliasChange(f"Acme Corp {i}", f"acme-{i}", merged, "ana"))
    rollout = start + timedelta(seconds=ROLLOUT_AT_S)
    await publish_policy(settings, policy_b.read_text(), rollout)
    producer = AIOKafkaProducer(bootstrap_servers=deployment.bootstrap, acks="all")
    await producer.start()
    topics = deployment.topics
    try:
        for at_s, record in _history(start):
            await asyncio.sleep(max(0.0, start.timestamp() + at_s - time.time()))
            topic = topics.resolutions if isinstance(record, Resolution) else topics.claims
            await producer.send_and_wait(
                topic,
                CODEC.encode(topic, record),
                key=state_key(record.subject, record.field).encode(),
                timestamp_ms=int((start + timedelta(seconds=at_s)).timestamp() * 1000),
            )
    finally:
        await producer.stop()


def _key_pair() -> tuple[str, str]:
    """A base64 raw Ed25519 private key and its public key as `audit_verify_keys` takes it."""
    key = Ed25519PrivateKey.generate()
    raw = serialization.Encoding.Raw
    private = key.private_bytes(raw, serialization.PrivateFormat.Raw, serialization.NoEncryption())
    public = key.public_key().public_bytes(raw, serialization.PublicFormat.Raw)
    return base64.b64encode(private).decode(), f"month-end:{base64.b64encode(public).decode()}"


def _claimstream(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streams.cli", *args],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_an_export_as_of_an_instant_is_what_was_believed_then_and_replays_identically(
    kafka: KafkaBroker, tmp_path: Path
) -> None:
    policy_a = _policy(tmp_path / "a.yaml", "A", believes="crm")
    policy_b = _policy(tmp_path / "b.yaml", "B", believes="order-form")
    deployment = Deployment(
        bootstrap=kafka.bootstrap, workdir=tmp_path, policy=policy_a,
        guarantee="exactly_once", static_membership=True,
    )  # fmt: skip
    workers = [deployment.worker(0), deployment.worker(1)]
    try:
        asyncio.run(start_ready(workers))
        start = datetime.fromtimestamp(round(time.time() + 1.0), UTC)
        asyncio.run(_publish(deployment, start, policy_b))
        time.sleep(max(0.0, start.timestamp() + END_AT_S - time.time()))
        as_of, early = start + timedelta(seconds=AS_OF_S), start + timedelta(seconds=EARLY_S)
        decisions = _decisions(deployment)
        on_topic, early_on_topic = _until(decisions, as_of), _until(decisions, early)
        answered = _answers_as_of(workers[0], on_topic, as_of)
        answered_early = _answers_as_of(workers[0], early_on_topic, early)
    finally:
        for worker in workers:
            worker.stop()
    for worker in workers:
        assert "Traceback" not in worker.log_tail(400), worker.log_tail()
    private, public = _key_pair()
    env = deployment.env(0, tmp_path / "cli") | {
        "CLAIMSTREAM_AUDIT_SIGNING_KEY": "month-end:AUDIT_KEY",
        "AUDIT_KEY": private,
        "CLAIMSTREAM_AUDIT_VERIFY_KEYS": public,
    }
    first = _claimstream(env, "audit", "export", "--as-of", as_of.isoformat(), "--out",
                         str(tmp_path / "first"))  # fmt: skip
    assert first.returncode == 0, first.stderr
    token = json.loads(first.stdout)["token"]
    beliefs = _beliefs(tmp_path / "first")
    assert beliefs == {key: sent[-1] for key, sent in on_topic.items()}
    # The web API answers an alias's spelling with its subject's key, the rest as asked.
    assert {key: beliefs[answered_as] for key, (answered_as, _) in answered.items()} == {
        key: decision_id for key, (_, decision_id) in answered.items()
    }
    assert {key for key, (answered_as, _) in answered.items() if key != answered_as} == {
        (f"Acme Corp {i}", SEATS) for i in range(3)
    }
    _check_tables(tmp_path / "first", start + timedelta(seconds=ROLLOUT_AT_S))
    # Before the merge and the rollout: every spelling its own key, on the web API too.
    settings = Settings(broker=f"kafka://{deployment.bootstrap}", topics=deployment.topics)
    quiet = Progress(io.StringIO())
    asyncio.run(export(settings, tmp_path / "early", as_of=early, progress=quiet))
    early_beliefs = _beliefs(tmp_path / "early")
    assert early_beliefs == {key: sent[-1] for key, sent in early_on_topic.items()}
    assert answered_early == {key: (key, early_beliefs[key]) for key in early_beliefs}
    again = _claimstream(env, "audit", "export", "--token", token, "--out", str(tmp_path / "again"))
    assert again.returncode == 0, again.stderr
    for path in sorted((tmp_path / "first").iterdir()):
        assert path.read_bytes() == (tmp_path / "again" / path.name).read_bytes(), path.name
    verified = _claimstream(env, "audit", "verify", str(tmp_path / "first"), "--replay")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "holds" in verified.stdout
    _edit_a_belief(tmp_path / "first" / "beliefs.parquet")
    refused = _claimstream(env, "audit", "verify", str(tmp_path / "first"))
    assert refused.returncode == 1, refused.stdout
    assert "beliefs.parquet: its SHA-256 is not the manifest's" in refused.stderr


Key = tuple[str, str]


def _decisions(deployment: Deployment) -> list[Decision]:
    """The decisions topic (read committed), once it holds the decisions of the records after
    the export's instant too."""
    deadline = time.monotonic() + 60
    while True:
        records = asyncio.run(
            read_topic(deployment.bootstrap, deployment.topics.decisions, idle_s=2,
                       isolation_level="read_committed")
        )  # fmt: skip
        decisions = [CODEC.decode(Decision, record.value) for record in records]
        if any(d.resolution_id == "r7" for d in decisions) or time.monotonic() > deadline:
            return decisions


def _until(decisions: list[Decision], as_of: datetime) -> dict[Key, list[str]]:
    """Each key's decision ids decided at or before `as_of`, in order."""
    assert any(d.decided_at > as_of for d in decisions), "the history after the instant is there"
    by_key: dict[Key, list[str]] = {}
    for d in decisions:
        if d.decided_at <= as_of:
            by_key.setdefault((d.subject, d.field), []).append(d.decision_id)
    assert len(by_key) == 6 + 2 + 6 + 3, sorted(by_key)
    return by_key


def _answers_as_of(
    worker: WorkerProcess, keys: dict[Key, list[str]], as_of: datetime
) -> dict[Key, tuple[Key, str]]:
    """For each key, the key the web API answers for (an alias's spelling names its subject's
    key) and the id of its belief as of `as_of` (whose evidence the worker may no longer hold:
    an alias key's moved with it)."""
    answers = {}
    for subject, field in keys:
        key = urllib.parse.quote(f"{subject}|{field}", safe="")
        at = urllib.parse.quote(as_of.isoformat(), safe="")
        answer = worker.get(f"/api/decisions/{key}?as_of={at}")
        assert answer is not None, (subject, field)
        answered = tuple(answer["key"].split("|", 1))
        answers[(subject, field)] = ((answered[0], answered[1]), answer["belief"]["decision_id"])
    return answers


def _beliefs(folder: Path) -> dict[Key, str]:
    table = pq.read_table(folder / "beliefs.parquet").to_pylist()
    return {(row["subject"], row["field"]): row["decision_id"] for row in table}


def _check_tables(folder: Path, rollout: datetime) -> None:
    """What the tables say of the merge, the steward, the rollout and the freshness."""
    beliefs = {
        (r["subject"], r["field"]): r for r in pq.read_table(folder / "beliefs.parquet").to_pylist()
    }
    assert {beliefs[(f"contract:{i}", SEATS)]["value"] for i in range(6)} == {"15"}  # under B
    assert {beliefs[(f"contract:{i}", SEATS)]["policy_version"] for i in range(6)} == {"B"}
    assert beliefs[("contract:6", SEATS)]["resolution_id"] == "r6"
    assert beliefs[("contract:7", SEATS)]["outcome"] == "conflict"  # r7 came after
    assert {beliefs[(f"order:{i}", PAYMENT)]["outcome"] for i in range(3)} == {"insufficient"}
    assert {beliefs[(f"acme-{i}", SEATS)]["outcome"] for i in range(3)} == {"conflict"}
    evidence = pq.read_table(folder / "evidence.parquet").to_pylist()
    merged = {(r["subject"], r["sent_about"]) for r in evidence if r["subject"].startswith("acme")}
    assert merged == {(f"acme-{i}", s) for i in range(3) for s in (f"acme-{i}", f"Acme Corp {i}")}
    statements = pq.read_table(folder / "statements.parquet").to_pylist()
    assert [(r["subject"], r["resolution_id"], r["standing"]) for r in statements] == [
        ("contract:6", "r6", "in_force")
    ]
    policies = pq.read_table(folder / "policies.parquet").to_pylist()
    # A, as each worker that found the topic empty published it, then B from the rollout on
    assert list(dict.fromkeys(r["version"] for r in policies)) == ["A", "B"]
    assert policies[-1]["until"] is None
    assert policies[-2]["until"] == policies[-1]["since"] == rollout
    manifest = json.loads((folder / "manifest.json").read_text())
    records = 6 * 2 + 2 * 2 + 3 * 2 + 3 + 1  # the claims and the resolution before the instant
    assert manifest["records"] == {"read": records, "applied": records, "refused": {}}
    assert [f["rows"] for f in manifest["files"]][:1] == [len(beliefs)]


def _edit_a_belief(path: Path) -> None:
    """The file rewritten with one belief's value changed, as a forger would."""
    table = pq.read_table(path)
    rows = table.to_pylist()
    rows[0]["value"] = "999"
    pq.write_table(table.from_pylist(rows, schema=table.schema), path, compression="zstd")
    assert os.path.getsize(path) > 0


def test_a_cut_the_topics_no_longer_hold_is_refused_naming_the_oldest_instant(
    kafka: KafkaBroker, tmp_path: Path
) -> None:
    """Retention took a partition's first records: a cut from before what it still holds is
    refused naming the oldest instant that can be exported; a later one is exported and says
    its history is incomplete; an earlier export no longer replays from its token."""
    policy = REPO / "examples" / "policy.yaml"
    deployment = Deployment(bootstrap=kafka.bootstrap, workdir=tmp_path, policy=policy)
    settings = Settings(broker=f"kafka://{kafka.bootstrap}", topics=deployment.topics)
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2)
    at = [start + timedelta(seconds=n / 5) for n in range(6)]  # after the policy's publication
    quiet = Progress(io.StringIO())

    async def publish() -> None:
        text = policy.read_text()
        await publish_policy(settings, text, start - timedelta(seconds=1))
        producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, acks="all")
        await producer.start()
        try:
            for n, instant in enumerate(at):
                claim = Claim(
                    claim_id=f"c{n}", subject=f"contract:{n}", field=SEATS, status="present",
                    value=12, source="crm", observed_at=instant,
                )  # fmt: skip
                topic = deployment.topics.claims
                await producer.send_and_wait(
                    topic, CODEC.encode(topic, claim), partition=0,
                    timestamp_ms=int(instant.timestamp() * 1000),
                )  # fmt: skip
        finally:
            await producer.stop()

    async def delete_the_first_three() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap)
        await admin.start()
        try:
            await admin.delete_records(
                {TopicPartition(deployment.topics.claims, 0): RecordsToDelete(3)}
            )
        finally:
            await admin.close()

    asyncio.run(publish())
    time.sleep(max(0.0, at[-1].timestamp() - time.time()))
    first = asyncio.run(
        export(settings, tmp_path / "first", as_of=at[5], fmt="jsonl", progress=quiet)
    )
    assert first["complete_history"] is True
    asyncio.run(delete_the_first_three())
    with pytest.raises(
        ClaimstreamError, match="oldest instant that can be exported is "
    ) as refused:
        asyncio.run(export(settings, tmp_path / "before", as_of=at[1], progress=quiet))
    assert at[3].isoformat() in str(refused.value)
    assert not (tmp_path / "before").exists()
    later = asyncio.run(
        export(settings, tmp_path / "later", as_of=at[5], fmt="jsonl", progress=quiet)
    )
    assert later["complete_history"] is False
    assert later["records"]["read"] == 3
    problems = asyncio.run(verify(settings, tmp_path / "first", {}, replay=True, progress=quiet))
    assert problems[0] == "the manifest is not signed"
    assert problems[1].startswith("exported again from its token: ")
    assert "no longer holds offsets 0 to 6 of the cut" in problems[1]
