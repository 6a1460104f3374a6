"""Erased subjects in the console: once an erasure is in effect, a key's decision, history and
past beliefs answer 410 with the erasure and never a value (as of an instant before it too,
decided before forwarding); a key held again since answers its new data; the erasures and
waiting requests are listed; a steward's request or approval is published (to a real broker,
Tansu, one for the module) as the token's steward, a lead time ahead, and a body that is neither
is refused."""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from faust.web import View
from pydantic import SecretStr

from streams.arbiter.routing import Owner
from streams.console import api, web, writes
from streams.console.api import Console
from streams.console.forward import Peers
from streams.console.live import LiveDecisions
from streams.console.stewards import StewardTokens
from streams.core.keys.state import KeyState
from streams.core.timeline.aliases import AliasChange, AliasHistory
from streams.core.timeline.erasures import (
    APPROVE,
    REQUEST,
    Erasure,
    ErasureHistory,
    ErasureStatement,
    Pending,
)
from streams.core.timeline.rollout import PolicyHistory
from streams.devkit.brokers import TansuBroker
from streams.ops.metrics import Metrics
from streams.settings import Settings
from streams.topic_names import Topics
from streams.worker.erasure_log import published_erasures
from tests.support.builders import NOW, POLICY, state_of

KEY = "user:8812|order.payment_status"
ANN, BOB = "ann-0123456789abcdef", "bob-0123456789abcdef"
BEFORE = NOW - timedelta(hours=1)  # the erasure, before the key's claims (state_of: NOW - 2s)
AFTER = NOW + timedelta(minutes=1)  # the erasure, after the key was last decided


class FakeOwnership:
    """A worker that owns every key (or none: `here` False, the owner elsewhere)."""

    def __init__(self, states: dict[str, KeyState], here: bool = True) -> None:
        self.url = "http://w0"
        self.states = states
        self.here = here

    def owner_of(self, key: bytes) -> Owner:
        return Owner(True) if self.here else Owner(False, "http://w1")

    def state_of(self, key: bytes) -> KeyState | None:
        return self.states.get(key.decode())

    def peers(self) -> list[str]:
        return []


class FakeView:
    def json(self, body: Any, status: int = 200) -> tuple[int, Any]:
        return status, json.loads(json.dumps(body))


class FakeRequest:
    def __init__(
        self,
        query: dict[str, str] | None = None,
        body: Any = None,
        token: str | None = None,
    ) -> None:
        self.query = query or {}
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.body = body
        self.rel_url = "/api/decisions/x"

    async def json(self) -> Any:
        if isinstance(self.body, str):
            return json.loads(self.body)
        return self.body


def _erasure(at: datetime, subject: str = "user:8812", erasure_id: str = "e1") -> Erasure:
    return Erasure(erasure_id, subject, at, at - timedelta(seconds=10), "dpo", "Art. 17 request")


def _console(
    states: dict[str, KeyState],
    erasures: Sequence[Erasure] = (),
    *,
    now: datetime = NOW + timedelta(minutes=2),
    here: bool = True,
    aliases: AliasHistory | None = None,
    waiting: Sequence[Pending] = (),
    settings: Settings | None = None,
) -> Console:
    aliases = aliases or AliasHistory()
    history = ErasureHistory(erasures, aliases)
    settings = settings or Settings(
        steward_tokens=SecretStr(f"ann:{ANN}, bob:{BOB}"), policy_lead_s=10
    )
    return Console(
        FakeOwnership(states, here),  # type: ignore[arg-type]
        lambda: aliases,
        lambda: PolicyHistory.of(POLICY, NOW - timedelta(days=1)),
        lambda: history,
        lambda: waiting,
        settings,
        Metrics(POLICY),
        LiveDecisions(4),
        StewardTokens.from_settings(settings),
        Peers(),
        lambda: now,
    )


async def _handled(
    handler: Callable[..., Awaitable[Any]], console: Console, request: FakeRequest, *params: str
) -> tuple[int, Any]:
    """A handler's answer as the fake view gives it: its status and JSON body."""
    status, body = await handler(console, FakeView(), request, *params)
    return status, body


def _held() -> dict[str, KeyState]:
    """The key, its claims sent and decided by NOW."""
    return {KEY: state_of("user:8812", ["paid", "overdue"])}


async def _read(console: Console, key: str = KEY, **query: str) -> tuple[int, Any]:
    return await _handled(api.decision, console, FakeRequest(query), key)


async def _history(console: Console, key: str = KEY) -> tuple[int, Any]:
    return await _handled(api.decision_history, console, FakeRequest(), key)


def _erased(body: Any, erasure_id: str = "e1", at: datetime = AFTER) -> bool:
    """An erased answer: the erasure, and nothing that could hold a value."""
    expected = {"key", "erased", "erasure_id", "erased_at"}
    moment = at.isoformat().replace("+00:00", "Z")
    return (
        set(body) == expected
        and body["erased"] is True
        and (
            body["erasure_id"],
            body["erased_at"],
        )
        == (erasure_id, moment)
    )


