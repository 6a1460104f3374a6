"""The `claimstream` command line: one `cmd_*` handler per subcommand, `build_parser` the table.

Offline, in the order a newcomer meets them: `init` (example files), `replay` (arbitrate recorded
claims), `policy check|diff`, `explain` (decisions for people). Against a broker: `worker`, `dev`
(bundled broker, worker and demo feed), `publish` and `resolve` (claims and resolutions in),
`tail` (streams out), and `bench`. Broker-side work is imported lazily from streams.runtime,
streams.client and streams.devkit, so the offline commands start without Kafka clients.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import shutil
import sys
from collections.abc import Callable, Iterable, Sequence
from contextlib import nullcontext
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from pydantic import ValidationError

from streams import __version__
from streams.core.contracts import ClaimStatus, Decision, Resolution, parse_instant
from streams.core.errors import ClaimstreamError
from streams.core.explain import explain
from streams.core.policy import load_policy
from streams.core.replay import ReplayResult, replay
from streams.packaged import EXAMPLE_FILES, EXAMPLES_NOW, example_path
from streams.settings import Guarantee, Settings, load_settings


def _instant_argument(raw: str) -> datetime:
    try:
        return parse_instant(raw)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{raw!r} is not an RFC 3339 timestamp: {exc}") from exc


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ClaimstreamError(f"{path}: cannot read: {exc.strerror}") from exc


def _run_replay(
    policy_path: Path, now: datetime, claims: Path, resolutions: Path | None
) -> ReplayResult:
    policy = load_policy(policy_path)
    resolution_lines = _read_lines(resolutions) if resolutions else []
    return replay(_read_lines(claims), policy, now, resolution_lines, str(resolutions))


def _open_for_writing(path: Path) -> TextIO:
    try:
        return open(path, "w", encoding="utf-8")
    except OSError as exc:
        raise ClaimstreamError(f"{path}: cannot write: {exc.strerror}") from exc


def cmd_replay(args: argparse.Namespace) -> int:
    # Opened first: an unwritable path fails before any decision is printed.
    with _open_for_writing(args.rejected) if args.rejected else nullcontext() as rejected:
        result = _run_replay(args.policy, args.now, args.claims, args.resolutions)
        out = sys.stdout
        for decision in result.decisions:
            out.write(decision.model_dump_json() + "\n")
        if rejected is not None:
            rejected.writelines(rejection.to_json() + "\n" for rejection in result.rejections)
    for problem in result.rejected_resolutions:
        print(f"claimstream: rejected resolution: {problem}", file=sys.stderr)
    print(
        f"replay: {len(result.decisions)} decisions, {len(result.rejections)} rejected claims, "
        f"{len(result.rejected_resolutions)} rejected resolutions",
        file=sys.stderr,
    )
    return 0


def cmd_policy_check(args: argparse.Namespace) -> int:
    policy = load_policy(args.file)
    print(
        f"{args.file}: policy {policy.version} is valid "
        f"({len(policy.sources)} sources, {len(policy.fields)} fields)"
    )
    return 0


def cmd_policy_diff(args: argparse.Namespace) -> int:
    old = _run_replay(args.old, args.now, args.claims, None)
    new = _run_replay(args.new, args.now, args.claims, None)
    before = {(d.subject, d.field): d for d in old.decisions}
    after = {(d.subject, d.field): d for d in new.decisions}
    flips = 0
    for key in sorted(before.keys() | after.keys()):
        a, b = before.get(key), after.get(key)
        if _flippable(a) != _flippable(b):
            flips += 1
            print(f"{key[0]} {key[1]}: {_one_line(a)} -> {_one_line(b)}")
    print(f"policy diff: {flips} of {len(before.keys() | after.keys())} decisions change")
    return 1 if flips and args.exit_code else 0


def _flippable(decision: Decision | None) -> tuple[object, ...] | None:
    if decision is None:
        return None
    return (
        decision.outcome,
        decision.conflict_kind,
        decision.status,
        decision.value,
        decision.action,
    )


def _one_line(decision: Decision | None) -> str:
    if decision is None:
        return "(no decision: claims rejected)"
    value = "" if decision.value is None else f" {decision.value!r}"
    kind = f"/{decision.conflict_kind.value}" if decision.conflict_kind else ""
    return f"{decision.outcome.value}{kind}{value} ({decision.action.value})"


def cmd_explain(args: argparse.Namespace) -> int:
    if args.decisions == "-":
        return _explain_lines(sys.stdin, "stdin", args)
    return _explain_lines(_read_lines(Path(args.decisions)), args.decisions, args)


def _explain_lines(source: Iterable[str], origin: str, args: argparse.Namespace) -> int:
    for number, line in enumerate(source, start=1):
        if not line.strip():
            continue
        try:
            decision = Decision.model_validate_json(line)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "(line)"
            raise ClaimstreamError(
                f"{origin}:{number}: not a decision record: {where}: {first['msg']}"
            ) from exc
        if args.subject and decision.subject != args.subject:
            continue
        if args.field and decision.field != args.field:
            continue
        print(explain(decision))
    return 0


def _settings(args: argparse.Namespace, **overrides: Any) -> Settings:
    return load_settings(args.settings, broker=getattr(args, "broker", None), **overrides)


def _client_logs_quiet() -> None:
    """publish, resolve and tail report a broker they cannot reach as one error line; aiokafka
    would log each failed connection attempt before it as well."""
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)


def cmd_worker(args: argparse.Namespace) -> int:
    from streams.runtime import run_worker

    return run_worker(_settings(args))


def cmd_dev(args: argparse.Namespace) -> int:
    from streams.devkit.dev import run_dev

    return run_dev(
        _settings(args),
        broker_kind=args.broker_kind,
        rounds=args.rounds,
        round_seconds=args.round_seconds,
    )


def cmd_publish(args: argparse.Namespace) -> int:
    from streams.client import publish_resolutions
    from streams.runtime import publish_lines

    _client_logs_quiet()
    settings = _settings(args)
    # Every resolution is checked before anything is sent: one bad line sends none of them.
    resolutions = _resolutions_file(args.resolutions) if args.resolutions else []
    if args.claims is not None or not args.resolutions:
        claims = args.claims or "-"
        lines = sys.stdin.read().splitlines() if claims == "-" else _read_lines(Path(claims))
        sent = asyncio.run(publish_lines(settings, lines, user_assertions=args.user))
        print(f"publish: {sent} claims sent", file=sys.stderr)
    if resolutions:
        sent = asyncio.run(publish_resolutions(settings, resolutions))
        print(f"publish: {sent} resolutions sent", file=sys.stderr)
    return 0


def _resolutions_file(path: Path) -> list[Resolution]:
    from streams.client import build_resolution

    now = datetime.now(UTC)
    resolutions = []
    for number, line in enumerate(_read_lines(path), start=1):
        if not line.strip():
            continue
        origin = f"{path}:{number}"
        try:
            request = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ClaimstreamError(f"{origin}: not JSON: {exc.msg}") from exc
        if not isinstance(request, dict):
            raise ClaimstreamError(f"{origin}: a resolution is a JSON object")
        problems = [
            f"{origin}: {key}: missing"
            for key in ("subject", "field", "decided_by")
            if not isinstance(request.get(key), str)
        ]
        problems += [
            f"{origin}: {key}: not a resolution field"
            for key in sorted(request.keys() - Resolution.model_fields.keys())
        ]
        if problems:
            raise ClaimstreamError("\n".join(problems))
        fields = {"decided_at": now, **request, "origin": origin}
        resolutions.append(build_resolution(None, **fields))
    return resolutions


def _json_or_text(raw: str) -> Any:
    """`--value 40` is a number, `--value true` a boolean, `--value '{"amount_minor": 1250,
    "currency": "USD"}'` money; anything that is not JSON (`--value paid`) is a string."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def cmd_resolve(args: argparse.Namespace) -> int:
    from streams.client import build_resolution, publish_resolutions

    _client_logs_quiet()
    status = ClaimStatus(args.status)
    if (args.value is None) == (status is ClaimStatus.PRESENT):
        raise ClaimstreamError(
            "give --value for a present value, or --status not_found without a value"
        )
    resolution = build_resolution(
        load_policy(args.policy) if args.policy else None,
        args.subject,
        args.field,
        decided_by=args.by,
        decided_at=datetime.now(UTC),
        status=status,
        value=None if args.value is None else _json_or_text(args.value),
        unit=args.unit,
        note=args.note,
        resolves_decision_id=args.decision_id,
    )
    asyncio.run(publish_resolutions(_settings(args), [resolution]))
    print(resolution.model_dump_json())
    print(
        f"resolve: {resolution.resolution_id} sent for {args.subject} {args.field}",
        file=sys.stderr,
    )
    return 0


