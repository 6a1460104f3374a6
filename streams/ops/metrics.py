"""Prometheus metrics of a worker, on an injectable registry.

Conventions: one `claimstream_` prefix, base units (seconds), `_total` counters. Labels are bounded:
`field` and `source` take only names the policy declares (anything else is reported as `_other`),
and no metric ever carries a subject, a claim id or a claim value.

`Metrics` registers its families by what they describe, in the order a claim meets them: what
happened to each record, how fresh the decisions are, the state held, the hot path's stages, the
console's writes, the worker's lifecycle. Per-claim counts are tallied in plain dicts and
published once per batch (`flush`); `StageClock` sums the stage times the same way.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Mapping
from time import perf_counter

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)

from streams.core.decision.arbitration import Arbitration
from streams.core.records.contracts import EvidenceRole, Outcome
from streams.core.records.policy import Policy

OTHER = "_other"
# The hot path's stages, in the order a claim goes through them (see StageClock).
DECODE, ADMIT, ARBITRATE, ENCODE = "decode", "admit", "arbitrate", "encode"
PRODUCE, JOURNAL, COMMIT = "produce", "journal", "commit"
STAGES = (DECODE, ADMIT, ARBITRATE, ENCODE, PRODUCE, JOURNAL, COMMIT)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
TIMERS_COUNTED = 10_000  # due timers counted per task by `claimstream_timers_due`, at most
RESTORE_BUCKETS = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)


class Metrics:
    def __init__(self, policy: Policy, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._fields = frozenset(policy.fields)
        self._sources = frozenset(s for s in policy.sources if s != "*")
        r = self.registry
        self._claim_families(r)
        self._freshness_families(r)
        self._state_families(r)
        self._stage_families(r)
        self._console_families(r)
        self._worker_families(r, policy)
        # Memory, CPU, open files and start time of this process, next to its own metrics.
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        # What `flush` publishes once per batch: a labelled counter costs more per claim.
        self._accepted: Tally[tuple[str, str]] = Tally()
        self._decided: Tally[tuple[str, str, str]] = Tally()
        self._losses: Tally[tuple[str, str]] = Tally()
        self._rejected: dict[tuple[str, str], Counter] = {}  # by labels: reasons x sources
        self._last_claim = self._last_decision = 0.0

    def _claim_families(self, r: CollectorRegistry) -> None:
        """What happened to each record: admitted, refused, decided, lost, escalated, re-keyed."""
        self.claims_accepted = Counter(
            "claimstream_claims_accepted_total",
            "Claims admitted by the policy, by field and source.",
            ["field", "source"],
            registry=r,
        )
        self.claims_rejected = Counter(
            "claimstream_claims_rejected_total",
            "Claims sent to the dead-letter topic, by reason and declared source.",
            ["reason", "source"],
            registry=r,
        )
        self.decisions = Counter(
            "claimstream_decisions_total",
            "Decisions emitted (belief changes), by field, outcome and conflict kind.",
            ["field", "outcome", "conflict_kind"],
            registry=r,
        )
        self.losses = Counter(
            "claimstream_claim_losses_total",
            "Claims that lost to a stronger one (contested in a resolved decision), counted with "
            "each emitted decision and when an arriving claim loses without changing the "
            "decision: the lagging-replica signal.",
            ["field", "source"],
            registry=r,
        )
        self.source_settled = Counter(
            "claimstream_source_settled_total",
            "Claims judged against the value a closed conflict or quarantine settled on (a "
            "person's resolution, or a later observation that decided it), by source, field and "
            "verdict (agreed or disagreed): who was wrong, where the losses say who lost.",
            ["source", "field", "verdict"],
            registry=r,
        )
        self.escalations = Counter(
            "claimstream_escalations_total",
            "Conflicts escalated because they stayed open past the field's threshold.",
            ["field"],
            registry=r,
        )
        self.epoch_changes = Counter(
            "claimstream_epoch_changes_total",
            "Values that changed across an epoch boundary.",
            ["field"],
            registry=r,
        )
        self.processing_retries = Counter(
            "claimstream_processing_retries_total",
            "Retries of a valid claim whose processing failed.",
            registry=r,
        )
        self.rekey_hops = Counter(
            "claimstream_rekey_hops_total",
            "Records forwarded to their key's partition before being decided, by cause: `key` "
            "(keyed otherwise by the producer) or `partition` (key right, partitioned by another "
            "hash than murmur2, e.g. librdkafka's default CRC32).",
            ["cause"],
            registry=r,
        )
        self.aliases = AliasGauges(r)
        self.erasures = ErasureCounts(r)

    def _freshness_families(self, r: CollectorRegistry) -> None:
        """How current the decisions are: open conflicts, latency, lag, last activity."""
        self.open_conflicts = Gauge(
            "claimstream_open_conflicts",
            "Keys whose current decision is a conflict or quarantine, on this worker.",
            ["field"],
            registry=r,
        )
        self.oldest_open_conflict_age = Gauge(
            "claimstream_oldest_open_conflict_age_seconds",
            "Age of the oldest open conflict on this worker, by field.",
            ["field"],
            registry=r,
        )

        self.decision_latency = Histogram(
            "claimstream_decision_latency_seconds",
            "From a claim's record timestamp to the decision it caused being sent.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.consumer_lag = Gauge(
            "claimstream_consumer_lag_records",
            "Records not yet processed on the input topics assigned to this worker.",
            ["topic"],
            registry=r,
        )
        self.last_decision_time = Gauge(
            "claimstream_last_decision_timestamp_seconds",
            "Unix time of the last decision this worker emitted.",
            registry=r,
        )
        self.last_claim_time = Gauge(
            "claimstream_last_claim_timestamp_seconds",
            "Unix time of the last claim this worker admitted.",
            registry=r,
        )
        for field in sorted(self._fields):
            self.open_conflicts.labels(field).set(0)
            self.oldest_open_conflict_age.labels(field).set(0)

    def _state_families(self, r: CollectorRegistry) -> None:
        """The key state this worker holds, and the re-decisions time alone starts."""
        self.state_keys = Gauge(
            "claimstream_state_keys",
            "Subject|field keys whose state this worker holds (its tasks' keys).",
            registry=r,
        )
        self.state_bytes = Gauge(
            "claimstream_state_bytes",
            "Encoded size of the key state this worker holds (what its changelog partitions hold).",
            registry=r,
        )
        self.expiry_ticks = Counter(
            "claimstream_expiry_ticks_total",
            "Re-decisions by time alone started (a key went stale or a conflict is due to "
            "escalate).",
            registry=r,
        )
        self.timers = TimerGauges(r)
        self.stewards = StewardGauges(r, self._fields)
        self.stalled = StalledTasks(r)

    def _stage_families(self, r: CollectorRegistry) -> None:
        """Where the hot path's time goes, stage by stage (see StageClock)."""
        self.stage_seconds = Counter(
            "claimstream_stage_seconds_total",
            "Time the arbiter spent in each stage of the hot path: decode, admit (authenticate, "
            "alias, policy), arbitrate (the key's state read, caught up and decided), encode "
            "(outputs), produce (send until acknowledged), "
            "journal (key state encoded for the changelog), commit (offsets or transaction).",
            ["stage"],
            registry=r,
        )
        for stage in STAGES:
            self.stage_seconds.labels(stage)

    def _console_families(self, r: CollectorRegistry) -> None:
        """The steward console's writes."""
        self.console_writes_refused = Counter(
            "claimstream_console_writes_refused_total",
            "Console writes (resolutions) refused: writes disabled, missing or wrong steward "
            "token, or an invalid resolution.",
            ["reason"],
            registry=r,
        )
        self.console_resolutions = Counter(
            "claimstream_console_resolutions_total",
            "Resolutions stewards published from the console, by field.",
            ["field"],
            registry=r,
        )

    def _worker_families(self, r: CollectorRegistry, policy: Policy) -> None:
        """The worker's lifecycle: liveness, readiness, tasks, rebalances, commits, policy."""
        self.up = Gauge(
            "claimstream_worker_up",
            "1 while the worker is live (its arbiter loop iterates; /healthz answers 200).",
            registry=r,
        )
        self.ready = Gauge(
            "claimstream_worker_ready",
            "1 while every partition assigned to the worker has a restored task (/readyz).",
            registry=r,
        )
        self.tasks_owned = Gauge(
            "claimstream_tasks_owned", "Arbiter tasks (partitions) open on this worker.", registry=r
        )
        self.rebalances = Counter(
            "claimstream_rebalances_total",
            "Consumer-group rebalances that assigned this worker its tasks.",
            registry=r,
        )
        self.restore_records_remaining = Gauge(
            "claimstream_restore_records_remaining",
            "Changelog records the tasks being restored still have to read (0 when none is).",
            registry=r,
        )
        self.restore_seconds = Histogram(
            "claimstream_restore_seconds",
            "From a rebalance starting to this worker's assigned tasks being restored and open.",
            buckets=RESTORE_BUCKETS,
            registry=r,
        )
        self.commit_failures = Counter(
            "claimstream_commit_failures_total",
            "Batches whose outputs or input offsets failed to commit (the batch is re-read).",
            registry=r,
        )
        self.tasks_fenced = Counter(
            "claimstream_tasks_fenced_total",
            "Tasks dropped because a newer owner fenced their transactional producer.",
            registry=r,
        )
        self.records_committed = Counter(
            "claimstream_records_committed_total",
            "Input records whose processing this worker committed (group offsets advanced).",
            registry=r,
        )
        self.policies = PolicyGauges(r, policy.version)

    def field_label(self, field: str | None) -> str:
        return field if field in self._fields else OTHER

    def source_label(self, source: str | None) -> str:
        return source if source in self._sources else OTHER

    def accepted(self, field: str, source: str, when: float) -> None:
        """Tallied, and published by `flush` (once per batch): a labelled counter costs more
        than the rest of this bookkeeping."""
        self._accepted[field, source] += 1
        if when > self._last_claim:
            self._last_claim = when

    def flush(self, stages: StageClock | None = None) -> None:
        """Publish what was tallied since the last flush."""
        for (field, source), count in self._accepted.items():
            self.claims_accepted.labels(self.field_label(field), self.source_label(source)).inc(
                count
            )
        self._accepted.clear()
        for (field, outcome, kind), count in self._decided.items():
            self.decisions.labels(self.field_label(field), outcome, kind).inc(count)
        self._decided.clear()
        for (field, source), count in self._losses.items():
            self.losses.labels(self.field_label(field), self.source_label(source)).inc(count)
        self._losses.clear()
        if self._last_claim:
            self.last_claim_time.set(self._last_claim)
        if self._last_decision:
            self.last_decision_time.set(self._last_decision)
        if stages is not None:
            for stage, seconds in stages.seconds.items():
                if seconds:
                    self.stage_seconds.labels(stage).inc(seconds)
            stages.reset()

    def rejected(self, reason: str, source: str | None) -> None:
        labels = (reason, self.source_label(source))
        child = self._rejected.get(labels)  # a labels() lookup costs ~4 times the inc()
        if child is None:
            child = self._rejected[labels] = self.claims_rejected.labels(*labels)
        child.inc()

    def decided(self, arbitration: Arbitration, when: float) -> None:
        """Tallied like `accepted`, published by `flush`; read from the arbitration, so that no
        Decision model is built for it."""
        kind = arbitration.verdict.kind
        field = arbitration.field
        self._decided[field, arbitration.outcome.value, kind.value if kind else "none"] += 1
        if when > self._last_decision:
            self._last_decision = when
        if arbitration.outcome is Outcome.RESOLVED:
            roles = arbitration.roles
            for admitted in arbitration.claims:
                claim = admitted.claim
                if roles[claim.claim_id] is EvidenceRole.CONTESTED:
                    self._losses[field, claim.source] += 1

    def lost(self, field: str, source: str) -> None:
        """Tallied like `accepted`, published by `flush`: a labelled counter costs ~10 µs."""
        self._losses[field, source] += 1

    def rebalanced(self, restore_s: float) -> None:
        self.rebalances.inc()
        self.restore_seconds.observe(restore_s)

    def set_open_conflicts(self, ages_by_field: dict[str, list[float]]) -> None:
        for field in self._fields:
            ages = ages_by_field.get(field, [])
            self.open_conflicts.labels(field).set(len(ages))
            self.oldest_open_conflict_age.labels(field).set(max(ages, default=0.0))


