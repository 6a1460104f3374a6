"""What the loop does with a record the processor has handled, before the batch is committed.

Where it sits: `loop.Arbiter._batch` hands every handled record of a batch to `apply` (the dev
kit's shell bench, `devkit/bench/shell.py`, to the same, without a broker). The key's new state
goes into its task's store, its timer into the schedule and its settled conflicts into the source
ledgers; its records into the task's batch; its decisions are counted (in the batch's outcome
counts and the metrics), timed from the input record's timestamp and shown to the console's
observers.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from streams.arbiter.commit import TaskBatch
from streams.arbiter.routing import Observer
from streams.arbiter.schedule import Schedule
from streams.arbiter.sources import SourceLedgers
from streams.arbiter.tallies import OutcomeKeys
from streams.ops.metrics import Metrics
from streams.pipeline import Handled
from streams.state.task import TaskStore


class Bookkeeping:
    def __init__(
        self,
        metrics: Metrics,
        sources: SourceLedgers,
        schedule: Schedule,
        observers: Sequence[Observer] = (),
    ) -> None:
        self.metrics = metrics
        self.outcome_key = OutcomeKeys()
        self.sources = sources
        self.schedule = schedule
        self.observers = observers

    def apply(
        self, partition: int, store: TaskStore, batch: TaskBatch, handled: Handled, received: float
    ) -> None:
        """`received`: the input record's timestamp (s), 0 when it has none."""
        if handled.key is not None and handled.state is not None:
            self.sources.settle(store, handled)
            store.put(handled.key, handled.state)
            self.schedule.note(partition, handled.key, handled.state)
        elif handled.key is not None and handled.dropped:
            store.drop(handled.key)
            self.schedule.forget(partition, handled.key)
        batch.outputs += handled.outputs
        if handled.emitted:
            now = time.time()
            for arbitration in handled.emitted:
                batch.tallies[self.outcome_key(arbitration)] += 1
                self.metrics.decided(arbitration, now)
                for observe in self.observers:
                    observe(arbitration)
                if received > 0:
                    self.metrics.decision_latency.observe(max(0.0, now - received))
