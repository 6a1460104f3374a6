"""The one module that wires topics, tables, agents, the arbiter and web views.

The arbiter (`streams.arbiter`) is the hot path: a batched loop over the input topics that owns
per-key state, its changelog, the input offsets and the keys' timers (its loop sends their ticks),
and calls the core through `Processor`. Faust keeps what it is good at: the subject-alias
GlobalTable, the windowed outcome counts, the web API and the worker's lifecycle. Faust's own
parts run at least once whatever the configured guarantee: aliases are idempotent and outcome
counts are statistics; the guarantee that matters, decisions and state committed with their
input, belongs to the arbiter.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import faust
from faust.sensors.prometheus import setup_prometheus_sensors
from faust.types import TP, StreamT
from faust.web import Request, Response, View

from streams.arbiter.loop import Arbiter
from streams.arbiter.routing import Ownership
from streams.console.api import Console
from streams.console.web import register_console
from streams.core.admission.normalize import normalize_string
from streams.core.records.contracts import ConflictKind, Outcome
from streams.core.records.errors import RejectedInput
from streams.core.records.policy import Policy, StringCase, load_policy
from streams.core.timeline.rollout import PolicyHistory
from streams.ops.health import LagProbe, Pulse, report_health
from streams.ops.metrics import Metrics
from streams.ops.stall_watch import StallWatch, stall_view
from streams.ops.stalls import LoopLagProbe, StallCollector
from streams.pipeline import Processor
from streams.pipeline.authentication import principal_topics
from streams.pipeline.records import Incoming
from streams.pipeline.rekey import partition_of
from streams.settings import Settings
from streams.wire.registry import WireCodec, registry_for
from streams.worker.policy_log import PolicyFollower
from streams.worker.retention import topic_configs
from streams.worker.topics import OUTCOMES_KEPT

OUTCOME_WINDOW = timedelta(minutes=1)


def alias_key(subject: str) -> str:
    """Aliases match regardless of case and spacing: `ACME  Corp` finds `acme corp`."""
    return normalize_string(subject, StringCase.FOLD)


class AliasTable(faust.GlobalTable):
    """The subject-alias table, mirrored whole in memory. The arbiter looks up every claim's
    subject, and a Faust table read runs its sensors and a store read (about as much as
    admitting the claim); with more subjects than any memo holds, every claim would pay it.
    Aliases are declared by stewards, so they are few: the mirror holds them all. It is read
    from the table at the first lookup after the table's partitions were assigned or a changelog
    batch was applied (a restore), and kept in step with each local write.

    One alias arrives under any spelling (`ACME  Corp`, `acme corp`), and spellings fall on
    different partitions of the aliases topic. A Faust table journals a write to the changelog
    partition of the record that caused it, and on RocksDB keeps it in that partition's
    database: one alias would sit in several partitions, and a restarted worker, which reads
    partitions in no set order, could take an earlier value for the latest. So an alias is
    journaled to the partition of its own (normalized) key, where its records keep their order,
    and the table is held in memory whatever the worker's store: RocksDB would still file a
    write under the record's partition. A restart reads the changelog in full; compacted, it
    holds one record per alias."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._mirror: dict[str, str] | None = None

    def _new_store(self) -> Any:
        return self._new_store_by_url("memory://")

    def partition_for_key(self, key: Any) -> int:
        partitions = self.partitions
        assert partitions, "the alias table is declared with its partition count"
        return partition_of(str(key).encode(), partitions)

    def canonical(self, subject: str) -> str | None:
        """The canonical subject `subject` is an alias of, if any."""
        mirror = self._mirror
        if mirror is None:
            mirror = self._mirror = dict(self.data.items())
        return mirror.get(alias_key(subject)) if mirror else None

    def on_key_set(self, key: Any, value: Any) -> None:
        super().on_key_set(key, value)
        if self._mirror is not None:
            self._mirror[key] = value

    def on_key_del(self, key: Any) -> None:
        super().on_key_del(key)
        if self._mirror is not None:
            self._mirror.pop(key, None)

    def apply_changelog_batch(self, batch: Any) -> None:
        super().apply_changelog_batch(batch)
        self._mirror = None

    async def on_rebalance(
        self,
        assigned: set[TP],
        revoked: set[TP],
        newly_assigned: set[TP],
        generation_id: int = 0,
    ) -> None:
        await super().on_rebalance(assigned, revoked, newly_assigned, generation_id)
        self._mirror = None


@dataclass
class Pipeline:
    """Everything `build` wires, for the CLI and the tests."""

    app: faust.App
    settings: Settings
    policy: Policy
    metrics: Metrics
    processor: Processor
    arbiter: Arbiter
    console: Console


