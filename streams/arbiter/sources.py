"""The source ledger in the worker: settled outcomes judged, kept with the task, reported.

Where it sits: beside the arbiter's loop, after a record is decided. For each decision a record
emits, `SourceLedgers.settle` asks `streams.core.sources.settlement.settlement_of` whether it
settled the key's open decision (the key's previous state is still the store's, as the new one is
put after), adds the judgements to the task's ledger, a task-level record of its store
(`LEDGER_KEY`, journaled with the batch, so it is restored with the task and rewound with its keys),
and counts `claimstream_source_settled_total`. `GET /api/sources` (`streams.console.api`) merges the
open tasks' ledgers, and the peers', into `streams.core.sources.dependence.report`. Nothing here is
read by arbitration.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import date
from typing import Any
from weakref import WeakKeyDictionary

from streams.core.records.contracts import Authority
from streams.core.records.policy import CATCH_ALL, Policy
from streams.core.sources.dependence import report
from streams.core.sources.settlement import (
    Ledger,
    UnknownLedgerFormat,
    decode_ledger,
    encode_ledger,
    settlement_of,
)
from streams.ops.metrics import Metrics
from streams.pipeline.records import Handled
from streams.state.keystore import RESERVED
from streams.state.task import TaskStore

log = logging.getLogger(__name__)

LEDGER_KEY = RESERVED + b"sources"
AGREED, DISAGREED = "agreed", "disagreed"


class SourceLedgers:
    """Judges the decisions a worker emits, into the ledgers of its tasks."""

    def __init__(self, policy: Policy, metrics: Metrics) -> None:
        self.policy = policy
        self.metrics = metrics
        # Each task's ledger as last written here, with the bytes written: while the store still
        # holds those very bytes, the ledger is not decoded again (a reload brings other bytes).
        self._written: WeakKeyDictionary[TaskStore, tuple[bytes, Ledger]] = WeakKeyDictionary()

    def settle(self, store: TaskStore, handled: Handled) -> None:
        """Judge what `handled` settles, against the open state it replaced."""
        before = handled.opened
        if before is None or not handled.emitted:
            return
        for arbitration in handled.emitted:
            decision = arbitration.decision
            rules = self.policy.rules_for(decision.field)
            settlement = settlement_of(before, decision, rules.tolerance if rules else 0.0)
            if settlement is None or not settlement.judgements:
                continue
            ledger = self._ledger(store)
            if ledger is None:
                continue  # written by a newer release: kept as it is, never overwritten
            ledger.add(settlement)
            data = encode_ledger(ledger)
            store.put_encoded(LEDGER_KEY, data)
            self._written[store] = (data, ledger)
            metrics = self.metrics
            field = metrics.field_label(settlement.field)
            for judgement in settlement.judgements:
                verdict = AGREED if judgement.agreed else DISAGREED
                metrics.source_settled.labels(
                    metrics.source_label(judgement.source), field, verdict
                ).inc()

    def _ledger(self, store: TaskStore) -> Ledger | None:
        written = self._written.get(store)
        if written is not None and store.get_encoded(LEDGER_KEY) is written[0]:
            return written[1]
        return ledger_of(store)


def ledger_of(store: TaskStore) -> Ledger | None:
    """The task's ledger (empty if it has none yet); None, logged, when a newer release wrote
    it: the judging stops for that task, deciding never does."""
    data = store.get_encoded(LEDGER_KEY)
    return readable(data) if data is not None else Ledger()


def readable(data: bytes) -> Ledger | None:
    try:
        return decode_ledger(data)
    except UnknownLedgerFormat as exc:
        log.warning("sources: a task's ledger is not read by this release (%s)", exc)
        return None


def merged(ledgers: Iterable[Ledger | None]) -> Ledger:
    """The ledgers summed (an unreadable one, None, left out)."""
    total = Ledger()
    for ledger in ledgers:
        if ledger is not None:
            total.merge(ledger)
    return total


def authorities(policy: Policy) -> dict[tuple[str, str], Authority]:
    """(field, source) -> the authority a claim of that source on that field gets by default."""
    found = {}
    for field in policy.fields:
        rules = policy.rules_for(field)
        assert rules is not None
        for source, source_policy in policy.sources.items():
            if source != CATCH_ALL:
                found[(field, source)] = rules.authorities.get(source, source_policy.authority)
    return found


def lineages(policy: Policy) -> dict[str, str]:
    return {
        source: source_policy.lineage
        for source, source_policy in policy.sources.items()
        if source_policy.lineage is not None
    }


def sources_report(ledger: Ledger, policy: Policy, since: date | None) -> dict[str, Any]:
    """The cluster's answer: rows, pairs and findings over the settlements since `since`."""
    document = report(ledger.since(since), authorities(policy), lineages(policy))
    return {"since": since.isoformat() if since else None, **document}
