"""Which of the package's modules run compiled (mypyc extension modules) and which as Python.

A wheel built with `CLAIMSTREAM_USE_MYPYC=1` (or a checkout set up with a C compiler) holds
extension modules beside some `.py` files, and the import system loads the extension. This room
tells `claimstream --version` and the bench which one a process runs, and honours
`CLAIMSTREAM_INTERPRETED=1` (streams/__init__.py asks it first): every module of the package is
then imported from its `.py` file even where an extension module shadows it, to run the
pure-Python reference on a compiled install (the interpreted test pass does, and subprocesses
inherit it).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import EXTENSION_SUFFIXES, ModuleSpec
from pathlib import Path
from types import ModuleType

INTERPRETED = "CLAIMSTREAM_INTERPRETED"
"""`1`: import the package's `.py` files, never its extension modules."""

_PACKAGE = Path(__file__).resolve().parent
_RUNTIME_LIBRARY = "__mypyc"
"""mypyc's shared library of the compiled group ends with this; it is no module of ours."""


class _SourceFirst(MetaPathFinder):
    """Finds `streams.*` modules as their `.py` files, ahead of the default path finder."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if path is None or not fullname.startswith("streams."):
            return None
        name = fullname.rpartition(".")[2]
        for entry in path:
            source = Path(entry) / f"{name}.py"
            if source.is_file():
                return importlib.util.spec_from_file_location(fullname, source)
        return None  # a package or a missing module: the default finders decide


def honour_interpreted_switch() -> None:
    if os.environ.get(INTERPRETED) == "1" and not any(
        isinstance(finder, _SourceFirst) for finder in sys.meta_path
    ):
        sys.meta_path.insert(0, _SourceFirst())


def _module_name(path: Path) -> str | None:
    for suffix in EXTENSION_SUFFIXES:
        if path.name.endswith(suffix):
            stem = path.name.removesuffix(suffix)
            if stem.endswith(_RUNTIME_LIBRARY):
                return None
            parts = path.relative_to(_PACKAGE.parent).parent.parts
            return ".".join((*parts, stem))
    return None


def compiled_modules() -> tuple[str, ...]:
    """The package's modules that this process imports from extension modules, sorted."""
    names = {name for path in _PACKAGE.rglob("*") if (name := _module_name(path)) is not None}
    loaded = []
    for name in sorted(names):
        spec = importlib.util.find_spec(name)
        origin = spec.origin if spec is not None else None
        if origin is not None and origin.endswith(tuple(EXTENSION_SUFFIXES)):
            loaded.append(name)
    return tuple(loaded)


def describe() -> str:
    """`compiled: a, b` or `interpreted`, for `claimstream --version`."""
    compiled = compiled_modules()
    return f"compiled: {', '.join(compiled)}" if compiled else "interpreted"
