"""The bench's quixstreams peer (`claimstream bench --peer quixstreams`): on Apache Kafka it
produces exactly one record per record of the claims topic, under that record's key, with the
key's claims bounded as asked, and its figures are positive and finite; without quixstreams the
command says which extra brings it; and nothing the bench imports loads quixstreams (only the
peer's own process does)."""

from __future__ import annotations

import asyncio
import json
import math
import uuid
from collections import Counter
from importlib import metadata

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from streams.cli.main import main
from streams.devkit.bench.peer import run_peer
from streams.devkit.bench.workload import create_topics, fill, workload
from streams.devkit.brokers import KafkaBroker
from tests.support.import_probe import loaded_after_importing

CLAIMS = 2000
KEEP = 4  # claims a key keeps: below what the workload's contended keys get


async def _read_all(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    """Every record of `topic`, as (key, value)."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()  # subscribed at first: its metadata, `topic`'s partitions
    try:
        partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        consumer.unsubscribe()
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        records = []
        left = {tp for tp in partitions if ends[tp] > 0}
        while left:
            batch = await consumer.getmany(*left, timeout_ms=1000)
            records += [(m.key, m.value) for messages in batch.values() for m in messages]
            left = {tp for tp in left if await consumer.position(tp) < ends[tp]}
    finally:
        await consumer.stop()
    return records


@pytest.mark.integration
def test_the_peer_produces_one_record_per_claim(bench_kafka: KafkaBroker) -> None:
    bootstrap, name = bench_kafka.bootstrap, f"peer{uuid.uuid4().hex[:6]}"
    source, sink = f"{name}.claims", f"{name}.peer-out"
    load = workload(CLAIMS, 300, seed=1, topic=source)
    asyncio.run(create_topics(bootstrap, [source], 2))
    asyncio.run(fill(bootstrap, source, load.records))

    found = run_peer(bootstrap, source, sink, CLAIMS, 2, max_claims=KEEP)

    print(f"bench peer over {CLAIMS} claims on Kafka: {found.as_json()}")
    assert found.outputs == CLAIMS
    for figure in (found.throughput.per_s, found.throughput.cpu_us):
        assert math.isfinite(figure)
        assert figure > 0
    out = asyncio.run(_read_all(bootstrap, sink))
    assert Counter(key for key, _ in out) == Counter(key for key, _ in load.records)
    said = [json.loads(value or b"null") for _, value in out]
    dead = CLAIMS - len(load.claims)
    assert dead > 0  # the workload's bad records are there, and each got its record too
    assert Counter(s.get("claim_id") for s in said) == Counter(
        c.claim_id for c in load.claims
    ) + Counter({None: dead})
    # Each key's records count its claims up to the bound, then stay at it: the state is read,
    # appended to and bounded key by key.
    held: dict[bytes | None, list[int]] = {}
    for (key, _), record in zip(out, said, strict=True):
        if "claims" in record:
            held.setdefault(key, []).append(record["claims"])
    assert max(map(len, held.values())) > KEEP
    for counts in held.values():
        assert sorted(counts) == [min(n, KEEP) for n in range(1, len(counts) + 1)]


def test_the_bench_loads_no_quixstreams_until_the_peer_runs() -> None:
    modules = ["streams.cli.main", "streams.devkit.bench.run", "streams.devkit.bench.peer"]
    assert loaded_after_importing(modules, ["quixstreams"]) == []


def test_without_quixstreams_the_bench_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    installed = metadata.version

    def missing(name: str) -> str:
        if name == "quixstreams":
            raise metadata.PackageNotFoundError(name)
        return installed(name)

    monkeypatch.setattr(metadata, "version", missing)
    assert main(["bench", "--peer", "quixstreams", "--claims", "10"]) == 2
    error = capsys.readouterr().err
    assert "pip install 'claimstream[bench]'" in error
    assert "Traceback" not in error
