"""`POST /api/policy/preview` on one worker, without a broker: the owned keys walked task by task
in slices the event loop runs between, at most `limit` of them, nothing changed (not even the
shared cache); a task that closes meanwhile named; peers asked with the routed header and their
answers merged; a bad policy refused with the loader's error."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from aiohttp import web as aioweb

from streams.console import api, cluster_preview
from streams.console.cluster_preview import (
    WorkerPreview,
    cluster_answer,
    owned_preview,
    peer_preview,
    preview_limit,
)
from streams.console.forward import ROUTED_HEADER, Peers
from streams.core.keys.journal import encode_state
from streams.core.keys.state import KeyState
from streams.core.reading.policy_preview import Previewer, preview
from streams.core.reading.preview_report import Preview
from streams.core.timeline.rollout import PolicyHistory
from streams.state.cache import StateCache
from streams.state.task import TaskStore
from tests.support.builders import WIDE
from tests.support.previews import B_EDITS, NOW, T0, A, B, preview_keys, raw_variant

HISTORY = PolicyHistory.of(A, T0)


class FakeOwnership:
    """What the preview asks of `Ownership`: its URL, its peers and its open tasks."""

    def __init__(self, tasks: dict[int, Any], peers: list[str] | None = None) -> None:
        self._tasks = tasks
        self.url = "http://w0"
        self._peers = peers or []

    def peers(self) -> list[str]:
        return self._peers

    def open_tasks(self) -> frozenset[int]:
        return frozenset(self._tasks)

    def task_store(self, partition: int) -> TaskStore | None:
        task = self._tasks.get(partition)
        return task.states if task is not None else None


def _stores(keys: list[tuple[str, KeyState]], tasks: int = 2) -> tuple[StateCache, dict[int, Any]]:
    """The keys spread over `tasks` tasks' stores, encoded as the changelog holds them."""
    cache = StateCache(1000)
    open_tasks: dict[int, Any] = {}
    for n in range(tasks):
        store = TaskStore(cache)
        store.load_all([(k.encode(), encode_state(s)) for k, s in keys[n::tasks]])
        open_tasks[n] = SimpleNamespace(partition=n, states=store)
    return cache, open_tasks


def _stored(tasks: dict[int, Any]) -> dict[bytes, bytes | None]:
    return {key: task.states.store.get(key) for task in tasks.values() for key in task.states}


async def test_the_worker_judges_every_owned_key_and_changes_nothing() -> None:
    keys = preview_keys()
    cache, tasks = _stores(keys)
    before = _stored(tasks)
    found = await owned_preview(FakeOwnership(tasks), Previewer(HISTORY, B, NOW, WIDE))
    assert found.preview == preview(keys, HISTORY, B, NOW, WIDE)
    assert (found.worker, found.in_force, found.not_looked_at) == ("http://w0", A.version, 0)
    assert found.incomplete_tasks == ()
    assert _stored(tasks) == before
    assert len(cache) == 0  # decoded to be judged, not cached: the hot keys keep their places


async def test_the_walk_yields_to_the_event_loop_between_slices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cluster_preview, "SLICE_KEYS", 3)
    _, tasks = _stores([(f"{n}/{k}", s) for n in range(4) for k, s in preview_keys()])  # 68 keys
    turns = 0

    async def loop_turns() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    other = asyncio.ensure_future(loop_turns())
    try:
        await owned_preview(FakeOwnership(tasks), Previewer(HISTORY, B, NOW, WIDE))
    finally:
        other.cancel()
    assert turns >= 68 // 3 - 2


async def test_at_most_limit_keys_are_judged_and_the_rest_counted() -> None:
    _, tasks = _stores(preview_keys())  # 17 keys: 9 and 8
    found = await owned_preview(FakeOwnership(tasks), Previewer(HISTORY, B, NOW, WIDE), limit=5)
    assert (found.preview.looked_at, found.not_looked_at) == (5, 12)


async def test_a_task_closed_during_the_walk_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_preview, "SLICE_KEYS", 2)
    _, tasks = _stores(preview_keys())

    async def rebalance() -> None:
        await asyncio.sleep(0)
        del tasks[0]  # moves to another worker while its keys are walked

    moving = asyncio.ensure_future(rebalance())
    found = await owned_preview(FakeOwnership(tasks), Previewer(HISTORY, B, NOW, WIDE))
    await moving
    assert found.incomplete_tasks == (0,)
    assert found.preview.looked_at < 17


def test_the_limit_parameter_is_a_number_of_keys() -> None:
    assert preview_limit(None) == cluster_preview.DEFAULT_LIMIT
    assert preview_limit("20") == 20
    for bad in ("0", "-1", "many", str(cluster_preview.MAX_LIMIT + 1)):
        with pytest.raises(ValueError):  # noqa: PT011
            preview_limit(bad)


# -- the handler -----------------------------------------------------------------------------------


class FakeView:
    def json(self, body: Any, status: int = 200) -> tuple[int, Any]:
        return status, json.loads(json.dumps(body))


class FakeRequest:
    def __init__(self, body: str, routed: bool = False, query: dict[str, str] | None = None):
        self.body = body
        self.headers = {ROUTED_HEADER: "1"} if routed else {}
        self.query = query or {}

    async def text(self) -> str:
        return self.body


