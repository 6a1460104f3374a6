"""The package stays readable: its layers (and the core's rooms) import downward only, module, class
and function sizes are bounded (in the Python beside it too: the build backend, the dashboards'
generator, the deploy and example scripts), no modules import each other, and each package's
docstring names every module it holds.

Imports are read from the source (every `import`, at module level or inside a function: a lazy
import hides a cycle, it does not remove it), so the check needs nothing installed.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import streams

PACKAGE = Path(streams.__file__).parent
REPO = PACKAGE.parent
# The Python beside the package, held to the same sizes (no layers: the package imports none).
BESIDE = ("build_backend", "deploy", "examples", "grafana")
MAX_MODULE_LINES = 500
MAX_CLASS_LINES = 300
MAX_FUNCTION_LINES = 90
# An argument table reads best as one list of `add_argument` calls, however long.
LONG_BY_DESIGN = {("streams.cli.main", "build_parser")}

# The layers, lowest first: a module may import its own layer and the ones before it, never one
# after (each package's docstring says what its rooms hold). The foundation is the package's
# face and what every layer reads: its settings, the files it ships, which modules run compiled.
# The console, the agents' server and the public client sit below the worker because the worker
# wires the console's routes into its web server; the command line starts everything.
# The core's rooms come first, in the order a claim flows through them (streams/core's docstring
# says what each holds): a rule may read a decision's parts, never a key's stored form.
CORE_ROOMS = ("records", "admission", "decision", "rules", "keys", "timeline", "reading", "sources")
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("core", ("streams.core",)),
    *((f"core.{room}", (f"streams.core.{room}",)) for room in CORE_ROOMS),
    (
        "foundation",
        (
            "streams",
            "streams.build_info",
            "streams.packaged",
            "streams.settings",
            "streams.topic_names",
        ),
    ),
    ("wire", ("streams.wire",)),
    ("ops", ("streams.ops",)),
    ("pipeline", ("streams.pipeline",)),
    ("state", ("streams.state",)),
    ("arbiter", ("streams.arbiter",)),
    ("interfaces", ("streams.client", "streams.console", "streams.agents")),
    ("worker", ("streams.worker",)),
    ("audit", ("streams.audit",)),
    ("devkit", ("streams.devkit",)),
    ("cli", ("streams.cli",)),
)


def _modules() -> dict[str, Path]:
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    return modules


def _sized() -> dict[str, Path]:
    """Every module whose size is bounded: the package's, by module name, and the Python beside
    it, by path."""
    beside = {
        str(path.relative_to(REPO)): path
        for folder in BESIDE
        for path in sorted((REPO / folder).rglob("*.py"))
    }
    assert "grafana/generate.py" in beside
    assert "build_backend/compiled.py" in beside
    return {**_modules(), **beside}


def _defined(tree: ast.Module) -> Iterator[ast.AST]:
    yield from (
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
    )


def _span(node: ast.AST) -> int:
    assert isinstance(node, ast.stmt)
    assert node.end_lineno is not None
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    return node.end_lineno - first + 1


def _imported(name: str, package: str, tree: ast.Module, known: set[str]) -> set[str]:
    """The `known` modules that module `name` of `package` imports (`from a import b` is a.b
    when a.b is a module, else a)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each strongly connected group of two or more modules (Tarjan), as a sorted list."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def test_no_module_is_longer_than_the_bound() -> None:
    long = {
        name: n
        for name, path in _sized().items()
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


def test_no_class_or_function_is_longer_than_its_bound() -> None:
    long = []
    for name, path in _sized().items():
        for node in _defined(ast.parse(path.read_text())):
            assert isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            bound = MAX_CLASS_LINES if isinstance(node, ast.ClassDef) else MAX_FUNCTION_LINES
            if _span(node) > bound and (name, node.name) not in LONG_BY_DESIGN:
                long.append(f"{name}:{node.lineno} {node.name} ({_span(node)} lines)")
    assert long == []


def test_each_package_docstring_names_every_module_it_holds() -> None:
    """A package's docstring is its index (LAYERS' comment): every module and subpackage in it is
    named there, as a word (`__main__` aside: `python -m` names it)."""
    unnamed = []
    for init in sorted(PACKAGE.rglob("__init__.py")):
        index = ast.get_docstring(ast.parse(init.read_text())) or ""
        rooms = {path.stem for path in init.parent.glob("*.py")} - {"__init__", "__main__"}
        rooms |= {path.parent.name for path in init.parent.glob("*/__init__.py")}
        unnamed += [
            f"{init.parent.relative_to(REPO)}: {room}"
            for room in sorted(rooms)
            if not re.search(rf"\b{room}\b", index)
        ]
    assert unnamed == []


def test_no_modules_import_each_other_even_lazily() -> None:
    modules = _modules()
    graph = {
        name: _imported(name, _package_of(name, path), ast.parse(path.read_text()), set(modules))
        for name, path in modules.items()
    }
    assert _cycles(graph) == []


def test_the_cycle_finder_sees_a_lazy_import_cycle() -> None:
    known = {"streams.a", "streams.b", "streams.c"}
    sources = {
        "streams.a": "def f():\n    from streams.b import g\n",
        "streams.b": "from . import a\n",
        "streams.c": "import streams.a\n",
    }
    graph = {
        name: _imported(name, "streams", ast.parse(src), known) for name, src in sources.items()
    }
    assert graph["streams.c"] == {"streams.a"}
    assert _cycles(graph) == [["streams.a", "streams.b"]]


def _layer_of(module: str) -> int:
    """The index in LAYERS of the layer holding `module` (its longest matching prefix)."""
    matches = [
        (len(prefix), index)
        for index, (_, prefixes) in enumerate(LAYERS)
        for prefix in prefixes
        if module == prefix or module.startswith(prefix + ".")
    ]
    assert matches, f"{module} is in no layer: add it to LAYERS"
    return max(matches)[1]


def _upward(graph: dict[str, set[str]]) -> list[str]:
    """Each import of a module from a layer above its own, as `importer (layer) -> imported
    (layer)`."""
    return [
        f"{name} ({LAYERS[_layer_of(name)][0]}) -> {target} ({LAYERS[_layer_of(target)][0]})"
        for name, targets in sorted(graph.items())
        for target in sorted(targets)
        if _layer_of(target) > _layer_of(name)
    ]


def test_every_module_belongs_to_a_layer() -> None:
    for name in _modules():
        _layer_of(name)


def test_the_layers_import_downward_only() -> None:
    modules = _modules()
    graph = {
        name: _imported(name, _package_of(name, path), ast.parse(path.read_text()), set(modules))
        for name, path in modules.items()
    }
    assert _upward(graph) == []


def test_the_direction_check_sees_a_planted_upward_import() -> None:
    known = {
        "streams.core.records.policy",
        "streams.wire.codec",
        "streams.worker.app",
        "streams.cli.main",
    }
    sources = {
        "streams.core.records.policy": "def load():\n    from streams.wire import codec\n",
        "streams.wire.codec": "from streams.core.records import policy\n",
        "streams.worker.app": "import streams.wire.codec\n",
        "streams.cli.main": "from streams.worker.app import create_app\n",
    }
    graph = {
        name: _imported(name, name.rpartition(".")[0], ast.parse(src), known)
        for name, src in sources.items()
    }
    assert _upward(graph) == [
        "streams.core.records.policy (core.records) -> streams.wire.codec (wire)"
    ]


def test_the_direction_check_sees_a_planted_upward_import_inside_the_core() -> None:
    """A rule may import admission's helpers; admission importing the rules, or a rule reading a
    key's stored form, runs back up the core's flow."""
    known = {
        "streams.core.admission.intake",
        "streams.core.rules.engine",
        "streams.core.keys.journal",
    }
    sources = {
        "streams.core.admission.intake": "from streams.core.rules.engine import arbitrate\n",
        "streams.core.rules.engine": "from streams.core.admission import intake\n"
        "def f():\n    from streams.core.keys.journal import decode_state\n",
        "streams.core.keys.journal": "import streams.core.rules.engine\n",
    }
    graph = {
        name: _imported(name, name.rpartition(".")[0], ast.parse(src), known)
        for name, src in sources.items()
    }
    assert _upward(graph) == [
        "streams.core.admission.intake (core.admission) -> streams.core.rules.engine (core.rules)",
        "streams.core.rules.engine (core.rules) -> streams.core.keys.journal (core.keys)",
    ]


def _package_of(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]
