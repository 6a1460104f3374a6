"""The console's JSON API: one module-level handler per route, each given the `Console`.

`streams.console.web` binds `ROUTES` to the worker's web server. A handler answers from what this
worker holds, asked through the arbiter's `Ownership` (a key's owner and state, the open
conflicts, the peers), and leaves the rest to `streams.console.forward` (forward to the key's
owner, fan the queue out to the peers, relay their live decisions).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple, cast

import aiohttp
from aiohttp import web as aioweb
from faust.web import Request, Response, View

from streams.arbiter.routing import Ownership
from streams.arbiter.sources import LEDGER_KEY, merged, readable, sources_report
from streams.console.cluster_alias_preview import Unreadable, cluster_states, owned_states
from streams.console.cluster_preview import (
    cluster_answer,
    owned_preview,
    peer_preview,
    preview_limit,
)
from streams.console.erasures import ERASED_STATUS, erased_as_of, erased_body, erased_key, listing
from streams.console.forward import ROUTED_HEADER, Peers
from streams.console.live import END, LiveDecisions, Unavailable, sse
from streams.console.queue import QueueFilter, local_rows, merge
from streams.console.stewards import Refusal, StewardTokens
from streams.core.keys.belief import current_decision
from streams.core.keys.state import KeyState, split_key
from streams.core.keys.stewardship import basis_digest
from streams.core.reading.alias_preview import alias_preview, touched_keys
from streams.core.reading.asof import NoBeliefAsOf, belief_as_of
from streams.core.reading.explain import explain
from streams.core.reading.policy_preview import Previewer
from streams.core.records import contracts
from streams.core.records.contracts import (
    ConflictKind,
)
from streams.core.records.errors import AliasError, PolicyError
from streams.core.records.policy import FieldRules, Policy, policy_from_text
from streams.core.sources.settlement import ledger_document
from streams.core.timeline.aliases import AliasChange, AliasHistory
from streams.core.timeline.erasures import Erasure, ErasureHistory, Pending
from streams.core.timeline.rollout import PolicyHistory, catch_up
from streams.ops.metrics import Metrics
from streams.pipeline.rekey import canonical_key
from streams.settings import Settings

log = logging.getLogger(__name__)

HEARTBEAT_S = 10.0

Clock = Callable[[], datetime]


def wall_clock() -> datetime:
    return datetime.now(UTC)


@dataclass
class Console:
    """What every handler needs: the worker's ownership, the policies, and the console's parts."""

    ownership: Ownership
    aliases: Callable[[], AliasHistory]  # the subject aliases over time, as the worker follows them
    policies: Callable[[], PolicyHistory]  # the worker's policy history, as it grows
    erasures: Callable[[], ErasureHistory]  # the erasures approved, as the worker follows them
    waiting_erasures: Callable[[], Sequence[Pending]]  # erasure requests waiting for approvals
    settings: Settings
    metrics: Metrics
    live: LiveDecisions
    stewards: StewardTokens
    peers: Peers
    clock: Clock = wall_clock

    @property
    def policy(self) -> Policy:
        """The policy in force now."""
        return self.policies().in_force(self.clock())

    def alias_of(self, subject: str, at: datetime | None = None) -> str | None:
        """The canonical subject `subject` names at `at` (now by default), where it is an
        alias then."""
        named = self.aliases().canonical(subject, at or self.clock())
        return named if named != subject else None

    def live_upstreams(self, key: str | None) -> list[str]:
        """The workers whose live decisions a stream for `key` (or for every key) relays."""
        if key is None:
            return self.ownership.peers()
        owner = self.ownership.owner_of(key.encode())
        return [] if owner.here or owner.url is None else [owner.url]


Handler = Callable[..., Awaitable[Any]]


class Route(NamedTuple):
    method: str  # the View method that answers: get or post
    path: str
    name: str
    handler: Handler


def duration_text(span: timedelta | None) -> str:
    """A policy duration as the policy file writes it: 60s, 10m, 24h, 1d; `none` for never."""
    if span is None:
        return "none"
    milliseconds = int(span.total_seconds() * 1000)
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if milliseconds and milliseconds % size == 0:
            return f"{milliseconds // size}{unit}"
    return f"{milliseconds}ms"


def rules_json(rules: FieldRules) -> dict[str, Any]:
    """The field's effective policy, as a person reads the policy file."""
    return {
        "field": rules.name,
        "type": rules.type.value,
        "values": list(rules.values) if rules.values else None,
        "currency": rules.currency,
        "unit": rules.unit,
        "tolerance": rules.tolerance,
        "case": rules.case.value,
        "freshness": duration_text(rules.freshness),
        "on_conflict": rules.on_conflict.value,
        "min_independent_sources": rules.min_independent_sources,
        "epoch_change": rules.epoch_change.value,
        "escalate_after": duration_text(rules.escalate_after),
        "review": {
            "approvals": rules.review.approvals,
            "author_may_approve": rules.review.author_may_approve,
            "lease": duration_text(rules.review.lease),
        },
        "authorities": {source: a.value for source, a in sorted(rules.authorities.items())},
    }


