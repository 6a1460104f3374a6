"""The user docs against the code: the generated settings reference gives every setting of the
`Settings` model with a default that reads back as the code's and its variable, every variable the
docs and manifests name is read by someone, and the generated web API reference lists exactly the
endpoints a worker's index lists.

Read offline: README.md, docs/**/*.md, the deployment files and the pages docs/hooks/reference.py
generates, against streams/settings.py, streams/worker/app.py's ENDPOINTS and the console's ROUTES.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

import streams
from streams.console.api import ROUTES
from streams.settings import DEPLOYMENT_VARIABLES, ENV_PREFIX, Settings, setting_variables
from streams.topic_names import Topics
from streams.worker.app import ENDPOINTS
from tests.docs.reference_pages import cells, generated, headed

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"
RUNBOOK = DOCS / "runbook.md"
DEPLOYMENT_FILES = (
    REPO / "docker-compose.yml",
    *sorted((REPO / "deploy").glob("kubernetes*/*.yaml")),
)
# `/` and `/api` answer ENDPOINTS itself (streams.worker.app.register_views), so it does not
# list them.
INDEX = {("GET", "/"), ("GET", "/api")}
VARIABLE = re.compile(r"CLAIMSTREAM_[A-Z0-9_]+")


def section(text: str, heading: str) -> str:
    """The text under a Markdown heading, up to the next heading of any level."""
    start = text.index(heading + "\n") + len(heading)
    following = re.search(r"^#+ ", text[start:], flags=re.MULTILINE)
    return text[start : start + following.start()] if following else text[start:]


def variables_named(text: str) -> set[str]:
    """CLAIMSTREAM_* names, without patterns such as CLAIMSTREAM_<SETTING> or ..._TOPIC_<NAME>."""
    names = {match.group().rstrip("_") for match in VARIABLE.finditer(text)}
    return names - {"CLAIMSTREAM", "CLAIMSTREAM_TOPIC"}


def endpoint(method: str, path: str) -> tuple[str, str]:
    """One spelling per endpoint: no query part, a key as `{key}`."""
    path = re.sub(r"\[?\?.*$", "", path).replace("{subject}%7C{field}", "{key}")
    return method.upper(), path


def settings_rows(text: str) -> dict[str, tuple[str, str]]:
    """The settings reference's rows, both tables: setting -> (its default cell, its variable
    cell). The settings table has a type column the topics table has not."""
    found = {}
    sections = headed(text)
    for heading, default_column in (("Settings", 2), ("Topics", 1)):
        for line in sections.get(heading, "").splitlines():
            if line.startswith("| `"):
                row = cells(line)
                found[row[0].strip("`")] = (row[default_column], row[default_column + 1])
    return found


def the_settings() -> dict[str, tuple[type[BaseModel], str, str]]:
    """Every setting of the model, nested ones as `topics.<name>`: its model, its field and the
    variable load_settings reads it from."""
    found: dict[str, tuple[type[BaseModel], str, str]] = {
        name: (Settings, name, ENV_PREFIX + name.upper())
        for name, field in Settings.model_fields.items()
        if field.annotation is not Topics
    }
    for name in Topics.model_fields:
        found[f"topics.{name}"] = (Topics, name, f"{ENV_PREFIX}TOPIC_{name.upper()}")
    assert "topics" in Settings.model_fields, "the topics are no longer nested: update this test"
    assert {variable for _, _, variable in found.values()} <= setting_variables()
    return found


def code_default(model: type[BaseModel], name: str) -> Any:
    """The field's default; a file the package carries as its path inside the package."""
    value = model.model_fields[name].get_default(call_default_factory=True)
    if isinstance(value, Path) and value.is_absolute():
        return value.relative_to(Path(streams.__file__).parent.parent)
    return value


def documented_default(model: type[BaseModel], name: str, cell: str) -> Any:
    """The cell's value as the model reads it: `unset` is None; a file the package carries is
    its path inside the package; else the first `code` span, converted by the model itself (as a
    settings file or variable would be)."""
    if cell.startswith("unset"):
        return None
    value = re.match(r"`([^`]*)`", cell)
    if value is None:
        raise ValueError(f"neither unset nor a `value`: {cell!r}")
    if cell.endswith("(in the package)"):
        return Path("streams") / value.group(1)
    return getattr(model.model_validate({name: value.group(1)}), name)