async def test_a_key_held_from_before_an_erasure_in_effect_answers_erased() -> None:
    console = _console(_held(), [_erasure(AFTER)])
    for status, body in (await _read(console), await _history(console)):
        assert status == 410
        assert _erased(body)
        assert body["key"] == KEY
    status, body = await _read(console, as_of=(NOW - timedelta(seconds=1)).isoformat())
    assert (status, _erased(body)) == (410, True)


async def test_an_erasure_not_in_effect_yet_changes_nothing() -> None:
    console = _console(_held(), [_erasure(AFTER)], now=AFTER - timedelta(seconds=1))
    status, body = await _read(console)
    assert status == 200
    assert body["decision"]["value"] == "overdue"
    assert (await _history(console))[0] == 200
    as_of = await _read(console, as_of=(NOW + timedelta(seconds=1)).isoformat())
    assert as_of[0] == 200


async def test_a_key_with_no_state_of_an_erased_subject_answers_erased() -> None:
    console = _console({}, [_erasure(AFTER)])
    for status, body in (await _read(console), await _history(console)):
        assert (status, _erased(body)) == (410, True)
    # Another subject's key is not touched.
    assert (await _read(console, "user:1|order.payment_status"))[0] == 404


async def test_a_key_held_again_since_the_erasure_answers_its_new_data() -> None:
    console = _console(_held(), [_erasure(BEFORE)], now=NOW + timedelta(seconds=30))
    status, body = await _read(console)
    assert status == 200
    assert body["decision"]["value"] == "overdue"
    assert (await _history(console))[0] == 200
    # Its new data as of an instant after the erasure; before it, erased.
    status, body = await _read(console, as_of=(NOW + timedelta(seconds=1)).isoformat())
    assert status == 200
    assert body["belief"]["value"] == "overdue"
    status, body = await _read(console, as_of=(BEFORE - timedelta(seconds=1)).isoformat())
    assert (status, _erased(body, at=BEFORE)) == (410, True)
    # After the erasure, before the new data was decided: no belief then, and the subject erased.
    status, body = await _read(console, as_of=(BEFORE + timedelta(microseconds=1)).isoformat())
    assert (status, _erased(body, at=BEFORE)) == (410, True)


async def test_a_past_belief_is_answered_erased_before_forwarding() -> None:
    # The owner is another worker: the peers' session is not even open, so forwarding fails.
    console = _console({}, [_erasure(BEFORE)], here=False)
    status, body = await _read(console, as_of=(BEFORE - timedelta(hours=1)).isoformat())
    assert (status, _erased(body, at=BEFORE)) == (410, True)
    with pytest.raises(AssertionError, match="has not started"):
        await _read(console, as_of=(BEFORE + timedelta(seconds=1)).isoformat())


async def test_every_alias_spelling_of_an_erased_subject_answers_erased() -> None:
    aliases = AliasHistory([AliasChange("Jane Doe", "user:8812", BEFORE, "steward")])
    console = _console({}, [_erasure(AFTER)], aliases=aliases)
    status, body = await _read(console, "Jane Doe|order.payment_status")
    assert (status, body["key"], _erased(body)) == (410, KEY, True)
    status, body = await _history(console, "jane doe|order.payment_status")
    assert (status, _erased(body)) == (410, True)


def _pending(erasure_id: str = "e2", by: str = "dpo", approvals: tuple[str, ...] = ()) -> Pending:
    request = ErasureStatement(erasure_id, REQUEST, by, NOW, "user:9", "Art. 17, ticket 88")
    return Pending(request, 2, approvals)


async def test_the_erasures_and_the_waiting_requests_are_listed() -> None:
    aliases = AliasHistory([AliasChange("Jane Doe", "user:8812", BEFORE, "steward")])
    erasures = [_erasure(AFTER), _erasure(BEFORE, "user:7", "e0")]
    console = _console({}, erasures, aliases=aliases, waiting=[_pending(approvals=("ann",))])
    status, body = await _handled(api.erasures, console, FakeRequest())
    assert status == 200
    assert [e["erasure_id"] for e in body["erasures"]] == ["e0", "e1"]
    listed = body["erasures"][1]
    assert listed == {
        "erasure_id": "e1",
        "subject": "user:8812",
        "at": AFTER.isoformat().replace("+00:00", "Z"),
        "in_effect": True,
        "requested_at": (AFTER - timedelta(seconds=10)).isoformat().replace("+00:00", "Z"),
        "by": "dpo",
        "reason": "Art. 17 request",
        "approvals": [],
        "spellings": ["jane doe", "user:8812"],
    }
    assert body["waiting"] == [
        {
            "erasure_id": "e2",
            "subject": "user:9",
            "requested_at": NOW.isoformat().replace("+00:00", "Z"),
            "by": "dpo",
            "reason": "Art. 17, ticket 88",
            "needs": 2,
            "approvals": ["ann"],
        }
    ]
    one = FakeRequest({"subject": "Jane Doe"})
    status, body = await _handled(api.erasures, console, one)
    assert ([e["erasure_id"] for e in body["erasures"]], body["waiting"]) == (["e1"], [])
    other = FakeRequest({"subject": "USER:9"})
    status, body = await _handled(api.erasures, console, other)
    assert (body["erasures"], [p["erasure_id"] for p in body["waiting"]]) == ([], ["e2"])


