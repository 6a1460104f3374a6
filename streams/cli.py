"""The `claimstream` command line."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Iterable, Sequence
from contextlib import nullcontext
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from pydantic import ValidationError

from streams.core.contracts import Decision
from streams.core.errors import ClaimstreamError
from streams.core.explain import explain
from streams.core.policy import load_policy
from streams.core.replay import ReplayResult, replay
from streams.settings import Settings, load_settings


def _timestamp(raw: str) -> datetime:
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{raw!r} is not an RFC 3339 timestamp") from exc
    if moment.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{raw!r} needs a UTC offset, e.g. 2026-11-29T12:00:00Z")
    return moment.astimezone(UTC)


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
        if _belief(a) != _belief(b):
            flips += 1
            print(f"{key[0]} {key[1]}: {_summary(a)} -> {_summary(b)}")
    print(f"policy diff: {flips} of {len(before.keys() | after.keys())} decisions change")
    return 1 if flips and args.exit_code else 0


def _belief(decision: Decision | None) -> tuple[object, ...] | None:
    if decision is None:
        return None
    return (
        decision.outcome,
        decision.conflict_kind,
        decision.status,
        decision.value,
        decision.action,
    )


def _summary(decision: Decision | None) -> str:
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
    from streams.runtime import publish_lines

    lines = sys.stdin.read().splitlines() if args.claims == "-" else _read_lines(Path(args.claims))
    sent = asyncio.run(publish_lines(_settings(args), lines, user_assertions=args.user))
    print(f"publish: {sent} claims sent", file=sys.stderr)
    return 0


def cmd_tail(args: argparse.Namespace) -> int:
    from streams.runtime import tail

    return asyncio.run(tail(_settings(args), args.stream, args.count, args.timeout))


def cmd_bench(args: argparse.Namespace) -> int:
    from streams.devkit.bench import main as bench_main

    return bench_main(
        args.claims, args.subjects, args.broker_kind, args.partitions, args.latency_s, args.soak_s
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="claimstream", description="Deterministic reconciliation of conflicting claims."
    )
    commands = parser.add_subparsers(dest="command", required=True)

    rp = commands.add_parser("replay", help="arbitrate recorded claims offline (JSON lines)")
    rp.add_argument("claims", type=Path, help="claims, one JSON object per line")
    rp.add_argument("--policy", type=Path, required=True)
    rp.add_argument("--now", type=_timestamp, required=True, help="RFC 3339 evaluation time")
    rp.add_argument("--rejected", type=Path, help="write rejected claims here (JSON lines)")
    rp.add_argument("--resolutions", type=Path, help="human resolutions, JSON lines")
    rp.set_defaults(handler=cmd_replay)

    policy = commands.add_parser("policy", help="check or compare policy files")
    policy_commands = policy.add_subparsers(dest="policy_command", required=True)
    check = policy_commands.add_parser("check", help="validate a policy file")
    check.add_argument("file", type=Path)
    check.set_defaults(handler=cmd_policy_check)
    diff = policy_commands.add_parser("diff", help="decisions a policy change would flip")
    diff.add_argument("old", type=Path)
    diff.add_argument("new", type=Path)
    diff.add_argument("claims", type=Path)
    diff.add_argument("--now", type=_timestamp, default=datetime.now(UTC))
    diff.add_argument("--exit-code", action="store_true", help="exit 1 when a decision flips")
    diff.set_defaults(handler=cmd_policy_diff)

    ex = commands.add_parser("explain", help="render decisions (JSON lines) for people")
    ex.add_argument("decisions", nargs="?", default="-", help="file, or - for stdin")
    ex.add_argument("--subject")
    ex.add_argument("--field")
    ex.set_defaults(handler=cmd_explain)

    connection = argparse.ArgumentParser(add_help=False)
    connection.add_argument("--settings", type=Path, help="YAML settings file")
    connection.add_argument("--broker", help="kafka://host:port (overrides settings)")

    wk = commands.add_parser(
        "worker", parents=[connection], help="run a worker against the configured broker"
    )
    wk.set_defaults(handler=cmd_worker)

    dv = commands.add_parser(
        "dev", parents=[connection], help="bundled broker + worker + demo feed, printing decisions"
    )
    dv.add_argument("--broker-kind", choices=["tansu", "kafka"], default="tansu")
    dv.add_argument("--rounds", type=int, default=0, help="stop after N demo rounds (0: run on)")
    dv.add_argument("--round-seconds", type=float, default=20.0, help="pause between rounds")
    dv.set_defaults(handler=cmd_dev)

    pb = commands.add_parser("publish", parents=[connection], help="JSON claims in, Avro out")
    pb.add_argument("claims", nargs="?", default="-", help="JSON lines file, or - for stdin")
    pb.add_argument("--user", action="store_true", help="publish as user assertions")
    pb.set_defaults(handler=cmd_publish)

    tl = commands.add_parser("tail", parents=[connection], help="print a stream as JSON lines")
    tl.add_argument(
        "stream",
        choices=["decisions", "dead-letters", "epoch-changes", "reobserve", "escalations"],
    )
    tl.add_argument("--count", type=int, default=0, help="stop after N records (0: follow)")
    tl.add_argument("--timeout", type=float, default=0.0, help="stop after S idle seconds")
    tl.set_defaults(handler=cmd_tail)

    bn = commands.add_parser(
        "bench", help="claims/s, latency and state next to the raw aiokafka limit (prints JSON)"
    )
    bn.add_argument("--claims", type=int, default=100_000)
    bn.add_argument("--subjects", type=int, default=12_000)
    bn.add_argument("--broker-kind", choices=["kafka", "tansu"], default="kafka")
    bn.add_argument("--partitions", type=int, default=4)
    bn.add_argument("--latency-s", type=float, default=20.0, help="seconds of offered load")
    bn.add_argument(
        "--soak-s",
        type=float,
        default=0.0,
        help="then a steady run of this many seconds sampling memory (600 for the 10-min check)",
    )
    bn.set_defaults(handler=cmd_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except ClaimstreamError as exc:
        print(f"claimstream: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
