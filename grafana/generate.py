"""Generate claimstream's Grafana dashboards (stdlib only).

    python grafana/generate.py           # rewrite grafana/dashboards/*.json
    python grafana/generate.py --check   # exit 1 if the committed JSON differs from this output

The JSON is committed and provisioned by Grafana as is (grafana/provisioning/dashboards/);
tests/ops/test_dashboards.py fails when it drifts from this generator.

Every query reads the raw worker metrics (streams/metrics.py), so the dashboards work on any
Prometheus that scrapes the workers, with or without the alert rules; the one exception is the
field drill-down's baseline panel, which shows the very series the surge page reads. The
conflict-rate expressions are the same ratios the rules record
(deploy/prometheus/rules/claimstream.rules.yml).

Every dashboard picks its Prometheus (`$datasource`, no hard-coded uid) and its environment
(`$job`, `$namespace`): `scoped()` adds those matchers to every metric selector of every query.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

DASHBOARDS = Path(__file__).resolve().parent / "dashboards"
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


def overview() -> dict[str, Any]:
    drill = [
        {
            "title": "Drill down into ${__field.labels.field}",
            "url": f"/d/{FIELD_UID}?var-field=${{__field.labels.field}}&${{__url_time_range}}",
        }
    ]
    g = Layout()
    g.row("Health")
    g.add(
        panel(
            "stat",
            "Workers up",
            "Workers live (arbiter loop iterating: /healthz), ready (tasks restored: /readyz) and "
            "scraped by Prometheus.",
            [
                target("sum(claimstream_worker_up)", "live"),
                target("sum(claimstream_worker_ready)", "ready"),
                target("sum(up)", "scraped"),
            ],
            thresholds=[(None, "red"), (1, "green")],
            decimals=0,
            unit="short",
        ),
        w=6,
        h=5,
    )
    g.add(
        panel(
            "stat",
            "Claims in",
            "Claims admitted and rejected per second, all workers.",
            [
                target(
                    "sum(rate(claimstream_claims_accepted_total[$__rate_interval])) or vector(0)",
                    "accepted",
                ),
                target(
                    "sum(rate(claimstream_claims_rejected_total[$__rate_interval])) or vector(0)",
                    "rejected",
                ),
            ],
            unit="reqps",
        ),
        w=6,
        h=5,
    )
    g.add(
        panel(
            "stat",
            "Open conflicts",
            "Keys whose current decision is a conflict or a quarantine.",
            [target("sum(claimstream_open_conflicts)", "open")],
            thresholds=[(None, "green"), (1, "orange")],
            decimals=0,
            unit="short",
        ),
        w=6,
        h=5,
    )
    g.add(
        panel(
            "stat",
            "Since last decision",
            "Seconds since any worker emitted a decision (decisions are belief changes; a steady "
            "feed that confirms every belief emits none).",
            [target("time() - (max(claimstream_last_decision_timestamp_seconds) > 0)", "seconds")],
            unit="s",
            thresholds=[(None, "green"), (600, "orange")],
        ),
        w=6,
        h=5,
    )

    g.row("Claims and decisions")
    g.add(
        panel(
            "timeseries",
            "Claims in by field",
            "Claims admitted by the policy, per second.",
            [
                target(
                    "sum by (field) (rate(claimstream_claims_accepted_total[$__rate_interval]))",
                    "{{field}}",
                )
            ],
            unit="reqps",
            stack=True,
        ),
        w=12,
        h=8,
    )
    g.add(
        panel(
            "timeseries",
            "Decisions by outcome",
            "Decisions (belief changes) per second: resolved, conflict, insufficient, quarantined.",
            [
                target(
                    "sum by (outcome) (rate(claimstream_decisions_total[$__rate_interval]))",
                    "{{outcome}}",
                )
            ],
            unit="reqps",
            stack=True,
        ),
        w=12,
        h=8,
    )

    g.row("Conflicts")
    g.add(
        panel(
            "timeseries",
            "Conflict rate per field",
            "Share of each field's decisions that are conflicts (the ratio the conflict-rate "
            "alerts watch). Click a series to drill down into the field.",
            [target(conflict_ratio(), "{{field}}")],
            unit="percentunit",
            links=drill,
            minimum=0,
        ),
        w=12,
        h=8,
    )
    g.add(
        panel(
            "bargauge",
            "Top conflicting fields",
            "The fields with the most conflict decisions over the dashboard's time range.",
            [
                target(
                    "topk(10, sum by (field) "
                    '(increase(claimstream_decisions_total{outcome="conflict"}[$__range])))',
                    "{{field}}",
                    instant=True,
                )
            ],
            unit="short",
            links=drill,
            decimals=0,
        ),
        w=12,
        h=8,
    )
    g.add(
        panel(
            "timeseries",
            "Open conflicts by field",
            "Keys whose current decision is a conflict or quarantine, summed over workers.",
            [target("sum by (field) (claimstream_open_conflicts)", "{{field}}")],
            stack=True,
            decimals=0,
            unit="short",
            links=drill,
        ),
        w=12,
        h=8,
    )
    g.add(
        panel(
            "timeseries",
            "Oldest open conflict by field",
            "Age of the oldest open conflict per field "
            "(ClaimstreamConflictOpenTooLong fires past 1 h).",
            [target("max by (field) (claimstream_oldest_open_conflict_age_seconds)", "{{field}}")],
            unit="s",
            links=drill,
            thresholds=[(None, "green"), (3600, "red")],
        ),
        w=12,
        h=8,
    )

    g.row("Sources")
    g.add(
        panel(
            "timeseries",
            "Rejected claims by reason",
            "Claims sent to the dead-letter topic, per second, by reason.",
            [
                target(
                    "sum by (reason) (rate(claimstream_claims_rejected_total[$__rate_interval]))",
                    "{{reason}}",
                )
            ],
            unit="reqps",
            stack=True,
        ),
        w=8,
        h=8,
    )
    g.add(
        panel(
            "timeseries",
            "Rejection ratio by source",
            "Share of each source's claims that were rejected (ClaimstreamRejectionSurge fires "
            "above 10%).",
            [
                target(
                    "(sum by (source) (rate(claimstream_claims_rejected_total[$__rate_interval]))"
                    " or on (source) 0 * sum by (source) "
                    "(rate(claimstream_claims_accepted_total[$__rate_interval])))"
                    " / on (source) ("
                    "(sum by (source) (rate(claimstream_claims_rejected_total[$__rate_interval]))"
                    " or on (source) 0 * sum by (source) "
                    "(rate(claimstream_claims_accepted_total[$__rate_interval])))"
                    " + on (source) "
                    "(sum by (source) (rate(claimstream_claims_accepted_total[$__rate_interval]))"
                    " or on (source) 0 * sum by (source) "
                    "(rate(claimstream_claims_rejected_total[$__rate_interval])))"
                    " > 0)",
                    "{{source}}",
                )
            ],
            unit="percentunit",
            minimum=0,
        ),
        w=8,
        h=8,
    )
    g.add(
        panel(
            "timeseries",
            "Dead letters by source and reason",
            "Claims sent to the dead-letter topic per second, by declared source and reason "
            "(unauthenticated: someone used the source's name; processing_failed: a valid claim "
            "failed inside the worker).",
            [
                target(
                    "sum by (source, reason) "
                    "(rate(claimstream_claims_rejected_total[$__rate_interval]))",
                    "{{source}} / {{reason}}",
                )
            ],
            unit="reqps",
            stack=True,
        ),
        w=8,
        h=8,
    )
    g.add(
        panel(
            "timeseries",
            "Losses by source",
            "Claims that lost to a stronger source in a resolved decision, per second: a source "
            "that loses often is a lagging replica or a stale cache.",
            [
                target(
                    "sum by (source) (rate(claimstream_claim_losses_total[$__rate_interval]))",
                    "{{source}}",
                )
            ],
            unit="reqps",
        ),
        w=8,
        h=8,
    )
    g.add(
        panel(
            "bargauge",
            "Disagreement share by source",
            "Of each source's claims that a closed conflict judged (a steward's resolution, or a "
            "later deciding observation), the share that did not say the settled value: who was "
            "wrong, where losses say who lost. Counted since each worker started; GET "
            "/api/sources has the whole kept history, per field, with the keys.",
            [target(disagreement_share(), "{{source}}", instant=True)],
            unit="percentunit",
            decimals=1,
            minimum=0,
        ),
        w=8,
        h=8,
    )

    g.row("Pipeline")
    g.add(
        panel(
            "timeseries",
            "Decision latency",
            "From a claim's record timestamp to the decision it caused, from the histogram.",
            [
                target(
                    "histogram_quantile(0.5, sum by (le) "
                    "(rate(claimstream_decision_latency_seconds_bucket[$__rate_interval])))",
                    "p50",
                ),
                target(
                    "histogram_quantile(0.99, sum by (le) "
                    "(rate(claimstream_decision_latency_seconds_bucket[$__rate_interval])))",
                    "p99",
                ),
            ],
            unit="s",
        ),
        w=8,
        h=8,
    )
    g.add(
        panel(
            "timeseries",
            "Consumer lag by topic",
            "Records not yet committed on the input topics (log end minus the group's committed "
            "offsets, asked from the broker), summed over workers (ClaimstreamConsumerLagHigh "
            "fires above 10 000 for 10 minutes).",
            [target("sum by (topic) (claimstream_consumer_lag_records)", "{{topic}}")],
            thresholds=[(None, "green"), (10000, "red")],
            unit="short",
        ),
        w=8,
        h=8,
    )
    g.add(
        panel(
            "timeseries",
            "Worker up",
            "Per worker: scraped by Prometheus (up), live (claimstream_worker_up) and ready "
            "(claimstream_worker_ready).",
            [
                target("claimstream_worker_up", "live {{instance}}"),
                target("claimstream_worker_ready", "ready {{instance}}"),
                target("up", "scraped {{instance}}"),
            ],
            decimals=0,
            minimum=0,
            unit="bool",
        ),
        w=8,
        h=8,
    )
    g.add(
        panel(
            "timeseries",
            "Escalations, epoch changes, retries, partition hops",
            "Conflicts escalated past their field's threshold, values changed across an epoch "
            "boundary, retried claims, and claims moved to their key's partition because their "
            "producer partitions by another hash than murmur2 (librdkafka's default CRC32: set "
            "partitioner=murmur2_random there), per second.",
            [
                target(
                    "sum(rate(claimstream_escalations_total[$__rate_interval])) or vector(0)",
                    "escalations",
                ),
                target(
                    "sum(rate(claimstream_epoch_changes_total[$__rate_interval])) or vector(0)",
                    "epoch changes",
                ),
                target(
                    "sum(rate(claimstream_processing_retries_total[$__rate_interval]))"
                    " or vector(0)",
                    "retries",
                ),
                target(
                    'sum(rate(claimstream_rekey_hops_total{cause="partition"}[$__rate_interval]))'
                    " or vector(0)",
                    "partition hops",
                ),
            ],
            unit="reqps",
        ),
        w=12,
        h=8,
    )
    g.add(
        panel(
            "timeseries",
            "Memory and key state",
            "Per worker: resident memory and the encoded key state it holds "
            "(ClaimstreamStateLarge past 256 MiB; size the memory limit by docs/runbook.md).",
            [
                target("process_resident_memory_bytes", "memory {{instance}}"),
                target("claimstream_state_bytes", "state {{instance}}"),
            ],
            unit="bytes",
            minimum=0,
        ),
        w=12,
        h=8,
    )
    g.add(
        panel(
            "timeseries",
            "Rebalances and commit failures",
            "Per worker, over the dashboard's interval: consumer-group rebalances, failed batch "
            "commits (re-read) and tasks fenced by a newer owner.",
            [
                target(
                    "sum by (instance) (increase(claimstream_rebalances_total[$__rate_interval]))",
                    "rebalances {{instance}}",
                ),
                target(
                    "sum by (instance) "
                    "(increase(claimstream_commit_failures_total[$__rate_interval]))",
                    "commit failures {{instance}}",
                ),
                target(
                    "sum by (instance) "
                    "(increase(claimstream_tasks_fenced_total[$__rate_interval]))",
                    "fenced {{instance}}",
                ),
            ],
            unit="short",
            minimum=0,
        ),
        w=12,
        h=8,
    )
    g.add(
        panel(
            "timeseries",
            "Event-loop stalls",
            "Per worker: how late its event loop ran a due timer (p99 over the interval, and the "
            "longest over the last 10 to 20 s) and the share of time garbage collection held it. "
            "A high decision-latency p99 with these high is the loop held, not the broker.",
            [
                target(
                    "histogram_quantile(0.99, sum by (instance, le) "
                    "(rate(claimstream_loop_lag_seconds_bucket[$__rate_interval])))",
                    "loop lag p99 {{instance}}",
                ),
                target("claimstream_loop_lag_max_seconds", "longest lag {{instance}}"),
                target(
                    "sum by (instance) "
                    "(rate(claimstream_gc_pause_seconds_total[$__rate_interval]))",
                    "gc pauses (s/s) {{instance}}",
                ),
            ],
            unit="s",
            minimum=0,
        ),
        w=12,
        h=8,
    )
    g.add(
        panel(
            "bargauge",
            "Policy versions",
            "Workers per policy version (more than one for 15 minutes: "
            "ClaimstreamPolicyVersionSkew).",
            [
                target(
                    "count by (policy_version) (claimstream_policy_info)",
                    "{{policy_version}}",
                    instant=True,
                )
            ],
            decimals=0,
            unit="short",
        ),
        w=12,
        h=8,
    )
    return dashboard(
        OVERVIEW_UID,
        "claimstream: overview",
        "Claims in, decisions, conflicts per field, rejections, latency, lag and worker health.",
        g,
        links=[
            {
                "title": "Field drill-down",
                "type": "link",
                "url": f"/d/{FIELD_UID}",
                "keepTime": True,
                "icon": "dashboard",
            },
            {
                "title": "claimstream",
                "type": "dashboards",
                "tags": ["claimstream"],
                "asDropdown": True,
            },
        ],
    )


def field_dashboard() -> dict[str, Any]:
    f = 'field="$field"'
    g = Layout()
    g.add(
        panel(
            "stat",
            "Conflict rate (5m)",
            "Share of this field's decisions over the last 5 minutes that are conflicts.",
            [target(conflict_ratio(f, "5m"), "now")],
            unit="percentunit",
            thresholds=[(None, "green"), (0.05, "orange"), (0.2, "red")],
        ),
        w=6,
        h=5,
    )
    g.add(
        panel(
            "stat",
            "Decisions",
            "Decisions on this field per second.",
            [
                target(
                    f"sum(rate(claimstream_decisions_total{{{f}}}[$__rate_interval])) or vector(0)",
                    "decisions/s",
                )
            ],
            unit="reqps",
        ),
        w=6,
        h=5,
    )
    g.add(
        panel(
            "stat",
            "Open conflicts",
            "Keys of this field whose current decision is a conflict or quarantine.",
            [target(f"sum(claimstream_open_conflicts{{{f}}})", "open")],
            thresholds=[(None, "green"), (1, "orange")],
            decimals=0,
            unit="short",
        ),
        w=6,
        h=5,
    )
    g.add(
        panel(
            "stat",
            "Oldest open conflict",
            "Age of the oldest open conflict on this field.",
            [target(f"max(claimstream_oldest_open_conflict_age_seconds{{{f}}})", "age")],
            unit="s",
            thresholds=[(None, "green"), (3600, "red")],
        ),
        w=6,
        h=5,
    )
    g.add(
        panel(
            "timeseries",
            "Decisions by outcome",
            "Decisions on this field per second, by outcome and conflict kind.",
            [
                target(
                    "sum by (outcome, conflict_kind) "
                    f"(rate(claimstream_decisions_total{{{f}}}[$__rate_interval]))",
                    "{{outcome}} / {{conflict_kind}}",
                )
            ],
            unit="reqps",
            stack=True,
        ),
        w=12,
        h=8,
    )
    g.add(
        panel(
            "timeseries",
            "Conflict rate vs a day ago",
            "This field's conflict ratio now and at the same time a day earlier (what "
            "ClaimstreamConflictRateDayOverDay compares, hour by hour).",
            [
                target(conflict_ratio(f), "now"),
                target(conflict_ratio(f, offset="1d"), "a day ago"),
            ],
            unit="percentunit",
            minimum=0,
            overrides=[
                {
                    "matcher": {"id": "byFrameRefID", "options": "B"},
                    "properties": [
                        {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}},
                        {"id": "color", "value": {"mode": "fixed", "fixedColor": "gray"}},
                    ],
                }
            ],
        ),
        w=12,
        h=8,
    )
    recorded = f"{{{f},{ENVIRONMENT}}}"
    g.add(
        panel(
            "timeseries",
            "Conflict rate against its baseline",
            "What ClaimstreamConflictRateSurge reads (recorded by the alert rules): the 5-minute "
            "ratio, the median of the last 12 hours, and the z-score against the 12-hour spread "
            "(right axis; the page needs above 3, 1.5x the median, 5 points above it and 30 "
            "decisions in 5 minutes).",
            [
                target(f"field:claimstream_conflict_ratio:rate5m{recorded}", "ratio {{job}}"),
                target(
                    f"field:claimstream_conflict_ratio_baseline:median12h{recorded}",
                    "baseline (12 h median) {{job}}",
                ),
                target(f"field:claimstream_conflict_ratio:zscore12h{recorded}", "z-score {{job}}"),
            ],
            unit="percentunit",
            minimum=0,
            overrides=[right_axis("C", "none")],
        ),
        w=12,
        h=8,
    )
    g.add(
        panel(
            "timeseries",
            "Claims by source",
            "Claims on this field admitted per second, by source.",
            [
                target(
                    "sum by (source) "
                    f"(rate(claimstream_claims_accepted_total{{{f}}}[$__rate_interval]))",
                    "{{source}}",
                )
            ],
            unit="reqps",
            stack=True,
        ),
        w=12,
        h=8,
    )
    g.add(
        panel(
            "timeseries",
            "Losses per source",
            "Claims of each source that lost to a stronger one on this field (contested in a "
            "resolved decision), per second: the lagging-replica signal.",
            [
                target(
                    "sum by (source) "
                    f"(rate(claimstream_claim_losses_total{{{f}}}[$__rate_interval]))",
                    "{{source}}",
                )
            ],
            unit="reqps",
        ),
        w=12,
        h=8,
    )
    g.add(
        panel(
            "timeseries",
            "Open conflicts and oldest age",
            "Open conflicts on this field (left) and the age of the oldest (right).",
            [
                target(f"sum(claimstream_open_conflicts{{{f}}})", "open conflicts"),
                target(f"max(claimstream_oldest_open_conflict_age_seconds{{{f}}})", "oldest age"),
            ],
            decimals=0,
            unit="short",
            overrides=[right_axis("B", "s")],
        ),
        w=12,
        h=8,
    )
    g.add(
        panel(
            "timeseries",
            "Conflicts by kind",
            "Conflict and quarantine decisions on this field per second, by kind: value, "
            "existence, semantic, cross_epoch, provenance.",
            [
                target(
                    f"sum by (conflict_kind) (rate(claimstream_decisions_total{{{f},"
                    f'outcome=~"conflict|quarantined"}}[$__rate_interval]))',
                    "{{conflict_kind}}",
                )
            ],
            unit="reqps",
            stack=True,
        ),
        w=12,
        h=8,
    )
    g.add(
        panel(
            "timeseries",
            "Escalations and epoch changes",
            "Conflicts on this field escalated past escalate_after, and values that changed across "
            "an epoch boundary, per second.",
            [
                target(
                    f"sum(rate(claimstream_escalations_total{{{f}}}[$__rate_interval]))"
                    " or vector(0)",
                    "escalations",
                ),
                target(
                    f"sum(rate(claimstream_epoch_changes_total{{{f}}}[$__rate_interval]))"
                    " or vector(0)",
                    "epoch changes",
                ),
            ],
            unit="reqps",
        ),
        w=24,
        h=8,
    )
    variable = query_variable(
        "field",
        "Field",
        f"label_values(claimstream_decisions_total{{{ENVIRONMENT}}}, field)",
        include_all=False,
    )
    return dashboard(
        FIELD_UID,
        "claimstream: field drill-down",
        "One field: decisions by outcome, claims and losses by source, open conflicts, and its "
        "conflict rate against a day ago.",
        g,
        variables=[variable],
        links=[
            {
                "title": "Overview",
                "type": "link",
                "url": f"/d/{OVERVIEW_UID}",
                "keepTime": True,
                "icon": "dashboard",
            }
        ],
    )


def build() -> dict[str, str]:
    """File name -> JSON text of every dashboard."""
    boards = {
        "claimstream-overview.json": overview(),
        "claimstream-field.json": field_dashboard(),
    }
    return {
        name: json.dumps(board, indent=2, sort_keys=False) + "\n" for name, board in boards.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args(argv)
    stale = []
    for name, text in build().items():
        path = DASHBOARDS / name
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            DASHBOARDS.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    if stale:
        print(f"out of date, run python grafana/generate.py: {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
