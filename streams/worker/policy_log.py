"""The cluster's policy history, on its topic: every worker decides by the same policies from the
same instants, whichever worker owns a key.

The policy topic (`claims.policies`, one partition, kept for ever) holds one record a
publication: a policy's YAML text and the instant it takes effect (the line of
`core.policy_history`, keyed by the version). `claimstream policy publish FILE` writes one,
taking effect a lead time later (`policy_lead_s`) so that every worker has read it before; a
worker reads the topic to its end before it decides anything and follows it after
(`PolicyFollower`), and `claimstream policy history` prints it for replay. A rollback is a
publication of the older version. Where the policy in force has a `stewards` section that asks
for it, a record must be signed by a steward key (`--key-id`), as a resolution is; a record that
is not a valid policy or not proven is logged and passed over, never applied.

The policy file setting bootstraps the topic: a worker that finds the topic empty publishes its
file's policy, in force from then; one whose file holds a version the topic never had publishes
it, in force from then too (the other workers follow within `policy_poll_s`: restarting the
workers with a new file rolls it out once, for the whole cluster; `policy publish` names one
instant for all); one whose file the topic already has follows the topic; one whose file reuses
a published version for other content is refused.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from aiokafka import AIOKafkaProducer
from mode import Service

from streams.core.records.errors import ClaimstreamError, RejectedInput
from streams.core.records.policy import Policy
from streams.core.timeline.policy_history import history_from_lines, history_line
from streams.core.timeline.rollout import PolicyHistory
from streams.pipeline.authentication import STEWARD_HEADER, Authentication
from streams.pipeline.processor import Processor
from streams.settings import Settings
from streams.wire.history_topic import HistoryTopic
from streams.wire.kafka import client_options

log = logging.getLogger(__name__)

Headers = Sequence[tuple[str, bytes]]


class PolicyLog(HistoryTopic):
    """The policy topic read from its start, and the lines of the records that hold. With
    `prove`, a record after the first must be signed as the stewards section of the last policy
    accepted before it asks (the first, the topic's bootstrap, is trusted as the topic's write
    ACL is: workers and stewards only); a signature's age counts to when it was written."""

    def __init__(
        self, settings: Settings, prove: bool = True, env: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(settings, settings.topics.policies)
        self.lines: list[str] = []
        self._prove, self._env = prove, env
        self._proof: Authentication | None = None

    def take(self, record: Any) -> bool:
        line = self._line(record)
        if line is not None:
            self.lines.append(line)
        return line is not None

    def _line(self, record: Any) -> str | None:
        where = f"{self.topic}@{record.offset}"
        value: bytes = record.value or b""
        try:
            line = value.decode()
            policy = history_from_lines([line], where).latest.policy
            if self._proof is not None:
                headers: Headers = [(k, v) for k, v in record.headers or ()]
                steward = dict(headers).get(STEWARD_HEADER, b"").decode("utf-8", "replace")
                written = datetime.fromtimestamp(record.timestamp / 1000, UTC)
                self._proof.check_steward(value, headers, steward, written)
        except (UnicodeDecodeError, ClaimstreamError, RejectedInput) as exc:
            log.error("policy topic: %s passed over, not applied: %s", where, exc)
            return None
        if self._prove:
            self._proof = Authentication(self.settings, policy, self._env)
        return line

    def history(self) -> PolicyHistory | None:
        return history_from_lines(self.lines, self.topic) if self.lines else None


async def publish_policy(
    settings: Settings,
    text: str,
    since: datetime,
    signer: Any = None,
    steward: str | None = None,
) -> str:
    """Publish `text` (a policy's YAML) to take effect at `since`; returns the line sent."""
    line = history_line(since, text)
    version = history_from_lines([line]).latest.policy.version
    value = line.encode()
    headers: list[tuple[str, bytes]] = []
    if signer is not None:
        headers = [*signer(value), (STEWARD_HEADER, (steward or "").encode())]
    headers.append(("claimstream.published_by", _publisher().encode()))
    producer = AIOKafkaProducer(**client_options(settings), acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(  # partition 0: the one the workers read, in order
            settings.topics.policies, value, key=version.encode(), partition=0, headers=headers
        )
    finally:
        await producer.stop()
    return line


async def published_lines(settings: Settings) -> list[str]:
    """The policy topic's valid lines, as published (signatures not checked)."""
    policy_log = PolicyLog(settings, prove=False)
    await policy_log.start()
    try:
        await policy_log.read()
    finally:
        await policy_log.stop()
    return policy_log.lines


def _publisher() -> str:
    return f"{os.environ.get('USER', 'unknown')}@{socket.gethostname()}"


async def history_at_start(settings: Settings, policy: Policy, text: str) -> PolicyHistory:
    """The cluster's policy history as this worker starts: the topic's, after publishing the
    policy file's where the topic does not have its version yet (see the module's docstring)."""
    policy_log = PolicyLog(settings)
    await policy_log.start()
    try:
        await policy_log.read()
        history = policy_log.history()
        now = datetime.now(UTC)
        if history is None:
            log.info("policy topic is empty: publishing policy %s, in force now", policy.version)
            await publish_policy(settings, text, now)
        elif policy.version not in history.versions():
            log.info(
                "policy %s (the policy file) is new to the policy topic: publishing it, in "
                "force from %s for every worker",
                policy.version,
                now.isoformat(),
            )
            await publish_policy(settings, text, now)
        elif history.versions()[policy.version] != policy:
            raise ClaimstreamError(
                f"the policy file {settings.policy} says version {policy.version!r}, which the "
                f"policy topic {settings.topics.policies} holds with other content: give the "
                "changed policy a version of its own (a decision names the version it was "
                "decided under, so one version is one policy)"
            )
        else:
            latest = history.latest.policy.version
            if latest != policy.version:
                log.warning(
                    "the policy topic says policy %s; this worker's policy file (version %s) "
                    "was published before it and is not applied: publish it again to roll back",
                    latest,
                    policy.version,
                )
            return history
        await policy_log.read()  # to the end, this worker's publication included
        found = policy_log.history()
        if found is None or found.latest.policy.version != policy.version:
            log.error(
                "policy %s (the policy file) was not applied: the policy in force asks for a "
                "steward's signature; publish it with claimstream policy publish --key-id",
                policy.version,
            )
        if found is None:
            raise ClaimstreamError(f"the policy topic {settings.topics.policies} holds no policy")
        return found
    finally:
        await policy_log.stop()


class PolicyFollower(Service):
    """Follows the policy topic while the worker runs: each new version goes to the processor
    (`Processor.adopt`), between batches (`turn`: the arbiter's)."""

    def __init__(
        self, settings: Settings, processor: Processor, turn: asyncio.Lock, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.settings = settings
        self.policy_log = PolicyLog(settings)
        self.processor = processor
        self.turn = turn

    async def on_start(self) -> None:
        await self.policy_log.start()

    async def on_stop(self) -> None:
        await self.policy_log.stop()

    @Service.task
    async def _follow(self) -> None:
        while not self.should_stop:
            try:
                if await self.policy_log.read():
                    await self._adopt()
            except Exception as exc:  # a broker hiccup: read on next time
                log.warning("policy topic: reading failed (%s); reading again", exc)
            await self.sleep(self.settings.policy_poll_s)

    async def _adopt(self) -> None:
        history = self.policy_log.history()
        assert history is not None
        latest = history.latest
        if latest == self.processor.policies.latest:
            return
        async with self.turn:
            self.processor.adopt(history)
        log.info("policy %s in force from %s", latest.policy.version, latest.since.isoformat())