def parse_instant(raw: str) -> datetime:
    """An RFC 3339 instant from a query string, where an unescaped `+` offset arrives as a space."""
    return contracts.parse_instant(raw.replace(" ", "+"))


async def console_settings(console: Console, web: View, request: Request) -> Response:
    """What the pages need to know: may they offer writes, who the request's steward token
    names (null without a good one), and the policy's vocabulary."""
    policy = console.policy
    steward = console.stewards.steward(request.headers.get("Authorization"))
    return web.json(
        {
            "worker": console.ownership.url,
            "writes_enabled": console.stewards.writes_enabled,
            "steward": None if isinstance(steward, Refusal) else steward,
            "policy_version": policy.version,
            "fields": sorted(policy.fields),
            "conflict_kinds": [kind.value for kind in ConflictKind],
            "sources": sorted(s for s in policy.sources if s != "*"),
        }
    )


async def conflicts(console: Console, web: View, request: Request) -> Response:
    """Open conflicts and quarantines across the cluster (routed: this worker's only)."""
    try:
        wanted = QueueFilter.from_query(request.query)
    except ValueError as exc:
        return web.json({"error": str(exc)}, status=400)
    now, url = console.clock(), console.ownership.url
    rules_for = console.policy.rules_for
    rows = local_rows(console.ownership.open_keys(), now, wanted, url, rules_for)
    if request.headers.get(ROUTED_HEADER):
        return web.json({"worker": url, "rows": rows})
    peers = console.ownership.peers()
    answers = await asyncio.gather(*(console.peers.rows(peer, wanted) for peer in peers))
    return web.json(merge([(url, rows), *zip(peers, answers, strict=True)], wanted, now))


async def sources(console: Console, web: View, request: Request) -> Response:
    """How often each source's claims matched what settled conflicts settled on, across the
    cluster, since `since` (an RFC 3339 instant, counted by whole UTC days); routed: this
    worker's ledger, for the worker that asked to merge."""
    raw_since = request.query.get("since")
    try:
        since = parse_instant(raw_since).date() if raw_since else None
    except ValueError as exc:
        return web.json({"error": f"since: {exc}"}, status=400)
    url = console.ownership.url
    mine = merged(readable(r) for r in console.ownership.task_records(LEDGER_KEY))
    if request.headers.get(ROUTED_HEADER):
        return web.json({"worker": url, "ledger": ledger_document(mine)})
    peers = console.ownership.peers()
    answers = await asyncio.gather(*(console.peers.ledger(peer) for peer in peers))
    found = [ledger for ledger in answers if ledger is not None]
    return web.json(
        {
            **sources_report(merged([mine, *found]), console.policy, since),
            "workers": [url, *(p for p, a in zip(peers, answers, strict=True) if a is not None)],
            "unanswered": [p for p, a in zip(peers, answers, strict=True) if a is None],
        }
    )


async def policy_preview(console: Console, web: View, request: Request) -> Response:
    """The owned keys' decisions now beside those the policy in the body (its YAML text) would
    give were it put in force now, per field: what would flip, examples, keys not judged, the
    kept claims it would refuse. Nothing is sent, no state changes. Each worker judges at most
    `limit` keys; the worker asked merges every worker's answer (routed: this worker's)."""
    ownership, now = console.ownership, console.clock()
    try:
        limit = preview_limit(request.query.get("limit"))
        text = await request.text()
        policy = policy_from_text(text, "policy")
        previewer = Previewer(console.policies(), policy, now, console.settings.key_limits())
    except (PolicyError, ValueError) as exc:
        return web.json({"error": str(exc)}, status=400)
    local = owned_preview(ownership, previewer, limit)
    if request.headers.get(ROUTED_HEADER):
        return web.json((await local).as_json())
    peers = ownership.peers()
    asked = [peer_preview(console.peers, peer, text, {"limit": str(limit)}) for peer in peers]
    mine, answers = await asyncio.gather(local, asyncio.gather(*asked))
    return web.json(cluster_answer(mine, peers, answers, limit, now))


