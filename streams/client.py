"""The public client: publish claims and people's resolutions, ask what is believed,
follow decisions, gate plan steps.

Services publish with `ClaimPublisher` (`publish_and_wait` also waits until the key's decision
counts the claim); people close conflicts with `build_resolution` and `publish_resolutions`;
`FactsClient` asks any worker's web API what is believed now about a subject and field (aliases
resolved, forwarded to the key's owner); consumers follow `DecisionFeed`, whose `gate` answers
"may this step run?": a step that reads a field whose latest decision is not `resolved`, or whose
action is `block`, is not runnable; `GateVerdict.degraded` says the blocking facts only degrade.
"""

from __future__ import annotations

import asyncio
import os
import time
import urllib.parse
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

import aiohttp
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaError
from pydantic import ValidationError

from streams.core.admission.intake import admit_resolution
from streams.core.keys.state import state_key
from streams.core.records.contracts import (
    VALUED,
    Action,
    Claim,
    ClaimStatus,
    Decision,
    Outcome,
    Resolution,
    StewardAct,
    Value,
)
from streams.core.records.errors import (
    ClaimstreamError,
    RejectedInput,
    SubjectErased,
    validation_problems,
)
from streams.core.records.policy import Policy, load_policy
from streams.core.timeline.aliases import AliasChange
from streams.core.timeline.erasures import ErasureStatement
from streams.pipeline.alias_records import alias_record
from streams.pipeline.authentication import alias_payload
from streams.settings import Settings
from streams.wire.kafka import client_options
from streams.wire.personal import is_sealed, seal
from streams.wire.registry import WireCodec, registry_for
from streams.wire.subject_keys import SubjectKeys, subject_keys_for

Said = TypeVar("Said", Claim, Resolution)
"""A claim or a steward's resolution: what `ClaimPublisher.sealed` seals."""
Signer = Callable[[bytes], list[tuple[str, bytes]]]
"""A record value's signature headers (`authenticity.sign` bound to a key and the time)."""