class StewardGauges:
    """The stewards' backlog on this worker, per field (the loop refreshes them every
    `expiry_interval_s`)."""

    def __init__(self, r: CollectorRegistry, fields: frozenset[str]) -> None:
        self._fields = fields
        self.overdue = Gauge(
            "claimstream_overdue_tasks",
            "Open conflicts past their field's escalate_after: stewards' tasks overdue, on "
            "this worker.",
            ["field"],
            registry=r,
        )
        self.reviews_waiting = Gauge(
            "claimstream_reviews_waiting",
            "Keys with a steward's proposal waiting for review, on this worker (after a "
            "restart, a key that is not an open conflict counts again once its state changes).",
            ["field"],
            registry=r,
        )

    def set(self, overdue: Mapping[str, int], reviews: Mapping[str, int]) -> None:
        for field in self._fields:
            self.overdue.labels(field).set(overdue.get(field, 0))
            self.reviews_waiting.labels(field).set(reviews.get(field, 0))


class TimerGauges:
    """What time owes: the keys whose timer came due and whose tick has not gone out, and how
    late the oldest is (the loop refreshes them every `expiry_interval_s`)."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.due = Gauge(
            "claimstream_timers_due",
            "Keys whose timer has come due and whose tick has not been sent yet (counted up to "
            f"{TIMERS_COUNTED} a task).",
            registry=r,
        )
        self.lag = Gauge(
            "claimstream_timer_lag_seconds",
            "How long ago the oldest timer whose tick has not been sent yet came due (0: none "
            "is due): a key re-decided by time alone that late.",
            registry=r,
        )

    def set(self, waiting: int, lag_s: float) -> None:
        self.due.set(waiting)
        self.lag.set(lag_s)


class StalledTasks:
    """How long each owned task has gone without progress while it had work (`Pulse`)."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.seconds = Gauge(
            "claimstream_task_stalled_seconds",
            "Seconds a task has not committed past its input while records wait for it, or "
            "while its commits keep failing (0: making progress, or nothing to do).",
            ["task"],
            registry=r,
        )
        self._shown: set[str] = set()

    def set(self, stalled_s: dict[int, float]) -> None:
        shown = {str(task) for task in stalled_s}
        for gone in self._shown - shown:
            self.seconds.remove(gone)
        for task, seconds in stalled_s.items():
            self.seconds.labels(str(task)).set(seconds)
        self._shown = shown


