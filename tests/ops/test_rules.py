"""Prometheus rules and Alertmanager config, checked by the real tools (promtool, amtool).

The tools come from the Debian packages `prometheus` (promtool) and `prometheus-alertmanager`
(amtool). Without them these tests fail, they never skip.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from streams.devkit.brokers import free_port

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "prometheus" / "rules" / "claimstream.rules.yml"
RULE_TESTS = sorted((REPO / "deploy" / "prometheus" / "tests").glob("*.yml"))
PROMETHEUS_CONFIG = REPO / "deploy" / "prometheus" / "prometheus.yml"
ALERTMANAGER_CONFIG = REPO / "deploy" / "alertmanager" / "alertmanager.yml"
RUNBOOK = REPO / "docs" / "runbook.md"

REQUIRED_ALERTS = {
    "ClaimstreamConflictRateSurge",
    "ClaimstreamConflictRateDayOverDay",
    "ClaimstreamRejectionSurge",
    "ClaimstreamUnauthenticatedClaims",
    "ClaimstreamProcessingFailures",
    "ClaimstreamConflictOpenTooLong",
    "ClaimstreamProcessingStalled",
    "ClaimstreamConsumerLagHigh",
    "ClaimstreamTimersLagging",
    "ClaimstreamLatencyBudgetBurn",
    "ClaimstreamStateLarge",
    "ClaimstreamWorkerDown",
    "ClaimstreamWorkerNotReady",
    "ClaimstreamPolicyVersionSkew",
    "ClaimstreamWatchdog",
}
# Always firing by design: its silence is what the dead man's switch downstream detects.
WATCHDOG = "ClaimstreamWatchdog"
RUNBOOK_BASE = "{{ $externalLabels.runbook_base }}"
PACKAGES = {"promtool": "prometheus", "amtool": "prometheus-alertmanager"}


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(
            f"{name} is not installed: install the Debian package {PACKAGES[name]} "
            f"(apt-get install {PACKAGES[name]}); .ci/run does",
            pytrace=False,
        )
    return path


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args], cwd=REPO, capture_output=True, text=True, timeout=300, check=False
    )


def rules() -> list[dict[str, Any]]:
    data = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule for group in data["groups"] for rule in group["rules"]]


def alerts() -> dict[str, dict[str, Any]]:
    return {rule["alert"]: rule for rule in rules() if "alert" in rule}


def github_anchors(markdown: str) -> set[str]:
    """Anchors GitHub generates for the headings of a markdown text."""
    anchors = set()
    for line in markdown.splitlines():
        match = re.match(r"#{1,6}\s+(.*)", line)
        if match:
            text = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower())
            anchors.add(text.replace(" ", "-"))
    return anchors


def test_promtool_checks_the_rules() -> None:
    result = run(tool("promtool"), "check", "rules", RULES)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_rule_unit_tests_pass() -> None:
    assert RULE_TESTS, "no rule tests in deploy/prometheus/tests/"
    result = run(tool("promtool"), "test", "rules", *RULE_TESTS)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == len(RULE_TESTS), result.stdout


def test_promtool_checks_the_prometheus_config() -> None:
    result = run(tool("promtool"), "check", "config", PROMETHEUS_CONFIG)
    assert result.returncode == 0, result.stdout + result.stderr
    # The rule files the config names are the ones under test.
    assert "claimstream.rules.yml" in result.stdout


def test_amtool_checks_the_alertmanager_config() -> None:
    result = run(tool("amtool"), "check-config", ALERTMANAGER_CONFIG)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.parametrize(
    ("labels", "receiver"),
    [
        (["severity=page", "alertname=ClaimstreamWorkerDown"], "page"),
        (["severity=ticket", "alertname=ClaimstreamConsumerLagHigh"], "ticket"),
        (["alertname=Unlabelled"], "ticket"),
        (["severity=none", "alertname=ClaimstreamWatchdog"], "watchdog"),
    ],
)
def test_alertmanager_routes_by_severity(labels: list[str], receiver: str) -> None:
    result = run(
        tool("amtool"),
        "config",
        "routes",
        "test",
        f"--config.file={ALERTMANAGER_CONFIG}",
        f"--verify.receivers={receiver}",
        *labels,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == receiver


def test_alertmanager_groups_by_field() -> None:
    config = yaml.safe_load(ALERTMANAGER_CONFIG.read_text(encoding="utf-8"))
    assert config["route"]["group_by"] == ["alertname", "field"]


def test_every_required_alert_exists() -> None:
    assert alerts().keys() >= REQUIRED_ALERTS


@pytest.mark.parametrize("name", sorted(alerts()))
def test_alert_has_severity_summary_description_and_runbook(name: str) -> None:
    rule = alerts()[name]
    assert rule["labels"]["severity"] in ({"none"} if name == WATCHDOG else {"page", "ticket"})
    annotations = rule["annotations"]
    assert annotations["summary"].strip()
    assert annotations["description"].strip()
    # Absolute, from one base: the runbook_base external label of the Prometheus loading them.
    base, _, anchor = annotations["runbook_url"].partition("#")
    assert base == RUNBOOK_BASE
    assert anchor == name.lower()
    assert anchor in github_anchors(RUNBOOK.read_text(encoding="utf-8")), (
        f"docs/runbook.md has no section #{anchor}"
    )


def test_every_alert_is_proven_to_fire_and_to_stay_silent() -> None:
    fired: set[str] = set()
    silent: set[str] = set()
    for path in RULE_TESTS:
        for group in yaml.safe_load(path.read_text(encoding="utf-8"))["tests"]:
            for case in group.get("alert_rule_test", []):
                (fired if case.get("exp_alerts") else silent).add(case["alertname"])
    names = set(alerts())
    assert names - fired == set(), "alerts never shown to fire"
    assert names - silent == {WATCHDOG}, "alerts never shown to stay silent"


def test_every_aggregation_keeps_the_environment_labels() -> None:
    """`sum by (field)` would merge staging into production: every `by` keeps namespace and job."""
    for rule in rules():
        for grouping in re.findall(r"\bby \(([^)]*)\)", rule["expr"]):
            labels = {label.strip() for label in grouping.split(",")}
            assert {"namespace", "job"} <= labels, (rule.get("record") or rule["alert"], grouping)


def test_conflict_rate_alerts_compare_ratios_with_a_volume_floor() -> None:
    """A conflict-rate alert reads the conflict RATIO and a decision-volume floor, never raw
    counts."""
    for name in ("ClaimstreamConflictRateSurge", "ClaimstreamConflictRateDayOverDay"):
        expr = alerts()[name]["expr"]
        assert "conflict_ratio" in expr
        assert "claimstream_conflicts:" not in expr
        assert re.search(r"field:claimstream_decisions:rate\w+ >= [0-9.]+", expr), expr


def test_a_down_worker_mutes_only_its_own_stall_on_a_real_alertmanager(tmp_path: Path) -> None:
    binary = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if binary is None:
        pytest.fail("the alertmanager server is missing: install prometheus-alertmanager")
    port = free_port()
    server = subprocess.Popen(
        [
            binary,
            f"--config.file={ALERTMANAGER_CONFIG}",
            f"--storage.path={tmp_path}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "alertmanager.log").open("wb"),
    )
    url = f"http://127.0.0.1:{port}/api/v2/alerts"

    def alert(name: str, **labels: str) -> dict[str, Any]:
        return {"labels": {"alertname": name, "job": "claimstream", **labels}}

    sent = [
        alert("ClaimstreamWorkerDown", instance="w1", severity="page"),
        alert("ClaimstreamProcessingStalled", instance="w1", severity="page"),
        alert("ClaimstreamProcessingStalled", instance="w2", severity="page"),
        alert("ClaimstreamConsumerLagHigh", topic="claims.tools", severity="ticket"),
    ]
    try:
        deadline = time.monotonic() + 60
        received: list[dict[str, Any]] = []

        def settled() -> bool:
            """Every alert is in, and inhibition has run over them: Alertmanager marks an alert
            inhibited a moment after it answers with it, longer on a loaded machine."""
            return len(received) == len(sent) and any(a["status"]["inhibitedBy"] for a in received)

        while time.monotonic() < deadline and not settled():
            try:
                post = urllib.request.Request(
                    url, json.dumps(sent).encode(), {"Content-Type": "application/json"}
                )
                urllib.request.urlopen(post, timeout=5).close()
                with urllib.request.urlopen(url, timeout=5) as response:
                    received = json.loads(response.read())
            except OSError:
                pass  # not listening yet
            if not settled():
                time.sleep(0.3)
        muted = {
            (a["labels"]["alertname"], a["labels"].get("instance", "")): bool(
                a["status"]["inhibitedBy"]
            )
            for a in received
        }
        assert muted == {
            ("ClaimstreamWorkerDown", "w1"): False,
            ("ClaimstreamProcessingStalled", "w1"): True,
            ("ClaimstreamProcessingStalled", "w2"): False,
            ("ClaimstreamConsumerLagHigh", ""): False,
        }
    finally:
        server.terminate()
        server.wait(timeout=30)
