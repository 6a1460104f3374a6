"""The steward console and the JSON API behind it, served by every worker's web server.

- `/ui/`: static pages shipped in the package (plain HTML, CSS and JS; no build step).
- `/api/conflicts`: the open conflicts of the whole cluster: the worker asked fans out to every
  worker named in the arbiter's assignment and says which did not answer.
- `/api/decisions/{key}` (optionally `?as_of=RFC3339`) and `/api/decisions/{key}/history`:
  answered by the key's owner; any worker forwards there.
- `POST /api/resolutions`: a steward's resolution, published to the resolutions topic; only with
  a configured steward token in the Authorization header.
- `/api/live`: server-sent events of the decisions workers emit (this worker's, and its peers'
  relayed), from the arbiter's observer hook.

Safe by default: every response carries a restrictive Content-Security-Policy (scripts and styles
only from the worker itself, no inline code), the pages render values as text, never as markup.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from importlib.resources import files
from typing import Any, cast

import aiohttp
import faust
from aiohttp import web as aioweb
from aiokafka.errors import KafkaError
from faust.web import Request, Response, View

from streams.arbiter import Arbiter
from streams.client import build_resolution, publish_resolutions
from streams.console.live import END, LiveDecisions, Subscription, Unavailable, sse
from streams.console.lookup import canonical_key
from streams.console.queue import QueueFilter, local_rows, merge
from streams.console.stewards import Refusal, StewardTokens
from streams.core import contracts
from streams.core.asof import NoBeliefAsOf, belief_as_of
from streams.core.contracts import ClaimStatus, ConflictKind
from streams.core.errors import ClaimstreamError
from streams.core.explain import explain
from streams.core.keystate import KeyState, current_decision, split_key, state_key
from streams.core.policy import FieldRules, Policy
from streams.metrics import Metrics
from streams.settings import Settings

log = logging.getLogger(__name__)

ROUTED_HEADER = "x-claimstream-routed"
PEER_TIMEOUT_S = 5.0
HEARTBEAT_S = 10.0
RELAY_RETRY_S = 2.0
MAX_NOTE = 2000
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}
CONTENT_TYPES = {
    ".html": "text/html",
    ".js": "text/javascript",
    ".css": "text/css",
    ".svg": "image/svg+xml",
}

Clock = Callable[[], datetime]


def wall_clock() -> datetime:
    return datetime.now(UTC)


def static_assets() -> dict[str, tuple[bytes, str]]:
    """The console's files (package data), by name, with their content types."""
    folder = files("streams.console").joinpath("static")
    assets = {}
    for item in folder.iterdir():
        suffix = "." + item.name.rsplit(".", 1)[-1]
        if item.is_file() and suffix in CONTENT_TYPES:
            assets[item.name] = (item.read_bytes(), CONTENT_TYPES[suffix])
    return assets


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
        "authorities": {source: a.value for source, a in sorted(rules.authorities.items())},
    }


def parse_instant(raw: str) -> datetime:
    """An RFC 3339 instant from a query string, where an unescaped `+` offset arrives as a space."""
    return contracts.parse_instant(raw.replace(" ", "+"))


@dataclass
class Console:
    arbiter: Arbiter
    policy: Policy
    settings: Settings
    metrics: Metrics
    live: LiveDecisions
    stewards: StewardTokens
    clock: Clock = wall_clock

    @property
    def url(self) -> str:
        return str(self.arbiter.assignor.url)

    def peers(self) -> list[str]:
        """Every other worker named in the current assignment."""
        return sorted(set(self.arbiter.assignor.owners.values()) - {self.url})

    def live_upstreams(self, key: str | None) -> list[str]:
        """The workers whose live decisions a stream for `key` (or for every key) relays."""
        if key is None:
            return self.peers()
        local, owner = self.arbiter.owner_url(key.encode())
        return [] if local or owner is None else [owner]

    def open_keys(self) -> Iterator[tuple[KeyState, datetime]]:
        for key, (_, since) in list(self.arbiter.schedule.open_since.items()):
            state = self.arbiter.state_of(key)
            if state is not None:
                yield state, since


