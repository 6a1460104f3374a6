"""The agents' commands of the `claimstream` command line: `mcp` (the MCP server) and `get` (what
is believed now about a subject and field). `streams.cli.main` adds them to its parser; the MCP SDK
is imported only when `mcp` runs, so the rest of the command line works without it."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
from typing import Any

from streams.client import FactsClient, api_url
from streams.core.reading.explain import explain
from streams.core.records.contracts import Decision, parse_instant
from streams.core.records.errors import ClaimstreamError
from streams.settings import Settings, load_settings


def add_agent_commands(commands: Any, connection: argparse.ArgumentParser) -> None:
    """Add `mcp` and `get` to the subcommands (`connection`: the --settings, --broker parent)."""
    api = argparse.ArgumentParser(add_help=False)
    api.add_argument(
        "--api", metavar="URL", help="a worker's web API (default: web_host:web_port of settings)"
    )
    mc = commands.add_parser(
        "mcp",
        parents=[connection, api],
        help="serve claimstream's facts, plan gate and claim reporting to agents over MCP",
    )
    mc.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="serve streamable HTTP at http://HOST:PORT/mcp (HOST 127.0.0.1 when only PORT is "
        "given) instead of stdio",
    )
    mc.add_argument(
        "--allow-writes",
        action="store_true",
        help="let agents publish claims (record_observation, record_user_assertion)",
    )
    mc.set_defaults(handler=cmd_mcp)
    gt = commands.add_parser(
        "get", parents=[connection, api], help="what is believed now about SUBJECT's FIELD"
    )
    gt.add_argument("subject", help="the subject, or an alias of it")
    gt.add_argument("field", help="a policy field")
    gt.add_argument("--as-of", metavar="RFC3339", help="the belief in force at that instant")
    gt.add_argument("--json", action="store_true", help="print the decision as one JSON line")
    gt.set_defaults(handler=cmd_get)


def _settings(args: argparse.Namespace) -> Settings:
    return load_settings(args.settings, broker=args.broker)


def http_address(raw: str) -> tuple[str, int]:
    host, _, port = raw.rpartition(":")
    if not port.isdigit():
        raise ClaimstreamError(f"--http {raw!r}: give HOST:PORT or PORT, e.g. 127.0.0.1:8765")
    return host or "127.0.0.1", int(port)


def cmd_mcp(args: argparse.Namespace) -> int:
    try:
        from streams.agents.server import build_server
        from streams.agents.tools import FactTools
    except ImportError as exc:
        raise ClaimstreamError(
            f"claimstream mcp needs the MCP SDK ({exc}): pip install 'claimstream[mcp]'"
        ) from exc
    settings = _settings(args)
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # a refused write says why itself
    tools = FactTools(
        FactsClient(args.api or api_url(settings)), settings, allow_writes=args.allow_writes
    )
    server = build_server(tools)
    if args.http:
        host, port = http_address(args.http)
        server.run("streamable-http", host=host, port=port)
    else:
        server.run()
    return 0


def cmd_get(args: argparse.Namespace) -> int:
    facts = FactsClient(args.api or api_url(_settings(args)))
    try:
        as_of = parse_instant(args.as_of) if args.as_of else None
    except ValueError as exc:
        raise ClaimstreamError(f"--as-of {args.as_of!r}: {exc}") from exc
    found = asyncio.run(facts.answer(args.subject, args.field, as_of=as_of))
    if found is None or found.get("decision") is None:
        when = f" at {args.as_of}" if args.as_of else ""
        raise ClaimstreamError(f"nothing is known about {args.subject} {args.field}{when}")
    decision = Decision.model_validate(found["decision"])
    print(json.dumps(found["decision"]) if args.json else explain(decision))
    return 0
