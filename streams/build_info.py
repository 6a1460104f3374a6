"""Which of the package's modules run compiled (mypyc extension modules) and which as Python.

A wheel built with `CLAIMSTREAM_USE_MYPYC=1` (or a checkout set up with a C compiler) holds
extension modules beside some `.py` files, and the import system loads the extension. This room
tells `claimstream --version` and the bench which one a process runs, and decides it first thing
when the package is imported (`choose_sources`, from streams/__init__.py): every module of the
package is imported from its `.py` file even where an extension module shadows it when
`CLAIMSTREAM_INTERPRETED=1` asks (to run the pure-Python reference on a compiled install: the
interpreted test pass does, and subprocesses inherit it), and, with a warning, when a checkout's
extension modules were compiled from other sources than its `.py` files now hold (an edit since
`bash scripts/setup.sh`): a process never runs code older than its sources. The in-place build
(build_backend/inplace.py) records what it compiled from (`record_sources`); a wheel carries no
record and is never checked: its files are installed together.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterable, Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import EXTENSION_SUFFIXES, ModuleSpec
from pathlib import Path
from types import ModuleType

INTERPRETED = "CLAIMSTREAM_INTERPRETED"
"""`1`: import the package's `.py` files, never its extension modules."""

_PACKAGE = Path(__file__).resolve().parent
_RUNTIME_LIBRARY = "__mypyc"
"""mypyc's shared library of the compiled group ends with this; it is no module of ours."""
SOURCES = _PACKAGE.parent / "build" / "inplace" / "sources.json"
"""A checkout's record of its in-place build: each compiled module -> the size, mtime and
sha256 of the `.py` file it was compiled from."""
_CHECKOUT = _PACKAGE.parent / "build_backend" / "inplace.py"
"""Only a checkout has the in-place build beside the package (a wheel never ships it)."""
_stale: tuple[str, ...] = ()  # the compiled modules this process ignores, being stale


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


def choose_sources() -> None:
    """Import the package from its `.py` files when `CLAIMSTREAM_INTERPRETED=1` asks, or when a
    compiled module is stale. The whole package then: a compiled group's modules expect each
    other's native classes, so none of them can run beside another's `.py`."""
    global _stale
    if any(isinstance(finder, _SourceFirst) for finder in sys.meta_path):
        return
    if os.environ.get(INTERPRETED) != "1":
        _stale = stale_modules()
        if not _stale:
            return
        import warnings

        warnings.warn(_stale_warning(_stale), RuntimeWarning, stacklevel=2)
    sys.meta_path.insert(0, _SourceFirst())


def _stale_warning(stale: Sequence[str]) -> str:
    return (
        f"claimstream: compiled modules out of date with their .py files ({', '.join(stale)}): "
        "edited since `bash scripts/setup.sh` compiled them, or compiled by a build that recorded "
        "no sources. Every module runs from its .py file instead (slower). Rebuild them with "
        "`bash scripts/setup.sh`, or remove them with "
        "`CLAIMSTREAM_USE_MYPYC=0 python -m build_backend.inplace`."
    )


def _source_of(module: str) -> Path:
    return _PACKAGE.parent.joinpath(*module.split(".")).with_suffix(".py")


def _fingerprint(source: Path, digest: bool) -> dict[str, int | str]:
    stat = source.stat()
    fingerprint: dict[str, int | str] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    if digest:
        import hashlib  # read only for a source whose size or mtime is not as recorded

        fingerprint["sha256"] = hashlib.sha256(source.read_bytes()).hexdigest()
    return fingerprint


def record_sources(modules: Iterable[str]) -> None:
    """Note what the in-place build compiles `modules` from (build_backend/inplace.py, before
    it compiles: a source edited during the compile is then stale)."""
    import json

    record = {module: _fingerprint(_source_of(module), digest=True) for module in modules}
    SOURCES.parent.mkdir(parents=True, exist_ok=True)
    SOURCES.write_text(json.dumps(record, indent=1) + "\n")


def recorded_modules() -> list[str] | None:
    """The modules the last in-place build compiled, in its order (None: no record)."""
    import json

    try:
        return list(json.loads(SOURCES.read_text()))
    except (OSError, ValueError):
        return None


def stale_modules() -> tuple[str, ...]:
    """A checkout's compiled modules whose `.py` changed since they were built (all of them if
    their build recorded nothing), sorted; () outside a checkout. A source whose size and mtime
    are as recorded is not read; one touched but unchanged (a branch switched back) is not stale."""
    if not _CHECKOUT.is_file() or not any(_PACKAGE.glob(f"*{_RUNTIME_LIBRARY}.*")):
        return ()
    import json  # from here on, only in a compiled checkout

    try:
        recorded: dict[str, dict[str, int | str]] = json.loads(SOURCES.read_text())
    except (OSError, ValueError):
        return _compiled_files()  # compiled from sources nobody recorded: trust none of them
    return tuple(
        sorted(
            module
            for module, built in recorded.items()
            if _has_extension(module) and _changed(_source_of(module), built)
        )
    )


def _changed(source: Path, built: dict[str, int | str]) -> bool:
    if not source.is_file():
        return True
    now = _fingerprint(source, digest=False)
    if now["size"] == built.get("size") and now["mtime_ns"] == built.get("mtime_ns"):
        return False
    return _fingerprint(source, digest=True)["sha256"] != built.get("sha256")


def _has_extension(module: str) -> bool:
    source = _source_of(module)
    return any(source.with_name(source.stem + suffix).is_file() for suffix in EXTENSION_SUFFIXES)


def _compiled_files() -> tuple[str, ...]:
    """The package's modules that have an extension module here (a walk of the package)."""
    found = (_module_name(path) for path in _PACKAGE.rglob("*"))
    return tuple(sorted(name for name in found if name is not None))


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
    loaded = []
    for name in _compiled_files():
        spec = importlib.util.find_spec(name)
        origin = spec.origin if spec is not None else None
        if origin is not None and origin.endswith(tuple(EXTENSION_SUFFIXES)):
            loaded.append(name)
    return tuple(loaded)


def describe() -> str:
    """`compiled: a, b` or `interpreted` (saying which compiled modules are ignored as stale),
    for `claimstream --version`."""
    compiled = compiled_modules()
    if compiled:
        return f"compiled: {', '.join(compiled)}"
    return f"interpreted, stale compiled: {', '.join(_stale)}" if _stale else "interpreted"