async def alias_change_preview(console: Console, web: View, request: Request) -> Response:
    """`alias` naming `subject` (no subject: the alias retracted), were it to take effect now,
    against the keys it touches across the cluster: where their evidence would go and what each
    would decide. Routed (a peer asking): the states this worker holds of those keys."""
    now, policies = console.clock(), console.policies()
    query = {name: request.query[name] for name in ("alias", "subject") if request.query.get(name)}
    try:
        change = AliasChange(query.get("alias", ""), query.get("subject"), now, "preview")
        touched = touched_keys(console.aliases(), change, policies.in_force(now), now)
    except AliasError as exc:
        return web.json({"error": str(exc)}, status=400)
    if request.headers.get(ROUTED_HEADER):
        return web.json({"states": owned_states(console.ownership, touched.keys)})
    try:
        states = await cluster_states(console.ownership, console.peers, touched.keys, query)
    except Unreadable as exc:
        return web.json({"error": str(exc)}, status=503)
    limits = console.settings.key_limits()
    found = alias_preview(states, policies, console.aliases(), change, now, limits)
    return web.json(found.as_json() | {"keys_read": len(states)})


async def decision(console: Console, web: View, request: Request, key: str) -> Response:
    """The key's current decision with its evidence, or the belief in force at `as_of`: a
    subject named by an alias is read on the key of the subject it named then. A read of an
    erased subject answers ERASED_STATUS, as of any instant before the erasure too."""
    raw_as_of = request.query.get("as_of")
    try:
        as_of = parse_instant(raw_as_of) if raw_as_of else None
    except ValueError as exc:
        return web.json({"error": f"as_of: {exc}"}, status=400)
    key = canonical_key(key, lambda subject: console.alias_of(subject, as_of))
    ownership, policy, now = console.ownership, console.policy, console.clock()
    subject, field = split_key(key)
    erasures = console.erasures()
    if as_of is not None and (erased := erased_as_of(erasures, subject, as_of, now)):
        return web.json(erased_body(key, erased), status=ERASED_STATUS)

    def answer() -> Response:
        state = ownership.state_of(key.encode())
        if erased := erased_key(erasures, subject, state, now):
            return web.json(erased_body(key, erased), status=ERASED_STATUS)
        rules = policy.rules_for(field)
        if state is None or rules is None:
            return web.json({"error": f"no claims for {key!r}"}, status=404)
        if as_of is not None:
            erased_before = erasures.last_of(subject, as_of)  # no belief since it: erased then
            return _as_of_answer(web, key, state, rules, policy, as_of, erased_before)
        # As the key stands once what is due by now has moved it: its timers, a newer policy.
        moved = catch_up(state, console.policies(), now, console.settings.key_limits())
        state = moved[-1][1].state if moved else state
        current = current_decision(state, rules, policy.version, now)
        return web.json(
            {
                "key": key,
                "worker": ownership.url,
                "decision": current.model_dump(mode="json"),
                # What an approval names as the basis its steward saw (stewardship.py).
                "basis": {
                    "decision_id": current.decision_id,
                    "evidence_digest": basis_digest(current),
                },
                "explain": explain(current, state.resolutions),
                "last_emitted": state.current.as_json() if state.current else None,
                "open_since": state.conflict_since.isoformat() if state.conflict_since else None,
                "rules": rules_json(rules),
            }
        )

    owner = ownership.owner_of(key.encode())
    return await console.peers.at_owner(web, request, key, owner, answer)


