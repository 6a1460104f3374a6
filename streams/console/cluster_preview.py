"""A policy previewed against the keys the cluster holds: `POST /api/policy/preview`'s work.

- `owned_preview`: this worker's keys, task by task, each judged by
  `streams.core.reading.policy_preview` (its decision now beside the one the new policy would give
  were it put in force now). Nothing is sent and no state changes: a key's state is read as it
  stands (from the shared cache where it is there, else decoded from its store without caching it,
  so the hot keys stay cached). The walk yields to the event loop every `SLICE_KEYS` keys or
  `SLICE_S` seconds, whichever comes first, so the arbiter's loop runs between slices; it stops
  after `limit` keys. A task closed meanwhile (a rebalance) is named as not walked in full.
- `peer_preview`: a peer's own answer, the request sent on with the routed header.
- `cluster_answer`: this worker's answer and its peers' merged, naming the workers that did not
  answer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from time import perf_counter
from typing import Any

import aiohttp

from streams.arbiter.routing import Ownership
from streams.console.forward import ROUTED_HEADER, Peers
from streams.core.keys.journal import decode_state
from streams.core.keys.state import split_key
from streams.core.reading.policy_preview import Previewer
from streams.core.reading.preview_report import Preview, Tally, merged
from streams.core.records.errors import ClaimstreamError
from streams.state.task import TaskStore

log = logging.getLogger(__name__)

DEFAULT_LIMIT = 100_000
"""Keys each worker judges per request unless `?limit=N` says otherwise."""
MAX_LIMIT = 10_000_000
SLICE_KEYS = 500
SLICE_S = 0.01
"""A slice of the walk ends after `SLICE_KEYS` keys or this long, and the event loop runs."""
PEER_TIMEOUT = aiohttp.ClientTimeout(total=600, sock_connect=5)
"""A peer walks its own keys (about 20k a second), so its answer may take minutes."""
PATH = "/api/policy/preview"


def preview_limit(raw: str | None) -> int:
    """The `limit` query parameter: keys each worker judges at most; ValueError if not 1 to
    `MAX_LIMIT`."""
    if raw is None or raw == "":
        return DEFAULT_LIMIT
    limit = int(raw)
    if not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"limit: give a number of keys from 1 to {MAX_LIMIT}")
    return limit


@dataclass(frozen=True)
class WorkerPreview:
    """One worker's keys under the new policy."""

    worker: str
    in_force: str
    """The policy this worker decides by now."""
    preview: Preview
    not_looked_at: int = 0
    """Owned keys past the limit (an estimate on disk)."""
    incomplete_tasks: tuple[int, ...] = ()
    """Tasks that closed during the walk (a rebalance): their keys not all looked at."""

    def as_json(self) -> dict[str, Any]:
        return {
            "worker": self.worker,
            "in_force": self.in_force,
            "not_looked_at": self.not_looked_at,
            "incomplete_tasks": list(self.incomplete_tasks),
            "preview": self.preview.as_json(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WorkerPreview:
        """A worker's answer, or KeyError, TypeError or ValueError."""
        return cls(
            worker=str(data["worker"]),
            in_force=str(data["in_force"]),
            preview=Preview.from_json(data["preview"]),
            not_looked_at=int(data["not_looked_at"]),
            incomplete_tasks=tuple(int(p) for p in data["incomplete_tasks"]),
        )

    def summary(self) -> dict[str, Any]:
        return {
            "worker": self.worker,
            "in_force": self.in_force,
            "looked_at": self.preview.looked_at,
            "not_looked_at": self.not_looked_at,
            "incomplete_tasks": list(self.incomplete_tasks),
        }


class _Walk:
    """Keys judged so far, across the tasks."""

    def __init__(self, previewer: Previewer, limit: int) -> None:
        self.previewer = previewer
        self.limit = limit
        self.tally = Tally()
        self.looked_at = 0

    def judge(self, store: TaskStore, key: bytes) -> None:
        name = key.decode("utf-8", "replace")
        self.looked_at += 1
        try:
            state = store.cache.peek(key)
            if state is None:
                data = store.get_encoded(key)
                if data is None:
                    return  # gone since the walk listed it
                state = decode_state(data)
            judged = self.previewer.judge(name, state)
        except ClaimstreamError as exc:  # a state this release does not read
            log.warning("policy preview: key %r not judged: %s", name, exc)
            self.tally.not_judged(split_key(name)[1])
            return
        self.tally.add(judged)

    async def task(self, ownership: Ownership, partition: int) -> bool:
        """Walk one task's keys, up to the limit; False if it closed meanwhile."""
        store = ownership.task_store(partition)
        if store is None:
            return False
        keys = iter(store)
        started, count = perf_counter(), 0
        while self.looked_at < self.limit:
            key = next(keys, None)
            if key is None:
                return True
            self.judge(store, key)
            count += 1
            if count >= SLICE_KEYS or perf_counter() - started >= SLICE_S:
                await asyncio.sleep(0)  # the arbiter's loop and the web server run
                if ownership.task_store(partition) is not store:
                    return False
                started, count = perf_counter(), 0
        return True


async def owned_preview(
    ownership: Ownership, previewer: Previewer, limit: int = DEFAULT_LIMIT
) -> WorkerPreview:
    """The previewer's policy against the keys this worker owns, at most `limit` of them."""
    walk = _Walk(previewer, limit)
    incomplete: list[int] = []
    not_looked_at = 0
    for partition in sorted(ownership.open_tasks()):
        if walk.looked_at >= limit:
            store = ownership.task_store(partition)
            not_looked_at += len(store) if store is not None else 0
            continue
        before = walk.looked_at
        if not await walk.task(ownership, partition):
            incomplete.append(partition)
            continue
        store = ownership.task_store(partition)
        if walk.looked_at >= limit and store is not None:
            not_looked_at += max(0, len(store) - (walk.looked_at - before))
    return WorkerPreview(
        worker=ownership.url,
        in_force=previewer.history.in_force(previewer.now).version,
        preview=walk.tally.result(previewer.policy.version),
        not_looked_at=not_looked_at,
        incomplete_tasks=tuple(incomplete),
    )


async def peer_preview(
    peers: Peers, peer: str, text: str, query: Mapping[str, str]
) -> WorkerPreview | None:
    """A peer's answer for its own keys; None when it does not answer, or not with a preview."""
    try:
        async with peers.session.post(
            peer + PATH,
            data=text.encode(),
            params=dict(query),
            headers={ROUTED_HEADER: "1", "Content-Type": "application/yaml"},
            timeout=PEER_TIMEOUT,
        ) as reply:
            body = await reply.json(content_type=None)
            if reply.status != 200:
                log.info("policy preview: worker %s answered %d: %s", peer, reply.status, body)
                return None
            return WorkerPreview.from_json(body)
    except (aiohttp.ClientError, TimeoutError, ValueError, KeyError, TypeError) as exc:
        log.info("policy preview: worker %s did not answer (%s)", peer, type(exc).__name__)
        return None


def cluster_answer(
    mine: WorkerPreview,
    peers: Sequence[str],
    answers: Sequence[WorkerPreview | None],
    limit: int,
    now: datetime,
) -> dict[str, Any]:
    """This worker's preview and its peers' as one: the fields' counts added up, the first
    examples by key, each worker's part, and the workers that did not answer."""
    found = [mine, *(a for a in answers if a is not None)]
    preview = merged(mine.preview.policy_version, (a.preview for a in found))
    return {
        **preview.as_json(),
        "at": now.isoformat(),
        "in_force": sorted({a.in_force for a in found}),
        "limit": limit,
        "not_looked_at": sum(a.not_looked_at for a in found),
        "workers": [a.worker for a in found],
        "by_worker": [a.summary() for a in found],
        "unanswered": [p for p, a in zip(peers, answers, strict=True) if a is None],
    }
