"""The dashboards' building blocks: a query target scoped to the selected environment, a panel,
the grid that places panels in rows, the template variables and annotations every dashboard
carries, and the conflict-rate expressions the alert rules record too."""

from __future__ import annotations

import re
from typing import Any

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
ENVIRONMENT = 'job=~"$job",namespace=~"$namespace"'
# A raw metric name (not a recorded `level:metric:operation`), with its matchers if any.
_SELECTOR = re.compile(r"(?<![\w:])(claimstream_\w+|process_\w+|up)\b(?![\w(])(\{[^}]*\})?")
RATE = "$__rate_interval"
OVERVIEW_UID = "claimstream-overview"
FIELD_UID = "claimstream-field"


def conflict_ratio(selector: str = "", window: str = RATE, offset: str = "") -> str:
    """Share of a field's decisions that are conflicts or quarantines (what the alerts watch);
    0 when it decided without either."""
    sel = f",{selector}" if selector else ""
    off = f" offset {offset}" if offset else ""
    conflicts = (
        "sum by (field) "
        f'(rate(claimstream_decisions_total{{outcome=~"conflict|quarantined"{sel}}}[{window}]{off}))'
    )
    matchers = f"{{{selector}}}" if selector else ""
    decisions = f"sum by (field) (rate(claimstream_decisions_total{matchers}[{window}]{off}))"
    return f"({conflicts} or on (field) 0 * {decisions}) / on (field) ({decisions} > 0)"


def disagreement_share() -> str:
    """Per source, disagreed over settled judgements; 0 for a source that never disagreed."""
    settled = "sum by (source) (claimstream_source_settled_total)"
    disagreed = 'sum by (source) (claimstream_source_settled_total{verdict="disagreed"})'
    return f"({disagreed} or on (source) 0 * {settled}) / on (source) {settled}"


def scoped(expr: str) -> str:
    """`expr` with the environment's matchers added to every raw metric selector."""

    def add(match: re.Match[str]) -> str:
        name, matchers = match.group(1), match.group(2)
        inner = matchers[1:-1] if matchers else ""
        return f"{name}{{{ENVIRONMENT}{',' if inner else ''}{inner}}}"

    return _SELECTOR.sub(add, expr)


def target(expr: str, legend: str = "", *, instant: bool = False) -> dict[str, Any]:
    return {
        "datasource": dict(DATASOURCE),
        "expr": scoped(expr),
        "legendFormat": legend or "__auto",
        "range": not instant,
        "instant": instant,
    }


class Layout:
    """Places panels left to right in rows of 24 grid units."""

    def __init__(self) -> None:
        self.x = 0
        self.y = 0
        self.row_height = 0
        self.next_id = 1
        self.panels: list[dict[str, Any]] = []

    def add(self, panel: dict[str, Any], w: int, h: int) -> None:
        if self.x + w > 24:
            self.x, self.y, self.row_height = 0, self.y + self.row_height, 0
        panel["id"] = self.next_id
        panel["gridPos"] = {"h": h, "w": w, "x": self.x, "y": self.y}
        self.next_id += 1
        self.x += w
        self.row_height = max(self.row_height, h)
        self.panels.append(panel)

    def row(self, title: str) -> None:
        if self.x:
            self.x, self.y, self.row_height = 0, self.y + self.row_height, 0
        self.panels.append(
            {
                "id": self.next_id,
                "type": "row",
                "title": title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y},
                "panels": [],
            }
        )
        self.next_id += 1
        self.y += 1


