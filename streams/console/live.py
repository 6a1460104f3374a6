"""The console's live feed: decisions this worker emits, fanned out to server-sent-event clients.

The arbiter calls `LiveDecisions.observe` for every decision it emits (an observer: no Kafka
consumer per client, nothing read back from the decisions topic). Each client has a bounded
queue; a client that falls behind loses events and is told so (`lagged`), so it reloads what it
shows instead of the worker buffering without limit. The number of clients is bounded too.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from streams.core.decision.arbitration import Arbitration
from streams.core.keys.state import state_key
from streams.core.records.contracts import Decision, Money

CLIENT_QUEUE = 256
LAGGED = b"event: lagged\ndata: {}\n\n"
END = b""  # the worker is stopping: end the stream (the browser reconnects to another)


class Unavailable(Exception):
    """The worker already serves its limit of live streams, or is stopping."""


def decision_event(decision: Decision) -> dict[str, Any]:
    """What a live client needs to update a queue row or a key page (no evidence: it reloads).
    Built field by field: the arbiter's loop pays for it while anyone watches."""
    return {
        "key": state_key(decision.subject, decision.field),
        "subject": decision.subject,
        "field": decision.field,
        "decision_id": decision.decision_id,
        "outcome": decision.outcome.value,
        "conflict_kind": decision.conflict_kind.value if decision.conflict_kind else None,
        "status": decision.status.value if decision.status else None,
        "value": decision.value.model_dump()
        if isinstance(decision.value, Money)
        else decision.value,
        "unit": decision.unit,
        "action": decision.action.value,
        "reason": decision.reason,
        "resolution_id": decision.resolution_id,
        "decided_at": decision.decided_at.isoformat(),
    }


def sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, sort_keys=True)}\n\n".encode()


class Subscription:
    def __init__(self, key: str | None) -> None:
        self.key = key
        self.queue: asyncio.Queue[bytes] = asyncio.Queue(CLIENT_QUEUE)
        self.lagged = False

    def end(self) -> None:
        """Wake the stream's writer with END, even if that costs the oldest queued event."""
        if self.queue.full():
            self.queue.get_nowait()
        self.queue.put_nowait(END)

    def offer(self, event: bytes) -> None:
        """Queue an event without waiting; a full queue marks the client as lagging instead."""
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            self.lagged = True

    async def next(self, timeout: float) -> bytes | None:
        """The next event to write (a `lagged` notice first, if events were lost); None on
        timeout."""
        if self.lagged:
            self.lagged = False
            return LAGGED
        try:
            return await asyncio.wait_for(self.queue.get(), timeout)
        except TimeoutError:
            return None


class LiveDecisions:
    def __init__(self, max_clients: int) -> None:
        self.max_clients = max_clients
        self._clients: set[Subscription] = set()
        self.closed = False

    @property
    def clients(self) -> int:
        return len(self._clients)

    def observe(self, arbitration: Arbitration) -> None:
        """The arbiter's observer: the decision is built only when some client follows."""
        if self._clients:
            self.publish(arbitration.decision)

    def publish(self, decision: Decision) -> None:
        if not self._clients:
            return
        key = state_key(decision.subject, decision.field)
        event = sse("decision", decision_event(decision))
        for client in self._clients:
            if client.key is None or client.key == key:
                client.offer(event)

    def subscribe(self, key: str | None = None) -> Subscription:
        """A client's stream of decisions (of `key` only, if given); unsubscribe it when done."""
        if self.closed:
            raise Unavailable("this worker is stopping")
        if len(self._clients) >= self.max_clients:
            raise Unavailable(f"this worker already serves {self.max_clients} live streams")
        subscription = Subscription(key)
        self._clients.add(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        self._clients.discard(subscription)

    def close(self) -> None:
        """End every stream now: a stopping web server waits for its open requests."""
        self.closed = True
        for client in self._clients:
            client.end()
