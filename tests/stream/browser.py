"""What the console's browser tests share: Chromium's options, screenshots, and two real workers
(`Cluster`: worker 0 with steward tokens, worker 1 without) to publish to and ask."""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from playwright.sync_api import Page

from streams.client import ClaimPublisher
from streams.settings import Settings
from tests.stream.support import REPO, Deployment, WorkerProcess

TOKEN = "steward-token-for-the-browser-test"
STEWARDS = {
    "alice": "alice-steward-token-for-the-browser-test",
    "bob": "bob-steward-token-for-the-browser-test",
}
"""Two more stewards on worker 0: a proposal's review needs a steward other than its author."""
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = REPO / "artifacts" / "screenshots"
WAIT_MS = 60_000


def steward_tokens() -> str:
    """Worker 0's CLAIMSTREAM_STEWARD_TOKENS: Ann Steward's token, alice's and bob's."""
    return ",".join(f"{name}:{token}" for name, token in {"Ann Steward": TOKEN, **STEWARDS}.items())


class Cluster:
    def __init__(
        self, deployment: Deployment, writer: WorkerProcess, reader: WorkerProcess
    ) -> None:
        self.deployment, self.writer, self.reader = deployment, writer, reader

    @property
    def settings(self) -> Settings:
        return Settings(broker=self.deployment.bootstrap, topics=self.deployment.topics)

    def url(self, worker: WorkerProcess, path: str = "/") -> str:
        return f"http://127.0.0.1:{worker.web_port}{path}"

    def publish(self, claims: list[dict[str, Any]]) -> None:
        """Publish from a thread of its own: Playwright's sync API owns this thread's loop."""

        async def send() -> None:
            async with (
                ClaimPublisher(self.settings) as tools,
                ClaimPublisher(self.settings, user_assertions=True) as users,
            ):
                await tools.publish_many(c for c in claims if c.get("source_class") != "user")
                await users.publish_many(c for c in claims if c.get("source_class") == "user")

        failures: list[BaseException] = []
        thread = threading.Thread(target=lambda: run_into(send(), failures))
        thread.start()
        thread.join(60)
        assert not failures, failures

    def post(
        self, worker: WorkerProcess, body: dict[str, Any], token: str | None
    ) -> tuple[int, dict[str, Any]]:
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        request = urllib.request.Request(
            self.url(worker, "/api/resolutions"), json.dumps(body).encode(), headers, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as reply:
                return reply.status, json.loads(reply.read())
        except urllib.error.HTTPError as refused:
            return refused.code, json.loads(refused.read())


def run_into(coroutine: Any, failures: list[BaseException]) -> None:
    """Run `coroutine` in a loop of its own, keeping what it raised in `failures`."""
    try:
        asyncio.run(coroutine)
    except BaseException as exc:
        failures.append(exc)


def open_keys(worker: WorkerProcess) -> set[str]:
    answer = worker.get("/api/conflicts")
    if answer is None or answer["unanswered"]:
        return set()
    return {row["key"] for row in answer["open_conflicts"]}


def shoot(page: Page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def key_page(cluster: Cluster, worker: WorkerProcess, key: str) -> str:
    return cluster.url(worker, "/ui/#/key/" + urllib.parse.quote(key, safe=""))
