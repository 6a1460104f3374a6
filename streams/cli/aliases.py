"""The alias commands of the `claimstream` command line: `alias add`, `remove`, `list` and
`history`, on the aliases topic (`streams.worker.alias_log`, imported when one runs), and
`preview`, asked of a worker's web API (`GET /api/aliases/preview`).
`streams.cli.main` adds them to its parser.

A change takes effect a lead time after it is published (the setting `policy_lead_s`, as a policy
does) or at `--at`, and is signed as `policy publish` signs where the policy's `stewards` section
asks for it. `add` and `remove` read the published history first and refuse, publishing nothing,
an alias that would close a cycle and the retraction of an alias not in force.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from streams.cli.commands import _client_logs_quiet, ask_worker, settings_from
from streams.cli.signing import steward_signer
from streams.core.reading.alias_preview import render
from streams.core.records.errors import AliasError, ClaimstreamError
from streams.core.records.policy import load_policy
from streams.core.timeline.aliases import AliasChange, AliasHistory, alias_key, change_line
from streams.settings import Settings

T = TypeVar("T")


def add_alias_commands(
    commands: Any, connection: argparse.ArgumentParser, instant: Callable[[str], datetime]
) -> None:
    """Add `alias` and its subcommands (`connection`: the --settings, --broker parent;
    `instant`: how the command line reads an RFC 3339 argument)."""
    alias_parser = commands.add_parser(
        "alias", help="merge two spellings of a subject, or split them back (the aliases topic)"
    )
    alias_commands = alias_parser.add_subparsers(dest="alias_command", required=True)
    change = argparse.ArgumentParser(add_help=False)
    change.add_argument(
        "--at",
        type=instant,
        metavar="RFC3339",
        help="take effect at this RFC 3339 instant (default: the setting policy_lead_s from now)",
    )
    change.add_argument(
        "--by", metavar="STEWARD", help="the steward making the change (with --key-id)"
    )
    change.add_argument(
        "--key-id",
        metavar="ID",
        help="sign as --by with this key of the stewards section of the policy in force",
    )
    change.add_argument(
        "--key-env", metavar="VAR", help="the environment variable holding the key's secret"
    )
    add = alias_commands.add_parser(
        "add",
        parents=[connection, change],
        help="publish an alias: from its instant on, claims about ALIAS count on SUBJECT's key, "
        "and ALIAS's evidence moves there",
    )
    add.add_argument(
        "alias", metavar="ALIAS", help="the spelling that names SUBJECT, e.g. 'Acme Corp'"
    )
    add.add_argument(
        "subject",
        metavar="SUBJECT",
        help="the subject it names, e.g. acme (itself an alias: the chain resolves)",
    )
    add.set_defaults(handler=cmd_alias_add, policy=None)
    remove = alias_commands.add_parser(
        "remove",
        parents=[connection, change],
        help="retract an alias: from its instant on, the claims sent about ALIAS count on its "
        "own key again",
    )
    remove.add_argument("alias", metavar="ALIAS", help="the alias to retract")
    remove.set_defaults(handler=cmd_alias_remove, policy=None)
    listing = alias_commands.add_parser(
        "list",
        parents=[connection],
        help="the aliases in force, each with the subject it names once chains are followed",
    )
    listing.add_argument(
        "--at",
        type=instant,
        metavar="RFC3339",
        help="the aliases in force at this RFC 3339 instant (default: now)",
    )
    listing.add_argument(
        "--json", action="store_true", help="print one JSON object, alias -> subject"
    )
    listing.set_defaults(handler=cmd_alias_list)
    history = alias_commands.add_parser(
        "history",
        parents=[connection],
        help="the published changes with the instant each takes effect, as JSON lines "
        "(for replay --alias-history)",
    )
    history.set_defaults(handler=cmd_alias_history)
    _add_preview_command(alias_commands)


def _add_preview_command(alias_commands: Any) -> None:
    preview = alias_commands.add_parser(
        "preview",
        help="which keys an alias (or its retraction) would merge or split, and which decisions "
        "would flip, were it to take effect now (nothing is published)",
    )
    preview.add_argument("alias", metavar="ALIAS", help="the spelling, e.g. 'Acme Corp'")
    preview.add_argument(
        "subject",
        metavar="SUBJECT",
        nargs="?",
        help="the subject it would name; none previews retracting ALIAS",
    )
    preview.add_argument(
        "--url",
        help="any worker's web URL: it reads the keys from their owners (default: the "
        "settings' web port)",
    )
    preview.add_argument("--settings", type=Path, metavar="FILE", help="YAML settings file")
    preview.add_argument(
        "--json", action="store_true", help="print the web API's answer (JSON) as it is"
    )
    preview.add_argument(
        "--exit-code", action="store_true", help="exit 1 when a decision would flip"
    )
    preview.set_defaults(handler=cmd_alias_preview)


def _moment(at: datetime) -> str:
    return at.astimezone(UTC).isoformat()


def _on_broker(settings: Settings, work: Coroutine[Any, Any, T]) -> T:
    """`work` run; a broker that cannot be reached, or refuses the topic, is one error line."""
    from aiokafka.errors import KafkaError

    try:
        return asyncio.run(work)
    except KafkaError as exc:
        raise ClaimstreamError(
            f"cannot use {settings.topics.aliases} on the broker {settings.bootstrap}: {exc}"
        ) from exc


def _published(settings: Settings) -> tuple[AliasHistory, list[str]]:
    """The history the aliases topic makes as every worker applies it (signatures not checked;
    changes counted once approved as the settings' policy asks), and the records passed over:
    unreadable, or closing a cycle (each as `where: why`)."""
    from streams.worker import alias_log

    review = load_policy(settings.policy).defaults.review
    level = alias_log.log.level
    alias_log.log.setLevel(logging.CRITICAL)  # what it passes over is told below, once
    try:
        found = _on_broker(settings, alias_log.published_history(settings))
        history = found.history(lambda _: review)
    finally:
        alias_log.log.setLevel(level)
    return history, [f"{p['record']}: {p['error']}" for p in found.passed_over]


def _change(args: argparse.Namespace, settings: Settings, canonical: str | None) -> AliasChange:
    """The change the arguments ask for (AliasError for an alias naming itself), at `--at` or
    `policy_lead_s` from now."""
    at = args.at or datetime.now(UTC) + timedelta(seconds=settings.policy_lead_s)
    return AliasChange(args.alias, canonical, at, args.by or "")


def cmd_alias_add(args: argparse.Namespace) -> int:
    from streams.worker.alias_log import publish_alias

    _client_logs_quiet()
    settings = settings_from(args)
    change = _change(args, settings, args.subject)
    signer = steward_signer(args, settings) if args.key_id else None
    try:
        joined = _published(settings)[0].joined(change)
    except AliasError as exc:
        raise AliasError(f"{exc} (nothing published)") from exc
    _on_broker(settings, publish_alias(settings, change, signer))
    print(change_line(change))
    canonical = joined.canonical(change.alias, change.at)
    print(
        f"alias {change.alias!r} -> {change.canonical!r} published on {settings.topics.aliases}: "
        f"from {_moment(change.at)} every worker counts claims about {change.alias!r} on the "
        f"key of {canonical!r}, and the evidence of {change.alias!r} moves there",
        file=sys.stderr,
    )
    return 0


def cmd_alias_remove(args: argparse.Namespace) -> int:
    from streams.worker.alias_log import publish_alias

    _client_logs_quiet()
    settings = settings_from(args)
    change = _change(args, settings, None)
    signer = steward_signer(args, settings) if args.key_id else None
    history = _published(settings)[0]
    named = history.in_force(change.at).get(alias_key(change.alias))
    if named is None:
        raise AliasError(
            f"alias {change.alias!r} is not in force at {_moment(change.at)}: nothing to "
            "retract (nothing published; `claimstream alias list --at` shows those in force)"
        )
    _on_broker(settings, publish_alias(settings, change, signer))
    print(change_line(change))
    print(
        f"alias {change.alias!r} -> {named!r} retracted on {settings.topics.aliases}: from "
        f"{_moment(change.at)} every claim sent about {change.alias!r} counts on its own key "
        "again, and both keys are decided again",
        file=sys.stderr,
    )
    return 0


def aliases_in_force(history: AliasHistory, at: datetime) -> dict[str, str]:
    """The aliases in force at `at`, each as last spelled by the change that put it in force,
    with the subject it names once chains are followed; sorted by alias."""
    table = history.in_force(at)
    spelled = {alias_key(c.alias): c.alias for c in history.changes if c.at <= at}
    found = {spelled[key]: history.canonical(spelled[key], at) for key in table}
    return dict(sorted(found.items()))


def cmd_alias_list(args: argparse.Namespace) -> int:
    _client_logs_quiet()
    settings = settings_from(args)
    at = args.at or datetime.now(UTC)
    aliases = aliases_in_force(_published(settings)[0], at)
    if args.json:
        print(json.dumps(aliases, indent=2, sort_keys=True, ensure_ascii=False))
    else:
        for alias, canonical in aliases.items():
            print(f"{alias} -> {canonical}")
    print(f"alias list: {len(aliases)} aliases in force at {_moment(at)}", file=sys.stderr)
    return 0


def cmd_alias_preview(args: argparse.Namespace) -> int:
    query = {"alias": args.alias} | ({"subject": args.subject} if args.subject else {})
    answer = ask_worker(args, "/api/aliases/preview", query, "preview the alias")
    if args.json:
        print(json.dumps(answer, indent=2, sort_keys=True, ensure_ascii=False))
    else:
        print("\n".join(render(answer)))
    return 1 if args.exit_code and answer.get("flipped") else 0


def cmd_alias_history(args: argparse.Namespace) -> int:
    _client_logs_quiet()
    history, passed_over = _published(settings_from(args))
    for change in history.changes:
        print(change_line(change))
    for change in history.changes:
        later = history.superseded_by(change)
        if later is not None:
            print(
                f"alias history: the retraction of {change.alias!r} at {_moment(change.at)} is "
                f"superseded by {later.alias!r} -> {later.canonical!r} at {_moment(later.at)}",
                file=sys.stderr,
            )
    if passed_over:
        print(
            f"alias history: {len(passed_over)} records passed over, applied by no worker:",
            file=sys.stderr,
        )
        for problem in passed_over:
            print(f"  {problem}", file=sys.stderr)
    return 0
