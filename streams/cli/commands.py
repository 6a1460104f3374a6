"""What each `claimstream` subcommand does: one `cmd_*` handler per subcommand, in the order a
newcomer meets them. Offline: `init` (example files), `replay` (arbitrate recorded claims),
`policy check|schema|diff`, `explain` (decisions for people). Against a worker's web API: `policy
suggest` (candidate edits from settled conflicts), `policy preview` (what a policy would flip
among the cluster's keys). Against a broker: `worker`, `dev` (bundled broker, worker and demo
feed), `publish` and `resolve` (claims and resolutions in), `replay-dead-letters` (refused
records back in), `tail` (streams out). Broker-side work is imported lazily from
streams.worker.runtime, streams.client and streams.cli.dead_letters, so the offline commands
start without Kafka clients. The dev kit's commands (`dev`, `bench`) stay in streams.cli.main,
the one module that may name the dev kit (tests/devkit/test_boundary.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import shutil
import sys
from collections.abc import Iterable
from contextlib import nullcontext
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO
from urllib.error import HTTPError
from urllib.parse import urlencode
from urllib.request import Request, urlopen

from pydantic import ValidationError

from streams.cli.signing import steward_signer
from streams.core.reading.explain import explain
from streams.core.reading.preview_report import render_answer
from streams.core.reading.replay import ReplayResult, TimedReplay, replay, replay_with_clock
from streams.core.records.contracts import ClaimStatus, Decision, Resolution, StewardAct
from streams.core.records.errors import ClaimstreamError
from streams.core.records.policy import Policy, load_policy
from streams.core.records.policy_schema import policy_schema_text
from streams.core.sources.suggestions import render, suggest
from streams.core.timeline.aliases import history_from_lines as alias_history_from_lines
from streams.core.timeline.erasures import ErasureHistory, erasures_from_lines
from streams.core.timeline.policy_history import history_from_lines
from streams.core.timeline.rollout import PolicyHistory
from streams.packaged import EXAMPLE_FILES, EXAMPLES_NOW, example_path
from streams.settings import Settings, load_settings

SUGGEST_TIMEOUT_S = 15.0
PREVIEW_TIMEOUT_S = 900.0  # every worker walks its keys: minutes for millions


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


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ClaimstreamError(f"{path}: cannot read: {exc.strerror}") from exc


def _final_replay(policy_path: Path, now: datetime, claims: Path) -> ReplayResult:
    return replay(_read_lines(claims), load_policy(policy_path), now)


def _run_replay(args: argparse.Namespace) -> ReplayResult | TimedReplay:
    resolution_lines = _read_lines(args.resolutions) if args.resolutions else []
    origin = str(args.resolutions)
    claims = _read_lines(args.claims)
    if not args.clock:
        return replay(claims, load_policy(args.policy), args.now, resolution_lines, origin)
    policies: Policy | PolicyHistory = (
        history_from_lines(_read_lines(args.policy_history), str(args.policy_history))
        if args.policy_history is not None
        else load_policy(args.policy)
    )
    aliases = None
    if args.alias_history is not None:
        lines = _read_lines(args.alias_history)
        aliases = alias_history_from_lines(lines, str(args.alias_history))
    erasures = None
    if args.erasures is not None:
        erased = erasures_from_lines(_read_lines(args.erasures), str(args.erasures))
        erasures = ErasureHistory(erased, aliases)
    return replay_with_clock(
        claims, policies, args.now, resolution_lines, origin, aliases=aliases, erasures=erasures
    )


def _open_for_writing(path: Path) -> TextIO:
    try:
        return open(path, "w", encoding="utf-8")
    except OSError as exc:
        raise ClaimstreamError(f"{path}: cannot write: {exc.strerror}") from exc


def cmd_replay(args: argparse.Namespace) -> int:
    if args.escalations and not args.clock:
        raise ClaimstreamError("--escalations goes with --clock (only the clock escalates)")
    histories = {
        "--policy-history": args.policy_history,
        "--alias-history": args.alias_history,
        "--erasures": args.erasures,
    }
    for flag, given in histories.items():
        if given is not None and not args.clock:
            raise ClaimstreamError(
                f"{flag} goes with --clock (each claim is taken at its own instant)"
            )
    # Opened first: an unwritable path fails before any decision is printed.
    with (
        _open_for_writing(args.rejected) if args.rejected else nullcontext() as rejected,
        _open_for_writing(args.escalations) if args.escalations else nullcontext() as escalated,
    ):
        result = _run_replay(args)
        if isinstance(result, TimedReplay):
            decisions = [e.decision for e in result.emitted if not e.escalation]
            escalations = [e.decision for e in result.emitted if e.escalation]
        else:
            decisions, escalations = result.decisions, []
        sys.stdout.writelines(decision.model_dump_json() + "\n" for decision in decisions)
        if escalated is not None:
            escalated.writelines(decision.model_dump_json() + "\n" for decision in escalations)
        if rejected is not None:
            rejected.writelines(rejection.to_json() + "\n" for rejection in result.rejections)
    for problem in result.rejected_resolutions:
        print(f"claimstream: rejected resolution: {problem}", file=sys.stderr)
    escalated_count = f", {len(escalations)} escalations" if args.clock else ""
    print(
        f"replay: {len(decisions)} decisions{escalated_count}, {len(result.rejections)} rejected "
        f"claims, {len(result.rejected_resolutions)} rejected resolutions",
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


def cmd_policy_schema(args: argparse.Namespace) -> int:
    print(policy_schema_text(), end="")
    return 0


def cmd_policy_diff(args: argparse.Namespace) -> int:
    old = _final_replay(args.old, args.now, args.claims)
    new = _final_replay(args.new, args.now, args.claims)
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


def cmd_policy_suggest(args: argparse.Namespace) -> int:
    """Read the cluster's settled outcomes from a worker and print the candidate edits."""
    if args.url:
        url = args.url.rstrip("/")
    else:
        settings = load_settings(args.settings)
        url = f"http://{settings.web_host}:{settings.web_port}"
    query = urlencode({"since": (args.now - args.since).isoformat()})
    try:
        with urlopen(f"{url}/api/sources?{query}", timeout=SUGGEST_TIMEOUT_S) as reply:
            report = json.load(reply)
    except (OSError, ValueError) as exc:
        raise ClaimstreamError(f"could not read {url}/api/sources: {exc}") from exc
    found = suggest(report)
    unanswered = report.get("unanswered") or []
    print(
        f"policy suggest: {len(found)} candidate edits from the settlements since "
        f"{report.get('since')}, as {len(report.get('workers') or [])} workers hold them"
        + (f" ({len(unanswered)} did not answer: {', '.join(unanswered)})" if unanswered else "")
    )
    for line in render(found):
        print(line)
    if found:
        print(
            "none is applied: edit the policy file, then `claimstream policy diff OLD NEW "
            "CLAIMS` shows the decisions the edit would flip"
        )
    return 0


