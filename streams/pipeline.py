"""What the worker does with one input record, without Faust: decode, validate, key, decide.

`Processor.process` turns one `Incoming` record into the state to store and the records to send.
Anything it cannot accept becomes a dead letter carrying the original key, value and headers plus
the reason; a failure while processing a valid record is retried, then dead-lettered. Nothing is
silently skipped, and the worker never stops on bad input.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from time import perf_counter

from aiokafka.partitioner import murmur2

from streams.core.arbitration import Arbitration
from streams.core.authenticity import SourceKey, keyring, verify
from streams.core.contracts import (
    Claim,
    Decision,
    EvidenceRole,
    Outcome,
    RejectReason,
    Resolution,
    SourceClass,
)
from streams.core.errors import ClaimstreamError, ContractError, RejectedInput
from streams.core.intake import admit, admit_resolution
from streams.core.keystate import (
    KeyState,
    Limits,
    Transition,
    add_claim,
    add_resolution,
    advance,
    state_key,
)
from streams.core.policy import Policy
from streams.metrics import ADMIT, ARBITRATE, DECODE, ENCODE, Metrics, StageClock
from streams.registry import WireCodec
from streams.settings import Settings

log = logging.getLogger(__name__)

Headers = tuple[tuple[str, bytes], ...]

HEADER_KIND = "claimstream.kind"
HEADER_SOURCE_CLASS = "claimstream.source_class"
HEADER_DUE = "claimstream.due"
ERROR_HEADER_PREFIX = "claimstream.error."
KIND_CLAIM, KIND_RESOLUTION, KIND_TICK = b"claim", b"resolution", b"tick"


@functools.lru_cache(maxsize=1 << 16)
def partition_of(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner puts `key` on: the Java client's murmur2, which
    is what owns a key here. Other partitioners (librdkafka's CRC32) only cost a re-key hop.
    Cached: every input record asks, and aiokafka's pure-Python murmur2 costs ~7 µs of CPU."""
    hashed: int = murmur2(key)
    return (hashed & 0x7FFFFFFF) % partitions


@dataclass(frozen=True, slots=True)
class Incoming:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()
    timestamp: float | None = None  # the record's Kafka timestamp, seconds

    def header(self, name: str) -> bytes | None:
        return next((v for k, v in self.headers if k == name), None)


@dataclass(frozen=True, slots=True)
class Outgoing:
    topic: str
    key: bytes | None
    value: bytes | None
    headers: Headers = ()
    partition: int | None = None  # None: the key's partition under the default partitioner


@dataclass(slots=True)
class Handled:
    key: bytes | None = None
    state: KeyState | None = None
    outputs: list[Outgoing] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)