class ClaimPublisher:
    """Publishes claims (Avro, Confluent wire format) keyed by subject|field.

    Keying at the producer lets the worker skip the re-key hop. A value of a field in
    `personal_fields` (by default the settings' policy's, `Policy.personal_fields`) leaves sealed
    under its subject's key, found or made on `subject_keys` (by default the keys topic under the
    settings' `deployment_key`; without one, such a value is refused, never sent in plain text);
    the publisher starts those keys as it opens if they are not started, and stops them as it
    closes."""

    def __init__(
        self,
        settings: Settings,
        *,
        user_assertions: bool = False,
        personal_fields: frozenset[str] | None = None,
        subject_keys: SubjectKeys | None = None,
    ) -> None:
        self.settings = settings
        self.topic = settings.topics.user_claims if user_assertions else settings.topics.claims
        self.codec = WireCodec(registry_for(settings))
        if personal_fields is None:
            personal_fields = load_policy(settings.policy).personal_fields
        self.personal_fields = personal_fields
        if subject_keys is None and personal_fields and settings.deployment_key:
            subject_keys = subject_keys_for(settings, os.environ)
        self.subject_keys = subject_keys
        self._starts_keys = False
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
        if self.subject_keys is not None and not self.subject_keys.started:
            try:
                await self.subject_keys.start()
            except BaseException:
                await self._producer.stop()
                raise
            self._starts_keys = True
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self._producer.stop()
        finally:
            if self._starts_keys and self.subject_keys is not None:
                self._starts_keys = False
                await self.subject_keys.stop()

    async def sealed(self, said: Said) -> Said:
        """A claim or a steward's resolution with its value sealed where its field is personal
        (a sealed value as is)."""
        value = said.value
        if said.field not in self.personal_fields or not isinstance(value, str) or is_sealed(value):
            return said
        if self.subject_keys is None:
            raise ClaimstreamError(
                f"{said.field} is a personal field: its values leave sealed, under keys the "
                "deployment key wraps; set the deployment_key setting (KEY_ID:VARIABLE)"
            )
        key = await self.subject_keys.key_for(said.subject)
        return said.model_copy(update={"value": seal(value, key, said.field)})

    async def publish(self, claim: Claim | Mapping[str, Any]) -> asyncio.Future[Any]:
        """Queue one claim (sealed where personal); await the returned future for the broker's
        acknowledgement."""
        model = claim if isinstance(claim, Claim) else Claim.model_validate(claim)
        model = await self.sealed(model)
        key = state_key(model.subject, model.field).encode()
        value = self.codec.encode(self.topic, model)
        future: asyncio.Future[Any] = await self._producer.send(self.topic, value, key=key)
        return future

    async def publish_many(self, claims: Iterable[Claim | Mapping[str, Any]]) -> int:
        futures = [await self.publish(claim) for claim in claims]
        await asyncio.gather(*futures)
        return len(futures)

    async def publish_and_wait(
        self, claim: Claim | Mapping[str, Any], facts: FactsClient, wait_s: float
    ) -> Decision | None:
        """Publish one claim, wait for the broker's acknowledgement, then up to `wait_s` for the
        key's current decision to count it (read-your-claim). A claim that only corroborates
        emits no decision, so this asks the key's owner, not the decisions topic. None when it
        is not placed in time: the worker dead-letters a claim its policy refuses."""
        model = claim if isinstance(claim, Claim) else Claim.model_validate(claim)
        await (await self.publish(model))
        return await facts.wait_for_claim(model.subject, model.field, model.claim_id, wait_s)

    async def resolve(
        self, resolution: Resolution, signer: Signer | None = None
    ) -> asyncio.Future[Any]:
        """Send a steward's statement (sealed where personal); the future the broker's
        acknowledgement completes. `signer`: the signature headers for the encoded value, where
        stewards sign."""
        resolution = await self.sealed(resolution)
        topic = self.settings.topics.resolutions
        key = state_key(resolution.subject, resolution.field).encode()
        value = self.codec.encode(topic, resolution)
        headers = signer(value) if signer is not None else None
        future: asyncio.Future[Any] = await self._producer.send(
            topic, value, key=key, headers=headers
        )
        return future

    async def alias(
        self,
        alias: str,
        subject: str | None,
        signer: Signer | None = None,
        steward: str = "",
        at: datetime | None = None,
    ) -> None:
        """`alias` names `subject` from `at` (default: now) on; `subject` None retracts it then.
        `signer` and `steward`: where stewards sign, the steward it signs as."""
        change = AliasChange(alias, subject, at or datetime.now(UTC), steward)
        key, value, headers = alias_record(change, signer)
        await self.send(self.settings.topics.aliases, key, value, headers)

    async def send(self, topic: str, key: bytes, value: bytes | None, headers: Any = None) -> None:
        """One record of a history topic (aliases, erasures), once the broker holds it."""
        await self._producer.send_and_wait(topic, value, key=key, headers=headers)


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
    act: StewardAct | str = StewardAct.RESOLVE,
    target_id: str | None = None,
    basis_digest: str | None = None,
    assignee: str | None = None,
) -> Resolution:
    """A person's statement about one key as a `Resolution` record: by default a resolution
    (`act` resolve), which covers the claims observed before `decided_at`; else an undo of the
    resolution `target_id`, a review of that proposal (approve, naming the decision and
    evidence digest it saw; reject; send_back), or the key's task given to `assignee`. Without
    `resolution_id` it gets a fresh one. With `policy`, a bare value takes the field's unit and
    the statement is checked the way the worker will check it, so a mistake is refused here
    rather than dead-lettered later. Raises ClaimstreamError naming `origin`, one problem per
    line."""
    if not decided_by.strip():
        raise ClaimstreamError(f"{origin}: a resolution names who decided it (decided_by)")
    rules = policy.rules_for(field) if policy is not None else None
    if unit is None and rules is not None and act in VALUED:
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
                "act": act,
                "target_id": target_id,
                "basis_digest": basis_digest,
                "assignee": assignee,
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


async def publish_resolutions(
    settings: Settings,
    resolutions: Iterable[Resolution],
    signer: Signer | None = None,
    personal_fields: frozenset[str] | None = None,
) -> int:
    """Publish resolutions (stewards' statements) on the resolutions topic, keyed by
    subject|field, all sent before any acknowledgement is awaited (one key's stay in order: one
    partition, one producer); returns how many the broker acknowledged. A value of one of
    `personal_fields` (by default the settings' policy's) leaves sealed (`ClaimPublisher`)."""
    async with ClaimPublisher(settings, personal_fields=personal_fields) as publisher:
        sending = [await publisher.resolve(resolution, signer) for resolution in resolutions]
        await asyncio.gather(*sending)
    return len(sending)


