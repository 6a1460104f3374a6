"""The field drill-down dashboard (`claimstream-field`, variable `field`): one field's conflicts,
sources and events. `f` is the field's matcher, `field="$field"`."""

from __future__ import annotations

from typing import Any

from boards.kit import (
    ENVIRONMENT,
    FIELD_UID,
    OVERVIEW_UID,
    Layout,
    conflict_ratio,
    dashboard,
    panel,
    query_variable,
    right_axis,
    target,
)


def field_now(g: Layout, f: str) -> None:
    """The field now: its conflict rate, decisions, open conflicts and the oldest one."""
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


def field_conflict_rates(g: Layout, f: str) -> None:
    """Its decisions by outcome, and its conflict rate against a day ago and against the
    baseline the surge alert reads."""
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


def field_sources(g: Layout, f: str) -> None:
    """Its claims and losses by source."""
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


def field_open_conflicts(g: Layout, f: str) -> None:
    """Its open conflicts, conflicts by kind, escalations and epoch changes."""
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


def field_dashboard() -> dict[str, Any]:
    f = 'field="$field"'
    g = Layout()
    field_now(g, f)
    field_conflict_rates(g, f)
    field_sources(g, f)
    field_open_conflicts(g, f)
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
