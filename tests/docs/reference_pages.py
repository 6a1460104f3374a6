"""The Reference pages as the site's build generates them, for the tests to read: the build hook
(docs/hooks/reference.py) loaded once, and readers of its Markdown tables and sections."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
HOOK = REPO / "docs" / "hooks" / "reference.py"
HOOK_NAME = "docs_reference_hook"


def _load_hook() -> ModuleType:
    """The hook, loaded by path as MkDocs loads it (it is no package's module)."""
    if HOOK_NAME in sys.modules:
        return sys.modules[HOOK_NAME]
    spec = importlib.util.spec_from_file_location(HOOK_NAME, HOOK)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[HOOK_NAME] = module
    spec.loader.exec_module(module)
    return module


HOOK_MODULE = _load_hook()


def generated(path: str) -> str:
    """The Markdown of one generated page, e.g. `reference/settings.md`."""
    text: str = HOOK_MODULE.PAGES[path]()
    return text


def rows(text: str) -> dict[str, str]:
    """A page's table rows by their first cell, its backticks stripped."""
    found = {}
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("| ---"):
            first = line[2:].split(" | ", 1)[0]
            found[first.strip("`")] = line
    return found


def cells(line: str) -> list[str]:
    """A table row's cells, stripped; a pipe inside a code span, or escaped, stays in its cell."""
    found, current, in_code, escaped = [], "", False, False
    for char in line.strip()[1:]:
        if char == "|" and not in_code and not escaped:
            found.append(current.strip())
            current = ""
            continue
        in_code ^= char == "`"
        escaped = char == "\\" and not escaped
        current += char
    return found


def headed(text: str) -> dict[str, str]:
    """A page's second-level sections by their heading."""
    parts = re.split(r"^## ", text, flags=re.M)[1:]
    return {heading: body for heading, _, body in (part.partition("\n") for part in parts)}
