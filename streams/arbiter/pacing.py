"""How many ticks a turn of the loop starts: the due timers' and the rollout sweep's.

A tick comes back to the loop as an input record, in the same batches as live claims: every tick
started is work a claim may queue behind. So ticks take a share of the loop's time since the
last turn (at most one fetch wait), priced at what they cost (averaged over recent batches):

- due timers: a quarter while input arrives, half when none came, at the cost of an average
  record, at least one a turn (one only, when a full batch of input waits). Keys that went stale
  together came back as one burst of re-decisions that stalled every claim behind it for seconds
  (claims processed fell to 0/s for 3 s while 2-3.6k ticks/s went out; p99 3.8 s).
- the sweep: its own share, smaller while live input arrives, so that a rollout neither waits
  for the timers nor adds a standing queue in front of live claims: a worker at half load is
  busy half the time already, and what the sweep adds to that, live claims wait behind.
  Priced at the cost of a tick measured apart (its own time in the batch and its part of the
  commit): a sweep's tick readmits every kept claim of a key that is often cold, several times
  an average record. That price leaves out what a tick costs outside the batch (its fetch and
  send, the collections after): in `claimstream bench`'s rollout phase (live load at half the
  worker's saturation), a tenth at that price put the worker at 89% CPU and the live claims' p99
  at 2.07 times its value without the sweep; a twentieth, at 1.40 and 1.64 times (two runs), and
  1.28 times at a million keys on RocksDB. (Priced at the loop thread's CPU time between
  batches instead, an idle worker's web answers and metrics were charged to the few ticks of its
  batches, and the sweep stopped once the live load did.) Its time is kept as credit across
  turns (up to one fetch wait's share), so that a trickle of input, fetched every millisecond or
  two, does not round every turn's share down to no tick at all; a full credit always affords
  one tick, so that one dear tick's price, only ever corrected by the next tick's, cannot stop
  the sweep. Ticks fetched alone are not input.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter

TICK_SHARE = 0.25
IDLE_TICK_SHARE = 0.5
SWEEP_SHARE = 0.05
IDLE_SWEEP_SHARE = 0.5
_RECENT = 0.2
"""The weight of the last batch in the cost averages (an EWMA)."""


@dataclass
class Costs:
    """What one batch took, for the averages."""

    batch_s: float
    """Fetched to committed."""
    decided_s: float
    """Fetched to every record decided (the rest is the commit)."""
    records: int
    ticks: int
    """Of `records`, the ticks (timers' and the sweep's)."""
    ticks_s: float
    """The ticks' own time: decided and applied."""


class Pacing:
    """The ticks a turn may start, from what records and ticks cost."""

    def __init__(
        self,
        batch_size: int,
        most: int,
        within_s: float,
        clock: Callable[[], float] = perf_counter,
    ) -> None:
        self._clock = clock
        self.batch_size = batch_size
        self.most = most
        """At most this many of each kind a turn (`expiry_ticks_per_batch`)."""
        self.within_s = within_s
        self.record_cost = 0.0
        """Seconds a record, end to end, over recent batches."""
        self.tick_cost = 0.0
        """Seconds a tick: its own time and its part of the commit, over recent batches."""
        self.sweep_credit = 0.0
        """Seconds of the sweep's share not yet spent."""
        self._last = 0.0  # perf_counter time of the last turn's budgets

    def measured(self, costs: Costs) -> None:
        if not costs.records:
            return
        self.record_cost = _recent(self.record_cost, costs.batch_s / costs.records)
        if costs.ticks:
            commit_s = (costs.batch_s - costs.decided_s) / costs.records
            self.tick_cost = _recent(self.tick_cost, costs.ticks_s / costs.ticks + commit_s)

    def budgets(self, live: int) -> tuple[int, int]:
        """The due timers' ticks and the sweep's this turn, `live` records of input (not ticks)
        fetched in it."""
        now = self._clock()
        since = min(now - self._last, self.within_s)
        self._last = now
        if live >= self.batch_size:
            return 1, 0
        if not self.record_cost:  # nothing measured yet
            return self.most, self.most
        share = TICK_SHARE if live else IDLE_TICK_SHARE
        timers = max(1, min(self.most, int(since * share / self.record_cost)))
        sweep_share = SWEEP_SHARE if live else IDLE_SWEEP_SHARE
        most_credit = self.within_s * sweep_share
        self.sweep_credit = min(most_credit, self.sweep_credit + since * sweep_share)
        sweep = min(self.most, int(self.sweep_credit / self._tick_price))
        if self.sweep_credit >= most_credit:
            sweep = max(sweep, 1)
        return timers, sweep

    def swept(self, ticks: int) -> None:
        """The sweep started `ticks` (fewer than its budget when it found fewer to move)."""
        self.sweep_credit = max(0.0, self.sweep_credit - ticks * self._tick_price)

    @property
    def _tick_price(self) -> float:
        return self.tick_cost or self.record_cost  # before a tick is measured, a record's


def _recent(average: float, value: float) -> float:
    return value if not average else (1 - _RECENT) * average + _RECENT * value