def panel(
    kind: str,
    title: str,
    description: str,
    targets: list[dict[str, Any]],
    *,
    unit: str,
    stack: bool = False,
    links: list[dict[str, Any]] | None = None,
    overrides: list[dict[str, Any]] | None = None,
    thresholds: list[tuple[float | None, str]] | None = None,
    decimals: int | None = None,
    minimum: float | None = None,
) -> dict[str, Any]:
    for index, t in enumerate(targets):
        t["refId"] = chr(ord("A") + index)
    steps = thresholds or [(None, "green")]
    defaults: dict[str, Any] = {
        "unit": unit,
        "color": {"mode": "palette-classic" if kind == "timeseries" else "thresholds"},
        "thresholds": {
            "mode": "absolute",
            "steps": [{"color": color, "value": value} for value, color in steps],
        },
        "links": links or [],
    }
    if decimals is not None:
        defaults["decimals"] = decimals
    if minimum is not None:
        defaults["min"] = minimum
    options: dict[str, Any]
    if kind == "timeseries":
        defaults["custom"] = {
            "drawStyle": "line",
            "lineWidth": 1,
            "fillOpacity": 20 if stack else 0,
            "showPoints": "never",
            "spanNulls": False,
            "stacking": {"mode": "normal" if stack else "none", "group": "A"},
            "axisSoftMin": 0,
        }
        options = {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "desc"},
        }
    elif kind == "bargauge":
        options = {
            "orientation": "horizontal",
            "displayMode": "gradient",
            "showUnfilled": True,
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
        }
    else:  # stat
        options = {
            "colorMode": "value",
            "graphMode": "area",
            "justifyMode": "auto",
            "textMode": "auto",
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
        }
    return {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": dict(DATASOURCE),
        "fieldConfig": {"defaults": defaults, "overrides": overrides or []},
        "options": options,
        "targets": targets,
    }


def right_axis(refid: str, unit: str) -> dict[str, Any]:
    return {
        "matcher": {"id": "byFrameRefID", "options": refid},
        "properties": [
            {"id": "unit", "value": unit},
            {"id": "custom.axisPlacement", "value": "right"},
        ],
    }


# Firing claimstream alerts of the selected environment, drawn on every time series (the Watchdog,
# which always fires, left out).
ALERT_ANNOTATIONS = {
    "name": "claimstream alerts",
    "datasource": dict(DATASOURCE),
    "enable": True,
    "hide": False,
    "iconColor": "red",
    "expr": 'ALERTS{alertstate="firing",alertname=~"Claimstream.+",'
    'alertname!="ClaimstreamWatchdog",' + ENVIRONMENT + "}",
    "step": "60s",
    "titleFormat": "{{alertname}}",
    "textFormat": "{{severity}} {{field}}{{source}}{{instance}}{{topic}}",
    "tagKeys": "severity",
    "useValueForTime": False,
}


def query_variable(name: str, label: str, query: str, *, include_all: bool) -> dict[str, Any]:
    variable: dict[str, Any] = {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": dict(DATASOURCE),
        "query": {
            "qryType": 1,
            "query": query,
            "refId": "PrometheusVariableQueryEditor-VariableQuery",
        },
        "definition": query,
        "refresh": 2,
        "sort": 1,
        "multi": include_all,
        "includeAll": include_all,
        "current": {},
        "options": [],
        "hide": 0,
        "regex": "",
    }
    if include_all:
        # Matches series without the label too (compose has no namespace).
        variable["allValue"] = ".*"
    return variable


ENVIRONMENT_VARIABLES = [
    {
        "name": "datasource",
        "label": "Prometheus",
        "type": "datasource",
        "query": "prometheus",
        "current": {},
        "hide": 0,
        "refresh": 1,
        "regex": "",
    },
    query_variable("job", "Job", "label_values(claimstream_worker_up, job)", include_all=True),
    query_variable(
        "namespace",
        "Namespace",
        'label_values(claimstream_worker_up{job=~"$job"}, namespace)',
        include_all=True,
    ),
]


def dashboard(uid: str, title: str, description: str, layout: Layout, **extra: Any) -> dict:
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["claimstream"],
        "timezone": "utc",
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-6h", "to": "now"},
        "annotations": {
            "list": [
                {
                    "builtIn": 1,
                    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                    "enable": True,
                    "hide": True,
                    "iconColor": "rgba(0, 211, 255, 1)",
                    "name": "Annotations & Alerts",
                    "type": "dashboard",
                },
                ALERT_ANNOTATIONS,
            ]
        },
        "templating": {"list": [*ENVIRONMENT_VARIABLES, *extra.pop("variables", [])]},
        "links": extra.pop("links", []),
        "panels": layout.panels,
        **extra,
    }