class Processor:
    def __init__(
        self,
        settings: Settings,
        policy: Policy,
        codec: WireCodec,
        metrics: Metrics,
        group: str = "",
        wall_clock: Callable[[], float] = time.time,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.settings = settings
        self.topics = settings.topics
        self.policy = policy
        self.codec = codec
        self.metrics = metrics
        self.group = group
        self.wall_clock = wall_clock
        self.limits = Limits(settings.max_claims_per_key, settings.decision_history_per_key)
        self.keys = signing_keys(policy, env)
        self.stages = StageClock()

    def process(
        self,
        record: Incoming,
        state_of: Callable[[bytes], KeyState | None],
        alias_of: Callable[[str], str | None],
    ) -> Handled:
        """Handle one record: retried on unexpected failure, dead-lettered when it cannot be."""
        attempts = self.settings.retry_attempts
        for attempt in range(1, attempts + 1):
            try:
                return self._handle(record, state_of, alias_of)
            except RejectedInput as exc:
                return Handled(outputs=[self._dead_letter(record, exc, attempt)])
            except Exception as exc:
                log.warning(
                    "processing %s[%d]@%d failed (attempt %d/%d): %s",
                    record.topic,
                    record.partition,
                    record.offset,
                    attempt,
                    attempts,
                    type(exc).__name__,
                )
                if attempt == attempts:
                    return Handled(outputs=[self._dead_letter(record, exc, attempt)])
                self.metrics.processing_retries.inc()
        raise AssertionError("unreachable: the last attempt returns")

    def tick(self, key: bytes, due: datetime) -> Outgoing:
        """A self-addressed record that makes the owner of `key` re-decide at `due`."""
        return Outgoing(
            self.topics.rekeyed,
            key,
            None,
            ((HEADER_KIND, KIND_TICK), (HEADER_DUE, due.isoformat().encode())),
        )

    def _handle(
        self,
        record: Incoming,
        state_of: Callable[[bytes], KeyState | None],
        alias_of: Callable[[str], str | None],
    ) -> Handled:
        kind = record.header(HEADER_KIND)
        if record.topic == self.topics.rekeyed and kind == KIND_TICK:
            return self._on_tick(record, state_of)
        if record.topic == self.topics.resolutions or kind == KIND_RESOLUTION:
            return self._on_resolution(record, state_of, alias_of)
        return self._on_claim(record, state_of, alias_of)

    def _on_claim(
        self,
        record: Incoming,
        state_of: Callable[[bytes], KeyState | None],
        alias_of: Callable[[str], str | None],
    ) -> Handled:
        stages = self.stages
        started = perf_counter()
        claim = self.codec.decode_claim(record.value)
        lap = stages.add(DECODE, started)
        wall = datetime.fromtimestamp(self.wall_clock(), UTC)
        self._authenticate(record, claim.source, wall)
        canonical = alias_of(claim.subject)
        if canonical and canonical != claim.subject:
            claim = claim.model_copy(update={"subject": canonical})
        admitted = admit(claim, self.policy, wall, self._source_class(record))
        key = state_key(claim.subject, claim.field).encode()
        if self._misrouted(record, key):
            return self._forward(record, key, KIND_CLAIM)
        rules = self.policy.rules_for(claim.field)
        assert rules is not None  # admit() refused unknown fields
        lap = stages.add(ADMIT, lap)
        step = add_claim(
            state_of(key),
            admitted,
            rules,
            self.policy.version,
            self._now(record, wall),
            self.limits,
        )
        lap = stages.add(ARBITRATE, lap)
        if step.refused is not None:
            return self._emit(key, step, record)
        self.metrics.accepted(claim.field, claim.source, wall.timestamp())
        decided = step.arbitration
        if (
            step.emitted is None
            and decided.outcome is Outcome.RESOLVED
            and decided.roles.get(claim.claim_id) is EvidenceRole.CONTESTED
        ):
            # Arrived late and lost: the decision stands, but the loss is the signal.
            self.metrics.lost(claim.field, claim.source)
        handled = self._emit(key, step, record)
        stages.add(ENCODE, lap)
        return handled

    def _on_resolution(
        self,
        record: Incoming,
        state_of: Callable[[bytes], KeyState | None],
        alias_of: Callable[[str], str | None],
    ) -> Handled:
        wall = datetime.fromtimestamp(self.wall_clock(), UTC)
        resolution = admit_resolution(
            self.codec.decode(Resolution, record.value), self.policy, wall
        )
        canonical = alias_of(resolution.subject)
        if canonical and canonical != resolution.subject:
            resolution = resolution.model_copy(update={"subject": canonical})
        key = state_key(resolution.subject, resolution.field).encode()
        if self._misrouted(record, key):
            return self._forward(record, key, KIND_RESOLUTION)
        rules = self.policy.rules_for(resolution.field)
        assert rules is not None
        step = add_resolution(
            state_of(key),
            resolution,
            rules,
            self.policy.version,
            self._now(record, wall),
            self.limits,
        )
        return self._emit(key, step, record)

    def _on_tick(self, record: Incoming, state_of: Callable[[bytes], KeyState | None]) -> Handled:
        if record.key is None:
            return Handled()
        state = state_of(record.key)
        due_header = record.header(HEADER_DUE)
        if state is None or due_header is None:
            return Handled()
        rules = self.policy.rules_for(state.field)
        if rules is None:  # the policy no longer has this field; nothing to re-decide
            return Handled()
        due = datetime.fromisoformat(due_header.decode())
        step = advance(state, rules, self.policy.version, due, self.limits)
        return self._emit(record.key, step, record)

    def _authenticate(self, record: Incoming, source: str, now: datetime) -> None:
        """A claim's declared source must be proven: by the principal-only topic it arrived on
        (broker ACLs), and/or by a signature from a key the policy binds to that source."""
        prefix = self.settings.principal_topic_prefix
        if prefix and record.topic != self.topics.rekeyed:
            source_policy = self.policy.source_policy(source)
            owner = source_policy.principal if source_policy else None
            arrived_as = (
                record.topic.removeprefix(prefix) if record.topic.startswith(prefix) else None
            )
            if owner is not None and arrived_as != owner:
                raise ContractError(
                    RejectReason.UNAUTHENTICATED,
                    f"spoofed source: {source!r} publishes only as principal {owner!r} on "
                    f"{prefix}{owner}, not on {record.topic}",
                )
            if arrived_as is not None and owner != arrived_as:
                raise ContractError(
                    RejectReason.UNAUTHENTICATED,
                    f"spoofed source: principal {arrived_as!r} may not publish claims of {source!r}",
                )
        signing = self.policy.signing
        if signing.keys or signing.required:
            verify(
                record.value or b"",
                record.headers,
                source,
                self.keys,
                now,
                signing.max_age,
                signing.required,
            )

    def _misrouted(self, record: Incoming, key: bytes) -> bool:
        """Whether the record must hop to its key's partition before it can be decided: keyed
        otherwise by its producer, or keyed right but partitioned by another hash (librdkafka's
        CRC32). Deciding it where it landed would split the key's state across two tasks."""
        if record.key != key and record.topic != self.topics.rekeyed:
            self.metrics.rekey_hops.labels("key").inc()
            return True
        if record.partition != partition_of(key, self.settings.partitions):
            self.metrics.rekey_hops.labels("partition").inc()
            return True
        return False

    def _forward(self, record: Incoming, key: bytes, kind: bytes) -> Handled:
        """Re-key to subject|field, sent to the key's partition explicitly, so the record reaches
        the task that owns the key's state whatever partitioner the producer used."""
        headers = tuple(h for h in record.headers if h[0] not in (HEADER_KIND, HEADER_SOURCE_CLASS))
        headers += ((HEADER_KIND, kind),)
        source_class = self._source_class(record)
        if source_class is not None:
            headers += ((HEADER_SOURCE_CLASS, source_class.value.encode()),)
        partition = partition_of(key, self.settings.partitions)
        return Handled(
            outputs=[Outgoing(self.topics.rekeyed, key, record.value, headers, partition)]
        )

    def _source_class(self, record: Incoming) -> SourceClass | None:
        """A user assertion's class comes from the topic it arrived on, never from its payload."""
        if record.topic == self.topics.user_claims:
            return SourceClass.USER
        carried = record.header(HEADER_SOURCE_CLASS)
        if record.topic == self.topics.rekeyed and carried is not None:
            return SourceClass(carried.decode())
        return None

    def _now(self, record: Incoming, wall: datetime) -> datetime:
        """Decide as of the record's own timestamp, so a redelivered record decides the same."""
        if record.timestamp is None or record.timestamp <= 0:
            return wall
        stamped = datetime.fromtimestamp(record.timestamp, UTC)
        return min(stamped, wall + self.policy.defaults.max_clock_skew)

    def _emit(self, key: bytes, step: Transition, record: Incoming) -> Handled:
        handled = Handled(key=key, state=step.state)
        topics = self.topics
        if step.refused is not None:
            handled.outputs.append(self._dead_letter(record, step.refused, 1))
        if step.emitted is not None:
            handled.outputs += self._arbitration_records(key, step.emitted)
            handled.decisions.append(step.emitted.decision)
            outcome = step.emitted.decision
            conflict_kind = outcome.conflict_kind.value if outcome.conflict_kind else "none"
            stat = f"{outcome.field}|{outcome.outcome.value}|{conflict_kind}".encode()
            handled.outputs.append(Outgoing(topics.outcomes, stat, b"1"))
        if step.escalation is not None:
            handled.outputs.append(
                Outgoing(
                    topics.escalations, key, self.codec.encode(topics.escalations, step.escalation)
                )
            )
            self.metrics.escalations.labels(self.metrics.field_label(step.state.field)).inc()
        return handled

    def _arbitration_records(self, key: bytes, arbitration: Arbitration) -> list[Outgoing]:
        topics = self.topics
        records = [
            Outgoing(
                topics.decisions, key, self.codec.encode(topics.decisions, arbitration.decision)
            )
        ]
        if arbitration.epoch_change is not None:
            records.append(
                Outgoing(
                    topics.epoch_changes,
                    key,
                    self.codec.encode(topics.epoch_changes, arbitration.epoch_change),
                )
            )
            field_name = self.metrics.field_label(arbitration.decision.field)
            self.metrics.epoch_changes.labels(field_name).inc()
        if arbitration.reobserve is not None:
            records.append(
                Outgoing(
                    topics.reobserve,
                    key,
                    self.codec.encode(topics.reobserve, arbitration.reobserve),
                )
            )
        return records

    def _dead_letter(self, record: Incoming, exc: Exception, attempts: int) -> Outgoing:
        reason = exc.reason if isinstance(exc, RejectedInput) else RejectReason.PROCESSING_FAILED
        detail = exc.detail if isinstance(exc, RejectedInput) else str(exc)
        source = _declared_source(record, self.codec)
        self.metrics.rejected(reason.value, source)
        log.info(
            "dead letter %s[%d]@%d: %s",
            record.topic,
            record.partition,
            record.offset,
            reason,
            extra={"reason": reason.value, "attempts": attempts},
        )
        error_headers = {
            "reason": reason.value,
            "detail": detail[:2000],
            "exception": type(exc.__cause__ or exc).__name__,
            "topic": record.topic,
            "partition": str(record.partition),
            "offset": str(record.offset),
            "group": self.group,
            "attempts": str(attempts),
            "rejected_at": datetime.fromtimestamp(self.wall_clock(), UTC).isoformat(),
        }
        headers = record.headers + tuple(
            (ERROR_HEADER_PREFIX + name, value.encode()) for name, value in error_headers.items()
        )
        return Outgoing(self.topics.dead_letters, record.key, record.value, headers)


def signing_keys(policy: Policy, env: Mapping[str, str] | None = None) -> dict[str, SourceKey]:
    """The policy's signing keys with their HMAC secrets read from the environment."""
    env = os.environ if env is None else env
    keys = []
    for key in policy.signing.keys:
        secret = None
        if key.secret_env is not None:
            secret = env.get(key.secret_env)
            if not secret:
                raise ClaimstreamError(
                    f"signing key {key.key_id!r}: environment variable {key.secret_env} is not set"
                )
        keys.append(
            SourceKey(
                key_id=key.key_id,
                algorithm=key.algorithm,
                secret=secret,
                public_key=key.public_key,
                sources=key.sources,
            )
        )
    return keyring(keys)


def principal_topics(policy: Policy, settings: Settings) -> list[str]:
    """One input topic per publishing principal named in the policy (when configured)."""
    prefix = settings.principal_topic_prefix
    if not prefix:
        return []
    principals = {s.principal for s in policy.sources.values() if s.principal}
    return [f"{prefix}{principal}" for principal in sorted(principals)]


def _declared_source(record: Incoming, codec: WireCodec) -> str | None:
    """The source a rejected claim claims to be, for the per-source rejection metric."""
    try:
        return codec.decode(Claim, record.value).source
    except Exception:
        return None
