"""The compiled and the interpreted claimstream: what each run loads, that both decide alike, and
that the compiled wheel carries and loads its extension modules.

scripts/test.sh runs the suite on the checkout compiled in place by scripts/setup.sh, then
tests/core and this file again with `CLAIMSTREAM_INTERPRETED=1` (every module from its `.py`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

import streams.core.rules.engine
from build_backend.compiled import GROUP, SWITCH, modules
from build_backend.inplace import built_extensions
from streams.build_info import INTERPRETED, compiled_modules, describe
from streams.packaged import EXAMPLES_NOW

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
REPLAY = ["replay", "--policy", str(EXAMPLES / "policy.yaml"), "--now", EXAMPLES_NOW]
REPLAY += ["--resolutions", str(EXAMPLES / "resolutions.jsonl"), str(EXAMPLES / "claims.jsonl")]


def _python(code: str, env: dict[str, str], cwd: Path = REPO) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def _replay(env: dict[str, str], cwd: Path = REPO) -> str:
    command = [sys.executable, "-m", "streams.cli", *REPLAY]
    return subprocess.run(
        command, env=env, cwd=cwd, capture_output=True, text=True, check=True
    ).stdout


def test_this_run_loads_what_its_mode_says() -> None:
    engine = streams.core.rules.engine.__file__
    assert engine is not None
    if os.environ.get(INTERPRETED) == "1" or not built_extensions():
        assert engine.endswith("engine.py")
        assert compiled_modules() == ()
        assert describe() == "interpreted"
        assert f"{GROUP}__mypyc" not in sys.modules
    else:
        assert engine.endswith(tuple(EXTENSION_SUFFIXES)), engine
        assert compiled_modules() == tuple(sorted(modules()))
        assert describe() == f"compiled: {', '.join(sorted(modules()))}"


WHERE_THE_ENGINE_RUNS_FROM = (
    "import streams.core.rules.engine as e, streams.build_info as b;"
    " print(e.__file__, b.describe())"
)


def test_the_interpreted_switch_imports_every_module_from_its_source() -> None:
    (line,) = _python(WHERE_THE_ENGINE_RUNS_FROM, os.environ | {INTERPRETED: "1"})
    assert line == f"{REPO / 'streams' / 'core' / 'rules' / 'engine.py'} interpreted"


def test_compiled_and_interpreted_replays_agree_byte_for_byte() -> None:
    compiled = _replay(os.environ | {INTERPRETED: "0"})
    assert compiled == _replay(os.environ | {INTERPRETED: "1"})
    assert compiled.count("\n") >= 8


@pytest.mark.integration
def test_the_compiled_wheel_loads_its_extension_modules(tmp_path: Path) -> None:
    out = tmp_path / "dist"
    subprocess.run(
        # From the sdist, as a release is built: nothing of the checkout's own builds leaks in.
        [sys.executable, "-m", "build", "--outdir", str(out), str(REPO)],
        env=os.environ | {SWITCH: "1"},
        check=True,
        capture_output=True,
        timeout=900,
    )
    (wheel,) = out.glob("claimstream-*.whl")
    assert not wheel.name.endswith("-none-any.whl"), wheel.name  # a platform wheel
    unpacked = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(unpacked)
    names = {path.relative_to(unpacked).as_posix() for path in unpacked.rglob("*")}
    for module in modules():
        stem = module.replace(".", "/")
        assert any(name.startswith(f"{stem}.") and name.endswith(".so") for name in names), stem
    assert not any(name.startswith("build_backend") for name in names)
    # The unpacked wheel ahead of the checkout on the path, run from an empty folder.
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLAIMSTREAM_")}
    env["PYTHONPATH"] = str(unpacked)
    (line,) = _python(WHERE_THE_ENGINE_RUNS_FROM, env, cwd=empty)
    engine, described = line.split(" ", 1)
    assert Path(engine).is_relative_to(unpacked), engine
    assert engine.endswith(tuple(EXTENSION_SUFFIXES)), engine
    assert described == f"compiled: {', '.join(sorted(modules()))}"
    replayed = _replay(env, cwd=empty)
    assert replayed == _replay(os.environ | {INTERPRETED: "1"})
