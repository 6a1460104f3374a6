"""The stewards' commands of the `claimstream` command line: `review approve`, `reject` and
`send-back` of a steward's proposed resolution or undo; `take`, `release` and `hand` of a key's
task; `review queue`, the open tasks as the console lists them, and `review show`, a key's
statements with where each stands. `streams.cli.main` adds them to its parser.

An approval names the basis its steward saw: the key's decision and its evidence digest, which
`approve` asks the key's worker for (`GET /api/decisions/KEY`) and prints before it publishes.
The key's owner refuses the approval as stale, and sends the proposal back to its author, if the
key has been decided again by the time it takes it (`streams.core.keys.stewardship`).
Reviews are signed as `resolve` signs (`--key-id`, `--key-env`) where the policy asks for it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from streams.cli.commands import _client_logs_quiet, ask_worker, settings_from
from streams.cli.signing import steward_signer
from streams.core.keys.state import split_key
from streams.core.records.contracts import StewardAct
from streams.core.records.policy import load_policy

_VERDICTS = {
    "approve": StewardAct.APPROVE,
    "reject": StewardAct.REJECT,
    "send-back": StewardAct.SEND_BACK,
}
_TASKS = {
    "take": "take a key's task: yours until your lease lapses (the policy's review.lease)",
    "release": "release a task you hold: anyone may take it",
    "hand": "hand a task you hold to another steward (--to)",
}


def add_review_commands(commands: Any, connection: argparse.ArgumentParser) -> None:
    """Add `review` and its subcommands (`connection`: the --settings, --broker parent)."""
    review_parser = commands.add_parser(
        "review",
        help="the stewards' work: review proposals (approve, reject, send back), take, hand on "
        "or release a key's task, list the queue, show a key's statements",
    )
    review_commands = review_parser.add_subparsers(dest="review_command", required=True)
    worker = argparse.ArgumentParser(add_help=False)
    worker.add_argument(
        "--url", help="any worker's web URL: it asks the key's owner (default: the settings')"
    )
    said = argparse.ArgumentParser(add_help=False)
    said.add_argument("key", metavar="KEY", help="the key, subject|field")
    said.add_argument("--by", required=True, metavar="NAME", help="who you are (the steward)")
    said.add_argument("--note", default="", metavar="TEXT", help="why, in your words")
    said.add_argument(
        "--policy", type=Path, metavar="FILE", help="the policy to sign by (with --key-id)"
    )
    said.add_argument(
        "--key-id", metavar="ID", help="sign as --by with this key of the stewards section"
    )
    said.add_argument(
        "--key-env", metavar="VAR", help="the environment variable holding the key's secret"
    )
    for name, act in _VERDICTS.items():
        verdict = review_commands.add_parser(
            name,
            parents=[connection, worker, said],
            help=f"{name.replace('-', ' ')} a proposal"
            + (": names the decision and evidence you saw" if act is StewardAct.APPROVE else ""),
        )
        verdict.add_argument("proposal", metavar="ID", help="the proposal's resolution_id")
        verdict.set_defaults(handler=cmd_review, act=act)
    for name, help_text in _TASKS.items():
        task = review_commands.add_parser(name, parents=[connection, worker, said], help=help_text)
        if name == "hand":
            task.add_argument("--to", required=True, metavar="NAME", help="the steward")
        task.set_defaults(handler=cmd_review, act=StewardAct.ASSIGN, proposal=None)
    queue = review_commands.add_parser(
        "queue",
        parents=[worker],
        help="the open tasks across the cluster, oldest first (the console's queue)",
    )
    queue.add_argument("--field", metavar="F", help="only this field")
    queue.add_argument("--mine", metavar="NAME", help="only the tasks NAME holds")
    queue.add_argument("--unassigned", action="store_true", help="only tasks nobody holds")
    queue.add_argument("--overdue", action="store_true", help="only tasks past their due time")
    queue.add_argument("--settings", type=Path, metavar="FILE", help="YAML settings file")
    queue.set_defaults(handler=cmd_review_queue)
    show = review_commands.add_parser(
        "show",
        parents=[worker],
        help="a key's stewards' statements: resolutions in force, proposals and their reviews",
    )
    show.add_argument("key", metavar="KEY", help="the key, subject|field")
    show.add_argument("--settings", type=Path, metavar="FILE", help="YAML settings file")
    show.set_defaults(handler=cmd_review_show)


def cmd_review(args: argparse.Namespace) -> int:
    from streams.client import build_resolution, publish_resolutions

    _client_logs_quiet()
    subject, field = split_key(args.key)
    seen: dict[str, Any] = {}
    if args.act is StewardAct.APPROVE:
        answer = ask_worker(args, f"/api/decisions/{quote(args.key, safe='')}", {}, "read the key")
        seen = answer["basis"]
        decision = answer["decision"]
        print(
            f"review: approving {args.proposal} on the basis of decision {seen['decision_id']} "
            f"({decision['outcome']}, evidence {seen['evidence_digest']})",
            file=sys.stderr,
        )
    assignee = {"take": args.by, "hand": getattr(args, "to", None)}.get(args.review_command)
    statement = build_resolution(
        load_policy(args.policy) if args.policy else None,
        subject,
        field,
        decided_by=args.by,
        decided_at=datetime.now(UTC),
        note=args.note,
        act=args.act,
        target_id=args.proposal,
        assignee=assignee,
        resolves_decision_id=seen.get("decision_id"),
        basis_digest=seen.get("evidence_digest"),
        origin=f"review {args.act.value}",
    )
    settings = settings_from(args)
    signer = steward_signer(args, settings) if args.key_id else None
    asyncio.run(publish_resolutions(settings, [statement], signer))
    print(statement.model_dump_json())
    what = args.proposal if args.proposal else f"the task to {assignee or 'nobody'}"
    print(f"review: {args.review_command} {what} sent for {args.key}", file=sys.stderr)
    return 0


def cmd_review_queue(args: argparse.Namespace) -> int:
    query = {"field": args.field, "assignee": args.mine}
    wanted = {name: value for name, value in query.items() if value}
    wanted |= {flag: "1" for flag in ("unassigned", "overdue") if getattr(args, flag)}
    answer = ask_worker(args, "/api/conflicts", wanted, "read the queue")
    for row in answer["open_conflicts"]:
        holder = f"{row['assignee']} until {row['lease_until']}" if row["assignee"] else "nobody"
        late = "  OVERDUE" if row["overdue"] else ""
        count = row["waiting_for_review"]
        waiting = f"  {count} waiting for review" if count else ""
        print(
            f"{row['key']}  {row['outcome']}  open {row['age_s']:.0f} s  due {row['due_at']}"
            f"  held by {holder}{waiting}{late}"
        )
    for url in answer["unanswered"]:
        print(f"review: {url} did not answer: its tasks are missing above", file=sys.stderr)
    return 0


def cmd_review_show(args: argparse.Namespace) -> int:
    path = f"/api/decisions/{quote(args.key, safe='')}/history"
    answer = ask_worker(args, path, {}, "read the key's history")
    for resolution in answer["resolutions"]:
        print(_line(resolution, "in_force"))
    for step in answer["steward_log"]:
        print(_line(step, step["standing"]))
    return 0


def _line(statement: dict[str, Any], standing: str) -> str:
    about = f" {statement['target_id']}" if statement.get("target_id") else ""
    value = f" = {statement['value']}" if statement.get("act") in ("resolve", "propose") else ""
    why = f" ({statement['why']})" if statement.get("why") else ""
    note = f": {statement['note']}" if statement.get("note") else ""
    return (
        f"{statement['decided_at']}  {standing:<9}  {statement['act']}{about}{value}  "
        f"{statement['resolution_id']} by {statement['decided_by']}{note}{why}"
    )
