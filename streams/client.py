"""The client side: create topics, publish claims and people's resolutions, follow decisions, gate
plan steps.

Services publish with `ClaimPublisher`; people close conflicts with `build_resolution` and
`publish_resolutions`; consumers follow `DecisionFeed`, whose `gate` answers
"may this step run?": a step that reads a field whose latest decision is not `resolved`, or whose
action is `block`, is not runnable.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError
from pydantic import ValidationError

from streams.core.contracts import (
    Action,
    Claim,
    ClaimStatus,
    Decision,
    Outcome,
    Resolution,
    Value,
)
from streams.core.errors import ClaimstreamError, RejectedInput, validation_problems
from streams.core.intake import admit_resolution
from streams.core.keystate import state_key
from streams.core.policy import Policy
from streams.registry import WireCodec, registry_from_url
from streams.settings import Settings


def client_options(settings: Settings) -> dict[str, Any]:
    """aiokafka connection options (SASL/TLS pass through)."""
    options: dict[str, Any] = {
        "bootstrap_servers": settings.bootstrap,
        "security_protocol": settings.security_protocol,
    }
    if settings.sasl_mechanism:
        options["sasl_mechanism"] = settings.sasl_mechanism
        options["sasl_plain_username"] = settings.sasl_username
        options["sasl_plain_password"] = (
            settings.sasl_password.get_secret_value() if settings.sasl_password else None
        )
    context = settings.ssl_context()
    if context is not None:
        options["ssl_context"] = context
    return options


async def ensure_topics(settings: Settings, extra: Iterable[str] = ()) -> list[str]:
    """Create the pipeline's topics (idempotent); decisions are compacted. Returns those created."""
    topics = settings.topics
    changelog = settings.changelog_topic
    configs = {
        topics.decisions: {"cleanup.policy": "compact"},
        changelog: {"cleanup.policy": "compact"},
    }
    names = [
        changelog,
        *topics.inputs(),
        *extra,
        topics.aliases,
        topics.decisions,
        topics.dead_letters,
        topics.epoch_changes,
        topics.reobserve,
        topics.escalations,
        topics.outcomes,
    ]
    admin = AIOKafkaAdminClient(**client_options(settings))
    await admin.start()
    created = []
    try:
        existing = set(await admin.list_topics())
        for name in names:
            if name in existing:
                continue
            try:
                await admin.create_topics(
                    [
                        NewTopic(
                            name,
                            settings.partitions,
                            settings.replication_factor,
                            topic_configs=configs.get(name, {}),
                        )
                    ]
                )
                created.append(name)
            except TopicAlreadyExistsError:
                pass
    except KafkaError as exc:
        raise ClaimstreamError(f"cannot create topics on {settings.bootstrap}: {exc}") from exc
    finally:
        await admin.close()
    return created


class ClaimPublisher:
    """Publishes claims (Avro, Confluent wire format) keyed by subject|field.

    Keying at the producer lets the worker skip the re-key hop."""

    def __init__(self, settings: Settings, *, user_assertions: bool = False) -> None:
        self.settings = settings
        self.topic = settings.topics.user_claims if user_assertions else settings.topics.claims
        self.codec = WireCodec(registry_from_url(settings.schema_registry))
        self._producer = AIOKafkaProducer(
            **client_options(settings), acks="all", linger_ms=5, enable_idempotence=False
        )

    async def __aenter__(self) -> ClaimPublisher:
        try:
            await self._producer.start()
        except KafkaError as exc:
            await self._producer.stop()
            raise ClaimstreamError(
                f"cannot reach the broker {self.settings.bootstrap}: {exc}"
            ) from exc
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._producer.stop()

    async def publish(self, claim: Claim | Mapping[str, Any]) -> asyncio.Future[Any]:
        """Queue one claim; await the returned future for the broker's acknowledgement."""
        model = claim if isinstance(claim, Claim) else Claim.model_validate(claim)
        key = state_key(model.subject, model.field).encode()
        value = self.codec.encode(self.topic, model)
        future: asyncio.Future[Any] = await self._producer.send(self.topic, value, key=key)
        return future

    async def publish_many(self, claims: Iterable[Claim | Mapping[str, Any]]) -> int:
        futures = [await self.publish(claim) for claim in claims]
        await asyncio.gather(*futures)
        return len(futures)

    async def resolve(self, resolution: Resolution) -> None:
        topic = self.settings.topics.resolutions
        key = state_key(resolution.subject, resolution.field).encode()
        await self._producer.send_and_wait(topic, self.codec.encode(topic, resolution), key=key)

    async def alias(self, alias: str, subject: str) -> None:
        await self._producer.send_and_wait(
            self.settings.topics.aliases, subject.encode(), key=alias.encode()
        )


