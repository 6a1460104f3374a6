"""A real Prometheus (with the alert rules) scraping a real worker fed by the demo: every dashboard
query returns data, the worker reports its health and process, alerts carry absolute runbook
URLs, and the worker logs JSON lines."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from streams.devkit.brokers import free_port
from tests.ops.promql import (
    DASHBOARDS,
    REPO,
    all_dashboard_queries,
    load,
    reads_history,
    substitute,
)

pytestmark = pytest.mark.integration
RUNBOOK_BASE = "https://runbooks.example.test/claimstream/docs/runbook.md"


@dataclass
class Live:
    prometheus: str
    worker: str
    worker_log: Path  # the worker's stderr: its log lines


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def query(url: str, expr: str) -> list[dict[str, Any]]:
    result = _get(f"{url}/api/v1/query?query={urllib.parse.quote(expr)}")
    assert result["status"] == "success", result
    samples: list[dict[str, Any]] = result["data"]["result"]
    return samples


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    binary = shutil.which("prometheus")
    assert binary, "the prometheus server is missing: apt-get install prometheus (.ci/run does)"
    workdir = tmp_path_factory.mktemp("prometheus")
    web_port, prom_port = free_port(), free_port()
    dev = subprocess.Popen(
        [sys.executable, "-m", "streams.cli", "dev", "--rounds", "6", "--round-seconds", "6"],
        cwd=REPO,
        env=dict(
            os.environ,
            CLAIMSTREAM_WEB_PORT=str(web_port),
            CLAIMSTREAM_LOG_LEVEL="info",
            CLAIMSTREAM_LOG_FORMAT="json",
        ),
        stdout=(workdir / "dev.out").open("wb"),
        stderr=(workdir / "dev.err").open("wb"),
        start_new_session=True,
    )
    config = workdir / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s, "
        f"external_labels: {{runbook_base: '{RUNBOOK_BASE}'}}}}\n"
        f"rule_files: ['{REPO}/deploy/prometheus/rules/*.yml']\n"
        "scrape_configs:\n"
        "  - job_name: claimstream\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{web_port}']}}]\n"
    )
    prometheus = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        ],
        stdout=(workdir / "prometheus.log").open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{prom_port}"
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            time.sleep(2)
            try:
                result = _get(f"{url}/api/v1/query?query=claimstream_decisions_total")
            except OSError:
                continue
            if len(result["data"]["result"]) >= 6:
                break
        time.sleep(15)  # rate() windows need a few scrapes with the demo's traffic in them
        yield Live(url, f"http://127.0.0.1:{web_port}", workdir / "dev.err")
    finally:
        for proc in (prometheus, dev):
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(timeout=40)
                except subprocess.TimeoutExpired:
                    proc.kill()


QUERIES = all_dashboard_queries(field="order.payment_status", interval="1m", range_="5m")


@pytest.mark.parametrize(
    ("dashboard", "title", "expr"), QUERIES, ids=[f"{d}:{t}" for d, t, _ in QUERIES]
)
def test_every_panel_query_returns_data(live: Live, dashboard: str, title: str, expr: str) -> None:
    samples = query(live.prometheus, expr)
    if reads_history(expr):
        return  # `offset 1d` has nothing to read on a Prometheus started minutes ago
    assert samples, f"{dashboard} / {title}: no data for {expr}"


@pytest.mark.parametrize("path", sorted(DASHBOARDS.glob("*.json")), ids=lambda p: p.name)
def test_alert_annotation_queries_run(live: Live, path: Path) -> None:
    for annotation in load(path)["annotations"]["list"]:
        if "expr" in annotation:
            query(live.prometheus, substitute(annotation["expr"]))


def scalar(url: str, expr: str) -> float:
    samples = query(url, expr)
    assert len(samples) == 1, (expr, samples)
    return float(samples[0]["value"][1])


def test_the_worker_reports_its_health_process_and_progress(live: Live) -> None:
    url, worker = live.prometheus, 'job="claimstream",instance=~".+"'
    assert scalar(url, f"claimstream_worker_up{{{worker}}}") == 1
    assert scalar(url, f"claimstream_worker_ready{{{worker}}}") == 1
    assert scalar(url, f"claimstream_tasks_owned{{{worker}}}") == 8  # dev: 8 partitions, 1 worker
    assert scalar(url, f"claimstream_rebalances_total{{{worker}}}") >= 1
    assert scalar(url, f"claimstream_restore_seconds_count{{{worker}}}") >= 1
    assert scalar(url, f"claimstream_records_committed_total{{{worker}}}") > 0
    assert scalar(url, f"claimstream_commit_failures_total{{{worker}}}") == 0
    lag_topics = {s["metric"]["topic"] for s in query(url, "claimstream_consumer_lag_records")}
    assert {"claims.tools", "claims.users", "claims.resolutions"} <= lag_topics
    assert scalar(url, f"process_resident_memory_bytes{{{worker}}}") > 10 * 2**20
    assert scalar(url, f"process_open_fds{{{worker}}}") > 0
    started = scalar(url, f"process_start_time_seconds{{{worker}}}")
    assert started <= scalar(url, "vector(time())")
    for path in ("/healthz", "/readyz"):
        answer = _get(live.worker + path)
        assert answer["status"] == "ok", answer
        assert answer["reasons"] == []
    assert _get(live.worker + "/readyz")["tasks_open"] == list(range(8))


def test_alerts_carry_an_absolute_runbook_url_from_one_base(live: Live) -> None:
    deadline = time.monotonic() + 30
    firing: list[dict[str, Any]] = []
    while time.monotonic() < deadline and not firing:
        alerts = _get(f"{live.prometheus}/api/v1/alerts")["data"]["alerts"]
        firing = [a for a in alerts if a["labels"]["alertname"] == "ClaimstreamWatchdog"]
        time.sleep(0.5)
    (watchdog,) = firing
    assert watchdog["annotations"]["runbook_url"] == f"{RUNBOOK_BASE}#claimstreamwatchdog"


def test_the_worker_logs_one_json_event_per_line_without_claim_values(live: Live) -> None:
    lines = live.worker_log.read_text(encoding="utf-8").splitlines()
    assert len(lines) > 10
    events = [json.loads(line) for line in lines]  # every line is one JSON object
    for event in events:
        assert {"ts", "level", "logger", "message"} <= event.keys()
    dead_letters = [e for e in events if e["message"].startswith("dead letter ")]
    assert dead_letters, "the demo sends bad claims: their dead letters are logged"
    assert all(e["reason"] for e in dead_letters)
    # The demo's subjects never appear: logs carry reason codes and offsets, not claim contents.
    assert not [line for line in lines if "globex" in line or "svc:checkout" in line]
