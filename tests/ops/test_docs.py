"""The user docs against the code: the README's settings table lists every setting of the
`Settings` model with its default and variable, every setting the docs name exists, and the
README's endpoint table lists exactly the endpoints a worker serves.

Read offline: README.md, docs/runbook.md and the deployment files against streams/settings.py,
streams/worker/app.py's ENDPOINTS and the console's ROUTES.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

import streams
from streams.console.api import ROUTES
from streams.settings import DEPLOYMENT_VARIABLES, ENV_PREFIX, Settings, Topics, setting_variables
from streams.worker.app import ENDPOINTS

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
RUNBOOK = REPO / "docs" / "runbook.md"
DEPLOYMENT_FILES = (
    REPO / "docker-compose.yml",
    *sorted((REPO / "deploy").glob("kubernetes*/*.yaml")),
)
# `/` and `/api` answer ENDPOINTS itself (streams.worker.app.register_views), so it does not
# list them.
INDEX = {("GET", "/"), ("GET", "/api")}
VARIABLE = re.compile(r"CLAIMSTREAM_[A-Z0-9_]+")
ENDPOINT = re.compile(r"`(GET|POST) ([^`\s]+)`")


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
    """The README settings table's rows: setting -> (its default cell, its variable cell)."""
    rows = {}
    for line in section(text, "### Settings").splitlines():
        if not line.startswith("| `"):
            continue
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
        rows[cells[0].strip("`")] = (cells[1], cells[2])
    return rows


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
    """The cell's value as the model reads it: `unset` is None, else the first `code` span,
    converted by the model itself (as a settings file or variable would be)."""
    if cell.startswith("unset"):
        return None
    value = re.match(r"`([^`]*)`", cell)
    if value is None:
        raise ValueError(f"neither unset nor a `value`: {cell!r}")
    return getattr(model.model_validate({name: value.group(1)}), name)


def settings_table_problems(text: str) -> list[str]:
    """What the README's settings table gets wrong about the model: a setting without a row, a
    row naming no setting, a default or a variable other than the code's."""
    rows, settings = settings_rows(text), the_settings()
    problems = [
        f"{name}: no row in the README's settings table" for name in sorted(settings.keys() - rows)
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


def test_the_readme_settings_table_has_every_setting_with_its_default_and_variable() -> None:
    assert len(the_settings()) > 50
    assert settings_table_problems(README.read_text()) == []


def test_the_table_check_sees_a_missing_row_a_wrong_default_and_a_stray_row() -> None:
    text = README.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `state_cache_mb` |"))
    planted = text.replace(row + "\n", "").replace(
        "| `store_cache_mb` | `64` |", "| `store_cache_mb` | `128` |"
    )
    planted = planted.replace(
        "| `batch_size` |",
        "| `batch_sizes` | `1` | `CLAIMSTREAM_BATCH_SIZES` | a typo |\n| `batch_size` |",
    )
    assert settings_table_problems(planted) == [
        "state_cache_mb: no row in the README's settings table",
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
    for path in (README, RUNBOOK, *DEPLOYMENT_FILES):
        assert variables_named(path.read_text()) - known == set(), path.name


def test_the_readme_endpoint_table_lists_exactly_what_a_worker_serves() -> None:
    table = section(README.read_text(), "### Web API (each worker; JSON)")
    documented = {
        endpoint(method, path)
        for line in table.splitlines()
        if line.startswith("| `")
        for method, path in ENDPOINT.findall(line.split(" | ")[0])
    }
    indexed = {endpoint(*key.split(" ", 1)) for key in ENDPOINTS}
    routed = {endpoint(route.method, route.path) for route in ROUTES}
    assert routed <= indexed, "the index (GET /api) misses a console route"
    assert documented == indexed | INDEX