class PolicyGauges:
    """The policy a worker decides by, and how far its rollout sweep has come."""

    def __init__(self, r: CollectorRegistry, version: str) -> None:
        self.info = Gauge(
            "claimstream_policy_info",
            "The policy version in force on the worker (value is always 1).",
            ["policy_version"],
            registry=r,
        )
        self.sweep_remaining = Gauge(
            "claimstream_policy_sweep_remaining",
            "Owned keys the rollout sweep has yet to look at, or found on an older policy and "
            "not yet sent to the one in force (0: every owned key is on it).",
            registry=r,
        )
        self._version = version
        self.info.labels(version).set(1)

    def in_force(self, version: str) -> None:
        if version != self._version:
            self.info.remove(self._version)
            self._version = version
            self.info.labels(version).set(1)


class AliasGauges:
    """What alias changes moved, and what the sweep has still to regroup."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.moves = Counter(
            "claimstream_alias_moves_total",
            "Evidence sent from one key to another's owner because an alias took effect or was "
            "retracted (one per key it went to).",
            registry=r,
        )
        self.pending = Gauge(
            "claimstream_alias_regroups_pending",
            "Owned keys the sweep found whose evidence an alias change moves, not yet regrouped "
            "(0 once every owned key is grouped by the aliases in force).",
            registry=r,
        )


class ErasureCounts:
    """What erasures dropped: keys, and records read about data erased since they were sent."""

    def __init__(self, r: CollectorRegistry) -> None:
        keys = "Keys dropped because their subject was erased (each sent one `erased` decision)."
        self.keys = Counter("claimstream_erased_keys_total", keys, registry=r)
        records = "Claims and resolutions read about a subject erased after they were sent: passed "
        records += "over, never counted (a restart, a rebalance, a replay reading them again)."
        self.records = Counter("claimstream_erased_records_total", records, registry=r)


class StageClock:
    """Seconds per hot-path stage, summed in plain floats (a perf_counter delta per stage and
    claim) and published to `claimstream_stage_seconds_total` once per batch."""

    __slots__ = ("seconds",)

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(STAGES, 0.0)

    def add(self, stage: str, since: float) -> float:
        """Charge the time from `since` to now to `stage`; returns now (the next stage's start)."""
        now = perf_counter()
        self.seconds[stage] += now - since
        return now

    def charge(self, stage: str, since: float, until: float) -> None:
        """Charge the time from `since` to `until` to `stage`."""
        self.seconds[stage] += until - since

    def charge_decided(self, clocks: tuple[float, float, float, float]) -> None:
        """Charge a decided claim's decode, admission and arbitration, from when its decode
        started and ended, its admission ended and its arbitration ended (one call a claim)."""
        started, decoded, admitted, arbitrated = clocks
        seconds = self.seconds
        seconds[DECODE] += decoded - started
        seconds[ADMIT] += admitted - decoded
        seconds[ARBITRATE] += arbitrated - admitted

    def reset(self) -> None:
        for stage in self.seconds:
            self.seconds[stage] = 0.0
