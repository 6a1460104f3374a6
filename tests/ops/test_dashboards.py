"""Grafana dashboards: committed JSON equals its generator, every target is complete, every query
is valid PromQL (checked by promtool) and reads metrics the worker exposes."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.ops.promql import (
    DASHBOARDS,
    all_dashboard_queries,
    dashboard_queries,
    iter_panels,
    iter_targets,
    load,
    reads_history,
    substitute,
)

REPO = Path(__file__).resolve().parents[2]
GENERATOR = REPO / "grafana" / "generate.py"
DATASOURCES = REPO / "grafana" / "provisioning" / "datasources" / "prometheus.yml"
METRICS = (REPO / "streams" / "ops" / "metrics.py", REPO / "streams" / "ops" / "stalls.py")
RULES = REPO / "deploy" / "prometheus" / "rules" / "claimstream.rules.yml"
OVERVIEW = DASHBOARDS / "claimstream-overview.json"
FIELD = DASHBOARDS / "claimstream-field.json"
PATHS = sorted(DASHBOARDS.glob("*.json"))


def generator() -> ModuleType:
    """grafana/generate.py, loaded as `python grafana/generate.py` runs it: with its folder (and
    so its `boards` package) first on the import path."""
    spec = importlib.util.spec_from_file_location("claimstream_grafana_generate", GENERATOR)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(GENERATOR.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(GENERATOR.parent))
    return module


def provisioned_uids() -> set[str]:
    data = yaml.safe_load(DATASOURCES.read_text(encoding="utf-8"))
    return {ds["uid"] for ds in data["datasources"] if ds["type"] == "prometheus"}


def exposed_metrics() -> set[str]:
    """Series names streams/ops/metrics.py and streams/ops/stalls.py expose (histograms as _bucket,
    _sum, _count; a scrape-time counter family as _total)."""
    text = "\n".join(path.read_text(encoding="utf-8") for path in METRICS)
    names = set(re.findall(r'"(claimstream_\w+)"', text))
    histograms = set(re.findall(r'Histogram\(\s*"(claimstream_\w+)"', text))
    for name in histograms:
        names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
    families = set(re.findall(r'CounterMetricFamily[,(]\s*"(claimstream_\w+)"', text))
    return (names - histograms - families) | {f"{name}_total" for name in families}


def test_both_dashboards_are_committed() -> None:
    assert {p.name for p in PATHS} == {"claimstream-overview.json", "claimstream-field.json"}


def test_committed_json_is_the_generators_output() -> None:
    built = generator().build()
    assert set(built) == {p.name for p in PATHS}
    for name, text in built.items():
        assert (DASHBOARDS / name).read_text(encoding="utf-8") == text, (
            f"{name} is stale: run python grafana/generate.py"
        )


SELECTED_DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# Grafana units the dashboards use (a panel without a deliberate unit fails the test below).
UNITS = {"short", "bool", "s", "bytes", "reqps", "percentunit"}


def variables(dashboard: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in dashboard["templating"]["list"]}


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_every_target_has_a_refid_and_the_selected_datasource(path: Path) -> None:
    dashboard = load(path)
    panels = list(iter_panels(dashboard))
    assert panels
    for panel in panels:
        title = panel.get("title")
        assert panel.get("targets"), f"{title}: no targets"
        assert panel["datasource"] == SELECTED_DATASOURCE, title
        refids = [t.get("refId") for t in panel["targets"]]
        assert all(refids), f"{title}: empty refId"
        assert len(set(refids)) == len(refids), f"{title}: duplicate refId"
        for target in panel["targets"]:
            assert target["datasource"] == SELECTED_DATASOURCE, title
            assert target.get("expr", "").strip(), f"{title}: empty expr"


def datasource_uids(node: Any) -> set[str]:
    """Every datasource uid anywhere in a dashboard (panels, targets, variables, annotations)."""
    if isinstance(node, list):
        return set().union(*(datasource_uids(item) for item in node))
    if not isinstance(node, dict):
        return set()
    found = {node["datasource"]["uid"]} if isinstance(node.get("datasource"), dict) else set()
    return found.union(*(datasource_uids(value) for value in node.values()))


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_datasource_job_and_namespace_variables_select_every_query(path: Path) -> None:
    dashboard = load(path)
    found = variables(dashboard)
    assert found["datasource"]["type"] == "datasource"
    assert found["datasource"]["query"] == "prometheus"
    for name in ("job", "namespace"):
        assert found[name]["type"] == "query"
        assert found[name]["datasource"] == SELECTED_DATASOURCE
        assert found[name]["includeAll"] is True
    assert datasource_uids(dashboard) <= {"${datasource}", "-- Grafana --"}, "a hard-coded uid"
    for panel, target in iter_targets(dashboard):
        # Every metric selector carries the environment's matchers (recorded series included).
        for selector in re.findall(r"[\w:]+\{[^}]*\}", target["expr"]):
            assert 'job=~"$job"' in selector, (panel["title"], selector)
            assert 'namespace=~"$namespace"' in selector, (panel["title"], selector)
        bare = re.findall(r"(?<![\w:])(?:claimstream_\w+|up|process_\w+)(?![\w{(])", target["expr"])
        assert bare == [], (panel["title"], bare)


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_every_panel_has_a_unit(path: Path) -> None:
    for panel in iter_panels(load(path)):
        assert panel["fieldConfig"]["defaults"]["unit"] in UNITS, panel["title"]


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_firing_alerts_are_annotated(path: Path) -> None:
    (alerts,) = [
        a for a in load(path)["annotations"]["list"] if a.get("name") == "claimstream alerts"
    ]
    assert alerts["datasource"] == SELECTED_DATASOURCE
    assert alerts["enable"] is True
    assert alerts["expr"].startswith('ALERTS{alertstate="firing",alertname=~"Claimstream.+"')
    assert 'alertname!="ClaimstreamWatchdog"' in alerts["expr"]


def test_provisioned_datasource_is_the_compose_prometheus() -> None:
    assert provisioned_uids() == {"prometheus"}


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_panel_ids_and_grid_positions(path: Path) -> None:
    dashboard = load(path)
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(set(ids)) == len(ids)
    for panel in dashboard["panels"]:
        pos = panel["gridPos"]
        assert pos["w"] >= 1
        assert pos["h"] >= 1
        assert pos["x"] + pos["w"] <= 24


def test_dashboard_uids_are_unique_and_linked() -> None:
    overview, field = load(OVERVIEW), load(FIELD)
    assert overview["uid"] != field["uid"]
    assert any(link.get("url", "").startswith(f"/d/{field['uid']}") for link in overview["links"])
    assert any(link.get("url", "").startswith(f"/d/{overview['uid']}") for link in field["links"])


def test_field_drill_down_has_a_field_variable_from_the_decisions() -> None:
    dashboard = load(FIELD)
    variable = variables(dashboard)["field"]
    query = 'label_values(claimstream_decisions_total{job=~"$job",namespace=~"$namespace"}, field)'
    assert variable["type"] == "query"
    assert variable["definition"] == query
    assert variable["query"]["query"] == query
    assert variable["datasource"] == SELECTED_DATASOURCE
    for panel, target in iter_targets(dashboard):
        assert 'field="$field"' in target["expr"], panel["title"]


def test_overview_has_the_required_panels() -> None:
    titles = {panel["title"] for panel in iter_panels(load(OVERVIEW))}
    assert {
        "Claims in",
        "Decisions by outcome",
        "Conflict rate per field",
        "Top conflicting fields",
        "Rejected claims by reason",
        "Open conflicts by field",
        "Decision latency",
        "Consumer lag by topic",
        "Worker up",
        "Dead letters by source and reason",
        "Memory and key state",
        "Rebalances and commit failures",
        "Disagreement share by source",
    } <= titles
    exprs = " ".join(expr for _, expr in dashboard_queries(OVERVIEW))
    assert "topk(" in exprs
    assert "histogram_quantile(0.5," in exprs
    assert "histogram_quantile(0.99," in exprs
    dead_letters = [
        e for t, e in dashboard_queries(OVERVIEW) if t == "Dead letters by source and reason"
    ]
    assert [re.search(r"sum by \(([^)]*)\)", e).group(1) for e in dead_letters] == [
        "source, reason"
    ]  # type: ignore[union-attr]


def test_drill_down_has_the_required_panels() -> None:
    queries = dashboard_queries(FIELD)
    titles = {title for title, _ in queries}
    assert {
        "Decisions by outcome",
        "Claims by source",
        "Losses per source",
        "Open conflicts and oldest age",
        "Conflict rate vs a day ago",
        "Conflict rate against its baseline",
    } <= titles
    baseline = " ".join(
        expr for title, expr in queries if title == "Conflict rate against its baseline"
    )
    for recorded in (
        "field:claimstream_conflict_ratio:rate5m",
        "field:claimstream_conflict_ratio_baseline:median12h",
        "field:claimstream_conflict_ratio:zscore12h",
    ):
        assert recorded in baseline
    history = [expr for title, expr in queries if title == "Conflict rate vs a day ago"]
    assert [reads_history(expr) for expr in history] == [False, True]


def test_queries_have_no_template_variable_left() -> None:
    for _, _, expr in all_dashboard_queries():
        assert "$" not in expr, expr


def test_substitute() -> None:
    assert (
        substitute('rate(x{field="$field"}[$__rate_interval])', field="a.b", interval="2m")
        == 'rate(x{field="a.b"}[2m])'
    )
    assert (
        substitute("increase(x[${__range}]) / $__range_s", range_="1h") == "increase(x[1h]) / 3600"
    )
    assert substitute('x{src=~"${source:regex}"}', variables={"source": "crm"}) == 'x{src=~"crm"}'
    with pytest.raises(KeyError):
        substitute('x{y="$unknown"}')


def test_every_query_reads_metrics_the_worker_exposes() -> None:
    exposed = exposed_metrics()
    assert "claimstream_decisions_total" in exposed
    assert "claimstream_decision_latency_seconds_bucket" in exposed
    used = {
        name
        for _, _, expr in all_dashboard_queries()
        for name in re.findall(r"(?<![\w:])claimstream_\w+", expr)
    }
    used |= set(re.findall(r"(?<![\w:])claimstream_\w+", RULES.read_text(encoding="utf-8")))
    assert used - exposed == set()
    recorded = set(re.findall(r"record: (\S+)", RULES.read_text(encoding="utf-8")))
    read = {
        name for _, _, expr in all_dashboard_queries() for name in re.findall(r"\w+:\w+:\w+", expr)
    }
    assert read <= recorded


def test_every_query_is_valid_promql(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail(
            "promtool is not installed: install the Debian package prometheus; .ci/run does",
            pytrace=False,
        )
    queries = all_dashboard_queries()
    rules: list[dict[str, Any]] = [
        {"record": f"claimstream_dashboard_query_{index:03d}", "expr": expr}
        for index, (_, _, expr) in enumerate(queries)
    ]
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    result = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(queries)} rules found" in result.stdout
