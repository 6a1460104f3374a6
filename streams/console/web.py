"""The steward console and the JSON API behind it, served by every worker's web server.

- `/ui/`: static pages shipped in the package (plain HTML, CSS and JS; no build step).
- `/api/conflicts`: the open conflicts of the whole cluster: the worker asked fans out to every
  worker named in the arbiter's assignment and says which did not answer.
- `/api/decisions/{key}` (optionally `?as_of=RFC3339`) and `/api/decisions/{key}/history`:
  answered by the key's owner; any worker forwards there.
- `/api/sources` (optionally `?since=RFC3339`): how often each source's claims matched what
  settled conflicts settled on, over the cluster (the worker asked merges its peers' ledgers),
  with candidate shared lineages and authorities to review.
- `POST /api/resolutions`: a steward's resolution, published to the resolutions topic; only with
  a configured steward token in the Authorization header.
- `/api/erasures` (optionally `?subject=S`): the erasures approved and the requests waiting for
  approvals; `POST /api/erasures`: a steward's erasure request or approval, published to the
  erasures topic (a steward token, as for resolutions). An erased subject's decision, history
  and past beliefs answer 410 Gone with the erasure, never a value.
- `/api/live`: server-sent events of the decisions workers emit (this worker's, and its peers'
  relayed), subscribed to through the arbiter's `Ownership`.

This module wires the room: the pages, the security headers, and the lifecycle of what the
handlers share (the live feed, the peers' HTTP session). A request goes from here to its handler
in `streams.console.api`, which reads the arbiter's `Ownership` and, for what another worker
holds, goes through `streams.console.forward`; `live`, `queue` and `stewards` are its parts.

Safe by default: every response carries a restrictive Content-Security-Policy (scripts and styles
only from the worker itself, no inline code), the pages render values as text, never as markup.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from importlib.resources import files
from typing import Any, cast

import faust
from aiohttp import web as aioweb
from faust.web import Request, Response, View

from streams.arbiter.routing import Ownership
from streams.console.api import ROUTES, Clock, Console, Route, wall_clock
from streams.console.forward import Peers
from streams.console.live import LiveDecisions
from streams.console.stewards import Refusal, StewardTokens
from streams.console.writes import WRITE_ROUTES
from streams.core.timeline.aliases import AliasHistory
from streams.core.timeline.erasures import ErasureHistory, Pending
from streams.core.timeline.rollout import PolicyHistory
from streams.ops.metrics import Metrics
from streams.settings import Settings

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


def static_assets() -> dict[str, tuple[bytes, str]]:
    """The console's files (package data), by name, with their content types."""
    folder = files("streams.console").joinpath("static")
    assets = {}
    for item in folder.iterdir():
        suffix = "." + item.name.rsplit(".", 1)[-1]
        if item.is_file() and suffix in CONTENT_TYPES:
            assets[item.name] = (item.read_bytes(), CONTENT_TYPES[suffix])
    return assets


def register_console(
    app: faust.App,
    ownership: Ownership,
    aliases: Callable[[], AliasHistory],
    policies: Callable[[], PolicyHistory],
    erasures: Callable[[], ErasureHistory],
    waiting_erasures: Callable[[], Sequence[Pending]],
    settings: Settings,
    metrics: Metrics,
    clock: Clock = wall_clock,
) -> Console:
    console = Console(
        ownership,
        aliases,
        policies,
        erasures,
        waiting_erasures,
        settings,
        metrics,
        LiveDecisions(settings.console_live_clients),
        StewardTokens.from_settings(settings),
        Peers(),
        clock,
    )
    ownership.subscribe(console.live.observe)
    for refusal in Refusal:
        metrics.console_writes_refused.labels(refusal.value)
    # Faust's aiohttp driver: its requests and application are aiohttp's own.
    web_app: aioweb.Application = cast(Any, app.web).web_app
    web_app.on_response_prepare.append(_secure_headers)
    web_app.on_startup.append(lambda _: console.peers.open())
    web_app.on_shutdown.append(lambda _: _closed(console.live))
    web_app.on_cleanup.append(lambda _: console.peers.close())
    web_app.middlewares.append(_browsers_to_console)
    _register_pages(app, static_assets())
    by_path: dict[str, list[Route]] = {}
    for route in ROUTES + WRITE_ROUTES:
        by_path.setdefault(route.path, []).append(route)
    for path, routes in by_path.items():
        app.page(path, name=routes[0].name)(_view(console, routes))
    return console


def _view(console: Console, routes: list[Route]) -> type[View]:
    """A Faust view answering one path: each route's method calls its handler with the console
    (one view a path, so that a GET and a POST of one path are both routed)."""

    def responder(route: Route) -> Callable[..., Awaitable[Any]]:
        async def respond(web: View, request: Request, **params: Any) -> Any:
            return await route.handler(console, web, request, **params)

        return respond

    methods: dict[str, Any] = {route.method: responder(route) for route in routes}
    about = "\n\n".join(route.handler.__doc__ or "" for route in routes)
    return type(routes[0].name, (View,), {**methods, "__doc__": about})


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


def _register_pages(app: faust.App, assets: dict[str, tuple[bytes, str]]) -> None:
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