def register_console(
    app: faust.App,
    arbiter: Arbiter,
    policy: Policy,
    settings: Settings,
    metrics: Metrics,
    clock: Clock = wall_clock,
) -> Console:
    console = Console(
        arbiter,
        policy,
        settings,
        metrics,
        LiveDecisions(settings.console_live_clients),
        StewardTokens.from_settings(settings),
        clock,
    )
    arbiter.observers.append(console.live.publish)
    for refusal in Refusal:
        metrics.console_writes_refused.labels(refusal.value)
    assets = static_assets()
    # Faust's aiohttp driver: its requests and application are aiohttp's own.
    web_app: aioweb.Application = cast(Any, app.web).web_app
    web_app.on_response_prepare.append(_secure_headers)
    web_app.on_shutdown.append(lambda _: _closed(console.live))
    web_app.middlewares.append(_browsers_to_console)
    _register_pages(app, console, assets)
    _register_api(app, console)
    return console


async def _closed(live: LiveDecisions) -> None:
    live.close()


async def _secure_headers(request: aioweb.Request, response: aioweb.StreamResponse) -> None:
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)


@aioweb.middleware
async def _browsers_to_console(
    request: aioweb.Request,
    handler: Callable[[aioweb.Request], Awaitable[aioweb.StreamResponse]],
) -> aioweb.StreamResponse:
    """A browser opening the worker's root gets the console; API clients keep Faust's index."""
    if request.path == "/" and "text/html" in request.headers.get("Accept", ""):
        raise aioweb.HTTPFound("/ui/")
    return await handler(request)


def _register_pages(app: faust.App, console: Console, assets: dict[str, tuple[bytes, str]]) -> None:
    @app.page("/ui/", name="console_index")
    async def console_index(web: View, request: Request) -> Response:
        body, content_type = assets["index.html"]
        return web.bytes(body, content_type=content_type, headers={"Cache-Control": "no-cache"})

    @app.page("/ui/{asset}", name="console_asset")
    async def console_asset(web: View, request: Request, asset: str) -> Response:
        if asset not in assets:
            return web.json({"error": f"no console asset {asset!r}"}, status=404)
        body, content_type = assets[asset]
        return web.bytes(body, content_type=content_type, headers={"Cache-Control": "no-cache"})


