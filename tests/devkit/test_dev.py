"""`claimstream dev` from the user's side: the commands it prints (once the worker decides), Ctrl-C,
what it leaves behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from streams.devkit.brokers import free_port
from streams.devkit.dev import try_it

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.integration
def test_ctrl_c_stops_dev_quietly_and_leaves_no_folder_behind(tmp_path: Path) -> None:
    scratch, cwd = tmp_path / "tmp", tmp_path / "cwd"
    scratch.mkdir()
    cwd.mkdir()
    env = dict(os.environ, TMPDIR=str(scratch), CLAIMSTREAM_WEB_PORT=str(free_port()))
    proc = subprocess.Popen(
        [sys.executable, "-m", "streams.cli", "dev"],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    seen: list[str] = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # readline blocks; dev prints a line per decision
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(line.rstrip("\n"))
            if line.startswith("  claimstream tail dead-letters"):  # the last command it prints
                break
        text = "\n".join(seen)
        assert any(line.startswith("decision:") for line in seen), text
        # The commands come once the worker has decided: run at once, they see it work.
        try_it_at = seen.index("dev: try it from another terminal:")
        assert any(line.startswith("decision:") for line in seen[:try_it_at]), text
        proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
        rest, errors = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    output = "\n".join(seen) + "\n" + rest
    assert proc.returncode == 0, errors[-3000:]
    assert "-INT-" not in output + errors
    assert errors == ""
    assert output.rstrip().endswith("dev: broker stopped")

    # The printed commands name the broker dev started.
    (address,) = [line.split(" on ", 1)[1] for line in seen if " broker on " in line]
    printed = [line.strip() for line in seen if line.startswith("  claimstream ")]
    assert printed
    assert all(f"--broker {address}" in line for line in printed)
    assert any(line.startswith("claimstream resolve initech contract.seats") for line in printed)

    assert list(scratch.iterdir()) == []  # no broker data or state folder left in TMPDIR
    assert list(cwd.iterdir()) == []


def test_the_first_run_tutorial_shows_the_commands_dev_prints() -> None:
    # The tutorial writes the broker's address as $B (the address dev printed).
    tutorial = (REPO / "docs" / "tutorials" / "first-run.md").read_text(encoding="utf-8")
    printed = try_it("127.0.0.1:40123", datetime(2026, 11, 30, 12, tzinfo=UTC)).splitlines()
    commands = [line.strip() for line in printed if line.strip().startswith("claimstream ")]
    assert len(commands) >= 4
    for command in commands:
        assert command.replace("127.0.0.1:40123", "$B") in tutorial, command
