"""`claimstream policy schema` prints the schema the package ships, and `init` copies it beside
the example policy whose first line names it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.builders import REPO


def claimstream(*args: str | Path, cwd: Path = REPO) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "streams.cli", *map(str, args)],
        capture_output=True,
        text=True,
        check=True,
        cwd=cwd,
    )
    return done.stdout


def test_policy_schema_prints_the_shipped_schema() -> None:
    assert claimstream("policy", "schema") == (REPO / "examples" / "policy.schema.json").read_text()


def test_init_puts_the_schema_where_the_policy_names_it(tmp_path: Path) -> None:
    claimstream("init", tmp_path / "ex")
    policy = (tmp_path / "ex" / "policy.yaml").read_text()
    named = policy.splitlines()[0].removeprefix("# yaml-language-server: $schema=")
    assert (tmp_path / "ex" / named).read_text() == claimstream("policy", "schema")