def _register_api(app: faust.App, console: Console) -> None:
    arbiter, policy = console.arbiter, console.policy

    async def at_owner(
        web: View, request: Request, key: str, answer: Callable[[], Response]
    ) -> Response:
        """Answer for a key this worker owns, or forward the request to the worker that does."""
        local, owner = arbiter.owner_url(key.encode())
        if local:
            return answer()
        if owner is None or request.headers.get(ROUTED_HEADER):
            return web.json(
                {"error": f"no worker owns {key!r} right now (rebalancing?); retry"}, status=503
            )
        try:
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=PEER_TIMEOUT_S)) as s,
                s.get(owner + str(request.rel_url), headers={ROUTED_HEADER: "1"}) as reply,
            ):
                body = await reply.read()
                return web.bytes(body, content_type=reply.content_type, status=reply.status)
        except (aiohttp.ClientError, TimeoutError) as exc:
            return web.json(
                {"error": f"the worker owning {key!r} ({owner}) did not answer: {exc}"}, status=502
            )

    @app.page("/api/console", name="console_settings")
    async def console_settings(web: View, request: Request) -> Response:
        """What the pages need to know: may they offer writes, and the policy's vocabulary."""
        return web.json(
            {
                "worker": console.url,
                "writes_enabled": console.stewards.writes_enabled,
                "policy_version": policy.version,
                "fields": sorted(policy.fields),
                "conflict_kinds": [kind.value for kind in ConflictKind],
                "sources": sorted(s for s in policy.sources if s != "*"),
            }
        )

    @app.page("/api/conflicts", name="conflicts")
    async def conflicts(web: View, request: Request) -> Response:
        """Open conflicts and quarantines across the cluster (routed: this worker's only)."""
        try:
            wanted = QueueFilter.from_query(request.query)
        except ValueError as exc:
            return web.json({"error": str(exc)}, status=400)
        now = console.clock()
        rows = local_rows(console.open_keys(), now, wanted, console.url)
        if request.headers.get(ROUTED_HEADER):
            return web.json({"worker": console.url, "rows": rows})
        peers = console.peers()
        answers = await asyncio.gather(*(_peer_rows(peer, wanted) for peer in peers))
        return web.json(
            merge([(console.url, rows), *zip(peers, answers, strict=True)], wanted, now)
        )

    @app.page("/api/decisions/{key}", name="decision")
    async def decision(web: View, request: Request, key: str) -> Response:
        key = canonical_key(key, arbiter.alias_of)
        raw_as_of = request.query.get("as_of")
        try:
            as_of = parse_instant(raw_as_of) if raw_as_of else None
        except ValueError as exc:
            return web.json({"error": f"as_of: {exc}"}, status=400)

        def answer() -> Response:
            state = arbiter.state_of(key.encode())
            rules = policy.rules_for(split_key(key)[1])
            if state is None or rules is None:
                return web.json({"error": f"no claims for {key!r}"}, status=404)
            if as_of is not None:
                return _as_of_answer(web, key, state, rules, policy, as_of)
            current = current_decision(state, rules, policy.version, console.clock())
            return web.json(
                {
                    "key": key,
                    "worker": console.url,
                    "decision": current.model_dump(mode="json"),
                    "explain": explain(current),
                    "last_emitted": state.current.model_dump(mode="json")
                    if state.current
                    else None,
                    "open_since": state.conflict_since.isoformat()
                    if state.conflict_since
                    else None,
                    "rules": rules_json(rules),
                }
            )

        return await at_owner(web, request, key, answer)

    @app.page("/api/decisions/{key}/history", name="decision_history")
    async def decision_history(web: View, request: Request, key: str) -> Response:
        def answer() -> Response:
            state = arbiter.state_of(key.encode())
            if state is None:
                return web.json({"error": f"no claims for {key!r}"}, status=404)
            return web.json(
                {
                    "key": key,
                    "decisions": [s.model_dump(mode="json") for s in state.history],
                    "claims": [
                        {
                            **s.claim.model_dump(mode="json"),
                            "authority": s.authority.value,
                            "lineage": s.lineage,
                        }
                        for s in state.claims
                    ],
                    "resolutions": [r.model_dump(mode="json") for r in state.resolutions],
                }
            )

        return await at_owner(web, request, key, answer)

    class Resolutions(View):
        async def post(self, request: Request) -> Response:
            return await _resolve(self, request, console)

    app.page("/api/resolutions", name="resolutions")(Resolutions)

    @app.page("/api/live", name="live")
    async def live(web: View, request: Request) -> Any:
        return await _live_stream(request, console)


def _as_of_answer(
    web: View, key: str, state: KeyState, rules: FieldRules, policy: Policy, at: datetime
) -> Response:
    try:
        found = belief_as_of(state, rules, policy.version, at, policy.defaults.max_clock_skew)
    except NoBeliefAsOf as exc:
        return web.json({"error": str(exc), "key": key, "as_of": at.isoformat()}, status=404)
    return web.json(
        {
            "key": key,
            "as_of": at.isoformat(),
            "belief": found.belief.model_dump(mode="json"),
            "evidence_basis": found.basis.value,
            "decision": found.decision.model_dump(mode="json") if found.decision else None,
            "explain": explain(found.decision) if found.decision else None,
            "rules": rules_json(rules),
        }
    )


async def _peer_rows(peer: str, wanted: QueueFilter) -> list[dict[str, Any]] | None:
    """A peer's own open conflicts; None when it does not answer in time."""
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=PEER_TIMEOUT_S)) as s,
            s.get(
                f"{peer}/api/conflicts", params=wanted.query(), headers={ROUTED_HEADER: "1"}
            ) as reply,
        ):
            if reply.status != 200:
                return None
            rows: list[dict[str, Any]] = (await reply.json())["rows"]
            return rows
    except (aiohttp.ClientError, TimeoutError, ValueError, KeyError) as exc:
        log.info("console: worker %s did not answer for the queue (%s)", peer, type(exc).__name__)
        return None