def cmd_policy_preview(args: argparse.Namespace) -> int:
    """Ask a worker to preview a policy against the cluster's keys; print it per field."""
    load_policy(args.file)  # a bad policy is told here, before any worker is asked
    text = args.file.read_text(encoding="utf-8")
    query = {"limit": str(args.limit)} if args.limit else {}
    answer = ask_worker(args, "/api/policy/preview", query, "preview the policy", text.encode())
    if args.json:
        print(json.dumps(answer, indent=2, sort_keys=True, ensure_ascii=False))
    else:
        print("\n".join(render_answer(answer)))
    return 1 if args.exit_code and answer.get("flipped") else 0


def ask_worker(
    args: argparse.Namespace,
    path: str,
    query: dict[str, str],
    what: str,
    body: bytes | None = None,
) -> Any:
    """The JSON answer of the worker at `--url` (default: the settings' web port) to `path`,
    a POST of YAML `body` where one is given; ClaimstreamError with what it said otherwise."""
    if args.url:
        url = args.url.rstrip("/")
    else:
        settings = load_settings(args.settings)
        url = f"http://{settings.web_host}:{settings.web_port}"
    request = Request(
        f"{url}{path}" + (f"?{urlencode(query)}" if query else ""),
        data=body,
        headers={"Content-Type": "application/yaml"} if body is not None else {},
        method="POST" if body is not None else "GET",
    )
    try:
        with urlopen(request, timeout=PREVIEW_TIMEOUT_S) as reply:
            return json.load(reply)
    except HTTPError as exc:
        raise ClaimstreamError(f"{url} refused to {what}: {_error_of(exc)}") from exc
    except (OSError, ValueError) as exc:
        raise ClaimstreamError(f"could not {what} at {url}: {exc}") from exc


def _error_of(exc: HTTPError) -> str:
    """What a worker's error answer says (`{"error": ...}`), else its status."""
    try:
        return str(json.loads(exc.read())["error"])
    except (ValueError, KeyError, TypeError, OSError):
        return f"HTTP {exc.code}"


