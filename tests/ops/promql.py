"""PromQL of the committed Grafana dashboards, ready to run against a real Prometheus.

    from tests.ops.promql import dashboard_queries
    for title, expr in dashboard_queries("grafana/dashboards/claimstream-field.json",
                                         field="order.payment_status"):
        ...  # GET /api/v1/query?query=expr and expect a non-empty result

Grafana's template variables are substituted: `$field` (and any other dashboard variable given in
`variables`), `$__rate_interval` and `$__interval` by `interval`, `$__range` by `range_`; the
environment variables by what the dashboards' "All" means: `$job` by `claimstream`, `$namespace`
by `.*`.
Queries that read a day back (`offset 1d`) return nothing on a Prometheus younger than a day:
`reads_history(expr)` tells them apart.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DASHBOARDS = REPO / "grafana" / "dashboards"

_VARIABLE = re.compile(r"\$(?:\{(\w+)(?::\w+)?\}|(\w+))")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def load(path: str | Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def iter_panels(dashboard: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, including those nested in collapsed rows; rows themselves excluded."""
    for panel in dashboard.get("panels", []):
        if panel.get("type") == "row":
            yield from iter_panels(panel)
        else:
            yield panel


def iter_targets(dashboard: Mapping[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(panel, target) for every query target of every panel."""
    for panel in iter_panels(dashboard):
        for target in panel.get("targets", []):
            yield panel, target


def _seconds(duration: str) -> float:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)", duration)
    if not match:
        raise ValueError(f"not a duration: {duration!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def substitute(
    expr: str,
    *,
    field: str = "order.payment_status",
    interval: str = "1m",
    range_: str = "1h",
    variables: Mapping[str, str] | None = None,
) -> str:
    """Replace Grafana's variables in `expr`; an unknown variable raises KeyError."""
    values = {
        "field": field,
        "job": "claimstream",
        "namespace": ".*",
        "__rate_interval": interval,
        "__interval": interval,
        "__interval_ms": str(int(_seconds(interval) * 1000)),
        "__range": range_,
        "__range_s": str(int(_seconds(range_))),
        "__range_ms": str(int(_seconds(range_) * 1000)),
        **(variables or {}),
    }

    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in values:
            raise KeyError(f"no value for dashboard variable ${name} in {expr!r}")
        return values[name]

    return _VARIABLE.sub(replace, expr)


def dashboard_queries(
    path: str | Path,
    field: str = "order.payment_status",
    interval: str = "1m",
    range_: str = "1h",
    variables: Mapping[str, str] | None = None,
) -> list[tuple[str, str]]:
    """(panel title, expr) for every target of the dashboard at `path`, variables substituted."""
    return [
        (
            panel.get("title", ""),
            substitute(
                target["expr"], field=field, interval=interval, range_=range_, variables=variables
            ),
        )
        for panel, target in iter_targets(load(path))
        if target.get("expr")
    ]


def all_dashboard_queries(**kwargs: Any) -> list[tuple[str, str, str]]:
    """(dashboard file name, panel title, expr) for every committed dashboard."""
    return [
        (path.name, title, expr)
        for path in sorted(DASHBOARDS.glob("*.json"))
        for title, expr in dashboard_queries(path, **kwargs)
    ]


def reads_history(expr: str) -> bool:
    """True for a query that looks back with `offset` (empty until Prometheus holds that much)."""
    return re.search(r"\boffset\s+\d", expr) is not None