async def _resolve(web: View, request: Request, console: Console) -> Response:
    def refused(refusal: Refusal, status: int, message: str) -> Response:
        console.metrics.console_writes_refused.labels(refusal.value).inc()
        return web.json({"error": message, "refused": refusal.value}, status=status)

    refusal = console.stewards.refusal(request.headers.get("Authorization"))
    if refusal is Refusal.WRITES_DISABLED:
        return refused(refusal, 403, "writes are disabled: no steward token is configured")
    if refusal is Refusal.MISSING_TOKEN:
        return refused(refusal, 401, "a steward token is required (Authorization: Bearer ...)")
    if refusal is not None:
        return refused(refusal, 403, "this steward token is not accepted")
    try:
        body = await request.json()
        if not isinstance(body, dict):
            raise ClaimstreamError("the body must be a JSON object")
        subject, field = _subject_and_field(body)
        note = str(body.get("note") or "")
        if len(note) > MAX_NOTE:
            raise ClaimstreamError(f"the note is longer than {MAX_NOTE} characters")
        resolution = build_resolution(
            console.policy,
            subject,
            field,
            decided_by=str(body.get("decided_by") or ""),
            decided_at=console.clock(),
            status=ClaimStatus(body.get("status") or ClaimStatus.PRESENT),
            value=body.get("value"),
            note=note,
            resolves_decision_id=body.get("resolves_decision_id") or None,
        )
    except (ClaimstreamError, ValueError) as exc:
        return refused(Refusal.INVALID, 400, str(exc))
    try:
        await publish_resolutions(console.settings, [resolution])
    except (KafkaError, ClaimstreamError) as exc:
        return web.json({"error": f"could not publish the resolution: {exc}"}, status=503)
    console.metrics.console_resolutions.labels(console.metrics.field_label(field)).inc()
    log.info("console: resolution %s published for field %s", resolution.resolution_id, field)
    return web.json(
        {"key": state_key(subject, field), "resolution": resolution.model_dump(mode="json")},
        status=202,
    )


def _subject_and_field(body: dict[str, Any]) -> tuple[str, str]:
    if body.get("key"):
        subject, field = split_key(str(body["key"]))
    else:
        subject, field = str(body.get("subject") or ""), str(body.get("field") or "")
    if not subject or not field:
        raise ClaimstreamError("name the key (subject|field), or its subject and field")
    return subject, field


async def _live_stream(request: Request, console: Console) -> aioweb.StreamResponse:
    key = request.query.get("key") or None
    routed = bool(request.headers.get(ROUTED_HEADER))
    try:
        subscription = console.live.subscribe(key)
    except Unavailable as exc:
        return aioweb.json_response({"error": str(exc)}, status=503)
    upstreams = [] if routed else console.live_upstreams(key)
    relays = [asyncio.ensure_future(_relay(url, key, subscription)) for url in upstreams]
    response = aioweb.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"}
    )
    try:
        await response.prepare(cast(aioweb.Request, request))
        await response.write(b"retry: 2000\n\n")
        await response.write(sse("hello", {"worker": console.url, "relayed": upstreams}))
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


async def _relay(url: str, key: str | None, subscription: Subscription) -> None:
    """Copy a peer's live events into this client's stream, reconnecting while the client stays."""
    params = {"key": key} if key else {}
    while True:
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with (
                aiohttp.ClientSession(
                    timeout=aiohttp.ClientTimeout(sock_connect=PEER_TIMEOUT_S)
                ) as s,
                s.get(f"{url}/api/live", params=params, headers={ROUTED_HEADER: "1"}) as reply,
            ):
                block = b""
                async for line in reply.content:
                    if line.strip():
                        block += line
                        continue
                    if block.startswith(b"event: decision") or block.startswith(b"event: lagged"):
                        subscription.offer(block + b"\n")
                    block = b""
        await asyncio.sleep(RELAY_RETRY_S)
