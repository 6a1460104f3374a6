"""Which modules mypyc compiles, and the switch that turns the compile on.

Read by `setup.py` (wheels, sdists' wheels) and by `build_backend.inplace` (an editable checkout's
extension modules, built by scripts/setup.sh). COMPILED is the one list: each entry says what its
compile was measured to gain. Modules that define pydantic models or msgspec Structs stay out:
their classes are built by a metaclass, which mypyc's native classes cannot express (its C output
for them does not compile).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from setuptools import Extension

SWITCH = "CLAIMSTREAM_USE_MYPYC"
"""`1` compiles, `0` (or unset, for a wheel) builds pure Python."""
MODULES_OVERRIDE = "CLAIMSTREAM_MYPYC_MODULES"
"""A comma-separated module list that replaces COMPILED for one build (to measure a candidate)."""

COMPILED: dict[str, str] = {
    "streams.core.engine": "engine_rate",
    "streams.core.normalize": "engine_rate",
}
"""Module -> the measurement that justifies compiling it."""

BUILD_REQUIRES = ("mypy>=1.10", "pydantic>=2.7,<3", "types-PyYAML")
"""What the compile needs in an isolated build: mypyc, and what its type check reads (the core's
models and their mypy plugin, the policy loader's yaml stubs)."""

ROOT = Path(__file__).resolve().parents[1]
MYPY_CONFIG = Path(__file__).with_name("mypyc.ini")
GROUP = "streams.native"
"""The shared library of the compiled group lives inside the package: streams/native__mypyc.*"""


def use_mypyc() -> bool:
    value = os.environ.get(SWITCH, "0")
    if value not in ("0", "1"):
        raise SystemExit(f"{SWITCH} must be 0 or 1, not {value!r}")
    return value == "1"


def modules() -> list[str]:
    override = os.environ.get(MODULES_OVERRIDE, "").strip()
    if override:
        return [name.strip() for name in override.split(",") if name.strip()]
    return list(COMPILED)


def source_path(module: str) -> Path:
    path = ROOT.joinpath(*module.split(".")).with_suffix(".py")
    if not path.is_file():
        raise SystemExit(f"{SWITCH}=1: {module} is listed for mypyc but {path} does not exist")
    return path


def compile_extensions() -> list[Extension]:
    """mypyc's extension modules for the listed modules. Any type error or unsupported construct
    stops the build (mypyc exits with its diagnostics): a listed module is never quietly left
    interpreted."""
    from mypyc.build import mypycify

    paths = [str(source_path(module).relative_to(ROOT)) for module in modules()]
    return list(
        mypycify(
            ["--config-file", str(MYPY_CONFIG), *paths],
            opt_level="3",
            debug_level="0",
            group_name=GROUP,
        )
    )


def extensions() -> list[Extension]:
    """The extension modules of this build: none unless the switch is on."""
    return compile_extensions() if use_mypyc() else []