def cmd_explain(args: argparse.Namespace) -> int:
    if args.decisions == "-":
        return _explain_lines(sys.stdin, "stdin", args)
    return _explain_lines(_read_lines(Path(args.decisions)), args.decisions, args)


def _explain_lines(source: Iterable[str], origin: str, args: argparse.Namespace) -> int:
    resolutions = _recorded_resolutions(args.resolutions) if args.resolutions else []
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
        print(explain(decision, resolutions))
    return 0


def _recorded_resolutions(path: Path) -> list[Resolution]:
    found = []
    for number, line in enumerate(_read_lines(path), start=1):
        if line.strip():
            try:
                found.append(Resolution.model_validate_json(line))
            except ValidationError as exc:
                raise ClaimstreamError(f"{path}:{number}: not a resolution: {exc}") from exc
    return found


def settings_from(args: argparse.Namespace, **overrides: Any) -> Settings:
    """The settings a command runs with: its --settings file, then its --broker."""
    return load_settings(args.settings, broker=getattr(args, "broker", None), **overrides)


def _client_logs_quiet() -> None:
    """publish, resolve and tail report a broker they cannot reach as one error line; aiokafka
    would log each failed connection attempt before it as well."""
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)


def cmd_worker(args: argparse.Namespace) -> int:
    from streams.worker.runtime import run_worker

    return run_worker(settings_from(args))


def cmd_publish(args: argparse.Namespace) -> int:
    from streams.client import publish_resolutions
    from streams.worker.runtime import publish_lines

    _client_logs_quiet()
    settings = settings_from(args)
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


def cmd_policy_publish(args: argparse.Namespace) -> int:
    from streams.worker.policy_log import publish_policy

    _client_logs_quiet()
    settings = settings_from(args)
    policy = load_policy(args.file)
    lead = args.lead if args.lead is not None else timedelta(seconds=settings.policy_lead_s)
    since = args.at or datetime.now(UTC) + lead
    signer = steward_signer(args, settings) if args.key_id else None
    text = args.file.read_text(encoding="utf-8")
    asyncio.run(publish_policy(settings, text, since, signer, args.by))
    print(
        f"policy {policy.version} published on {settings.topics.policies}: every worker moves "
        f"every key to it at {since.isoformat()}",
        file=sys.stderr,
    )
    return 0


def cmd_policy_history(args: argparse.Namespace) -> int:
    from streams.worker.policy_log import published_lines

    _client_logs_quiet()
    for line in asyncio.run(published_lines(settings_from(args))):
        print(line)
    return 0


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
    undo = args.undo is not None
    if undo and (args.value is not None or status is not ClaimStatus.PRESENT):
        raise ClaimstreamError("--undo takes back a resolution: give no --value or --status")
    if not undo and (args.value is None) == (status is ClaimStatus.PRESENT):
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
        act=StewardAct.UNDO if undo else StewardAct.RESOLVE,
        target_id=args.undo,
    )
    settings = settings_from(args)
    signer = steward_signer(args, settings) if args.key_id else None
    personal = load_policy(args.policy or settings.policy).personal_fields
    asyncio.run(publish_resolutions(settings, [resolution], signer, personal))
    print(resolution.model_dump_json())
    print(
        f"resolve: {'undo of ' + args.undo + ' ' if undo else ''}{resolution.resolution_id} "
        f"sent for {args.subject} {args.field}",
        file=sys.stderr,
    )
    return 0


def cmd_replay_dead_letters(args: argparse.Namespace) -> int:
    """Exit 1 when a chosen dead letter could not be sent (a signature past max_age)."""
    from streams.cli.dead_letters import Choice, replay_dead_letters

    _client_logs_quiet()
    settings = settings_from(args)
    max_age = load_policy(settings.policy).signing.max_age
    choice = Choice(set(args.reason), args.since, args.until)
    replayed = asyncio.run(
        replay_dead_letters(
            settings, choice, max_age, datetime.now(UTC), sys.stderr, dry_run=args.dry_run
        )
    )
    print(replayed.summary(max_age, args.dry_run), file=sys.stderr)
    return 1 if replayed.expired else 0


def cmd_tail(args: argparse.Namespace) -> int:
    from streams.worker.runtime import tail

    _client_logs_quiet()
    return asyncio.run(tail(settings_from(args), args.stream, args.count, args.timeout))
