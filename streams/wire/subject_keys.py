"""The data subjects' keys on their compacted topic (`claims.subject-keys`): where a producer
finds, or makes, the key it seals a subject's personal values under, and what erasure destroys.

A record's key is `<spelling key>|<key id>` (the subject as aliases match it, `alias_key`), its
value the subject key wrapped by the deployment key (`personal.DeploymentKey.wrap`), its header
`claimstream.deployment_key` the deployment key's id. A tombstone (no value) destroys that key;
compaction then removes every earlier copy from the topic (`subject_key_topic_config`).

One spelling may hold several keys: two producers that find none at once both make one, and
both are kept (each opens what was sealed under it) and both are destroyed by erasure. Every
reader seals under the same one of them: the newest by record timestamp, then key id, an order
all readers agree on once they have read the same records.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from streams.core.records.errors import ClaimstreamError
from streams.core.timeline.aliases import alias_key
from streams.settings import Settings
from streams.wire.history_topic import HistoryTopic
from streams.wire.kafka import client_options
from streams.wire.personal import DataKey, DeploymentKey, SealError

log = logging.getLogger(__name__)

DEPLOYMENT_KEY_HEADER = "claimstream.deployment_key"
# A tombstone carries no key, so once compaction has removed what it destroyed it only needs
# to outlive a reader that started before it: a day.
TOMBSTONE_RETENTION_MS = 86_400_000


def subject_key_topic_config(settings: Settings) -> dict[str, str]:
    """The keys topic's configuration: compacted, and compacted soon enough to bound erasure.

    Once `subject_key_compaction_lag_hours` have passed after a tombstone, the compactor has
    removed every earlier record of that key: `max.compaction.lag.ms` makes a record eligible
    for compaction by then, and `segment.ms` (the same lag) closes the segment holding it, since
    compaction only cleans closed segments; `min.cleanable.dirty.ratio` low so a log with few
    tombstones is still cleaned. An erasure receipt cites this bound for the topic's copies. The
    tombstones themselves, which carry no key, are kept one more day (`delete.retention.ms`) so
    a reader part-way through the topic still sees them."""
    lag_ms = str(settings.subject_key_compaction_lag_hours * 3600 * 1000)
    return {
        "cleanup.policy": "compact",
        "max.compaction.lag.ms": lag_ms,
        "min.cleanable.dirty.ratio": "0.01",
        "segment.ms": lag_ms,
        "delete.retention.ms": str(TOMBSTONE_RETENTION_MS),
    }


def record_key(spelling_key: str, key_id: str) -> bytes:
    """A keys topic record's key: the spelling key (`alias_key`) and the key id."""
    return f"{spelling_key}|{key_id}".encode()


@dataclass(frozen=True, slots=True)
class WrappedKey:
    """A subject key as the topic holds it: wrapped, under which deployment key, and when."""

    wrapped: bytes
    deployment_key_id: str
    timestamp_ms: int


