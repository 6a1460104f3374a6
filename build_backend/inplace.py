"""The compiled modules of an editable checkout, built next to their sources.

scripts/setup.sh runs `python -m build_backend.inplace` after the editable install. With
`CLAIMSTREAM_USE_MYPYC` unset it compiles when a C toolchain is there and otherwise says so and
leaves the checkout interpreted; `=1` requires the compile, `=0` removes any extension modules so
the `.py` files run. A failed compile of a listed module always fails the setup. The extension
modules shadow the `.py` files beside them (the import system prefers extensions), so they are
rebuilt whenever a source they were compiled from is newer; the build records what it compiled
from (`streams.build_info.SOURCES`), which makes the package, when imported, run its `.py` files
(with a warning) rather than an extension module its source has changed since.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
import warnings
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

from build_backend.compiled import (
    GROUP,
    MODULES_OVERRIDE,
    ROOT,
    SWITCH,
    compile_extensions,
    modules,
)

with warnings.catch_warnings():
    # Stale extension modules are what this build replaces: no need to warn of them here.
    warnings.simplefilter("ignore", RuntimeWarning)
    from streams.build_info import SOURCES, record_sources, recorded_modules


def _log(message: str) -> None:
    print(f"setup: {message}", file=sys.stderr)


def toolchain_missing() -> str | None:
    """Why no extension module can be built here, or None when one can."""
    compiler = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        return f"no C compiler ({compiler})"
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if not headers.is_file():
        return f"no Python headers ({headers})"
    return None


def built_extensions() -> list[Path]:
    found = (ROOT / "streams").rglob("*")
    return sorted(path for path in found if path.name.endswith(tuple(EXTENSION_SUFFIXES)))


def remove_extensions() -> None:
    for path in built_extensions():
        path.unlink()
    SOURCES.unlink(missing_ok=True)


def _inputs() -> list[Path]:
    # The listed modules and the core they are type-checked against, plus the build's own rules.
    listed = [ROOT.joinpath(*name.split(".")).with_suffix(".py") for name in modules()]
    here = Path(__file__).parent
    return [
        *listed,
        *(ROOT / "streams" / "core").glob("*.py"),
        *here.glob("*.py"),
        *here.glob("*.ini"),
    ]


def up_to_date() -> bool:
    built = built_extensions()
    if not built or recorded_modules() != modules():  # a changed list means a rebuild
        return False
    oldest = min(path.stat().st_mtime for path in built)
    return all(path.stat().st_mtime <= oldest for path in _inputs() if path.is_file())


def build() -> None:
    from setuptools import Distribution

    remove_extensions()  # a module dropped from the list must not keep shadowing its source
    os.chdir(ROOT)
    distribution = Distribution({"name": "claimstream", "ext_modules": compile_extensions()})
    command = distribution.get_command_obj("build_ext")
    command.inplace = True  # type: ignore[attr-defined]
    # Its own build folders: a wheel built from this checkout must not pick up stale objects.
    command.build_lib = str(ROOT / "build" / "inplace" / "lib")  # type: ignore[attr-defined]
    command.build_temp = str(ROOT / "build" / "inplace" / "temp")  # type: ignore[attr-defined]
    record_sources(modules())
    distribution.run_command("build_ext")


def main() -> int:
    switch = os.environ.get(SWITCH, "")
    if switch == "0":
        if built_extensions():
            _log(f"{SWITCH}=0: removing the compiled modules, the core runs interpreted")
        remove_extensions()
        return 0
    if switch not in ("", "1"):
        _log(f"{SWITCH} must be 0 or 1, not {switch!r}")
        return 2
    missing = toolchain_missing()
    if missing is not None:
        if switch == "1":
            _log(f"{SWITCH}=1 but {missing}")
            return 1
        _log(f"{missing}: the core runs interpreted (pure Python)")
        remove_extensions()
        return 0
    if up_to_date():
        return 0
    override = f" ({MODULES_OVERRIDE})" if os.environ.get(MODULES_OVERRIDE) else ""
    _log(f"compiling with mypyc{override}: {', '.join(modules())} (group {GROUP})")
    os.environ[SWITCH] = "1"
    build()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
