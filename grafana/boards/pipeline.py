"""The overview's Pipeline row: how claims move through the workers (latency, lag, liveness),
what they carry (escalations, retries, memory) and what happens to the workers themselves
(rebalances, stalls, policy versions)."""

from __future__ import annotations

from boards.kit import Layout, panel, target


def flow(g: Layout) -> None:
    """Row Pipeline, first part: decision latency, consumer lag, workers up."""
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


def load(g: Layout) -> None:
    """Row Pipeline, second part: escalations, epoch changes, retries and partition hops;
    memory and key state."""
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


def worker_state(g: Layout) -> None:
    """Row Pipeline, last part: rebalances and commit failures, event-loop stalls, policy
    versions."""
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
