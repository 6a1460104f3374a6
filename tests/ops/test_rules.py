"""Prometheus rules and Alertmanager config, checked by the real tools (promtool, amtool).

The tools come from the Debian packages `prometheus` (promtool) and `prometheus-alertmanager`
(amtool). Without them these tests fail, they never skip.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

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
    "ClaimstreamConflictOpenTooLong",
    "ClaimstreamDecisionsStalled",
    "ClaimstreamConsumerLagHigh",
    "ClaimstreamWorkerDown",
}
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


def test_alertmanager_groups_by_field_and_inhibits_stalled_under_worker_down() -> None:
    config = yaml.safe_load(ALERTMANAGER_CONFIG.read_text(encoding="utf-8"))
    assert config["route"]["group_by"] == ["alertname", "field"]
    inhibitions = [
        (rule["source_matchers"], rule["target_matchers"], rule.get("equal"))
        for rule in config["inhibit_rules"]
    ]
    assert (
        ['alertname = "ClaimstreamWorkerDown"'],
        ['alertname = "ClaimstreamDecisionsStalled"'],
        ["job"],
    ) in inhibitions


def test_every_required_alert_exists() -> None:
    assert alerts().keys() >= REQUIRED_ALERTS


@pytest.mark.parametrize("name", sorted(alerts()))
def test_alert_has_severity_summary_description_and_runbook(name: str) -> None:
    rule = alerts()[name]
    assert rule["labels"]["severity"] in {"page", "ticket"}
    annotations = rule["annotations"]
    assert annotations["summary"].strip()
    assert annotations["description"].strip()
    page, _, anchor = annotations["runbook_url"].partition("#")
    assert page == "docs/runbook.md"
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
    assert names - silent == set(), "alerts never shown to stay silent"


def test_conflict_rate_alerts_compare_ratios_with_a_volume_floor() -> None:
    """A conflict-rate alert reads the conflict RATIO and a decision-volume floor, never raw counts."""
    for name in ("ClaimstreamConflictRateSurge", "ClaimstreamConflictRateDayOverDay"):
        expr = alerts()[name]["expr"]
        assert "conflict_ratio" in expr
        assert "claimstream_conflicts:" not in expr
        assert re.search(r"field:claimstream_decisions:rate\w+ >= [0-9.]+", expr), expr
