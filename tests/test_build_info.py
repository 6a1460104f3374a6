"""A checkout's compiled modules never shadow a `.py` edited since they were built: the package
then runs from its `.py` files, with a warning naming the module and the fix. Checked on a copy
of the package's entry (`streams/__init__.py`, `build_info.py`) with one module beside a stand-in
for its extension module, which cannot load: importing it says which of the two was chosen."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SUFFIX = EXTENSION_SUFFIXES[0]
PROBE = (
    "import streams.build_info as b\n"
    "try:\n"
    "    import streams.core.probe as p\n"
    "    print(p.VALUE, b.describe())\n"
    "except ImportError:\n"
    "    print('extension', b.describe())\n"
)


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A checkout whose in-place build compiled `streams.core.probe` and recorded its source."""
    package = tmp_path / "streams"
    (package / "core").mkdir(parents=True)
    for name in ("__init__.py", "build_info.py"):
        shutil.copy(REPO / "streams" / name, package / name)
    (package / "core" / "__init__.py").write_text("")
    (package / "core" / "probe.py").write_text('VALUE = "source"\n')
    # Stand-ins for mypyc's output: not loadable, so importing one fails with an ImportError.
    (package / "core" / f"probe{SUFFIX}").write_bytes(b"not an extension module")
    (package / f"native__mypyc{SUFFIX}").write_bytes(b"not an extension module")
    (tmp_path / "build_backend").mkdir()
    (tmp_path / "build_backend" / "inplace.py").write_text("")
    run(tmp_path, "import streams.build_info as b; b.record_sources(['streams.core.probe'])")
    return tmp_path


def run(root: Path, code: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CLAIMSTREAM_")}
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=root,
        env=clean | env,
        capture_output=True,
        text=True,
        check=True,
    )


def test_a_compiled_module_built_from_its_current_source_is_imported(checkout: Path) -> None:
    done = run(checkout, PROBE)
    assert done.stdout == "extension compiled: streams.core.probe\n"
    assert done.stderr == ""


def test_a_source_edited_since_the_build_runs_instead_with_a_warning(checkout: Path) -> None:
    (checkout / "streams" / "core" / "probe.py").write_text('VALUE = "edited"\n')
    done = run(checkout, PROBE)
    assert done.stdout == "edited interpreted, stale compiled: streams.core.probe\n"
    assert "RuntimeWarning" in done.stderr
    assert "(streams.core.probe)" in done.stderr
    assert "bash scripts/setup.sh" in done.stderr
    assert "CLAIMSTREAM_USE_MYPYC=0 python -m build_backend.inplace" in done.stderr


def test_a_source_touched_but_unchanged_keeps_its_compiled_module(checkout: Path) -> None:
    source = checkout / "streams" / "core" / "probe.py"
    os.utime(source, ns=(source.stat().st_atime_ns, source.stat().st_mtime_ns + 10**9))
    done = run(checkout, PROBE)
    assert done.stdout == "extension compiled: streams.core.probe\n"
    assert done.stderr == ""


def test_compiled_modules_no_build_recorded_are_not_trusted(checkout: Path) -> None:
    (checkout / "build" / "inplace" / "sources.json").unlink()
    done = run(checkout, PROBE)
    assert done.stdout == "source interpreted, stale compiled: streams.core.probe\n"
    assert "(streams.core.probe)" in done.stderr


def test_the_interpreted_switch_runs_the_sources_without_a_warning(checkout: Path) -> None:
    (checkout / "streams" / "core" / "probe.py").write_text('VALUE = "edited"\n')
    done = run(checkout, PROBE, CLAIMSTREAM_INTERPRETED="1")
    assert done.stdout == "edited interpreted\n"
    assert done.stderr == ""


def test_an_installed_package_is_not_checked(checkout: Path) -> None:
    """A wheel ships no build backend: its files are installed together, there is nothing to
    compare (and no record)."""
    shutil.rmtree(checkout / "build_backend")
    (checkout / "streams" / "core" / "probe.py").write_text('VALUE = "edited"\n')
    done = run(checkout, PROBE)
    assert done.stdout == "extension compiled: streams.core.probe\n"


def test_the_record_holds_what_the_build_compiled_from(checkout: Path) -> None:
    record = json.loads((checkout / "build" / "inplace" / "sources.json").read_text())
    source = checkout / "streams" / "core" / "probe.py"
    assert list(record) == ["streams.core.probe"]
    assert record["streams.core.probe"]["size"] == source.stat().st_size
    assert len(record["streams.core.probe"]["sha256"]) == 64
