"""The bench's rollout phase: policy B swaps two sources' authorities under a new version, the
watch counts a key once it has a decision under B, and on Apache Kafka a worker holding a few
hundred keys is restarted on B and reports every key moved, with the live load's latency."""

from __future__ import annotations

import asyncio
import math
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from streams.core.records.contracts import Decision
from streams.core.records.policy import load_policy, policy_from_text
from streams.devkit.bench.rollout import RolloutWatch, rollout_phase, rollout_policy
from streams.devkit.bench.scale import FIELD, lean_claims, publish
from streams.devkit.bench.worker import BenchWorker, worker_env
from streams.devkit.bench.workload import CODEC, PAID
from streams.devkit.brokers import KafkaBroker
from streams.packaged import example_path
from streams.worker.topics import ensure_topics
from tests.support.bench import bench_settings

KEYS = 300


def test_policy_b_is_policy_a_under_a_new_version_with_two_authorities_swapped() -> None:
    a = load_policy(example_path("policy.yaml"))
    b = policy_from_text(rollout_policy(example_path("policy.yaml"), "B"))
    assert b.version == "B"
    paid_a, paid_b = a.rules_for(PAID), b.rules_for(PAID)
    assert paid_a is not None
    assert paid_b is not None
    assert paid_b.authorities["billing-api"] == a.sources["reporting-replica"].authority
    assert paid_b.authorities["reporting-replica"] == paid_a.authorities["billing-api"]
    seats = b.rules_for(FIELD)
    assert seats is not None
    assert seats.authorities == {
        "crm": a.sources["billing-cache"].authority,
        "billing-cache": a.sources["crm"].authority,
    }
    assert b.sources == a.sources
    assert b.fields.keys() == a.fields.keys()


def _decision(subject: str, version: str) -> Any:
    decision = Decision.model_validate(
        {
            "decision_id": f"d-{subject}-{version}",
            "subject": subject,
            "field": FIELD,
            "outcome": "resolved",
            "value": 12,
            "action": "continue",
            "policy_version": version,
            "reason": "bench",
            "decided_at": datetime(2026, 12, 1, tzinfo=UTC),
        }
    )
    topic = "bench.decisions"
    return SimpleNamespace(key=f"{subject}|{FIELD}".encode(), value=CODEC.encode(topic, decision))


def test_the_watch_is_done_once_every_key_has_a_decision_under_b() -> None:
    a, b = "2026-11-29.1", "2026-11-29.1-rollout-b"
    watch = RolloutWatch({f"k{n}|{FIELD}".encode() for n in range(3)}, b)
    watch.see([_decision("k0", a), _decision("k0", b)], 1.0)
    watch.see([_decision("other", b), _decision("k1", "x")], 2.0)
    assert (watch.decisions, watch.others, watch.done_at, watch.first_at) == (1, 2, 0.0, 1.0)
    watch.see([_decision("k1", b), _decision("k2", b)], 3.0)
    watch.see([_decision("k2", b)], 4.0)
    assert (watch.decisions, watch.remaining, watch.done_at) == (4, set(), 3.0)
    assert watch.checked == 1  # the first decision under B is decoded


@pytest.mark.integration
def test_a_worker_restarted_on_policy_b_reports_every_key_moved(
    bench_kafka: KafkaBroker, tmp_path: Path
) -> None:
    kafka = bench_kafka
    settings = bench_settings(kafka, tmp_path, "rollout")
    asyncio.run(ensure_topics(settings))
    observed_at = datetime.now(UTC) - timedelta(minutes=1)
    claims = lean_claims(settings.topics.claims, 0, range(1, KEYS + 1), observed_at)
    assert asyncio.run(publish(kafka.bootstrap, settings.topics.claims, claims)) == KEYS
    log = tmp_path / "worker.log"
    worker = BenchWorker(settings, worker_env(settings), log)
    try:
        deadline = time.monotonic() + 120
        while worker.processed() < KEYS:
            assert worker.proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, f"processed {worker.processed()} of {KEYS}"
            time.sleep(0.2)
        figures = rollout_phase(kafka.bootstrap, worker, rate=200, log=log, baseline_s=2)
    finally:
        worker.stop()
    print(f"bench rollout of {KEYS} keys: {figures}")
    assert figures["rollout_keys"] == KEYS
    assert figures["rollout_decisions"] >= KEYS
    assert figures["rollout_keys_per_s"] > 0
    assert figures["rollout_live_keys_per_s"] > 0
    assert 0 < figures["rollout_s"] < 60
    assert figures["rollout_sweep_done_s"] >= 0
    assert figures["rollout_live_samples"] > 0
    assert figures["rollout_baseline_samples"] > 0
    for name in ("rollout_live_p50_ms", "rollout_live_p99_ms", "rollout_baseline_p99_ms"):
        assert math.isfinite(figures[name]), name
        assert figures[name] > 0, name
    logged = log.read_text()
    for task in range(settings.partitions):
        assert f"policy sweep: task {task} is on policy {figures['rollout_version']}" in logged
