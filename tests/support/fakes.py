"""Stand-ins for what the arbiter sends through, whose acknowledgements the test settles: a record
collector (`Collector`, for the commit strategies and the outcome counts, which take one) and an
aiokafka producer (`Producer`, attached to an arbiter's own collector as the loop attaches the
real one)."""

from __future__ import annotations

import asyncio
from typing import Any

from streams.pipeline import Outgoing

Pending = list[tuple[str, int | None, "asyncio.Future[Any]"]]  # topic, partition, the ack


class Collector:
    """Hands out an acknowledgement per record that the test settles, and keeps what it sent:
    each send's records (`sends`), every key in order (`sent`), the last value under each key
    (`values`). Settled by key (`ack`) or a whole send at a time (`ack_send`)."""

    def __init__(self, changelog: str = "changelog") -> None:
        self.changelog = changelog
        self.sends: list[list[Outgoing]] = []
        self.acks: dict[bytes, asyncio.Future[Any]] = {}  # the last record's under a key
        self._pending: list[Pending] = []  # each send's

    @property
    def sent(self) -> list[bytes | None]:
        """The key of every record sent, in order."""
        return [record.key for records in self.sends for record in records]

    @property
    def values(self) -> dict[bytes | None, bytes | None]:
        """The last value sent under each key."""
        return {record.key: record.value for records in self.sends for record in records}

    async def enqueue(self, records: list[Outgoing], via: Any = None) -> Pending:
        loop = asyncio.get_running_loop()
        pending: Pending = []
        for record in records:
            assert record.key is not None
            ack = self.acks[record.key] = loop.create_future()
            pending.append((record.topic, record.partition, ack))
        self.sends.append(list(records))
        self._pending.append(pending)
        return pending

    async def acknowledged(self, pending: Pending) -> dict[int | None, int]:
        """Once every record is acknowledged: the changelog partitions written to (at 1)."""
        await asyncio.gather(*(ack for _, _, ack in pending))
        return {p: 1 for topic, p, _ in pending if topic == self.changelog}

    async def send_all(self, records: list[Outgoing], via: Any = None) -> dict[int | None, int]:
        return await self.acknowledged(await self.enqueue(records))

    def ack(self, *keys: bytes, error: Exception | None = None) -> None:
        """Settle the last record sent under each key: acknowledged, or failed with `error`."""
        for key in keys:
            _settle(self.acks[key], error)

    def ack_send(self, n: int, error: Exception | None = None) -> None:
        """Settle every record of send `n`: acknowledged, or failed with `error`."""
        for _, _, ack in self._pending[n]:
            _settle(ack, error)


class Producer:
    """An aiokafka producer as the record collector drives it (`create_batch`, `send_batch`,
    `partitions_for`): keeps the keys of each batch sent (`batches`) and hands out an
    acknowledgement per batch (`acks`) that the test settles."""

    def __init__(self, partitions: int = 1) -> None:
        self.partitions = partitions
        self.batches: list[list[bytes | None]] = []
        self.acks: list[asyncio.Future[Any]] = []

    async def partitions_for(self, topic: str) -> set[int]:
        return set(range(self.partitions))

    def create_batch(self) -> _Batch:
        return _Batch()

    async def send_batch(self, batch: _Batch, topic: str, *, partition: int) -> asyncio.Future[Any]:
        ack = asyncio.get_running_loop().create_future()
        self.batches.append(batch.keys)
        self.acks.append(ack)
        return ack


class _Batch:
    """A producer batch without a size bound: every record fits."""

    def __init__(self) -> None:
        self.keys: list[bytes | None] = []

    def append(
        self, *, key: bytes | None, value: bytes | None, timestamp: int | None, headers: Any
    ) -> int:
        self.keys.append(key)
        return len(self.keys)  # aiokafka returns the record's metadata, None when full


def _settle(ack: asyncio.Future[Any], error: Exception | None) -> None:
    if error is None:
        ack.set_result(None)
    else:
        ack.set_exception(error)


async def settle() -> None:
    """Let the loop run what settling an acknowledgement set off."""
    for _ in range(3):
        await asyncio.sleep(0)
