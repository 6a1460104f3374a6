"""The wheel is the product: built, installed into a fresh venv and run from an empty folder."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

import streams
from streams.devkit.brokers import free_port
from streams.packaged import EXAMPLE_FILES, EXAMPLES_NOW, example_path, schema_dir

REPO = Path(__file__).resolve().parents[1]


def test_the_packaged_files_are_the_top_level_ones() -> None:
    # One copy of each: the package links to schemas/ and examples/ in a checkout.
    assert schema_dir().resolve() == (REPO / "schemas").resolve()
    for name in EXAMPLE_FILES:
        assert example_path(name).resolve() == (REPO / "examples" / name).resolve()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        # The sdist first, then the wheel from it: both must carry the files the links point to.
        [sys.executable, "-m", "build", "--outdir", str(out), str(REPO)],
        check=True,
        capture_output=True,
        timeout=600,
        # The default, pure-Python wheel: it needs no C compiler (any use of one would fail).
        env=os.environ | {"CLAIMSTREAM_USE_MYPYC": "0", "CC": "false"},
    )
    (built,) = out.glob("claimstream-*.whl")
    assert built.name.endswith("-py3-none-any.whl"), built.name
    return built


@pytest.mark.integration
def test_the_wheel_carries_the_schemas_examples_console_and_kafka_assembly(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {
        f"streams/schemas/{path.relative_to(REPO / 'schemas').as_posix()}"
        for path in (REPO / "schemas").rglob("*.avsc")
    }
    expected |= {f"streams/examples/{name}" for name in EXAMPLE_FILES}
    expected |= {"streams/devkit/kafka/kafka-assemble.sh", "streams/devkit/kafka/pom.xml"}
    # The steward console's pages: served from the package, nothing to build.
    expected |= {
        f"streams/console/static/{path.name}"
        for path in (REPO / "streams" / "console" / "static").iterdir()
    }
    assert len(expected) > 20
    assert expected <= names, sorted(expected - names)


@pytest.mark.integration
def test_the_installed_wheel_runs_from_an_empty_folder(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    bin_dir = env_dir / "bin"
    subprocess.run(
        [bin_dir / "python", "-m", "pip", "install", "--quiet", f"{wheel}[devkit]"],
        check=True,
        capture_output=True,
        timeout=900,
    )
    empty, scratch = tmp_path / "empty", tmp_path / "tmp"
    empty.mkdir()
    scratch.mkdir()
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
    }
    env |= {
        "PATH": f"{bin_dir}{os.pathsep}{env['PATH']}",
        "TMPDIR": str(scratch),
        "CLAIMSTREAM_WEB_PORT": str(free_port()),
    }
    env = {k: v for k, v in env.items() if not k.startswith("CLAIMSTREAM_") or k.endswith("PORT")}

    def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            args, cwd=empty, env=env, capture_output=True, text=True, timeout=timeout, check=True
        )

    located = run("python", "-c", "import streams.packaged as p; print(p.schema_dir())").stdout
    assert Path(located.strip()).is_relative_to(env_dir), located
    version = run("claimstream", "--version").stdout.strip()
    assert version == f"claimstream {streams.__version__} (interpreted)"

    run("claimstream", "init")
    assert "is valid" in run("claimstream", "policy", "check", "examples/policy.yaml").stdout
    replay = ["replay", "--policy", "examples/policy.yaml", "--now", EXAMPLES_NOW]
    replay += ["--resolutions", "examples/resolutions.jsonl", "examples/claims.jsonl"]
    replayed = run("claimstream", *replay).stdout
    from_checkout = subprocess.run(
        [sys.executable, "-m", "streams.cli", *replay],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert replayed == from_checkout
    assert replayed.count("\n") >= 8

    dev = run("claimstream", "dev", "--rounds", "1", "--round-seconds", "1", timeout=300)
    assert "dev: demo round 0 published" in dev.stdout
    assert "reason manual" in dev.stdout  # the demo's resolution closed the globex conflict
    assert dev.stdout.rstrip().endswith("dev: broker stopped")
    assert dev.stderr == ""
    # Nothing left behind: no broker or state folder in TMPDIR, nothing new in the folder.
    assert list(scratch.iterdir()) == []
    assert sorted(p.name for p in empty.iterdir()) == ["examples"]