async def publish_erasure(
    settings: Settings, statement: ErasureStatement, signer: Signer | None = None
) -> None:
    """Publish an erasure request or approval, signed by `signer` where given (over the
    record's key and value: `alias_payload`), once the broker holds it."""
    key, value = statement.record()
    headers = signer(alias_payload(key, value)) if signer is not None else None
    async with ClaimPublisher(settings) as publisher:
        await publisher.send(settings.topics.erasures, key, value, headers)


API_TIMEOUT_S = 10.0
PLACED_POLL_S = 0.2


def api_url(settings: Settings) -> str:
    """The web API of the worker the settings describe (a wildcard bind is reached on loopback)."""
    host = "127.0.0.1" if settings.web_host in ("0.0.0.0", "::", "") else settings.web_host
    return f"http://{host}:{settings.web_port}"


class FactsClient:
    """What is believed now about a subject and field, asked of any worker's web API: the worker
    resolves aliases and forwards to the key's owner, which recomputes the decision now (so a
    claim that only corroborates shows in the evidence, though no new decision was emitted).
    A read of an erased subject (now, or as of an instant before its erasure) raises
    `SubjectErased`: there is no value to give."""

    def __init__(self, api: str, *, timeout_s: float = API_TIMEOUT_S) -> None:
        self.api = api.rstrip("/")
        self.timeout_s = timeout_s
        self._vocabulary: dict[str, Any] | None = None

    async def vocabulary(self) -> dict[str, Any]:
        """The worker's policy version, fields, sources and conflict kinds (`/api/console`)."""
        if self._vocabulary is None:
            _, self._vocabulary = await self._get("/api/console")
        return self._vocabulary

    async def check_field(self, field_name: str) -> None:
        fields: list[str] = (await self.vocabulary())["fields"]
        if field_name not in fields:
            raise ClaimstreamError(
                f"unknown field {field_name!r}; the policy's fields are: {', '.join(fields)}"
            )

    async def answer(
        self, subject: str, field_name: str, as_of: datetime | None = None
    ) -> dict[str, Any] | None:
        """The web API's answer for the key (see the README's Web API), None when the worker
        holds no claims about it (or, with `as_of`, no belief was in force by then);
        SubjectErased when the subject's data (then) was erased."""
        if not subject.strip():
            raise ClaimstreamError("the subject is empty; name what the fact is about")
        await self.check_field(field_name)
        path = "/api/decisions/" + urllib.parse.quote(state_key(subject, field_name), safe="")
        params = {"as_of": as_of.isoformat()} if as_of is not None else {}
        status, body = await self._get(path, params, missing_ok=True)
        return None if status == 404 else body

    async def get_fact(self, subject: str, field_name: str) -> Decision | None:
        """The current decision about `subject` and `field_name` with its evidence, or None;
        SubjectErased when the subject was erased (and nothing was sent about it since)."""
        found = await self.answer(subject, field_name)
        return Decision.model_validate(found["decision"]) if found else None

    async def conflicts(self, **filters: str | int) -> dict[str, Any]:
        """Open conflicts and quarantines across the cluster (`field`, `kind`, `min_age_s`)."""
        _, body = await self._get("/api/conflicts", {k: str(v) for k, v in filters.items()})
        found: dict[str, Any] = body
        return found

    async def wait_for_claim(
        self, subject: str, field_name: str, claim_id: str, wait_s: float
    ) -> Decision | None:
        """The key's current decision once its evidence holds `claim_id` (whatever its role),
        or None if it does not within `wait_s`."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                decision = await self.get_fact(subject, field_name)
            except SubjectErased:
                decision = None  # a claim sent after an erasure is new data: not placed yet
            if decision is not None and any(e.claim_id == claim_id for e in decision.evidence):
                return decision
            if time.monotonic() >= deadline:
                return None
            await asyncio.sleep(PLACED_POLL_S)

    async def _get(
        self, path: str, params: Mapping[str, str] | None = None, *, missing_ok: bool = False
    ) -> tuple[int, Any]:
        url = self.api + path
        try:
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout_s)) as s,
                s.get(url, params=params) as reply,
            ):
                body = await reply.json(content_type=None)
                status = reply.status
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise ClaimstreamError(
                f"cannot reach the worker's web API at {self.api}: {exc or type(exc).__name__}"
            ) from exc
        if status == 404 and missing_ok:
            return status, body
        if status == 410 and (erased := SubjectErased.from_answer(body)) is not None:
            raise erased  # an erased subject: no value to give
        if status != 200:
            error = body.get("error") if isinstance(body, dict) else body
            raise ClaimstreamError(f"the worker at {self.api} answered {status}: {error}")
        return status, body


@dataclass(frozen=True, slots=True)
class GateVerdict:
    """May a step run? `blocked_by` names each blocking read and why, `actions` its decision's
    action (None: no decision yet). `degraded`: every blocking fact's action is `degrade`, so the
    step may go on without those facts; a `block` (or no decision) means stop."""

    runnable: bool
    blocked_by: dict[str, str]  # read -> why
    actions: dict[str, Action | None] = field(default_factory=dict)

    @property
    def degraded(self) -> bool:
        return not self.runnable and all(a is Action.DEGRADE for a in self.actions.values())


def _blocking(decision: Decision | None) -> str | None:
    if decision is None:
        return "no decision yet"
    if decision.outcome is not Outcome.RESOLVED:
        return f"{decision.outcome.value} ({decision.reason})"
    if decision.action is Action.BLOCK:
        return "action is block"
    return None


def judge(reads: Iterable[tuple[str, Decision | None]]) -> GateVerdict:
    """The gate's rule over (read, its latest decision) pairs: a read blocks unless its decision
    is resolved and its action is not block."""
    blocked: dict[str, str] = {}
    actions: dict[str, Action | None] = {}
    for read, decision in reads:
        why = _blocking(decision)
        if why is not None:
            blocked[read] = why
            actions[read] = decision.action if decision is not None else None
    return GateVerdict(runnable=not blocked, blocked_by=blocked, actions=actions)


class DecisionFeed:
    """Follows the decisions topic and keeps the latest decision per subject and field.

    It reads committed decisions only (`read_committed`: under exactly-once a worker's open
    transaction is not a belief yet), from the start of every partition unless a `group_id`
    has committed offsets, and commits none itself unless `commit_offsets` (a feed that commits
    and restarts misses the keys decided before its commit). Repeated decisions (same id as the
    latest for the key) are dropped: delivery is at least once.
    """

    def __init__(
        self, settings: Settings, *, group_id: str | None = None, commit_offsets: bool = False
    ) -> None:
        self.topic = settings.topics.decisions
        self.bootstrap = settings.bootstrap
        self.codec = WireCodec(registry_for(settings))
        self.latest: dict[tuple[str, str], Decision] = {}
        self._consumer = AIOKafkaConsumer(
            **client_options(settings),
            group_id=group_id,
            auto_offset_reset="earliest",
            enable_auto_commit=commit_offsets and group_id is not None,
            isolation_level="read_committed",
        )

    async def __aenter__(self) -> DecisionFeed:
        try:
            await self._consumer.start()
        except KafkaError as exc:
            await self._consumer.stop()
            raise ClaimstreamError(f"cannot reach the broker {self.bootstrap}: {exc}") from exc
        self._consumer.subscribe([self.topic])  # without a group: every partition, from the start
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._consumer.stop()

    async def caught_up(self, timeout_s: float = 60.0) -> None:
        """Read every decision the topic holds now into `latest` (up to each partition's end as
        of this call); `decisions()` then goes on from there. Do not run it beside
        `decisions()`: both read the same consumer."""
        deadline = time.monotonic() + timeout_s
        while not (assigned := self._consumer.assignment()):  # a group assigns after joining
            if time.monotonic() > deadline:
                raise ClaimstreamError(f"no partitions of {self.topic!r} assigned in {timeout_s}s")
            await asyncio.sleep(0.1)
        ends = await self._consumer.end_offsets(list(assigned))
        while [tp for tp, end in ends.items() if await self._consumer.position(tp) < end]:
            if time.monotonic() > deadline:
                raise ClaimstreamError(f"{self.topic!r} not read to its end in {timeout_s}s")
            batches = await self._consumer.getmany(timeout_ms=200)
            for records in batches.values():
                for record in records:
                    self._take(record.value)

    async def decisions(self) -> AsyncIterator[Decision]:
        """New beliefs as they arrive (duplicates of the latest one are skipped)."""
        async for message in self._consumer:
            decision = self._take(message.value)
            if decision is not None:
                yield decision

    def _take(self, value: bytes) -> Decision | None:
        decision = self.codec.decode(Decision, value)
        key = (decision.subject, decision.field)
        previous = self.latest.get(key)
        if previous is not None and previous.decision_id == decision.decision_id:
            return None
        self.latest[key] = decision
        return decision

    def gate(self, subject: str, reads: Iterable[str]) -> GateVerdict:
        """May a step that reads these fields of `subject` run now? (`judge`'s rule)"""
        return judge((name, self.latest.get((subject, name))) for name in reads)