def build_resolution(
    policy: Policy | None,
    subject: str,
    field: str,
    *,
    decided_by: str,
    decided_at: datetime,
    status: ClaimStatus | str = ClaimStatus.PRESENT,
    value: Value = None,
    unit: str | None = None,
    note: str = "",
    resolves_decision_id: str | None = None,
    resolution_id: str | None = None,
    origin: str = "resolution",
) -> Resolution:
    """A person's decision about one key as a `Resolution` record: it covers the claims observed
    before `decided_at`. Without `resolution_id` it gets a fresh one. With `policy`, a bare value
    takes the field's unit and the value is checked the way the worker will check it, so a
    mistake is refused here rather than dead-lettered later. Raises ClaimstreamError naming
    `origin`, one problem per line."""
    if not decided_by.strip():
        raise ClaimstreamError(f"{origin}: a resolution names who decided it (decided_by)")
    rules = policy.rules_for(field) if policy is not None else None
    if unit is None and rules is not None:
        unit = rules.unit or rules.currency
    try:
        resolution = Resolution.model_validate(
            {
                "resolution_id": resolution_id or f"res-{uuid.uuid4().hex}",
                "subject": subject,
                "field": field,
                "status": status,
                "value": value,
                "unit": unit,
                "decided_by": decided_by.strip(),
                "note": note,
                "decided_at": decided_at,
                "resolves_decision_id": resolves_decision_id,
            }
        )
    except ValidationError as exc:
        raise ClaimstreamError(validation_problems(exc.errors(), origin)) from exc
    if policy is not None:
        try:
            admit_resolution(resolution, policy, resolution.decided_at)
        except RejectedInput as exc:
            raise ClaimstreamError(f"{origin}: {exc}") from exc
    return resolution


async def publish_resolutions(settings: Settings, resolutions: Iterable[Resolution]) -> int:
    """Publish resolutions on the resolutions topic, keyed by subject|field; returns how many
    the broker acknowledged. The worker closes the key's conflict (reason `manual`)."""
    sent = 0
    async with ClaimPublisher(settings) as publisher:
        for resolution in resolutions:
            await publisher.resolve(resolution)
            sent += 1
    return sent


@dataclass(frozen=True, slots=True)
class GateVerdict:
    runnable: bool
    blocked_by: dict[str, str]  # field -> why


class DecisionFeed:
    """Follows the decisions topic and keeps the latest decision per subject and field.

    Repeated decisions (same id as the latest for the key) are dropped: delivery is at least once.
    """

    def __init__(self, settings: Settings, *, group_id: str | None = None) -> None:
        self.codec = WireCodec(registry_from_url(settings.schema_registry))
        self.latest: dict[tuple[str, str], Decision] = {}
        self._consumer = AIOKafkaConsumer(
            settings.topics.decisions,
            **client_options(settings),
            group_id=group_id,
            auto_offset_reset="earliest",
            enable_auto_commit=group_id is not None,
        )

    async def __aenter__(self) -> DecisionFeed:
        await self._consumer.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._consumer.stop()

    async def decisions(self) -> AsyncIterator[Decision]:
        """New beliefs as they arrive (duplicates of the latest one are skipped)."""
        async for message in self._consumer:
            decision = self.codec.decode(Decision, message.value)
            key = (decision.subject, decision.field)
            previous = self.latest.get(key)
            if previous is not None and previous.decision_id == decision.decision_id:
                continue
            self.latest[key] = decision
            yield decision

    def gate(self, subject: str, reads: Iterable[str]) -> GateVerdict:
        """May a step that reads these fields of `subject` run now?"""
        blocked = {}
        for field in reads:
            decision = self.latest.get((subject, field))
            if decision is None:
                blocked[field] = "no decision yet"
            elif decision.outcome is not Outcome.RESOLVED:
                blocked[field] = f"{decision.outcome.value} ({decision.reason})"
            elif decision.action is Action.BLOCK:
                blocked[field] = "action is block"
        return GateVerdict(runnable=not blocked, blocked_by=blocked)
