"""An alias change previewed against the keys it touches, wherever they live:
`GET /api/aliases/preview`'s work.

The keys a change can regroup (`alias_preview.touched_keys`: both subjects, each field the policy
decides) are owned by several workers. The worker asked reads those it owns, asks each other
owner for its own (the same request, with the routed header: the owner answers with the states
it holds, as its journal encodes them), and previews the change over all of them
(`alias_preview.alias_preview`). Nothing is sent to Kafka and no state changes. A key no worker
owns right now (a rebalance), or whose owner does not answer, makes the whole answer a 503:
a preview over part of the evidence would say the wrong thing.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Mapping
from typing import Any

import aiohttp

from streams.arbiter.routing import Ownership
from streams.console.forward import ROUTED_HEADER, Peers
from streams.core.keys.journal import decode_state, encode_state
from streams.core.keys.state import KeyState
from streams.core.records.errors import ClaimstreamError

log = logging.getLogger(__name__)

PATH = "/api/aliases/preview"
PEER_TIMEOUT = aiohttp.ClientTimeout(total=30, sock_connect=5)


class Unreadable(ClaimstreamError):
    """A touched key's state cannot be read now: no owner, or its owner did not answer."""


def owned_states(ownership: Ownership, keys: tuple[str, ...]) -> dict[str, str]:
    """The states this worker holds of `keys`, as its journal encodes them (base64): a routed
    request's answer."""
    found = {}
    for key in keys:
        state = ownership.state_of(key.encode())
        if state is not None:
            found[key] = base64.b64encode(encode_state(state)).decode("ascii")
    return found


async def cluster_states(
    ownership: Ownership, peers: Peers, keys: tuple[str, ...], query: Mapping[str, str]
) -> dict[str, KeyState]:
    """The states of `keys` that hold anything, read from their owners (this worker's own
    directly); Unreadable when one cannot be read now."""
    local: list[str] = []
    remote: dict[str, list[str]] = {}
    for key in keys:
        owner = ownership.owner_of(key.encode())
        if owner.here:
            local.append(key)
        elif owner.url is None:
            raise Unreadable(f"no worker owns {key!r} right now (rebalancing?); retry")
        else:
            remote.setdefault(owner.url, []).append(key)
    urls = sorted(remote)
    answers = await asyncio.gather(*(_peer_states(peers, url, query) for url in urls))
    encoded = owned_states(ownership, tuple(local))
    for url, answer in zip(urls, answers, strict=True):
        if answer is None:
            raise Unreadable(f"the worker owning {remote[url][0]!r} ({url}) did not answer; retry")
        encoded |= {key: answer[key] for key in remote[url] if key in answer}
    return {key: decode_state(base64.b64decode(data)) for key, data in encoded.items()}


async def _peer_states(peers: Peers, url: str, query: Mapping[str, str]) -> dict[str, str] | None:
    try:
        async with peers.session.get(
            url + PATH, params=dict(query), headers={ROUTED_HEADER: "1"}, timeout=PEER_TIMEOUT
        ) as reply:
            body: Any = await reply.json(content_type=None)
            if reply.status != 200 or not isinstance(body.get("states"), dict):
                log.info("alias preview: worker %s answered %d: %s", url, reply.status, body)
                return None
            return {str(key): str(data) for key, data in body["states"].items()}
    except (aiohttp.ClientError, TimeoutError, ValueError, AttributeError) as exc:
        log.info("alias preview: worker %s did not answer (%s)", url, type(exc).__name__)
        return None
