"""The at-least-once changelog writer: one changelog send at a time, each carrying every batch
whose outputs are acknowledged by then.

A batch's changelog records wait for its outputs' acknowledgements (a changelog never holds a
claim whose decision is not out) and for the changelog send before them (without idempotence, a
later send could land before an earlier one that fails across a leader's failover). Waiting for
that one round trip a batch, in series, the loop spent 85-126 ms a second of the bench's latency
phase waiting for its window of batches to settle. So the batches that became ready while a send
was on its way go out together in the next one, each changed key once, with its latest record:
24-25 ms a second (`claimstream bench`, three runs each).

A failed send fails its batches and every later one, sending none of them, until `resume`: the
loop rewinds them all.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Set
from dataclasses import dataclass
from typing import Any

from streams.arbiter.collector import RecordCollector
from streams.pipeline import Outgoing


@dataclass
class _Waiting:
    """A batch's changelog records, waiting for its outputs' acknowledgement and its turn."""

    outputs: asyncio.Future[Any]
    records: list[Outgoing]
    partitions: Set[int]
    journaled: asyncio.Future[dict[int, int]]


class ChangelogWriter:
    """Writes batches' changelog records in the order given, one send at a time."""

    def __init__(self, collector: RecordCollector) -> None:
        self.collector = collector
        self._waiting: deque[_Waiting] = deque()
        self._writing: asyncio.Future[None] | None = None
        self._failed: BaseException | None = None  # since the last `resume`

    def write(
        self, outputs: asyncio.Future[Any], records: list[Outgoing], partitions: Set[int]
    ) -> asyncio.Future[dict[int, int]]:
        """Journal a batch's `records` for its task `partitions` once `outputs` is done: how far
        each changelog partition reaches, for those whose last batch in the send this was (the
        others' end is a later batch's to note)."""
        journaled: asyncio.Future[dict[int, int]] = asyncio.get_running_loop().create_future()
        if self._failed is not None:
            journaled.set_exception(self._failed)
            return journaled
        self._waiting.append(_Waiting(outputs, records, partitions, journaled))
        if self._writing is None or self._writing.done():
            self._writing = asyncio.ensure_future(self._write())
        return journaled

    def resume(self) -> None:
        """The batches failed since the last failure are rewound: write again."""
        self._failed = None

    async def _write(self) -> None:
        waiting = self._waiting
        while waiting:
            try:
                await waiting[0].outputs
            except Exception as exc:
                self._fail(exc, [])
                return
            ready = [waiting.popleft()]
            while waiting and _succeeded(waiting[0].outputs):
                ready.append(waiting.popleft())
            try:
                ends = await self.collector.send_all(_latest(ready))
            except Exception as exc:
                self._fail(exc, ready)
                return
            last_of = {partition: batch for batch in ready for partition in batch.partitions}
            for batch in ready:
                batch.journaled.set_result(
                    {p: ends[p] for p in batch.partitions if last_of[p] is batch and p in ends}
                )

    def _fail(self, exc: BaseException, ready: list[_Waiting]) -> None:
        self._failed = exc
        for batch in (*ready, *self._waiting):
            batch.journaled.set_exception(exc)
        self._waiting.clear()


def _succeeded(outputs: asyncio.Future[Any]) -> bool:
    return outputs.done() and not outputs.cancelled() and outputs.exception() is None


def _latest(batches: list[_Waiting]) -> list[Outgoing]:
    """The batches' records, one per changelog key: the latest (a key's record holds its whole
    state)."""
    if len(batches) == 1:
        return batches[0].records
    latest = {(r.partition, r.key): r for batch in batches for r in batch.records}
    return list(latest.values())