def cmd_init(args: argparse.Namespace) -> int:
    target: Path = args.directory
    existing = [target / name for name in EXAMPLE_FILES if (target / name).exists()]
    if existing and not args.force:
        raise ClaimstreamError(
            f"{existing[0]} exists; pass --force to overwrite the example files in {target}"
        )
    try:
        target.mkdir(parents=True, exist_ok=True)
        for name in EXAMPLE_FILES:
            shutil.copyfile(example_path(name), target / name)
    except OSError as exc:
        raise ClaimstreamError(f"{target}: cannot write the examples: {exc.strerror}") from exc
    print(f"init: wrote {', '.join(str(target / name) for name in EXAMPLE_FILES)}")
    print("try:")
    print(f"  claimstream policy check {target / 'policy.yaml'}")
    print(
        f"  claimstream replay --policy {target / 'policy.yaml'} --now {EXAMPLES_NOW} "
        f"--resolutions {target / 'resolutions.jsonl'} {target / 'claims.jsonl'}"
        " | claimstream explain"
    )
    return 0


def cmd_tail(args: argparse.Namespace) -> int:
    from streams.runtime import tail

    _client_logs_quiet()
    return asyncio.run(tail(_settings(args), args.stream, args.count, args.timeout))


def cmd_bench(args: argparse.Namespace) -> int:
    from streams.devkit.bench.run import main as bench_main

    return bench_main(
        args.claims,
        args.subjects,
        args.broker_kind,
        args.partitions,
        args.latency_s,
        args.soak_s,
        Guarantee(args.guarantee),
    )


