"""The live feed: bounded per-client queues, a key filter, a bounded number of clients."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from streams.console.live import CLIENT_QUEUE, END, LAGGED, LiveDecisions, Unavailable
from streams.core.records.contracts import Decision, Money

AT = datetime(2026, 11, 30, 9, 14, tzinfo=UTC)


def decision(subject: str, n: int = 0) -> Decision:
    return Decision(
        decision_id=f"dec_{n:024d}",
        subject=subject,
        field="order.payment_status",
        outcome="conflict",
        conflict_kind="value",
        action="block",
        policy_version="1",
        reason="authority_conflict",
        decided_at=AT,
    )


def payload(event: bytes) -> dict[str, object]:
    name, data, _, _ = event.decode().split("\n")
    assert name == "event: decision"
    loaded: dict[str, object] = json.loads(data.removeprefix("data: "))
    return loaded


async def test_clients_get_the_decisions_they_follow() -> None:
    live = LiveDecisions(max_clients=4)
    everything, one_key = live.subscribe(), live.subscribe("invoice:42|order.payment_status")
    live.publish(decision("invoice:41"))
    live.publish(decision("invoice:42", 1))
    first, second = await everything.next(1), await everything.next(1)
    assert first is not None
    assert payload(first)["key"] == "invoice:41|order.payment_status"
    assert second is not None
    assert payload(second)["decision_id"] == f"dec_{1:024d}"
    only = await one_key.next(1)
    assert only is not None
    assert payload(only)["subject"] == "invoice:42"
    assert payload(only)["outcome"] == "conflict"
    assert await one_key.next(0.01) is None
    live.unsubscribe(everything)
    live.unsubscribe(one_key)
    assert live.clients == 0


async def test_a_slow_client_loses_events_and_is_told_so_instead_of_growing_a_buffer() -> None:
    live = LiveDecisions(max_clients=1)
    slow = live.subscribe()
    for n in range(CLIENT_QUEUE + 50):
        live.publish(decision("invoice:42", n))
    assert slow.queue.qsize() == CLIENT_QUEUE
    assert await slow.next(1) == LAGGED
    event = await slow.next(1)
    assert event is not None
    assert payload(event)["decision_id"] == f"dec_{0:024d}"


def test_the_number_of_clients_is_bounded() -> None:
    live = LiveDecisions(max_clients=2)
    live.subscribe(), live.subscribe()
    with pytest.raises(Unavailable, match="2 live streams"):
        live.subscribe()


async def test_closing_ends_every_stream_at_once_even_a_full_one() -> None:
    live = LiveDecisions(max_clients=2)
    idle, full = live.subscribe(), live.subscribe()
    for n in range(CLIENT_QUEUE):
        full.offer(f"{n}".encode())
    live.close()
    assert await idle.next(30) == END
    events = [await full.next(30) for _ in range(CLIENT_QUEUE)]
    assert events[-1] == END
    with pytest.raises(Unavailable, match="stopping"):
        live.subscribe()


def test_money_values_travel_as_json_objects() -> None:
    live = LiveDecisions(max_clients=1)
    client = live.subscribe()
    money = decision("account:7").model_copy(
        update={"field": "account.balance", "value": Money(amount_minor=1250, currency="USD")}
    )
    live.publish(money)
    event = client.queue.get_nowait()
    assert payload(event)["value"] == {"amount_minor": 1250, "currency": "USD"}