async def decision_history(console: Console, web: View, request: Request, key: str) -> Response:
    """The key's emitted decisions, retained claims and resolutions; ERASED_STATUS for an
    erased subject's (a key held again since its erasure holds only what was sent after)."""
    key = canonical_key(key, console.alias_of)
    ownership, erasures, now = console.ownership, console.erasures(), console.clock()

    def answer() -> Response:
        state = ownership.state_of(key.encode())
        if erased := erased_key(erasures, split_key(key)[0], state, now):
            return web.json(erased_body(key, erased), status=ERASED_STATUS)
        if state is None:
            return web.json({"error": f"no claims for {key!r}"}, status=404)
        return web.json(
            {
                "key": key,
                "decisions": [s.as_json() for s in state.history],
                "claims": [
                    {
                        **s.claim.as_claim().model_dump(mode="json"),
                        "authority": s.authority.value,
                        "lineage": s.lineage,
                    }
                    for s in state.claims
                ],
                "resolutions": [r.model_dump(mode="json") for r in state.resolutions],
                "steward_log": [step.as_json() for step in state.steward_log],
            }
        )

    owner = ownership.owner_of(key.encode())
    return await console.peers.at_owner(web, request, key, owner, answer)


def _as_of_answer(
    web: View,
    key: str,
    state: KeyState,
    rules: FieldRules,
    policy: Policy,
    at: datetime,
    erased: Erasure | None,
) -> Response:
    """The belief in force at `at`; where the key held none, and its subject had been erased
    by then (`erased`), that it was erased."""
    try:
        found = belief_as_of(state, rules, policy.version, at, policy.defaults.max_clock_skew)
    except NoBeliefAsOf as exc:
        if erased is not None:
            return web.json(erased_body(key, erased), status=ERASED_STATUS)
        return web.json({"error": str(exc), "key": key, "as_of": at.isoformat()}, status=404)
    return web.json(
        {
            "key": key,
            "as_of": at.isoformat(),
            "belief": found.belief.as_json(),
            "evidence_basis": found.basis.value,
            "decision": found.decision.model_dump(mode="json") if found.decision else None,
            "explain": explain(found.decision, state.resolutions) if found.decision else None,
            "rules": rules_json(rules),
        }
    )


async def erasures(console: Console, web: View, request: Request) -> Response:
    """The erasures approved (in effect, or from their instant) and the requests waiting for
    stewards' approvals; with `subject`, those of the subject (or the subject it names now).
    Every worker reads the whole erasures topic: this one's answer is the cluster's."""
    subject = request.query.get("subject") or None
    spellings = None if subject is None else {subject, console.alias_of(subject) or subject}
    now = console.clock()
    return web.json(listing(console.erasures(), console.waiting_erasures(), now, spellings))


async def live(console: Console, web: View, request: Request) -> aioweb.StreamResponse:
    """Server-sent events: this worker's decisions and, relayed, its peers' (or one key's)."""
    key = request.query.get("key") or None
    routed = bool(request.headers.get(ROUTED_HEADER))
    try:
        subscription = console.live.subscribe(key)
    except Unavailable as exc:
        return aioweb.json_response({"error": str(exc)}, status=503)
    upstreams = [] if routed else console.live_upstreams(key)
    relays = [
        asyncio.ensure_future(console.peers.relay(url, key, subscription)) for url in upstreams
    ]
    response = aioweb.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"}
    )
    try:
        await response.prepare(cast(aioweb.Request, request))
        await response.write(b"retry: 2000\n\n")
        await response.write(sse("hello", {"worker": console.ownership.url, "relayed": upstreams}))
        while True:
            event = await subscription.next(HEARTBEAT_S)
            if event == END:
                break
            if event is not None:
                await response.write(event)
            elif not routed and console.live_upstreams(key) != upstreams:
                break  # the assignment moved: end the stream; the browser reconnects to the new set
            else:
                await response.write(b": keepalive\n\n")
    except (ConnectionResetError, aiohttp.ClientConnectionResetError):
        pass  # the client went away
    finally:
        console.live.unsubscribe(subscription)
        for relay in relays:
            relay.cancel()
    return response


ROUTES = (
    Route("get", "/api/console", "console_settings", console_settings),
    Route("get", "/api/conflicts", "conflicts", conflicts),
    Route("get", "/api/sources", "sources", sources),
    Route("post", "/api/policy/preview", "policy_preview", policy_preview),
    Route("get", "/api/aliases/preview", "alias_preview", alias_change_preview),
    Route("get", "/api/decisions/{key}", "decision", decision),
    Route("get", "/api/decisions/{key}/history", "decision_history", decision_history),
    Route("get", "/api/erasures", "erasures", erasures),
    Route("get", "/api/live", "live", live),
)
