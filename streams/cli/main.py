"""The `claimstream` command line: the argument table (`build_parser`) and the dispatch to the
subcommands' handlers, which are in streams.cli.commands (in the same order as here), but for the
dev kit's `dev` and `bench`: this is the one module that may name the dev kit, lazily.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from streams import __version__
from streams.build_info import describe
from streams.cli.agents import add_agent_commands
from streams.cli.aliases import add_alias_commands
from streams.cli.audit import add_audit_commands
from streams.cli.bench import add_bench_command
from streams.cli.commands import (
    cmd_explain,
    cmd_init,
    cmd_policy_check,
    cmd_policy_diff,
    cmd_policy_history,
    cmd_policy_preview,
    cmd_policy_publish,
    cmd_policy_schema,
    cmd_policy_suggest,
    cmd_publish,
    cmd_replay,
    cmd_replay_dead_letters,
    cmd_resolve,
    cmd_tail,
    cmd_worker,
    settings_from,
)
from streams.cli.erase import add_erase_commands
from streams.cli.review import add_review_commands
from streams.core.records.contracts import ClaimStatus, parse_instant
from streams.core.records.errors import ClaimstreamError
from streams.core.records.policy import parse_duration
from streams.packaged import EXAMPLES_NOW
from streams.settings import Guarantee


def _duration_argument(raw: str) -> timedelta:
    try:
        span = parse_duration(raw)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a duration (7d, 24h): {exc}") from exc
    if span is None:
        raise argparse.ArgumentTypeError("give a duration, e.g. 7d")
    return span


def _instant_argument(raw: str) -> datetime:
    try:
        return parse_instant(raw)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{raw!r} is not an RFC 3339 timestamp: {exc}") from exc


def cmd_dev(args: argparse.Namespace) -> int:
    from streams.devkit.dev import run_dev

    return run_dev(
        settings_from(args),
        broker_kind=args.broker_kind,
        rounds=args.rounds,
        round_seconds=args.round_seconds,
    )


def cmd_bench(args: argparse.Namespace) -> int:
    from streams.devkit.bench.run import main as bench_main
    from streams.devkit.bench.scale import DEFAULT_KEYS, Scale

    scale = None
    if args.scale_keys is not None or args.scale_only:
        stores = tuple(args.scale_stores.split(","))
        scale = Scale(args.scale_keys or DEFAULT_KEYS, stores, only=args.scale_only)
    return bench_main(
        args.claims,
        args.subjects,
        args.broker_kind,
        args.partitions,
        args.latency_s,
        args.soak_s,
        Guarantee(args.guarantee),
        scale,
        args.pin_cores,
        merge_pairs=args.merge_pairs or 0,
        peer=args.peer,
    )


def _broker_kind_option(parser: argparse.ArgumentParser, default: str) -> None:
    parser.add_argument(
        "--broker-kind",
        choices=["tansu", "kafka"],
        default=default,
        help=f"tansu (bundled, no JVM) or kafka (Apache Kafka: Java 17 and Maven); "
        f"default {default}",
    )


class _Version(argparse.Action):
    """`--version` on one line (argparse's own wraps it), worked out only when asked for."""

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(f"claimstream {__version__} ({describe()})")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="claimstream", description="Deterministic reconciliation of conflicting claims."
    )
    parser.add_argument(
        "--version", action=_Version, nargs=0, help="print the version and what runs compiled"
    )
    commands = parser.add_subparsers(dest="command", required=True)

    init_parser = commands.add_parser(
        "init", help="write the example policy, claims and resolution into a folder"
    )
    init_parser.add_argument(
        "directory",
        nargs="?",
        type=Path,
        default=Path("examples"),
        help="where to write them (default: ./examples)",
    )
    init_parser.add_argument(
        "--force", action="store_true", help="overwrite example files already there"
    )
    init_parser.set_defaults(handler=cmd_init)

    replay_parser = commands.add_parser(
        "replay", help="arbitrate recorded claims offline (JSON lines)"
    )
    replay_parser.add_argument("claims", type=Path, help="claims, one JSON object per line")
    replay_policy = replay_parser.add_mutually_exclusive_group(required=True)
    replay_policy.add_argument("--policy", type=Path, help="the policy file (YAML)")
    replay_policy.add_argument(
        "--policy-history",
        type=Path,
        metavar="FILE",
        help="with --clock, instead of --policy: the policies in force over time, one JSON line "
        'per version, {"since": RFC 3339 instant, "policy": its YAML text} (other keys ignored); '
        "each claim and resolution is taken under the policy in force at its instant, and each "
        "key moves to every policy at the instant it takes effect",
    )
    replay_parser.add_argument(
        "--now",
        type=_instant_argument,
        required=True,
        help=f"RFC 3339 evaluation time (the examples are recorded for {EXAMPLES_NOW})",
    )
    replay_parser.add_argument(
        "--rejected", type=Path, help="write rejected claims here (JSON lines)"
    )
    replay_parser.add_argument("--resolutions", type=Path, help="people's resolutions, JSON lines")
    replay_parser.add_argument(
        "--clock",
        action="store_true",
        help="advance time as the stream does: print every decision it emits, in order, each "
        "claim at its observed_at and resolution at its decided_at, time-driven re-decisions "
        "at the instants their timers come due, up to --now",
    )
    replay_parser.add_argument(
        "--escalations", type=Path, help="with --clock: write the escalations here (JSON lines)"
    )
    replay_parser.add_argument(
        "--alias-history",
        type=Path,
        metavar="FILE",
        help="with --clock: the subject aliases over time, one JSON line per change, "
        '{"at": RFC 3339 instant, "alias": spelling, "canonical": subject or null to retract, '
        '"by": steward}; each claim and resolution counts on its subject\'s canonical spelling '
        "at its instant, and at each change every key's evidence merges or splits back",
    )
    replay_parser.add_argument(
        "--erasures",
        type=Path,
        metavar="FILE",
        help="with --clock: the erasures in effect, one JSON line each, as `erase history` "
        "prints them; a claim or resolution about an erased subject stamped before its "
        "erasure never counts, and its key says once, at the erasure's instant, that it was "
        "erased",
    )
    replay_parser.set_defaults(handler=cmd_replay)

    policy_parser = commands.add_parser("policy", help="check or compare policy files")
    policy_commands = policy_parser.add_subparsers(dest="policy_command", required=True)
    check_parser = policy_commands.add_parser("check", help="validate a policy file")
    check_parser.add_argument("file", type=Path, help="the policy file (YAML)")
    check_parser.set_defaults(handler=cmd_policy_check)
    schema_parser = policy_commands.add_parser(
        "schema", help="print the policy file's JSON Schema (what editors validate it with)"
    )
    schema_parser.set_defaults(handler=cmd_policy_schema)
    diff_parser = policy_commands.add_parser("diff", help="decisions a policy change would flip")
    diff_parser.add_argument("old", type=Path, help="the policy in force")
    diff_parser.add_argument("new", type=Path, help="the proposed policy")
    diff_parser.add_argument(
        "claims", type=Path, help="recorded claims to replay under both, JSON lines"
    )
    diff_parser.add_argument(
        "--now",
        type=_instant_argument,
        default=datetime.now(UTC),
        help="RFC 3339 evaluation time (default: now)",
    )
    diff_parser.add_argument(
        "--exit-code", action="store_true", help="exit 1 when a decision flips"
    )
    diff_parser.set_defaults(handler=cmd_policy_diff)
    suggest_parser = policy_commands.add_parser(
        "suggest", help="candidate policy edits from settled conflicts (never applied)"
    )
    suggest_parser.add_argument(
        "--since",
        type=_duration_argument,
        required=True,
        metavar="DURATION",
        help="settlements of the last DURATION (7d, 24h; counted by whole UTC days)",
    )
    suggest_parser.add_argument(
        "--url", help="any worker's web URL: it asks its peers (default: the settings' web port)"
    )
    suggest_parser.add_argument("--settings", type=Path, metavar="FILE", help="YAML settings file")
    suggest_parser.add_argument(
        "--now",
        type=_instant_argument,
        default=datetime.now(UTC),
        help="RFC 3339 instant the duration counts back from (default: now)",
    )
    suggest_parser.set_defaults(handler=cmd_policy_suggest)
    preview_parser = policy_commands.add_parser(
        "preview",
        help="what a policy would flip among the cluster's keys, were it put in force now "
        "(nothing is sent or changed)",
    )
    preview_parser.add_argument("file", type=Path, help="the proposed policy (YAML)")
    preview_parser.add_argument(
        "--url", help="any worker's web URL: it asks its peers (default: the settings' web port)"
    )
    preview_parser.add_argument("--settings", type=Path, metavar="FILE", help="YAML settings file")
    preview_parser.add_argument(
        "--limit",
        type=int,
        metavar="N",
        help="keys each worker judges at most (default: the worker's, 100000)",
    )
    preview_parser.add_argument(
        "--json", action="store_true", help="print the web API's answer (JSON) as it is"
    )
    preview_parser.add_argument(
        "--exit-code", action="store_true", help="exit 1 when a decision would flip"
    )
    preview_parser.set_defaults(handler=cmd_policy_preview)

    explain_parser = commands.add_parser("explain", help="render decisions (JSON lines) for people")
    explain_parser.add_argument("decisions", nargs="?", default="-", help="file, or - for stdin")
    explain_parser.add_argument("--subject", help="only decisions about this subject")
    explain_parser.add_argument("--field", help="only decisions about this field")
    explain_parser.add_argument(
        "--resolutions",
        type=Path,
        help="resolutions (JSON lines): a person's decision names who resolved, when and why",
    )
    explain_parser.set_defaults(handler=cmd_explain)

    connection = argparse.ArgumentParser(add_help=False)
    connection.add_argument("--settings", type=Path, metavar="FILE", help="YAML settings file")
    connection.add_argument(
        "--broker", metavar="URL", help="kafka://host:port or host:port (overrides settings)"
    )

    worker_parser = commands.add_parser(
        "worker", parents=[connection], help="run a worker against the configured broker"
    )
    worker_parser.set_defaults(handler=cmd_worker)

    dev_parser = commands.add_parser(
        "dev", parents=[connection], help="bundled broker + worker + demo feed, printing decisions"
    )
    _broker_kind_option(dev_parser, default="tansu")
    dev_parser.add_argument(
        "--rounds", type=int, default=0, help="stop after N demo rounds (0: run on)"
    )
    dev_parser.add_argument(
        "--round-seconds", type=float, default=20.0, help="pause between rounds (seconds)"
    )
    dev_parser.set_defaults(handler=cmd_dev)

    publish_parser = commands.add_parser(
        "publish", parents=[connection], help="JSON claims or resolutions in, Avro out"
    )
    publish_parser.add_argument(
        "claims",
        nargs="?",
        help="claims, JSON lines file or - for stdin (the default unless --resolutions is given)",
    )
    publish_parser.add_argument(
        "--user", action="store_true", help="publish the claims as user assertions"
    )
    publish_parser.add_argument(
        "--resolutions",
        type=Path,
        help="also publish people's resolutions from this JSON lines file "
        "(resolution_id and decided_at default to a fresh id and now)",
    )
    publish_parser.set_defaults(handler=cmd_publish)

    resolve_parser = commands.add_parser(
        "resolve",
        parents=[connection],
        help="publish a person's decision that closes a conflict (reason manual)",
    )
    resolve_parser.add_argument("subject", help="the subject, e.g. invoice:42")
    resolve_parser.add_argument("field", help="the field, e.g. order.payment_status")
    resolve_parser.add_argument(
        "--value",
        metavar="V",
        help='the decided value: JSON (40, true, {"amount_minor": 1250, "currency": '
        '"USD"}) or else a string (paid)',
    )
    resolve_parser.add_argument(
        "--status",
        choices=[ClaimStatus.PRESENT.value, ClaimStatus.NOT_FOUND.value],
        default=ClaimStatus.PRESENT.value,
        help="present (with --value; default) or not_found (the thing does not exist)",
    )
    resolve_parser.add_argument(
        "--unit", metavar="U", help="the value's unit, e.g. s or ms (numbers with units)"
    )
    resolve_parser.add_argument(
        "--by", required=True, metavar="NAME", help="who decides: a person or team identity"
    )
    resolve_parser.add_argument("--note", default="", metavar="TEXT", help="why, in your words")
    resolve_parser.add_argument(
        "--decision-id", metavar="ID", help="the conflict decision you looked at"
    )
    resolve_parser.add_argument(
        "--undo",
        metavar="ID",
        help="take back the resolution ID instead: the key returns to the policy's own "
        "decision (reviewed like a resolution where the policy asks)",
    )
    resolve_parser.add_argument(
        "--policy",
        type=Path,
        metavar="FILE",
        help="check the value against this policy before sending "
        "(the worker checks it anyway and dead-letters what it refuses)",
    )
    resolve_parser.add_argument(
        "--key-id",
        metavar="ID",
        help="sign as --by with this key of the policy's stewards section (its secret, or a "
        "base64 Ed25519 private key, in the variable --key-env names); without it the "
        "resolution is proven by the steward principal the connection settings publish as",
    )
    resolve_parser.add_argument(
        "--key-env", metavar="VAR", help="the environment variable holding the key's secret"
    )
    resolve_parser.set_defaults(handler=cmd_resolve)

    publish_policy = policy_commands.add_parser(
        "publish",
        parents=[connection],
        help="roll a policy out (or back) on every worker: publish it on the policy topic",
    )
    publish_policy.add_argument("file", type=Path, help="the policy file (YAML)")
    publish_policy.add_argument(
        "--in",
        dest="lead",
        type=_duration_argument,
        metavar="DURATION",
        help="take effect this long after now (default: the setting policy_lead_s)",
    )
    publish_policy.add_argument(
        "--at", type=_instant_argument, help="take effect at this RFC 3339 instant instead"
    )
    publish_policy.add_argument("--by", help="the steward publishing it (with --key-id)")
    publish_policy.add_argument(
        "--key-id",
        metavar="ID",
        help="sign as --by with this key of the stewards section of the policy in force",
    )
    publish_policy.add_argument(
        "--key-env", metavar="VAR", help="the environment variable holding the key's secret"
    )
    publish_policy.set_defaults(handler=cmd_policy_publish, policy=None)
    history_parser = policy_commands.add_parser(
        "history",
        parents=[connection],
        help="the published policies with the instant each takes effect, as JSON lines "
        "(for replay --policy-history)",
    )
    history_parser.set_defaults(handler=cmd_policy_history)
    add_alias_commands(commands, connection, _instant_argument)
    add_audit_commands(commands, connection, _instant_argument)
    add_erase_commands(commands, connection, _instant_argument)
    add_review_commands(commands, connection)

    redrive_parser = commands.add_parser(
        "replay-dead-letters",
        parents=[connection],
        help="send dead letters back to the topics they came from (once their cause is fixed)",
    )
    redrive_parser.add_argument(
        "--reason",
        action="append",
        default=[],
        metavar="R",
        help="only dead letters of this reason (repeatable; default: every reason)",
    )
    redrive_parser.add_argument(
        "--since", type=_instant_argument, metavar="T", help="only those rejected at or after T"
    )
    redrive_parser.add_argument(
        "--until", type=_instant_argument, metavar="T", help="only those rejected before T"
    )
    redrive_parser.add_argument(
        "--dry-run", action="store_true", help="count and list, send nothing"
    )
    redrive_parser.set_defaults(handler=cmd_replay_dead_letters)

    tail_parser = commands.add_parser(
        "tail", parents=[connection], help="print a stream as JSON lines"
    )
    tail_parser.add_argument(
        "stream",
        choices=["decisions", "dead-letters", "epoch-changes", "reobserve", "escalations"],
        help="which stream",
    )
    tail_parser.add_argument(
        "--count", type=int, default=0, help="stop after N records (0: follow)"
    )
    tail_parser.add_argument("--timeout", type=float, default=0.0, help="stop after S idle seconds")
    tail_parser.set_defaults(handler=cmd_tail)

    add_bench_command(commands, cmd_bench, _broker_kind_option)
    add_agent_commands(commands, connection)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except ClaimstreamError as exc:
        for problem in str(exc).splitlines():
            print(f"claimstream: error: {problem}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C ends `tail` and friends; a traceback would say nothing
        return 130