def _console(ownership: FakeOwnership) -> Any:
    return SimpleNamespace(
        ownership=ownership,
        clock=lambda: NOW,
        policies=lambda: HISTORY,
        settings=SimpleNamespace(key_limits=lambda: WIDE),
        peers=Peers(),
    )


def _text(**changes: Any) -> str:
    """Policy B's YAML text, with `changes` made."""
    return yaml.safe_dump({**raw_variant(B_EDITS), **changes})


async def test_a_bad_policy_is_refused_with_the_loaders_error() -> None:
    _, tasks = _stores(preview_keys())
    console = _console(FakeOwnership(tasks))
    status, body = await api.policy_preview(console, FakeView(), FakeRequest("version: [1"))
    assert status == 400
    assert "not valid YAML" in body["error"]
    status, body = await api.policy_preview(console, FakeView(), FakeRequest("version: x\n"))
    assert status == 400
    assert "sources" in body["error"]
    same_version = _text(version=A.version)
    status, body = await api.policy_preview(console, FakeView(), FakeRequest(same_version))
    assert status == 400
    assert "version of its own" in body["error"]
    limit = FakeRequest(_text(), query={"limit": "0"})
    status, body = await api.policy_preview(console, FakeView(), limit)
    assert (status, body["error"].startswith("limit")) == (400, True)


async def test_a_routed_request_answers_this_workers_keys() -> None:
    _, tasks = _stores(preview_keys())
    console = _console(FakeOwnership(tasks, peers=["http://w1"]))
    status, body = await api.policy_preview(console, FakeView(), FakeRequest(_text(), routed=True))
    assert status == 200
    assert WorkerPreview.from_json(body).preview == preview(preview_keys(), HISTORY, B, NOW, WIDE)


async def test_the_worker_asked_merges_its_peers_and_names_the_silent_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    keys = preview_keys()
    _, tasks = _stores(keys[:9])
    theirs = WorkerPreview("http://w1", A.version, preview(keys[9:], HISTORY, B, NOW, WIDE), 3)
    asked: list[tuple[str, dict[str, str]]] = []

    async def peer(peers: Peers, url: str, text: str, query: dict[str, str]) -> Any:
        asked.append((url, query))
        return theirs if url == "http://w1" else None

    monkeypatch.setattr(api, "peer_preview", peer)
    console = _console(FakeOwnership(tasks, peers=["http://w1", "http://w2"]))
    request = FakeRequest(_text(), query={"limit": "50"})
    status, body = await api.policy_preview(console, FakeView(), request)
    assert status == 200
    assert asked == [("http://w1", {"limit": "50"}), ("http://w2", {"limit": "50"})]
    assert Preview.from_json(body) == preview(keys, HISTORY, B, NOW, WIDE)
    assert (body["workers"], body["unanswered"]) == (["http://w0", "http://w1"], ["http://w2"])
    assert (body["limit"], body["not_looked_at"], body["in_force"]) == (50, 3, [A.version])
    assert body["at"] == NOW.isoformat()


@pytest.fixture
async def peer_server() -> AsyncIterator[tuple[str, list[Any]]]:
    """A peer answering previews with a fixed one, recording what it was sent."""
    seen: list[Any] = []
    answer = WorkerPreview("http://peer", A.version, preview(preview_keys(), HISTORY, B, NOW, WIDE))

    async def handle(request: aioweb.Request) -> aioweb.Response:
        seen.append((dict(request.headers), dict(request.query), await request.text()))
        if request.query.get("fail"):
            return aioweb.json_response({"error": "no"}, status=400)
        return aioweb.json_response(answer.as_json())

    app = aioweb.Application()
    app.router.add_post("/api/policy/preview", handle)
    runner = aioweb.AppRunner(app)
    await runner.setup()
    site = aioweb.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}", seen
    await runner.cleanup()


async def test_a_peer_is_sent_the_policy_with_the_routed_header(
    peer_server: tuple[str, list[Any]],
) -> None:
    url, seen = peer_server
    peers = Peers()
    await peers.open()
    try:
        found = await peer_preview(peers, url, "version: B\n", {"limit": "7"})
        refused = await peer_preview(peers, url, "version: B\n", {"fail": "1"})
        silent = await peer_preview(peers, "http://127.0.0.1:9", "version: B\n", {})
    finally:
        await peers.close()
    assert found is not None
    assert found.preview == preview(preview_keys(), HISTORY, B, NOW, WIDE)
    assert (refused, silent) == (None, None)
    headers, query, body = seen[0]
    assert (headers[ROUTED_HEADER], query, body) == ("1", {"limit": "7"}, "version: B\n")


def test_the_cluster_answer_adds_up_every_workers_part() -> None:
    keys = preview_keys()
    mine = WorkerPreview("http://w0", A.version, preview(keys[:4], HISTORY, B, NOW, WIDE))
    theirs = WorkerPreview(
        "http://w1", B.version, preview(keys[4:], HISTORY, B, NOW, WIDE), 2, (3,)
    )
    answer = cluster_answer(mine, ["http://w1"], [theirs], 10, NOW + timedelta(seconds=1))
    assert Preview.from_json(answer) == preview(keys, HISTORY, B, NOW, WIDE)
    assert answer["in_force"] == sorted({A.version, B.version})
    assert answer["by_worker"][1] == {
        "worker": "http://w1",
        "in_force": B.version,
        "looked_at": 13,
        "not_looked_at": 2,
        "incomplete_tasks": [3],
    }
