"""The decisions' outcome counts, summed in the loop and sent once a second.

Sent with each batch, they were one record or more a batch, each an event for the Faust agent
that keeps the windowed counts and a fetch for its consumer thread: 9% of the worker's CPU
samples at half load went to Faust (py-spy), for counts kept by the minute; 0.3% once they went
out once a second. A count is at least once either way: a rewound batch's were sent already,
and a send that failed goes out again with the next.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter

from streams.arbiter.collector import RecordCollector, Unawaited
from streams.core.decision.arbitration import Arbitration
from streams.core.records.contracts import ConflictKind, Outcome
from streams.pipeline import Outgoing

log = logging.getLogger(__name__)

# How often, at most, the outcome counts gathered from batches go out.
TALLY_INTERVAL_S = 1.0


class OutcomeKeys:
    """`field|outcome|conflict kind` (`none` without one), the outcome counts' key of a decision;
    made once per combination (the policy's fields, the outcomes and kinds are few)."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, Outcome, ConflictKind | None], bytes] = {}

    def __call__(self, arbitration: Arbitration) -> bytes:
        kind = arbitration.verdict.kind
        combination = (arbitration.field, arbitration.outcome, kind)
        known = self._known.get(combination)
        if known is None:
            text = f"{arbitration.field}|{arbitration.outcome.value}|{kind or 'none'}"
            known = self._known[combination] = text.encode()
        return known


class Tallies:
    """Outcome counts by field|outcome|kind, gathered from batches until they are sent."""

    def __init__(
        self, collector: RecordCollector, topic: str, interval_s: float = TALLY_INTERVAL_S
    ) -> None:
        self.topic = topic
        self.interval_s = interval_s
        self.out = Unawaited(collector)
        self.gathered: Counter[bytes] = Counter()
        self._sending: Counter[bytes] = Counter()  # the last send's, until it is acknowledged
        self._sent_at = -math.inf  # monotonic time the last counts went out

    def add(self, counts: Counter[bytes]) -> None:
        self.gathered.update(counts)

    async def send(self, *, now: bool = False) -> None:
        """Send what was gathered, one record per field|outcome|kind, if `interval_s`
        passed since the last send and it is acknowledged (`now`: once the last send is
        acknowledged, whenever that was)."""
        if now:
            if not self.gathered:
                return
            await self.out.settled()
        elif (
            self._in_flight()
            or time.monotonic() - self._sent_at < self.interval_s
            or not self.gathered
        ):
            return
        self._sending, self.gathered = self.gathered, Counter()
        self._sent_at = time.monotonic()
        await self.out.send(
            [Outgoing(self.topic, key, str(n).encode()) for key, n in self._sending.items()]
        )

    def _in_flight(self) -> bool:
        """Whether the last send is unacknowledged; if it failed, its counts are gathered again."""
        try:
            return self.out.in_flight()
        except Exception as exc:
            log.warning(
                "arbiter: outcome counts not sent, sent again next (%s: %s)",
                type(exc).__name__,
                exc,
            )
            self.gathered.update(self._sending)
            return False

    async def settled(self) -> None:
        """Wait for the send in flight (stopping: a failure is logged, nothing retried)."""
        await self.out.settled()
