"""Erased subjects, as a client and an agent read them from a worker's web API (a tiny one on
127.0.0.1): a 410 is `SubjectErased`, with the request's id and instant; the MCP tools answer an
erased fact (no value, no evidence, the erasure named), now and as of an earlier instant, and
`check_plan` stops a step that reads one; a claim sent after an erasure is waited for."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from aiohttp import web as aioweb

from streams.agents.facts import PlanStep
from streams.agents.tools import FactTools
from streams.client import FactsClient
from streams.core.records.contracts import Action, Outcome
from streams.core.records.errors import ClaimstreamError, SubjectErased
from streams.settings import Settings
from tests.support.builders import POLICY, claim, decide

ERASED_KEY = "user:8812|order.payment_status"
KEPT_KEY = "invoice:42|order.payment_status"
ERASED_AT = datetime(2026, 11, 29, 12, 0, 30, tzinfo=UTC)
ERASED = {
    "key": ERASED_KEY,
    "erased": True,
    "erasure_id": "4f1c0ffee",
    "erased_at": "2026-11-29T12:00:30Z",
}


class Worker:
    """What the fake worker answers, and what it was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, dict[str, str]]] = []
        self.erased = dict(ERASED)
        self.placed = False  # whether the erased subject's key holds a new claim yet

    async def console(self, request: aioweb.Request) -> aioweb.Response:
        return aioweb.json_response(
            {"policy_version": POLICY.version, "fields": sorted(POLICY.fields)}
        )

    async def decision(self, request: aioweb.Request) -> aioweb.Response:
        key = request.match_info["key"]
        self.asked.append((key, dict(request.query)))
        subject = key.split("|")[0]
        kept = decide(POLICY, claim(1, subject=subject)).decision.model_dump(mode="json")
        if key == KEPT_KEY or (key == ERASED_KEY and self.placed):
            return aioweb.json_response({"key": key, "decision": kept | {"subject": subject}})
        if key == ERASED_KEY:
            return aioweb.json_response(self.erased, status=410)
        return aioweb.json_response({"error": "gone, and says not why"}, status=410)


@pytest.fixture
async def worker() -> AsyncIterator[tuple[str, Worker]]:
    state = Worker()
    app = aioweb.Application()
    app.router.add_get("/api/console", state.console)
    app.router.add_get("/api/decisions/{key}", state.decision)
    runner = aioweb.AppRunner(app)
    await runner.setup()
    site = aioweb.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}", state
    await runner.cleanup()


async def test_a_410_is_subject_erased_with_the_requests_id_and_instant(
    worker: tuple[str, Worker],
) -> None:
    url, state = worker
    facts = FactsClient(url)
    with pytest.raises(SubjectErased) as erased:
        await facts.get_fact("user:8812", "order.payment_status")
    assert (erased.value.key, erased.value.erasure_id) == (ERASED_KEY, "4f1c0ffee")
    assert erased.value.erased_at == ERASED_AT
    assert "4f1c0ffee" in str(erased.value)
    with pytest.raises(SubjectErased):
        await facts.answer("user:8812", "order.payment_status", as_of=ERASED_AT)
    assert state.asked[-1] == (ERASED_KEY, {"as_of": ERASED_AT.isoformat()})
    # A 410 that names no erasure is a plain error, never taken for one.
    with pytest.raises(ClaimstreamError, match="answered 410") as plain:
        await facts.get_fact("user:1", "order.payment_status")
    assert not isinstance(plain.value, SubjectErased)
    state.erased["erased_at"] = "yesterday"
    with pytest.raises(ClaimstreamError, match="answered 410") as unreadable:
        await facts.get_fact("user:8812", "order.payment_status")
    assert not isinstance(unreadable.value, SubjectErased)


async def test_a_claim_sent_after_an_erasure_is_waited_for(worker: tuple[str, Worker]) -> None:
    url, state = worker
    facts = FactsClient(url)
    assert await facts.wait_for_claim("user:8812", "order.payment_status", "c1", 0.3) is None

    async def placed_later() -> None:
        await asyncio.sleep(0.3)
        state.placed = True

    later = asyncio.ensure_future(placed_later())
    found = await facts.wait_for_claim("user:8812", "order.payment_status", "c1", 5)
    await later
    assert found is not None
    assert found.subject == "user:8812"


def _tools(url: str) -> FactTools:
    return FactTools(FactsClient(url), Settings(), allow_writes=False)


async def test_the_tools_answer_an_erased_fact_with_no_value(worker: tuple[str, Worker]) -> None:
    url, _ = worker
    tools = _tools(url)
    for fact in (
        await tools.get_fact("user:8812", "order.payment_status"),
        await tools.get_fact_as_of("user:8812", "order.payment_status", "2026-11-29T12:00:00Z"),
    ):
        assert fact.outcome is Outcome.ERASED
        assert (fact.value, fact.status, fact.evidence) == (None, None, [])
        assert (fact.erasure_id, fact.decided_at, fact.key) == ("4f1c0ffee", ERASED_AT, ERASED_KEY)
        assert fact.action is Action.BLOCK
        assert fact.warning is not None
        assert "erased by request 4f1c0ffee" in fact.warning
        assert "2026-11-29T12:00:30+00:00" in fact.warning
    kept = await tools.get_fact("invoice:42", "order.payment_status")
    assert (kept.outcome, kept.erasure_id) == (Outcome.RESOLVED, None)
    explained = await tools.explain_fact("user:8812", "order.payment_status")
    assert "erased by request 4f1c0ffee" in explained.text
    assert "paid" not in explained.text


async def test_check_plan_stops_a_step_that_reads_an_erased_fact(
    worker: tuple[str, Worker],
) -> None:
    url, _ = worker
    steps = [
        PlanStep(name="remind", reads=[ERASED_KEY, KEPT_KEY]),
        PlanStep(name="bill", reads=[KEPT_KEY]),
    ]
    check = await _tools(url).check_plan(steps)
    assert check.runnable == ["bill"]
    [blocked] = check.blocked
    assert (blocked.name, blocked.then) == ("remind", "stop")
    [fact] = blocked.facts
    found: dict[str, Any] = fact.model_dump()
    assert (found["key"], found["outcome"], found["action"]) == (
        ERASED_KEY,
        Outcome.ERASED,
        Action.BLOCK,
    )
    assert "4f1c0ffee" in found["reason"]