def settings_table_problems(text: str) -> list[str]:
    """What the settings reference gets wrong about the model: a setting without a row, a
    row naming no setting, a default or a variable other than the code's."""
    rows, settings = settings_rows(text), the_settings()
    problems = [
        f"{name}: no row in the settings reference" for name in sorted(settings.keys() - rows)
    ]
    problems += [f"{name}: a row, but no such setting" for name in sorted(rows.keys() - settings)]
    for name in sorted(rows.keys() & settings):
        (cell, variable), (model, field, expected_variable) = rows[name], settings[name]
        try:
            documented = documented_default(model, field, cell)
        except (ValueError, ValidationError) as exc:
            problems.append(f"{name}: its default cell {cell!r} does not read: {exc}")
        else:
            if documented != code_default(model, field):
                problems.append(
                    f"{name}: documented default {cell}, code default "
                    f"{code_default(model, field)!r}"
                )
        if variable != f"`{expected_variable}`":
            problems.append(f"{name}: variable {variable}, load_settings reads {expected_variable}")
    return problems


def test_the_settings_reference_has_every_setting_with_its_default_and_variable() -> None:
    assert len(the_settings()) > 50
    assert settings_table_problems(generated("reference/settings.md")) == []


def test_the_table_check_sees_a_missing_row_a_wrong_default_and_a_stray_row() -> None:
    text = generated("reference/settings.md")
    row = next(line for line in text.splitlines() if line.startswith("| `state_cache_mb` |"))
    assert "| `48` |" in row
    planted = text.replace(row + "\n", "").replace(
        "| `store_cache_mb` | `int` | `64` |", "| `store_cache_mb` | `int` | `128` |"
    )
    planted = planted.replace(
        "| `batch_size` |",
        "| `batch_sizes` | `int` | `1` | `CLAIMSTREAM_BATCH_SIZES` | a typo |\n| `batch_size` |",
    )
    assert settings_table_problems(planted) == [
        "state_cache_mb: no row in the settings reference",
        "batch_sizes: a row, but no such setting",
        "store_cache_mb: documented default `128`, code default 64",
    ]


def test_every_variable_in_the_runbooks_settings_table_is_a_setting() -> None:
    table = section(RUNBOOK.read_text(), "## Operating claimstream")
    rows = [line for line in table.splitlines() if line.startswith("| `CLAIMSTREAM_")]
    named = variables_named("\n".join(rows))
    assert len(named) >= 10
    assert named - setting_variables() == set()


def test_every_variable_the_docs_and_manifests_name_is_read_by_someone() -> None:
    known = setting_variables() | DEPLOYMENT_VARIABLES
    pages = sorted(DOCS.rglob("*.md"))
    assert RUNBOOK in pages
    for path in (README, *pages, *DEPLOYMENT_FILES):
        assert variables_named(path.read_text()) - known == set(), path.relative_to(REPO)


def web_api_endpoints(text: str) -> set[tuple[str, str]]:
    """The endpoints the web API reference's table lists: (method, path) rows."""
    listed = set()
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("| ---"):
            row = cells(line)
            if row[0] in ("GET", "POST"):
                listed.add(endpoint(row[0], row[1].strip("`")))
    return listed


def web_api_problems(text: str) -> list[str]:
    """What the web API reference gets wrong about the worker's index: an endpoint the worker
    serves without a row, a row for one it does not serve."""
    documented = web_api_endpoints(text)
    indexed = {endpoint(*key.split(" ", 1)) for key in ENDPOINTS} | INDEX
    problems = [f"{m} {p}: served, not in the reference" for m, p in sorted(indexed - documented)]
    problems += [f"{m} {p}: in the reference, not served" for m, p in sorted(documented - indexed)]
    return problems


def test_the_web_api_reference_lists_exactly_what_a_worker_serves() -> None:
    indexed = {endpoint(*key.split(" ", 1)) for key in ENDPOINTS}
    routed = {endpoint(route.method, route.path) for route in ROUTES}
    assert routed <= indexed, "the index (GET /api) misses a console route"
    assert ("GET", "/healthz") in indexed
    assert web_api_problems(generated("reference/web-api.md")) == []


def test_the_web_api_check_sees_a_missing_and_a_stray_endpoint() -> None:
    text = generated("reference/web-api.md")
    planted = "\n".join(line for line in text.splitlines() if "`/readyz`" not in line)
    planted = planted.replace(
        "| GET | `/healthz` |", "| GET | `/stale` | gone |\n| GET | `/healthz` |"
    )
    assert web_api_problems(planted) == [
        "GET /readyz: served, not in the reference",
        "GET /stale: in the reference, not served",
    ]
