"""The one module that wires topics, tables, agents, the arbiter and web views.

The arbiter (`streams.arbiter`) is the hot path: a batched loop over the input topics that owns
per-key state, its changelog, the input offsets and the keys' timers (its loop sends their ticks),
and calls the core through `Processor`. Faust keeps what it is good at: the subject-alias
windowed outcome counts, the web API and the worker's lifecycle. Faust's own parts run at least
once whatever the configured guarantee: outcome counts are statistics; the guarantee that
matters, decisions and state committed with their input, belongs to the arbiter. The policy and
alias histories are followed from their topics (`policy_log`, `alias_log`), read to their ends
before the arbiter starts.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import faust
from faust.sensors.prometheus import setup_prometheus_sensors
from faust.types import StreamT
from faust.web import Request, Response, View

from streams.arbiter.loop import Arbiter
from streams.arbiter.routing import Ownership
from streams.console.api import Console
from streams.console.web import register_console
from streams.core.records.contracts import ConflictKind, Outcome, parse_instant
from streams.core.records.policy import Policy, load_policy
from streams.core.timeline.aliases import AliasChange, AliasHistory, belongs_to, change_line
from streams.core.timeline.rollout import PolicyHistory
from streams.ops.health import LagProbe, Pulse, report_health
from streams.ops.metrics import Metrics
from streams.ops.stall_watch import StallWatch, stall_view
from streams.ops.stalls import LoopLagProbe, StallCollector
from streams.pipeline import Processor
from streams.pipeline.authentication import principal_topics
from streams.settings import Settings
from streams.wire.registry import WireCodec, registry_for
from streams.worker.alias_log import AliasFollower, AliasLog
from streams.worker.erasure_log import ErasureFollower
from streams.worker.policy_log import PolicyFollower
from streams.worker.retention import topic_configs
from streams.worker.topics import OUTCOMES_KEPT

OUTCOME_WINDOW = timedelta(minutes=1)


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

    outcome_counts = _outcome_counts(app, settings)

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
        [*topics.inputs(), *principal_topics(policy, settings)],
        pulse,
        loop=app.loop,
        beacon=app.beacon,
    )

    @app.agent(topic(topics.outcomes), name="field-stats")
    async def field_stats(stream: StreamT[bytes]) -> None:
        async for event in stream.events():
            if isinstance(event.key, bytes) and isinstance(event.value, bytes):
                outcome_counts[event.key.decode()] += int(event.value)

    # The aliases first: read to the topic's end before the arbiter decides anything.
    aliases = AliasFollower(settings, processor, arbiter.turn, loop=app.loop, beacon=app.beacon)
    erasures = ErasureFollower(settings, processor, arbiter.turn, loop=app.loop, beacon=app.beacon)
    services = [aliases, erasures, arbiter, *_probes(app, settings, metrics, arbiter, pulse)]
    if history is not None:
        services.append(
            PolicyFollower(settings, processor, arbiter.turn, loop=app.loop, beacon=app.beacon)
        )

    @app.task
    async def start_arbiter() -> None:
        for service in services:
            await app.add_runtime_dependency(service)

    register_views(app, pulse, arbiter.ownership, processor, outcome_counts, aliases.alias_log)
    console = register_console(
        app,
        arbiter.ownership,
        lambda: processor.aliases,
        lambda: processor.policies,
        lambda: processor.clock.erasures,
        lambda: erasures.erasure_log.waiting,
        settings,
        metrics,
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


def _outcome_counts(app: faust.App, settings: Settings) -> Any:
    """The Faust table of decisions per field, outcome and kind in one-minute windows (the
    conflict rates)."""
    field_outcomes = app.Table(
        "field-outcomes",
        default=int,
        partitions=settings.partitions,
        help="Decisions per field|outcome|kind in one-minute windows: conflict rates.",
    )
    return field_outcomes.tumbling(OUTCOME_WINDOW, expires=OUTCOMES_KEPT)


ENDPOINTS = {
    "GET /ui/": "the steward console: the cluster's open conflicts, a key's evidence, timeline "
    "and past beliefs, resolutions (a browser opening / lands there)",
    "GET /api/console": "what the console's pages need: this worker, whether steward writes are "
    "enabled, the steward the request's token names (null without one), the policy version, its "
    "fields, conflict kinds and sources",
    "GET /api/decisions/{subject}%7C{field}[?as_of=RFC3339]": "the current decision with its "
    "evidence, recomputed now, the last emitted one and `basis` (the decision id and evidence "
    "digest an approval names); or the belief in force at as_of, with "
    "the evidence it had, rebuilt from the key's retained claims (evidence_basis rebuilt, or "
    "not_retained once they are evicted; 404 when no belief was in force). 410 with erasure_id "
    "and erased_at, never a value, once the subject is erased (as_of before the erasure too; a "
    "key held again since holds only what was sent after it). Any worker answers, forwarding to "
    "the key's owner",
    "GET /api/decisions/{subject}%7C{field}/history": "the key's emitted decisions, retained "
    "claims, resolutions in force and steward log (proposals, reviews, undos, assignments, each "
    "with its standing); 410 with erasure_id and erased_at for an erased subject",
    (
        "GET /api/conflicts[?field=F&kind=K&source=S&min_age_s=N&assignee=A&unassigned=1&overdue=1]"
    ): "open conflicts and quarantines across the cluster, oldest first, each a stewards' task "
    "(who holds it until when, when it is due, proposals waiting for review), with counts per "
    "field and the workers that did not answer",
    "GET /api/sources[?since=RFC3339]": "how often each source's claims matched what closed "
    "conflicts settled on, per source and field, with candidate shared lineages and authorities "
    "to review (across the cluster)",
    "POST /api/policy/preview[?limit=N]": "the policy in the body (YAML) against the keys the "
    "cluster holds, as if put in force now: per field the decisions that would flip (from -> "
    "to, example keys), keys not judged, kept claims it would refuse; nothing is sent or "
    "changed (at most N keys per worker, default 100000); 400 with the loader's error for a bad "
    "policy",
    "POST /api/resolutions": "a steward's statement (key, act: resolve by default, undo, "
    "approve, reject, send_back or assign; status, value, note, resolves_decision_id, target_id, "
    "basis_digest, assignee), published to the resolutions topic as the token's steward "
    "(Authorization: Bearer <steward token>), signed as that steward where the policy asks; 202 "
    "once published: 401 without a token, 403 with a wrong one, when writes are off or no key "
    "signs for the steward (unsigned), 400 for a body that is no statement, 409 stale_decision "
    "or review_refused when the key's owner would refuse it",
    "POST /api/resolutions/batch": 'many statements at once ({"statements": [...]}, at most '
    "500), answered one by one: each accepted one (202) with its record, each refused one with "
    "its status, reason and error; accepted ones are published together",
    "GET /api/aliases[?subject=S&at=RFC3339]": "the subject aliases this worker follows: each "
    "change with its instant and steward, oldest first, and the aliases in force at `at` "
    "(default now), each spelling with the subject it names after following chains; with "
    "`subject`, only the changes that moved evidence into or out of its key (its merge "
    "history); a retraction a later merge of the same spelling undid names that merge "
    "(`superseded_by`); the records passed over (not proven a steward's, unreadable, "
    "closing a cycle), with why; and the changes waiting for stewards' approvals (`waiting`)",
    "GET /api/aliases/preview?alias=A[&subject=S]": "alias A naming S (no S: A retracted), were "
    "it to take effect now, against the keys it touches across the cluster: the evidence that "
    "would move from key to key and each key's decision now beside the one it would take; "
    "nothing is published; 400 for a change that would close a cycle, 503 when a key's owner "
    "cannot be asked",
    "GET /api/erasures[?subject=S]": "the erasures stewards approved, oldest first (id, subject, "
    "instant, whether in effect yet, requested when and by whom, reason, approvals, the alias "
    "spellings covered) and the requests waiting for approvals (id, subject, requested when and by "
    "whom, reason, approvals needed and made); with `subject`, those of that subject",
    "POST /api/erasures": 'a steward\'s erasure request ({"subject": S, "reason": R}, under a '
    'fresh id) or approval ({"approve": ID}), published to the erasures topic as the token\'s '
    "steward (Authorization: Bearer <steward token>), taking effect policy_lead_s later; 202 "
    "with erasure_id and at once published: 401 without a token, 403 with a wrong one or when "
    "writes are off, 400 for another body, 409 review_refused for an approval that would count "
    "for nothing (no such request waiting, approved by this steward already, the author's own)",
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


def _listed(change: AliasChange, aliases: AliasHistory) -> dict[str, Any]:
    """A change as `GET /api/aliases` lists it; a retraction a later merge of the same spelling
    undid names that merge (`superseded_by`)."""
    listed: dict[str, Any] = json.loads(change_line(change))
    if change.canonical is None:
        later = aliases.superseded_by(change)
        listed["superseded_by"] = json.loads(change_line(later)) if later else None
    return listed


def register_views(
    app: faust.App,
    pulse: Pulse,
    ownership: Ownership,
    processor: Processor,
    outcome_counts: Any,
    alias_log: AliasLog,
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

    @app.page("/api/aliases")
    async def aliases_view(web: View, request: Request) -> Response:
        aliases = processor.aliases
        try:
            at = parse_instant(request.query["at"]) if "at" in request.query else None
        except ValueError as exc:
            return web.json({"error": f"at: not an RFC 3339 instant: {exc}"}, status=400)
        now = at or datetime.now(UTC)
        subject = request.query.get("subject")
        changes = aliases.changes if subject is None else aliases.involving(subject)
        table = aliases.in_force(now)
        return web.json(
            {
                "at": now.isoformat(),
                "changes": [_listed(change, aliases) for change in changes],
                "in_force": {alias: belongs_to(alias, table) for alias in sorted(table)},
                "passed_over": alias_log.passed_over,
                "waiting": [waiting.as_json() for waiting in alias_log.waiting],
            }
        )

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