class SubjectKeys(HistoryTopic):
    """The keys topic read from its start: every spelling's wrapped keys, each opened (with the
    deployment key) when first asked for. `start()` before use, `stop()` after; `key_for` and
    `destroy` publish, on a producer started when first needed."""

    def __init__(self, settings: Settings, deployment: DeploymentKey | None) -> None:
        super().__init__(settings, settings.topics.subject_keys)
        self.deployment = deployment
        self.held: dict[str, dict[str, WrappedKey]] = {}
        """Each spelling key's keys held now, by key id."""
        self._spelling_of: dict[str, str] = {}
        self._opened: dict[str, DataKey] = {}
        self._producer: AIOKafkaProducer | None = None
        self._creating = asyncio.Lock()
        self._read_at: float | None = None

    @property
    def started(self) -> bool:
        return self._consumer is not None

    async def start(self) -> None:
        try:
            await super().start()
        except KafkaError as exc:
            raise ClaimstreamError(
                f"{self.topic}: cannot read the subject keys from {self.settings.bootstrap}: {exc}"
            ) from exc

    async def stop(self) -> None:
        producer, self._producer = self._producer, None
        try:
            if producer is not None:
                await producer.stop()
        finally:
            await super().stop()

    async def read(self) -> bool:
        try:
            grew = await super().read()
        except KafkaError as exc:
            raise ClaimstreamError(f"{self.topic}: reading the subject keys failed: {exc}") from exc
        self._read_at = time.monotonic()
        return grew

    def take(self, record: Any) -> bool:
        spelling_key, _, key_id = (
            bytes(record.key or b"").decode("utf-8", "replace").rpartition("|")
        )
        if not spelling_key or not key_id:
            where = f"{self.topic}[{record.partition}]@{record.offset}"
            log.error("%s: no <spelling key>|<key id> record key; passed over", where)
            return False
        if record.value is None:
            self._forget(spelling_key, key_id)
            return True
        headers = dict(record.headers or ())
        deployment_key_id = bytes(headers.get(DEPLOYMENT_KEY_HEADER) or b"").decode(
            "utf-8", "replace"
        )
        held = WrappedKey(bytes(record.value), deployment_key_id, int(record.timestamp))
        self._keep(spelling_key, key_id, held)
        return True

    def _keep(self, spelling_key: str, key_id: str, held: WrappedKey) -> None:
        self.held.setdefault(spelling_key, {})[key_id] = held
        self._spelling_of[key_id] = spelling_key

    def _forget(self, spelling_key: str, key_id: str) -> None:
        keys = self.held.get(spelling_key, {})
        keys.pop(key_id, None)
        if not keys:
            self.held.pop(spelling_key, None)
        if self._spelling_of.get(key_id) == spelling_key:
            del self._spelling_of[key_id]
            self._opened.pop(key_id, None)

    def keys_of(self, spelling: str) -> list[str]:
        """The ids of the keys the subject spelled `spelling` holds now (as read so far)."""
        return list(self.held.get(alias_key(spelling), {}))

    def find(self, key_id: str) -> DataKey | None:
        """The subject key `key_id`, opened; None when the topic (as read so far) does not hold
        it: never made, or destroyed. SealError when it does not open under this deployment's
        key; ClaimstreamError without one."""
        opened = self._opened.get(key_id)
        if opened is not None:
            return opened
        spelling_key = self._spelling_of.get(key_id)
        if spelling_key is None:
            return None
        held = self.held[spelling_key][key_id]
        deployment = self._deployment(f"to open subject key {key_id}")
        if held.deployment_key_id and held.deployment_key_id != deployment.key_id:
            raise SealError(
                f"{self.topic}: subject key {key_id} is wrapped by deployment key "
                f"{held.deployment_key_id}; this deployment's is {deployment.key_id}"
            )
        # Wrapped for the spelling key the record names (see `_create`), so opened with it.
        opened = deployment.unwrap(held.wrapped, key_id, spelling_key)
        self._opened[key_id] = opened
        return opened

    async def key_for(self, spelling: str) -> DataKey:
        """The key to seal the personal values of the subject spelled `spelling` under: its
        newest key, else a new one, published (acknowledged by every in-sync replica) before
        it is used. The topic is read to its end first when last read `policy_poll_s` ago or
        more (and before a key is made), so a key made or destroyed elsewhere is seen."""
        spelling_key = alias_key(spelling)
        async with self._creating:  # two tasks sealing for one new subject make one key
            just_read = self._stale()
            if just_read:
                await self.read()
            newest = self._newest(spelling_key)
            if newest is None and not just_read:
                await self.read()  # a key made elsewhere since is used, not raced
                newest = self._newest(spelling_key)
            if newest is not None:
                found = self.find(newest)
                assert found is not None
                return found
            return await self._create(spelling_key)

    def _stale(self) -> bool:
        return self._read_at is None or (
            time.monotonic() - self._read_at >= self.settings.policy_poll_s
        )

    def _newest(self, spelling_key: str) -> str | None:
        keys = self.held.get(spelling_key, {})
        if not keys:
            return None
        return max(keys, key=lambda key_id: (keys[key_id].timestamp_ms, key_id))

    async def _create(self, spelling_key: str) -> DataKey:
        deployment = self._deployment("to make a subject key")
        key = DataKey.new()
        # Wrapped for the spelling key itself, which is what a reader finds in the record key.
        wrapped = deployment.wrap(key, spelling_key)
        timestamp_ms = int(time.time() * 1000)
        headers = [(DEPLOYMENT_KEY_HEADER, deployment.key_id.encode())]
        producer = await self._producing()
        try:
            await producer.send_and_wait(
                self.topic,
                wrapped,
                key=record_key(spelling_key, key.key_id),
                timestamp_ms=timestamp_ms,
                headers=headers,
            )
        except KafkaError as exc:
            raise ClaimstreamError(f"{self.topic}: publishing a subject key failed: {exc}") from exc
        self._keep(spelling_key, key.key_id, WrappedKey(wrapped, deployment.key_id, timestamp_ms))
        self._opened[key.key_id] = key
        return key

    async def destroy(self, spellings: Iterable[str]) -> list[str]:
        """Destroy every key of each subject spelled in `spellings`: a tombstone each on the
        topic (read to its end first), acknowledged by every in-sync replica, then dropped here.
        Returns what was destroyed, `<spelling key>|<key id>` each."""
        await self.read()
        spelling_keys = dict.fromkeys(alias_key(spelling) for spelling in spellings)
        doomed = [
            (spelling_key, key_id)
            for spelling_key in spelling_keys
            for key_id in self.held.get(spelling_key, {})
        ]
        if not doomed:
            return []
        producer = await self._producing()
        try:
            sending = [
                await producer.send(self.topic, None, key=record_key(spelling_key, key_id))
                for spelling_key, key_id in doomed
            ]
            await asyncio.gather(*sending)
        except KafkaError as exc:
            raise ClaimstreamError(
                f"{self.topic}: destroying subject keys failed: {exc}; publish the erasure again"
            ) from exc
        for spelling_key, key_id in doomed:
            self._forget(spelling_key, key_id)
        return [f"{spelling_key}|{key_id}" for spelling_key, key_id in doomed]

    def _deployment(self, purpose: str) -> DeploymentKey:
        if self.deployment is None:
            raise ClaimstreamError(
                f"{self.topic}: no deployment key {purpose}; set the deployment_key setting "
                "(KEY_ID:VARIABLE, `claimstream erase keygen` makes one)"
            )
        return self.deployment

    async def _producing(self) -> AIOKafkaProducer:
        if self._producer is None:
            producer = AIOKafkaProducer(**client_options(self.settings), acks="all")
            try:
                await producer.start()
            except KafkaError as exc:
                await producer.stop()
                raise ClaimstreamError(
                    f"{self.topic}: cannot reach the broker {self.settings.bootstrap}: {exc}"
                ) from exc
            self._producer = producer
        return self._producer


def subject_keys_for(settings: Settings, env: Mapping[str, str]) -> SubjectKeys:
    """The keys topic as the settings describe it, with the deployment key the `deployment_key`
    setting names read from `env` (without the setting, keys can be listed and destroyed, not
    made or opened)."""
    setting = settings.deployment_key
    deployment = DeploymentKey.from_setting(setting, env) if setting else None
    return SubjectKeys(settings, deployment)