@pytest.fixture(scope="module")
def broker() -> Iterator[TansuBroker]:
    with TansuBroker() as started:
        yield started


@dataclass
class ErasuresTopic:
    """An erasures topic of the test's own, and the settings that name it."""

    settings: Settings

    async def statements(self) -> list[ErasureStatement]:
        """What the topic holds, read as a worker reads it."""
        return (await published_erasures(self.settings)).statements


@pytest.fixture
async def published(broker: TansuBroker) -> ErasuresTopic:
    settings = Settings(
        broker=f"kafka://{broker.bootstrap}",
        topics=Topics(erasures=f"t{uuid.uuid4().hex[:8]}.erasures"),
        steward_tokens=SecretStr(f"ann:{ANN}, bob:{BOB}"),
        policy_lead_s=10,
    )
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(settings.topics.erasures, 1, 1)])
    finally:
        await admin.close()
    return ErasuresTopic(settings)


async def _write(console: Console, body: Any, token: str | None = ANN) -> tuple[int, Any]:
    request = FakeRequest(body=body, token=token)
    return await _handled(writes.erase, console, request)


async def test_a_request_is_published_as_the_tokens_steward_a_lead_time_ahead(
    published: ErasuresTopic,
) -> None:
    console = _console({}, settings=published.settings)
    body = {"subject": " user:8812 ", "reason": "Art. 17 request, ticket 12"}
    status, answer = await _write(console, body)
    assert status == 202
    [sent] = await published.statements()
    at = console.clock() + timedelta(seconds=10)
    assert (sent.action, sent.by, sent.at, sent.subject) == (REQUEST, "ann", at, "user:8812")
    assert sent.reason == "Art. 17 request, ticket 12"
    assert len(sent.erasure_id) == 32
    assert answer["erasure_id"] == sent.erasure_id
    assert answer["at"] == at.isoformat().replace("+00:00", "Z")


async def test_an_approval_is_published_and_one_that_counts_for_nothing_refused(
    published: ErasuresTopic,
) -> None:
    waiting = [_pending(by="bob", approvals=("carl",))]
    console = _console({}, waiting=waiting, settings=published.settings)
    assert (await _write(console, {"approve": "e2"}))[0] == 202
    [sent] = await published.statements()
    assert (sent.erasure_id, sent.action, sent.by) == ("e2", APPROVE, "ann")
    for body, token in (({"approve": "e9"}, ANN), ({"approve": "e2"}, BOB)):
        status, answer = await _write(console, body, token)
        assert (status, answer["refused"]) == (409, "review_refused")
    twice = _console({}, waiting=[_pending(approvals=("ann",))], settings=published.settings)
    status, answer = await _write(twice, {"approve": "e2"})
    assert (status, "already" in answer["error"]) == (409, True)
    assert len(await published.statements()) == 1


@pytest.mark.parametrize(
    "body",
    [
        {"subject": "user:1"},
        {"subject": "user:1", "reason": " "},
        {"subject": "", "reason": "Art. 17"},
        {"subject": 7, "reason": "Art. 17"},
        {"subject": "user:1", "reason": "x" * 2001},
        {"approve": ""},
        {"approve": "e2", "subject": "user:1"},
        {"erase": "user:1"},
        [],
        "not json{",
    ],
)
async def test_a_body_that_is_neither_is_refused(body: Any, published: ErasuresTopic) -> None:
    status, answer = await _write(_console({}, settings=published.settings), body)
    assert (status, answer["refused"]) == (400, "invalid_resolution")
    assert await published.statements() == []


async def test_writes_need_a_good_steward_token(published: ErasuresTopic) -> None:
    body = {"subject": "user:1", "reason": "Art. 17"}
    console = _console({}, settings=published.settings)
    assert (await _write(console, body, None))[0] == 401
    assert (await _write(console, body, "x" * 20))[0] == 403
    assert await published.statements() == []


def test_the_get_and_the_post_of_one_path_are_served_by_one_view() -> None:
    routes = [r for r in api.ROUTES + writes.WRITE_ROUTES if r.path == "/api/erasures"]
    assert [r.method for r in routes] == ["get", "post"]
    view = web._view(_console({}), routes)
    assert view.get is not View.get
    assert view.post is not View.post
    assert view.put is View.put
