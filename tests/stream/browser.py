"""What the console's browser tests share: Chromium's options, screenshots, and two real workers
(`Cluster`: worker 0 with steward tokens, worker 1 without) to publish to and ask. The policy
requires stewards' signatures: worker 0 signs what each token writes with that steward's key
(`steward_signing_keys`), and both workers check them (each holds the keys' secrets)."""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from playwright.sync_api import Page

from streams.client import ClaimPublisher
from streams.core.admission.authenticity import sign
from streams.settings import Settings
from tests.stream.support import REPO, Deployment, WorkerProcess

TOKEN = "steward-token-for-the-browser-test"
STEWARDS = {
    "alice": "alice-steward-token-for-the-browser-test",
    "bob": "bob-steward-token-for-the-browser-test",
}
"""Two more stewards on worker 0: a proposal's review needs a steward other than its author."""
SIGNING_KEYS = {
    "Ann Steward": ("ann-1", "CONSOLE_TEST_ANN_KEY", "ann-steward-hmac-secret-of-the-browser-test"),
    "alice": ("alice-1", "CONSOLE_TEST_ALICE_KEY", "alice-hmac-secret-of-the-console-browser-test"),
    "bob": ("bob-1", "CONSOLE_TEST_BOB_KEY", "bob-hmac-secret-of-the-console-browser-tests"),
}
"""Per steward: the key id of the policy's `stewards` section that signs for them, the variable
holding its HMAC secret, and the secret (at least 32 bytes)."""
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


def steward_signing_keys() -> str:
    """Worker 0's CLAIMSTREAM_STEWARD_SIGNING_KEYS: a key for every steward it has a token of."""
    return ",".join(f"{name}:{key_id}:{env}" for name, (key_id, env, _) in SIGNING_KEYS.items())


def signing_secrets() -> dict[str, str]:
    """The variables holding the stewards' secrets: every worker checks their signatures."""
    return {env: secret for _, env, secret in SIGNING_KEYS.values()}


def require_steward_signatures(policy: Path) -> Path:
    """The policy file asking every steward's record (resolution, alias change) to be signed by
    the steward's key: one for each of Ann Steward, alice and bob."""
    document = yaml.safe_load(policy.read_text())
    document["stewards"] = {
        "required": True,
        "keys": [
            {"key_id": key_id, "algorithm": "hmac-sha256", "secret_env": env, "sources": [name]}
            for name, (key_id, env, _) in SIGNING_KEYS.items()
        ],
    }
    policy.write_text(yaml.safe_dump(document))
    return policy


def signer_of(steward: str) -> Callable[[bytes], list[tuple[str, bytes]]]:
    """What signs a record as `steward`, as the console does (for what a test sends to Kafka)."""
    key_id, _, secret = SIGNING_KEYS[steward]
    return lambda value: sign(value, key_id, "hmac-sha256", secret.encode(), datetime.now(UTC))


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

    def post_many(
        self, worker: WorkerProcess, statements: list[dict[str, Any]], token: str
    ) -> dict[str, Any]:
        """POST /api/resolutions/batch as the steward `token` names: its answer, item by item."""
        status, answer = worker.post("/api/resolutions/batch", {"statements": statements}, token)
        assert status == 200, answer
        return dict(answer)


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
