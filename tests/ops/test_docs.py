"""The user docs against the code: every setting they name exists, and the README's endpoint
table lists exactly the endpoints a worker serves.

Read offline: README.md, docs/runbook.md and the deployment files against streams/settings.py,
streams/app.py's ENDPOINTS and the console's ROUTES.
"""

from __future__ import annotations

import re
from pathlib import Path

from streams.console.api import ROUTES
from streams.settings import DEPLOYMENT_VARIABLES, Settings, setting_variables
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


def test_every_setting_the_readme_lists_exists() -> None:
    listed = set(re.findall(r"`([a-z][a-z0-9_]*)`", section(README.read_text(), "### Settings")))
    assert listed, "the README's Settings section names no setting"
    assert listed - set(Settings.model_fields) == set()


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
