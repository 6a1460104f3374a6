"""The one module that wires topics, tables, agents, timers and web views (the Faust shell).

Agents read state, call the core through `Processor`, write state and send; nothing else.
Per-key state lives in a Faust table co-partitioned with the input topics (all keyed by
`subject|field`, all with the same partition count). Time-driven re-decisions (freshness expiry,
escalation) travel as self-addressed tick records through the re-key topic, so every state write
happens inside stream iteration on the partition that owns the key, as Faust's stores require.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import faust
import faust.streams as faust_streams
from faust.sensors.prometheus import setup_prometheus_sensors
from faust.serializers import codecs
from faust.types import EventT, StreamT
from faust.web import Request, Response, View

from streams.core.contracts import Decision, Outcome
from streams.core.keystate import (
    KeyState,
    current_decision,
    decode_state,
    encode_state,
    split_key,
)
from streams.core.normalize import normalize_string
from streams.core.policy import Policy, StringCase, load_policy
from streams.metrics import Metrics
from streams.pipeline import Handled, Incoming, Outgoing, Processor, principal_topics
from streams.registry import WireCodec, registry_from_url
from streams.settings import Settings

log = logging.getLogger(__name__)

KEYSTATE_CODEC = "claimstream-keystate"
OPEN = (Outcome.CONFLICT, Outcome.QUARANTINED)
RESCAN_EVERY_S = 30.0


class KeyStateCodec(codecs.Codec):
    def _dumps(self, obj: Any) -> bytes:
        return encode_state(obj)

    def _loads(self, s: bytes) -> Any:
        return decode_state(s)


codecs.register(KEYSTATE_CODEC, KeyStateCodec())


def alias_key(subject: str) -> str:
    """Aliases match regardless of case and spacing: `ACME  Corp` finds `acme corp`."""
    return normalize_string(subject, StringCase.FOLD)


@dataclass
class Schedule:
    """This worker's in-memory view of its keys: when each may change by time alone, and which
    are open conflicts. Rebuilt from the table after rebalances; the table stays the truth."""

    due: dict[bytes, datetime] = field(default_factory=dict)
    open_since: dict[bytes, tuple[str, datetime]] = field(default_factory=dict)

    def note(self, key: bytes, state: KeyState) -> None:
        if state.next_check_at is None:
            self.due.pop(key, None)
        else:
            self.due[key] = state.next_check_at
        current = state.current
        if current is not None and current.outcome in OPEN and state.conflict_since is not None:
            self.open_since[key] = (state.field, state.conflict_since)
        else:
            self.open_since.pop(key, None)

    def take_due(self, now: datetime) -> list[tuple[bytes, datetime]]:
        ready = [(key, due) for key, due in self.due.items() if due <= now]
        for key, _ in ready:
            del self.due[key]
        return ready


@dataclass
class Pipeline:
    """Everything `build` wires, for the CLI and the tests."""

    app: faust.App
    settings: Settings
    policy: Policy
    metrics: Metrics
    processor: Processor
    states: Any
    schedule: Schedule


def faust_settings(settings: Settings) -> dict[str, Any]:
    options: dict[str, Any] = {
        "broker": settings.broker,
        "store": settings.store,
        "datadir": str(settings.data_dir),
        "web_bind": settings.web_host,
        "web_host": settings.web_host,
        "web_port": settings.web_port,
        "processing_guarantee": settings.processing_guarantee.value,
        "topic_partitions": settings.partitions,
        "topic_replication_factor": settings.replication_factor,
        "broker_session_timeout": settings.broker_session_timeout_s,
        "broker_rebalance_timeout": settings.broker_rebalance_timeout_s,
        "broker_heartbeat_interval": min(3.0, settings.broker_session_timeout_s / 3),
        "stream_buffer_maxsize": 262144,
        "producer_linger": 0.005,
        "producer_max_batch_size": 262144,
        "consumer_auto_offset_reset": "earliest",
        "key_serializer": "raw",
        "value_serializer": "raw",
        "table_standby_replicas": 0,
        "web_access_log": None,
    }
    credentials = broker_credentials(settings)
    if credentials is not None:
        options["broker_credentials"] = credentials
    return options


def broker_credentials(settings: Settings) -> Any:
    """SASL and TLS settings passed through to aiokafka via Faust."""
    ssl_context = settings.ssl_context()
    if settings.sasl_mechanism:
        password = settings.sasl_password.get_secret_value() if settings.sasl_password else ""
        return faust.SASLCredentials(
            username=settings.sasl_username or "",
            password=password,
            mechanism=settings.sasl_mechanism,
            ssl_context=ssl_context,
        )
    if ssl_context is not None:
        return faust.SSLCredentials(ssl_context)
    return None


def use_serializers(table: Any, key_serializer: str, value_serializer: str) -> None:
    """Faust tables derive changelog serializers from model types and fall back to JSON; our keys
    are raw `subject|field` bytes (the same bytes the input topics are keyed and partitioned by)."""
    table.key_serializer = key_serializer
    table.value_serializer = value_serializer
    # The changelog topic was already built with the JSON defaults when the table registered
    # itself; rebuild it, or recovery would decode raw keys as JSON.
    table.changelog_topic = table._new_changelog_topic()


def build(settings: Settings, policy: Policy | None = None) -> Pipeline:
    policy = policy or load_policy(settings.policy)
    metrics = Metrics(policy)
    app = faust.App(settings.app_id, **faust_settings(settings))
    setup_prometheus_sensors(
        app, "/metrics", registry=metrics.registry, name_prefix="claimstream_faust"
    )
    codec = WireCodec(registry_from_url(settings.schema_registry))
    processor = Processor(settings, policy, codec, metrics, group=settings.app_id)
    schedule = Schedule()
    topics = settings.topics

    def topic(name: str, **extra: Any) -> Any:
        return app.topic(
            name,
            partitions=settings.partitions,
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
            **extra,
        )

    inputs = app.topic(
        *topics.inputs(),
        *principal_topics(policy, settings),
        key_type=bytes,
        value_type=bytes,
        key_serializer="raw",
        value_serializer="raw",
    )
    outputs = {
        name: topic(name, compacting=name == topics.decisions)
        for name in (
            topics.decisions,
            topics.dead_letters,
            topics.epoch_changes,
            topics.reobserve,
            topics.escalations,
            topics.rekeyed,
            topics.outcomes,
        )
    }
    states = app.Table(
        "key-state",
        partitions=settings.partitions,
        help="Per subject|field: bounded claims, resolutions and decision history.",
    )
    use_serializers(states, "raw", KEYSTATE_CODEC)
    aliases = app.GlobalTable(
        "subject-aliases",
        partitions=settings.partitions,
        help="Alias (normalized) -> canonical subject.",
    )
    field_outcomes = app.Table(
        "field-outcomes",
        default=int,
        partitions=settings.partitions,
        help="Decisions per field|outcome|kind in one-minute windows: conflict rates.",
    )
    outcome_counts = field_outcomes.tumbling(timedelta(minutes=1), expires=timedelta(hours=2))

    def alias_of(subject: str) -> str | None:
        found: str | None = aliases.get(alias_key(subject))
        return found

    async def send(record: Outgoing) -> None:
        await outputs[record.topic].send(
            key=record.key, value=record.value, headers=list(record.headers)
        )

    async def apply(handled: Handled, received: float, tallies: Counter[bytes]) -> None:
        if handled.key is not None and handled.state is not None:
            states[handled.key] = handled.state
            schedule.note(handled.key, handled.state)
        for record in handled.outputs:
            if record.topic == topics.outcomes:
                tallies[record.key or b""] += int(record.value or b"1")
            else:
                await send(record)
        now = time.time()
        for decision in handled.decisions:
            metrics.decided(decision, now)
            if received > 0:
                metrics.decision_latency.observe(max(0.0, now - received))

    @app.agent(inputs, name="arbiter")
    async def arbiter(events: StreamT[bytes]) -> None:
        stream = cast("faust.Stream[bytes]", events)  # take_events is not on the StreamT protocol
        async for batch in stream.take_events(settings.batch_size, settings.batch_within_s):
            # Outcome counts are summed per batch: one record per field|outcome|kind, not one
            # per decision, for the windowed counts.
            tallies: Counter[bytes] = Counter()
            for event in batch:
                writing_for(event)
                record = incoming(event)
                handled = processor.process(record, states.get, alias_of)
                await apply(handled, record.timestamp or 0.0, tallies)
            for key, count in tallies.items():
                await send(Outgoing(topics.outcomes, key, str(count).encode()))
            # Table writes wait in Faust's producer buffer; hand them to the Kafka producer before
            # this batch's offsets become committable. Under exactly_once Faust commits the
            # transaction without draining that buffer, which split state from its offsets.
            await app.producer.buffer.flush()

    @app.agent(topic(topics.aliases), name="alias-feed")
    async def alias_feed(stream: StreamT[bytes]) -> None:
        async for event in stream.events():
            if not isinstance(event.key, bytes):
                continue
            alias = alias_key(event.key.decode("utf-8", "replace"))
            if event.value:
                aliases[alias] = event.value.decode("utf-8", "replace").strip()
            else:
                aliases.pop(alias, None)

    @app.agent(outputs[topics.outcomes], name="field-stats")
    async def field_stats(stream: StreamT[bytes]) -> None:
        async for event in stream.events():
            if isinstance(event.key, bytes) and isinstance(event.value, bytes):
                outcome_counts[event.key.decode()] += int(event.value)

    @app.timer(interval=settings.expiry_interval_s)
    async def due_keys() -> None:
        now = datetime.now(UTC)
        for key, due in schedule.take_due(now):
            await send(processor.tick(key, due))
        ages: dict[str, list[float]] = {}
        for field_name, since in schedule.open_since.values():
            ages.setdefault(field_name, []).append((now - since).total_seconds())
        metrics.set_open_conflicts(ages)
        await record_lag(app, metrics, topics.inputs())

    @app.timer(interval=RESCAN_EVERY_S)
    async def rescan() -> None:
        """Pick up keys restored from the changelog or assigned in a rebalance."""
        schedule.due.clear()
        schedule.open_since.clear()
        for key, state in list(states.items()):
            schedule.note(key, state)

    @app.task
    async def started() -> None:
        metrics.up.set(1)
        await rescan()

    register_views(app, states, policy, schedule, outcome_counts)
    return Pipeline(app, settings, policy, metrics, processor, states, schedule)


def writing_for(event: EventT[Any]) -> None:
    """Make `event` the current event of this task for Faust's table stores.

    A table write goes to the changelog partition (and RocksDB partition) of the current event,
    which Faust's batch iterator leaves at the batch's last event. Only this task's context
    variable is set: the stream object's own `current_event`, which the background buffer-filler
    reads, must stay untouched."""
    faust_streams._current_event.set(weakref.ref(event))


def incoming(event: EventT[Any]) -> Incoming:
    message = event.message
    headers: Any = message.headers or []
    pairs: Iterable[tuple[str, bytes]] = (
        headers.items() if isinstance(headers, Mapping) else headers
    )
    return Incoming(
        topic=message.topic,
        partition=message.partition,
        offset=message.offset,
        key=message.key,
        value=message.value,
        headers=tuple((k, bytes(v or b"")) for k, v in pairs),
        timestamp=message.timestamp,
    )


async def record_lag(app: faust.App, metrics: Metrics, topics: Sequence[str]) -> None:
    consumer = app.consumer
    lag: dict[str, int] = dict.fromkeys(topics, 0)
    for tp in consumer.assignment():
        if tp.topic not in lag:
            continue
        position = await consumer.position(tp)
        highwater = consumer.highwater(tp)
        if position is not None and highwater is not None:
            lag[tp.topic] += max(0, highwater - position)
    for name, value in lag.items():
        metrics.consumer_lag.labels(name).set(value)


def decision_json(decision: Decision) -> dict[str, Any]:
    data: dict[str, Any] = decision.model_dump(mode="json")
    return data


def register_views(
    app: faust.App, states: Any, policy: Policy, schedule: Schedule, outcome_counts: Any
) -> None:
    @app.page("/api/decisions/{key}")
    @app.table_route(table=states, match_info="key")
    async def decision_view(web: View, request: Request, key: str) -> Response:
        state: KeyState | None = states.get(key.encode())
        rules = policy.rules_for(split_key(key)[1])
        if state is None or rules is None:
            return web.json({"error": f"no claims for {key!r}"}, status=404)
        decision = current_decision(state, rules, policy.version, datetime.now(UTC))
        return web.json(
            {
                "decision": decision_json(decision),
                "last_emitted": state.current.model_dump(mode="json") if state.current else None,
            }
        )

    @app.page("/api/decisions/{key}/history")
    @app.table_route(table=states, match_info="key")
    async def history_view(web: View, request: Request, key: str) -> Response:
        state: KeyState | None = states.get(key.encode())
        if state is None:
            return web.json({"error": f"no claims for {key!r}"}, status=404)
        return web.json(
            {
                "key": key,
                "decisions": [s.model_dump(mode="json") for s in state.history],
                "claims": [s.claim.model_dump(mode="json") for s in state.claims],
                "resolutions": [r.model_dump(mode="json") for r in state.resolutions],
            }
        )

    @app.page("/api/conflicts")
    async def conflicts_view(web: View, request: Request) -> Response:
        wanted = request.query.get("field")
        now = datetime.now(UTC)
        rows = [
            {
                "key": key.decode(),
                "field": field_name,
                "open_since": since.isoformat(),
                "age_s": (now - since).total_seconds(),
            }
            for key, (field_name, since) in sorted(schedule.open_since.items())
            if wanted is None or field_name == wanted
        ]
        return web.json({"worker_local": True, "open_conflicts": rows})

    @app.page("/healthz")
    async def health_view(web: View, request: Request) -> Response:
        return web.json({"status": "ok", "policy_version": policy.version})

    @app.page("/api/fields/{field}/outcomes")
    async def outcomes_view(web: View, request: Request, field: str) -> Response:
        """Decisions per outcome in the current one-minute window (keys this worker owns)."""
        counts = {}
        for outcome in Outcome:
            for kind in ("none", "value", "existence", "semantic", "cross_epoch", "provenance"):
                count = outcome_counts[f"{field}|{outcome.value}|{kind}"].now()
                if count:
                    counts[f"{outcome.value}/{kind}"] = count
        return web.json({"field": field, "worker_local": True, "window_s": 60, "counts": counts})
