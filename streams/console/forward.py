"""Forwarding between workers: a key's request to its owner, the queue's fan-out, live relays.

The console's handlers (`streams.console.api`) answer what this worker holds and come here for
the rest, through one HTTP client session for the whole process, opened and closed with the web
app (`streams.console.web`). A request a peer forwarded carries `ROUTED_HEADER`, so that it is
answered locally, never forwarded again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import aiohttp
from faust.web import Request, Response, View

from streams.arbiter.routing import Owner
from streams.console.live import Subscription
from streams.console.queue import QueueFilter
from streams.core.sources.settlement import Ledger, ledger_from_document

log = logging.getLogger(__name__)

ROUTED_HEADER = "x-claimstream-routed"
PEER_TIMEOUT_S = 5.0
RELAY_RETRY_S = 2.0
# A whole answer from a peer; a live relay streams for as long as its client stays.
ANSWER_TIMEOUT = aiohttp.ClientTimeout(total=PEER_TIMEOUT_S)
RELAY_TIMEOUT = aiohttp.ClientTimeout(sock_connect=PEER_TIMEOUT_S)


class Peers:
    """This worker's HTTP client to the other workers: one session, pooling their connections."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        # No pool limit: every live relay holds its connection for as long as its stream lasts.
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

    async def close(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        assert self._session is not None, "the web app has not started"
        return self._session

    async def at_owner(
        self,
        web: View,
        request: Request,
        key: str,
        owner: Owner,
        answer: Callable[[], Response],
    ) -> Response:
        """Answer for a key this worker owns, or forward the request to the worker that does."""
        if owner.here:
            return answer()
        if owner.url is None or request.headers.get(ROUTED_HEADER):
            return web.json(
                {"error": f"no worker owns {key!r} right now (rebalancing?); retry"}, status=503
            )
        try:
            async with self.session.get(
                owner.url + str(request.rel_url),
                headers={ROUTED_HEADER: "1"},
                timeout=ANSWER_TIMEOUT,
            ) as reply:
                body = await reply.read()
                return web.bytes(body, content_type=reply.content_type, status=reply.status)
        except (aiohttp.ClientError, TimeoutError) as exc:
            return web.json(
                {"error": f"the worker owning {key!r} ({owner.url}) did not answer: {exc}"},
                status=502,
            )

    async def rows(self, peer: str, wanted: QueueFilter) -> list[dict[str, Any]] | None:
        """A peer's own open conflicts; None when it does not answer in time."""
        try:
            async with self.session.get(
                f"{peer}/api/conflicts",
                params=wanted.query(),
                headers={ROUTED_HEADER: "1"},
                timeout=ANSWER_TIMEOUT,
            ) as reply:
                if reply.status != 200:
                    return None
                rows: list[dict[str, Any]] = (await reply.json())["rows"]
                return rows
        except (aiohttp.ClientError, TimeoutError, ValueError, KeyError) as exc:
            log.info(
                "console: worker %s did not answer for the queue (%s)", peer, type(exc).__name__
            )
            return None

    async def ledger(self, peer: str) -> Ledger | None:
        """A peer's own source ledger; None when it does not answer in time."""
        try:
            async with self.session.get(
                f"{peer}/api/sources", headers={ROUTED_HEADER: "1"}, timeout=ANSWER_TIMEOUT
            ) as reply:
                if reply.status != 200:
                    return None
                return ledger_from_document((await reply.json())["ledger"])
        except (aiohttp.ClientError, TimeoutError, ValueError, KeyError) as exc:
            log.info(
                "console: worker %s did not answer for the sources (%s)", peer, type(exc).__name__
            )
            return None

    async def relay(self, url: str, key: str | None, subscription: Subscription) -> None:
        """Copy a peer's live events into this client's stream, reconnecting while it stays."""
        params = {"key": key} if key else {}
        while self._session is not None:  # closed: the web app is shutting down
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with self._session.get(
                    f"{url}/api/live",
                    params=params,
                    headers={ROUTED_HEADER: "1"},
                    timeout=RELAY_TIMEOUT,
                ) as reply:
                    block = b""
                    async for line in reply.content:
                        if line.strip():
                            block += line
                            continue
                        if block.startswith((b"event: decision", b"event: lagged")):
                            subscription.offer(block + b"\n")
                        block = b""
            await asyncio.sleep(RELAY_RETRY_S)