def faust_settings(settings: Settings) -> dict[str, Any]:
    options: dict[str, Any] = {
        "broker": settings.broker,
        "store": settings.store,
        "datadir": str(settings.data_dir),
        "web_bind": settings.web_host,
        "web_host": settings.web_host,
        "web_port": settings.web_port,
        "processing_guarantee": "at_least_once",
        "topic_partitions": settings.partitions,
        "topic_replication_factor": settings.replication_factor,
        "broker_session_timeout": settings.broker_session_timeout_s,
        "consumer_group_instance_id": settings.instance_id,
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
        "GlobalTable": AliasTable,
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


def build(
    settings: Settings, policy: Policy | None = None, history: PolicyHistory | None = None
) -> Pipeline:
    """The worker's parts, wired. `history`: the cluster's policies from the policy topic, which
    the worker follows (`policy_log`); without it, `policy` alone, in force from now. A key last
    decided under another policy is moved to the one in force before anything else applies to
    it, and the rollout sweep moves the quiet ones (`arbiter.sweep`)."""
    policy = policy or load_policy(settings.policy)
    policies = history or PolicyHistory.of(policy, datetime.now(UTC))
    metrics = Metrics(policy)
    app = faust.App(settings.app_id, **faust_settings(settings))
    setup_prometheus_sensors(
        app, "/metrics", registry=metrics.registry, name_prefix="claimstream_faust"
    )
    codec = WireCodec(registry_for(settings))
    processor = Processor(settings, policies, codec, metrics, group=f"{settings.app_id}-arbiter")
    topics = settings.topics
    configs = topic_configs(settings)

    def topic(name: str) -> Any:
        return app.topic(
            name,
            partitions=settings.partitions,
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
            config=configs[name],  # as ensure_topics creates it, should Faust declare it first
        )

    aliases, outcome_counts = _tables(app, settings)
    alias_of = aliases.canonical

    pulse = Pulse(
        metrics,
        settings.liveness_timeout_s,
        settings.restore_timeout_s,
        stall_timeout_s=settings.task_stall_timeout_s,
    )
    arbiter = Arbiter(
        settings,
        processor,
        metrics,
        alias_of,
        [*topics.inputs(), *principal_topics(policy, settings)],
        pulse,
        loop=app.loop,
        beacon=app.beacon,
    )

    dead_letters = topic(topics.dead_letters)

    @app.agent(topic(topics.aliases), name="alias-feed")
    async def alias_feed(stream: StreamT[bytes]) -> None:
        async for event in stream.events():
            if not isinstance(event.key, bytes):
                continue
            if not await _alias_proven(processor, dead_letters, event.message):
                continue
            alias = alias_key(event.key.decode("utf-8", "replace"))
            if event.value:
                aliases[alias] = event.value.decode("utf-8", "replace").strip()
            else:
                aliases.pop(alias, None)

    @app.agent(topic(topics.outcomes), name="field-stats")
    async def field_stats(stream: StreamT[bytes]) -> None:
        async for event in stream.events():
            if isinstance(event.key, bytes) and isinstance(event.value, bytes):
                outcome_counts[event.key.decode()] += int(event.value)

    services = [arbiter, *_probes(app, settings, metrics, arbiter, pulse)]
    if history is not None:
        services.append(
            PolicyFollower(settings, processor, arbiter.turn, loop=app.loop, beacon=app.beacon)
        )

    @app.task
    async def start_arbiter() -> None:
        for service in services:
            await app.add_runtime_dependency(service)

    register_views(app, pulse, arbiter.ownership, processor, outcome_counts)
    console = register_console(
        app, arbiter.ownership, alias_of, lambda: processor.policies, settings, metrics
    )
    return Pipeline(app, settings, policy, metrics, processor, arbiter, console)


def _probes(
    app: faust.App, settings: Settings, metrics: Metrics, arbiter: Arbiter, pulse: Pulse
) -> list[Any]:
    """What watches the worker: consumer lag and stalled tasks (the lag probe, which tells the
    pulse), liveness and readiness as metrics, the event loop's lag and its stalls."""
    report_health(metrics, pulse, arbiter.ownership.open_tasks)
    metrics.registry.register(StallCollector(arbiter.tasks.cache))
    stall_watch = StallWatch(metrics.registry, settings.stall_threshold_s, loop=app.loop)
    app.page("/api/stalls")(stall_view(stall_watch))
    return [
        LagProbe(settings, metrics, arbiter.group, arbiter.inputs, lambda: pulse.owned, pulse),
        LoopLagProbe(metrics.registry, loop=app.loop),
        stall_watch,
    ]


def _tables(app: faust.App, settings: Settings) -> tuple[AliasTable, Any]:
    """The Faust tables: subject aliases (global), and the decisions per field, outcome and
    kind in one-minute windows (the conflict rates)."""
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
    assert isinstance(aliases, AliasTable)
    return aliases, field_outcomes.tumbling(OUTCOME_WINDOW, expires=OUTCOMES_KEPT)


async def _alias_proven(processor: Processor, dead_letters: Any, message: Any) -> bool:
    """An alias redirects a subject's claims: a record not proven a steward's is dead-lettered,
    as a resolution would be."""
    record = Incoming(
        message.topic,
        message.partition,
        message.offset,
        message.key,
        message.value,
        tuple((k, bytes(v or b"")) for k, v in _header_pairs(message.headers)),
        message.timestamp,
    )
    try:
        processor.authentication.check_alias(record, datetime.now(UTC))
    except RejectedInput as exc:
        letter = processor.outputs.dead_letter(record, exc, 1)
        await dead_letters.send(key=letter.key, value=letter.value, headers=letter.headers)
        return False
    return True


def _header_pairs(headers: Any) -> list[tuple[str, Any]]:
    """Faust hands a message's headers over as a list of pairs or as a mapping."""
    return list(headers.items()) if isinstance(headers, dict) else list(headers or ())


ENDPOINTS = {
    "GET /ui/": "the steward console: the cluster's open conflicts, a key's evidence, timeline "
    "and past beliefs, resolutions (a browser opening / lands there)",
    "GET /api/console": "what the console's pages need: this worker, whether steward writes are "
    "enabled, the policy version, its fields, conflict kinds and sources",
    "GET /api/decisions/{subject}%7C{field}[?as_of=RFC3339]": "the current decision with its "
    "evidence, recomputed now, and the last emitted one; or the belief in force at as_of, with "
    "the evidence it had, rebuilt from the key's retained claims (evidence_basis rebuilt, or "
    "not_retained once they are evicted; 404 when no belief was in force). Any worker answers, "
    "forwarding to the key's owner",
    "GET /api/decisions/{subject}%7C{field}/history": "the key's emitted decisions, retained "
    "claims and resolutions",
    "GET /api/conflicts[?field=F&kind=K&source=S&min_age_s=N]": "open conflicts and "
    "quarantines across the cluster, oldest first, with counts per field and the workers that "
    "did not answer",
    "GET /api/sources[?since=RFC3339]": "how often each source's claims matched what closed "
    "conflicts settled on, per source and field, with candidate shared lineages and authorities "
    "to review (across the cluster)",
    "POST /api/policy/preview[?limit=N]": "the policy in the body (YAML) against the keys the "
    "cluster holds, as if put in force now: per field the decisions that would flip (from -> "
    "to, example keys), keys not judged, kept claims it would refuse; nothing is sent or "
    "changed (at most N keys per worker, default 100000); 400 with the loader's error for a bad "
    "policy",
    "POST /api/resolutions": "a steward's resolution (key, status, value, note, "
    "resolves_decision_id), published to the resolutions topic (Authorization: Bearer <steward "
    "token>), 202 once published: 401 without a token, 403 with a wrong one or when writes are "
    "off, 400 for a body that is no resolution, 409 stale_decision when resolves_decision_id is "
    "no longer the key's current decision",
    "GET /api/live[?key=K]": "server-sent events: the decisions the cluster emits",
    "GET /api/fields/{field}/outcomes": "decisions per outcome in the current and the previous "
    "one-minute window (one to two minutes of decisions; keys this worker owns)",
    "GET /healthz": "liveness (the arbiter loop iterating) and the policy version; 503 with "
    "reasons when failing",
    "GET /readyz": "readiness (assigned tasks restored); 503 with reasons when not ready",
    "GET /api/stalls[?since=epoch_s]": "the event loop's longest stalls (held over "
    "stall_threshold_s) with what it ran: sampled stacks, overlapping garbage collections",
    "GET /metrics": "Prometheus metrics",
}


def register_views(
    app: faust.App,
    pulse: Pulse,
    ownership: Ownership,
    processor: Processor,
    outcome_counts: Any,
) -> None:
    async def endpoints_view(web: View, request: Request) -> Response:
        return web.json({"service": "claimstream", "endpoints": ENDPOINTS})

    app.page("/api")(endpoints_view)
    app.page("/")(endpoints_view)

    @app.page("/healthz")
    async def liveness_view(web: View, request: Request) -> Response:
        verdict = pulse.liveness()
        in_force = processor.policies.entries[processor.policies.position(datetime.now(UTC))]
        body = verdict.json() | {
            "policy_version": in_force.policy.version,
            "policy_since": in_force.since.isoformat(),
        }
        return web.json(body, status=200 if verdict.ok else 503)

    @app.page("/readyz")
    async def readiness_view(web: View, request: Request) -> Response:
        verdict = pulse.readiness(ownership.open_tasks())
        return web.json(verdict.json(), status=200 if verdict.ok else 503)

    @app.page("/api/fields/{field}/outcomes")
    async def outcomes_view(web: View, request: Request, field: str) -> Response:
        """Decisions per outcome over a rolling last minute: the current one-minute window plus
        the previous one, so the answer never empties as a minute turns (keys this worker owns)."""
        counts = {}
        # Two fixed instants read once: faust's delta() needs a stream event to be relative to.
        now_s = time.time()
        current = outcome_counts.relative_to(now_s)
        previous = outcome_counts.relative_to(now_s - OUTCOME_WINDOW.total_seconds())
        for outcome in Outcome:
            for kind in ("none", *ConflictKind):
                key = f"{field}|{outcome.value}|{kind}"
                count = current[key].value() + previous[key].value()
                if count:
                    counts[f"{outcome.value}/{kind}"] = count
        return web.json(
            {
                "field": field,
                "worker_local": True,
                "window_s": OUTCOME_WINDOW.total_seconds(),
                "covers": "the current and the previous window",
                "counts": counts,
            }
        )