def _broker_kind_option(parser: argparse.ArgumentParser, default: str) -> None:
    parser.add_argument(
        "--broker-kind",
        choices=["tansu", "kafka"],
        default=default,
        help=f"tansu (bundled, no JVM) or kafka (Apache Kafka: Java 17 and Maven); "
        f"default {default}",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="claimstream", description="Deterministic reconciliation of conflicting claims."
    )
    parser.add_argument("--version", action="version", version=f"claimstream {__version__}")
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
    replay_parser.add_argument("--policy", type=Path, required=True, help="the policy file (YAML)")
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
    replay_parser.set_defaults(handler=cmd_replay)

    policy_parser = commands.add_parser("policy", help="check or compare policy files")
    policy_commands = policy_parser.add_subparsers(dest="policy_command", required=True)
    check_parser = policy_commands.add_parser("check", help="validate a policy file")
    check_parser.add_argument("file", type=Path, help="the policy file (YAML)")
    check_parser.set_defaults(handler=cmd_policy_check)
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

    explain_parser = commands.add_parser("explain", help="render decisions (JSON lines) for people")
    explain_parser.add_argument("decisions", nargs="?", default="-", help="file, or - for stdin")
    explain_parser.add_argument("--subject", help="only decisions about this subject")
    explain_parser.add_argument("--field", help="only decisions about this field")
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
        "--policy",
        type=Path,
        metavar="FILE",
        help="check the value against this policy before sending "
        "(the worker checks it anyway and dead-letters what it refuses)",
    )
    resolve_parser.set_defaults(handler=cmd_resolve)

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

    bench_parser = commands.add_parser(
        "bench", help="claims/s, latency and state next to the raw aiokafka limit (prints JSON)"
    )
    bench_parser.add_argument(
        "--claims", type=int, default=100_000, help="generated claims to process"
    )
    bench_parser.add_argument(
        "--subjects", type=int, default=12_000, help="distinct subjects among them"
    )
    _broker_kind_option(bench_parser, default="kafka")
    bench_parser.add_argument("--partitions", type=int, default=4, help="partitions per topic")
    bench_parser.add_argument(
        "--latency-s", type=float, default=20.0, help="seconds of offered load"
    )
    bench_parser.add_argument(
        "--soak-s",
        type=float,
        default=0.0,
        help="then a steady run of this many seconds sampling memory (600 for the 10-min check)",
    )
    bench_parser.add_argument(
        "--guarantee",
        choices=[g.value for g in Guarantee],
        default=Guarantee.AT_LEAST_ONCE.value,
        help="the worker's processing guarantee (exactly_once: the same run under transactions)",
    )
    bench_parser.set_defaults(handler=cmd_bench)
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


if __name__ == "__main__":
    sys.exit(main())
