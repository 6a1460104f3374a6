"""Every dashboard query returns data from a real Prometheus scraping a real worker fed by the demo."""

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
from typing import Any

import pytest

from streams.devkit.brokers import free_port
from tests.ops.promql import REPO, all_dashboard_queries, reads_history

pytestmark = pytest.mark.integration


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


@pytest.fixture(scope="module")
def prometheus_with_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = shutil.which("prometheus")
    assert binary, "the prometheus server is missing: apt-get install prometheus (.ci/run does)"
    workdir = tmp_path_factory.mktemp("prometheus")
    web_port, prom_port = free_port(), free_port()
    dev = subprocess.Popen(
        [sys.executable, "-m", "streams.cli", "dev", "--rounds", "6", "--round-seconds", "6"],
        cwd=REPO,
        env=dict(os.environ, CLAIMSTREAM_WEB_PORT=str(web_port), CLAIMSTREAM_LOG_LEVEL="error"),
        stdout=(workdir / "dev.log").open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    config = workdir / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
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
        yield url
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
def test_every_panel_query_returns_data(
    prometheus_with_worker: str, dashboard: str, title: str, expr: str
) -> None:
    result = _get(f"{prometheus_with_worker}/api/v1/query?query={urllib.parse.quote(expr)}")
    assert result["status"] == "success"
    if reads_history(expr):
        return  # `offset 1d` has nothing to read on a Prometheus started minutes ago
    assert result["data"]["result"], f"{dashboard} / {title}: no data for {expr}"
