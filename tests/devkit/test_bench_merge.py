"""The bench's merge phase: the watch counts a pair once both its keys' decisions say it merged,
and on Apache Kafka a worker holding a hundred pairs of keys merges every pair by alias, with
the live load's latency, checked pair by pair on a sample."""

from __future__ import annotations

import asyncio
import math
import time
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from streams.core.records.contracts import Decision
from streams.devkit.bench.merge import MergeWatch, Pairs, merge_phase
from streams.devkit.bench.worker import BenchWorker, worker_env
from streams.devkit.bench.workload import CODEC, SEATS
from streams.devkit.brokers import KafkaBroker
from streams.worker.topics import ensure_topics
from tests.support.bench import bench_settings

PAIRS = 100


def _decision(subject: str, reason: str, sent_about: str | None = None) -> Any:
    evidence = []
    if sent_about is not None:
        evidence.append(
            {
                "claim_id": sent_about,
                "source": "crm",
                "authority": "system_of_record",
                "status": "present",
                "value": 40,
                "observed_at": datetime(2026, 12, 1, tzinfo=UTC),
                "sent_about": sent_about,
                "role": "winner",
            }
        )
    decision = Decision.model_validate(
        {
            "decision_id": f"d-{subject}-{reason}",
            "subject": subject,
            "field": SEATS,
            "outcome": "resolved",
            "value": 40,
            "action": "continue",
            "policy_version": "v",
            "reason": reason,
            "evidence": evidence,
            "decided_at": datetime(2026, 12, 1, tzinfo=UTC),
        }
    )
    key = f"{subject}|{SEATS}".encode()
    return SimpleNamespace(key=key, value=CODEC.encode("bench.decisions", decision))


def test_the_watch_counts_a_pair_once_both_keys_say_it_merged() -> None:
    pairs = Pairs("m", 2)
    watch = MergeWatch(pairs)
    assert watch.keys == {pairs.key(pairs.alias(0)), pairs.key(pairs.alias(1))}
    watch.see([_decision(pairs.alias(0), "resolved: crm"), _decision("other", "merged into")], 1)
    watch.see([_decision(pairs.canonical(0), "resolved", sent_about=pairs.alias(0))], 2.0)
    assert (len(watch.remaining), watch.first_at) == (2, 0.0)  # the alias key has not moved
    watch.see([_decision(pairs.alias(0), "merged into 'm-000000'")], 3.0)
    assert (len(watch.remaining), watch.first_at, watch.done_at) == (1, 3.0, 0.0)
    watch.see([_decision(pairs.alias(1), "merged into 'm-000001'")], 4.0)
    watch.see([_decision(pairs.canonical(1), "resolved", sent_about=pairs.canonical(0))], 4.5)
    assert len(watch.remaining) == 1  # names another spelling than its alias's
    watch.see([_decision(pairs.canonical(1), "resolved", sent_about=pairs.alias(1))], 5.0)
    assert (watch.remaining, watch.done_at) == (set(), 5.0)
    assert (watch.alias_decisions, watch.canonical_decisions, watch.checked) == (2, 2, 1)
    assert set(watch.last) == {pairs.key(s) for n in (0, 1) for s in pairs.spellings(n)}


def test_a_wrong_match_fails_the_watch() -> None:
    pairs = Pairs("m", 1)
    watch = MergeWatch(pairs)
    # The alias spelling in the canonical key's decision, but not as a claim's `sent_about`.
    with pytest.raises(AssertionError, match="matched as merged"):
        watch.see([_decision(pairs.canonical(0), f"about {pairs.alias(0)}")], 1.0)


@pytest.mark.integration
def test_a_worker_merges_every_pair_by_alias_under_live_load(
    bench_kafka: KafkaBroker, tmp_path: Path
) -> None:
    kafka = bench_kafka
    settings = bench_settings(kafka, tmp_path, "merge")
    asyncio.run(ensure_topics(settings))
    log = tmp_path / "worker.log"
    worker = BenchWorker(settings, worker_env(settings), log)
    try:
        deadline = time.monotonic() + 120
        while not worker.ready():
            assert worker.proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the worker was not ready in 120 s"
            time.sleep(0.2)
        figures = merge_phase(kafka.bootstrap, worker, rate=200, pairs=PAIRS, baseline_s=2)
    finally:
        worker.stop()
    print(f"bench merge of {PAIRS} pairs: {figures}")
    assert figures["merge_pairs"] == PAIRS
    assert figures["merge_alias_moves"] == PAIRS
    assert figures["merge_alias_decisions"] >= PAIRS
    assert figures["merge_canonical_decisions"] >= PAIRS
    assert figures["merge_checked_pairs"] >= 20
    assert 0 < figures["merge_s"] < 60
    assert figures["merge_keys_per_s"] > 0
    assert figures["merge_live_samples"] > 0
    assert figures["merge_baseline_samples"] > 0
    for name in ("merge_live_p50_ms", "merge_live_p99_ms", "merge_baseline_p99_ms"):
        assert math.isfinite(figures[name]), name
        assert figures[name] > 0, name
    assert figures["merge_p99_ratio"] > 0
    assert "Traceback" not in log.read_text()
