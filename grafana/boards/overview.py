"""The overview dashboard (`claimstream-overview`): the whole deployment, row by row. Its Pipeline
row is in `pipeline`."""

from __future__ import annotations

from typing import Any

from boards.kit import (
    FIELD_UID,
    OVERVIEW_UID,
    Layout,
    conflict_ratio,
    dashboard,
    disagreement_share,
    panel,
    target,
)
from boards.pipeline import flow, load, worker_state


def health(g: Layout) -> None:
    """Row Health: workers up, claims in, open conflicts, time since the last decision."""
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


def claims_and_decisions(g: Layout) -> None:
    """Row Claims and decisions: claims by field, decisions by outcome."""
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


def conflicts(g: Layout) -> None:
    """Row Conflicts: the conflict rate, the top fields and the open conflicts, each field
    linked to its drill-down."""
    drill = [
        {
            "title": "Drill down into ${__field.labels.field}",
            "url": f"/d/{FIELD_UID}?var-field=${{__field.labels.field}}&${{__url_time_range}}",
        }
    ]
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


def rejections(g: Layout) -> None:
    """Row Sources, first half: rejected claims by reason, by source, and dead letters."""
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


def judgements(g: Layout) -> None:
    """Row Sources, second half: losses and disagreements by source."""
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


def overview() -> dict[str, Any]:
    g = Layout()
    health(g)
    claims_and_decisions(g)
    conflicts(g)
    rejections(g)
    judgements(g)
    flow(g)
    load(g)
    worker_state(g)
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
