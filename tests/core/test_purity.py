"""The core must stay pure: no Kafka, Avro or Prometheus libraries under streams/core."""

from __future__ import annotations

import ast
from pathlib import Path

import streams.core
from tests.support.import_probe import loaded_after_importing

FORBIDDEN = ("faust", "mode", "aiokafka", "fastavro", "prometheus_client", "kafka")
CORE = Path(streams.core.__file__).parent
SOURCES = sorted(CORE.rglob("*.py"))  # its subpackages' modules too (shortcuts/)


def _module(path: Path) -> str:
    parts = path.relative_to(CORE.parents[1]).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_core_modules_do_not_import_io_libraries() -> None:
    offenders = []
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            where = path.relative_to(CORE)
            offenders += [f"{where}: {n}" for n in names if n.split(".")[0] in FORBIDDEN]
            offenders += [
                f"{where}: {n}"
                for n in names
                if n.startswith("streams.") and not n.startswith("streams.core")
            ]
    assert offenders == []


def test_importing_the_core_loads_none_of_them_transitively() -> None:
    modules = [_module(path) for path in SOURCES if path != CORE / "__init__.py"]
    assert loaded_after_importing(modules, FORBIDDEN) == []
    assert len(modules) >= 7
