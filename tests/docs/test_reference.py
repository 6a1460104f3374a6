"""The generated Reference against the code: every setting, topic, command, option, metric,
endpoint, Avro record and field, rule and alert the code enumerates appears on its page, so a new
one cannot be left undocumented. Each check reads the code on its own (not through the generator)
and returns what a page lacks; the companion tests feed a check a page with a row removed.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import markdown
import pytest
import yaml
from markdown.extensions.toc import slugify
from prometheus_client import CollectorRegistry

from streams.cli.main import build_parser
from streams.console.api import ROUTES
from streams.console.writes import WRITE_ROUTES
from streams.core.records.policy import Policy, load_policy
from streams.core.rules.engine import RULES
from streams.ops.metrics import Metrics
from streams.ops.stall_watch import StallWatch
from streams.ops.stalls import LoopLagProbe
from streams.packaged import example_path
from streams.settings import ENV_PREFIX, Settings
from streams.topic_names import Topics
from streams.worker.app import ENDPOINTS
from tests.docs.reference_pages import HOOK_MODULE, generated, headed, rows

REPO = Path(__file__).resolve().parents[2]
RUNBOOK = REPO / "docs" / "runbook.md"


# --- the checks: what the code enumerates and the page lacks -----------------------------------


def settings_missing(text: str) -> list[str]:
    table = rows(text)
    expected = {
        name: ENV_PREFIX + name.upper()
        for name, field in Settings.model_fields.items()
        if field.annotation is not Topics
    }
    expected |= {
        f"topics.{name}": f"{ENV_PREFIX}TOPIC_{name.upper()}" for name in Topics.model_fields
    }
    return [name for name, variable in expected.items() if variable not in table.get(name, "")]


def _parsers(
    parser: argparse.ArgumentParser, path: str = "claimstream"
) -> dict[str, argparse.ArgumentParser]:
    found = {path: parser}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found |= _parsers(sub, f"{path} {name}")
    return found


def cli_missing(text: str) -> list[str]:
    sections = headed(text)
    missing = []
    for path, parser in _parsers(build_parser()).items():
        if path not in sections:
            missing.append(path)
            continue
        table = rows(sections[path])
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            names = action.option_strings or [action.metavar or action.dest]
            # a row's first cell: `--policy POLICY`, `-q, --quiet` or a positional's name
            if not any(first.split(" ")[0].rstrip(",") == names[0] for first in table):
                missing.append(f"{path} {names[0]}")
    return missing


def metric_names() -> list[str]:
    registry = CollectorRegistry(auto_describe=True)
    Metrics(load_policy(example_path("policy.yaml")), registry)
    LoopLagProbe(registry)
    StallWatch(registry)
    return [
        family.name + ("_total" if family.type == "counter" else "")
        for family in registry.collect()
        if family.name.startswith("claimstream_")
    ]


def metrics_missing(text: str) -> list[str]:
    return [name for name in metric_names() if name not in rows(text)]


# The console's static files, served behind GET /ui/ (its page) rather than documented one by one.
UNLISTED = {("GET", "/ui/{asset}")}


def served_routes() -> set[tuple[str, str]]:
    """What a worker serves: the pages streams/worker/app.py and streams/console/web.py add, the
    console's ROUTES and WRITE_ROUTES, and the Prometheus endpoint."""
    served = {(route.method.upper(), route.path) for route in ROUTES + WRITE_ROUTES}
    for module in ("worker/app.py", "console/web.py"):
        source = (REPO / "streams" / module).read_text()
        served |= {("GET", path) for path in re.findall(r"\.page\(\"([^\"]+)\"", source)}
        metrics = re.findall(r"setup_prometheus_sensors\(\s*app, \"([^\"]+)\"", source)
        served |= {("GET", path) for path in metrics}
    return served - UNLISTED


def _endpoint(method: str, path: str) -> tuple[str, str]:
    """One spelling per endpoint: no query part, a key as `{key}`."""
    path = re.sub(r"\[?\?.*$", "", path).replace("{subject}%7C{field}", "{key}")
    return method.upper(), path


def routes_missing(text: str) -> list[tuple[str, str]]:
    listed = set()
    for line in text.splitlines():
        cells = [cell.strip().strip("`") for cell in line.strip("| ").split(" | ")]
        if len(cells) == 3 and cells[0] in ("GET", "POST") and cells[2]:
            listed.add(_endpoint(cells[0], cells[1]))  # without a description: not documented
    return sorted(served_routes() - listed)


def records_missing(text: str) -> list[str]:
    sections = headed(text)
    missing = []
    for path in sorted((REPO / "schemas").glob("*.avsc")):
        schema = json.loads(path.read_text())
        if schema["name"] not in sections:
            missing.append(schema["name"])
            continue
        table = rows(sections[schema["name"]])
        missing += [
            f"{schema['name']}.{field['name']}"
            for field in schema.get("fields", [])
            if field["name"] not in table
        ]
    return missing


def alert_rules() -> list[dict[str, str]]:
    found = []
    for path in sorted((REPO / "deploy" / "prometheus" / "rules").glob("*.yml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            found += [rule for rule in group["rules"] if "alert" in rule]
    return found


def runbook_anchors() -> set[str]:
    """The anchors docs/runbook.md's headings get (MkDocs' toc) and the ids it sets itself."""
    text = RUNBOOK.read_text()
    anchors = set(re.findall(r"\{#([\w-]+)", text)) | set(re.findall(r'id="([\w-]+)"', text))
    for heading in re.findall(r"^#+ (.+?)\s*(?:\{.*\})?$", text, flags=re.M):
        anchors.add(slugify(heading, "-"))
    return anchors


# --- each page covers what the code enumerates -------------------------------------------------


def test_every_setting_and_topic_is_on_the_settings_page() -> None:
    assert settings_missing(generated("reference/settings.md")) == []


def test_every_setting_and_topic_has_a_description_in_the_model() -> None:
    models: list[type[Settings] | type[Topics]] = [Settings, Topics]
    undescribed = [
        f"{model.__name__}.{name}"
        for model in models
        for name, field in model.model_fields.items()
        if not field.description
    ]
    assert undescribed == []


def test_a_type_with_a_pipe_reads_as_written_in_the_sites_tables() -> None:
    """The site's Markdown (its table and inline-code extensions) keeps a code span whole and
    prints a backslash inside one as it is: `str | None` must reach the page as that."""
    html = markdown.markdown(
        generated("reference/settings.md"), extensions=["tables", "pymdownx.inlinehilite"]
    )
    assert "<code>str | None</code>" in html
    assert "\\|" not in html


def test_the_settings_check_finds_a_setting_left_out() -> None:
    page = generated("reference/settings.md")
    without = "\n".join(line for line in page.splitlines() if "`CLAIMSTREAM_WEB_PORT`" not in line)
    assert settings_missing(without) == ["web_port"]
    without = page.replace("`CLAIMSTREAM_TOPIC_DECISIONS`", "")
    assert settings_missing(without) == ["topics.decisions"]


def test_every_command_and_option_is_on_the_cli_page() -> None:
    page = generated("reference/cli.md")
    assert cli_missing(page) == []
    assert "## claimstream policy check" in page  # a nested command is walked too


def test_the_cli_check_finds_an_option_left_out() -> None:
    page = generated("reference/cli.md")
    without = "\n".join(line for line in page.splitlines() if not line.startswith("| `--force`"))
    assert cli_missing(without) == ["claimstream init --force"]


def test_every_metric_is_on_the_metrics_page() -> None:
    names = metric_names()
    assert "claimstream_decisions_total" in names
    assert "claimstream_loop_stalls_total" in names
    assert metrics_missing(generated("reference/metrics.md")) == []


def test_the_metrics_check_finds_a_metric_left_out() -> None:
    page = generated("reference/metrics.md")
    without = "\n".join(
        line for line in page.splitlines() if not line.startswith("| `claimstream_decisions_total`")
    )
    assert metrics_missing(without) == ["claimstream_decisions_total"]


def test_every_route_a_worker_serves_is_on_the_web_api_page() -> None:
    assert ("GET", "/healthz") in served_routes()
    assert ("POST", "/api/resolutions") in served_routes()
    assert routes_missing(generated("reference/web-api.md")) == []


def test_the_routes_check_finds_a_route_left_out_or_undescribed() -> None:
    page = generated("reference/web-api.md")
    without = "\n".join(line for line in page.splitlines() if "`/readyz`" not in line)
    assert routes_missing(without) == [("GET", "/readyz")]
    undescribed = re.sub(r"(\| `/healthz` \|).*\|$", r"\1  |", page, flags=re.M)
    assert undescribed != page
    assert routes_missing(undescribed) == [("GET", "/healthz")]


def test_every_endpoint_listed_is_one_a_worker_serves() -> None:
    """ENDPOINTS describes the routes; one it lists that nothing serves is a stale description."""
    listed = {_endpoint(*entry.split(" ", 1)) for entry in ENDPOINTS}
    assert listed - served_routes() == set()


def test_every_avro_record_and_field_is_on_the_records_page() -> None:
    page = generated("reference/records.md")
    assert records_missing(page) == []
    without = "\n".join(line for line in page.splitlines() if not line.startswith("| `claim_id`"))
    assert "Claim.claim_id" in records_missing(without)


def rules_out_of_place(text: str) -> list[str]:
    """The rules of RULES that the page does not list at their position (counted from 1)."""
    listed = dict(re.findall(r"^\| (\d+) \| `([^`]+)` \|", text, re.M))
    return [
        rule.name
        for position, rule in enumerate(RULES, start=1)
        if listed.get(str(position)) != rule.name
    ]


def test_the_rules_page_lists_every_rule_in_order() -> None:
    assert len(RULES) > 5
    assert rules_out_of_place(generated("reference/rules.md")) == []


def test_the_rules_check_finds_a_rule_left_out_or_out_of_order() -> None:
    page = generated("reference/rules.md")
    first, second = RULES[0].name, RULES[1].name
    without = "\n".join(line for line in page.splitlines() if f"| `{second}` |" not in line)
    assert rules_out_of_place(without) == [second]
    swapped = page.replace(f"`{first}`", "`swap`").replace(f"`{second}`", f"`{first}`")
    swapped = swapped.replace("`swap`", f"`{second}`")
    assert rules_out_of_place(swapped) == [first, second]


def alerts_missing(text: str, anchors: set[str]) -> list[str]:
    """Each alert without a row linking its runbook anchor, or whose anchor the runbook lacks."""
    page = rows(text)
    missing = []
    for rule in alert_rules():
        row = next(
            (line for first, line in page.items() if first.startswith(f"[{rule['alert']}]")), ""
        )
        anchor = str(rule["annotations"]["runbook_url"]).rpartition("#")[2]  # type: ignore[index]
        if f"../runbook.md#{anchor}" not in row or anchor not in anchors:
            missing.append(rule["alert"])
    return missing


def test_every_alert_is_on_the_alerts_page_with_a_runbook_anchor_that_exists() -> None:
    anchors = runbook_anchors()
    assert "claimstreamconflictratesurge" in anchors
    assert len(alert_rules()) > 5
    assert alerts_missing(generated("reference/alerts.md"), anchors) == []


def test_the_alerts_check_finds_an_alert_left_out_or_its_anchor_gone() -> None:
    page = generated("reference/alerts.md")
    anchors = runbook_anchors()
    without = "\n".join(
        line
        for line in page.splitlines()
        if not line.startswith("| [ClaimstreamConflictRateSurge]")
    )
    assert alerts_missing(without, anchors) == ["ClaimstreamConflictRateSurge"]
    assert alerts_missing(page, anchors - {"claimstreamconflictratesurge"}) == [
        "ClaimstreamConflictRateSurge"
    ]


def test_every_policy_key_is_on_the_policy_file_page() -> None:
    page = generated("reference/policy-file.md")
    models = HOOK_MODULE.policy_models()
    assert Policy in models
    assert len(models) > 3  # the nested blocks (defaults, sources, fields, signing) are walked
    for model in models:
        section = page.split(f"## {model.__name__}\n", 1)[1].split("\n## ", 1)[0]
        assert set(model.model_fields) <= set(rows(section)), model.__name__


@pytest.mark.parametrize("path", sorted(HOOK_MODULE.PAGES))
def test_each_generated_page_is_a_titled_table(path: str) -> None:
    page = generated(path)
    assert page.startswith("# ")
    assert "| --- |" in page


def test_the_policy_check_finds_a_key_left_out() -> None:
    page = generated("reference/policy-file.md")
    section = headed(page)["Policy"]
    assert "version" in rows(section)
    without = "\n".join(line for line in section.splitlines() if not line.startswith("| `version`"))
    assert "version" not in rows(without)


# --- the generator follows the code: a new item appears without anyone writing it down ---------


def test_a_setting_added_to_the_model_appears_on_the_settings_page(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pydantic import Field

    import streams.settings

    class Extended(Settings):
        spare_knob_s: float = Field(2.5, description="a setting only this test declares")

    monkeypatch.setattr(streams.settings, "Settings", Extended)
    row = rows(generated("reference/settings.md"))["spare_knob_s"]
    assert "`CLAIMSTREAM_SPARE_KNOB_S`" in row
    assert "`2.5`" in row
    assert "a setting only this test declares" in row


def test_a_command_added_to_the_parser_appears_on_the_cli_page(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import streams.cli.main

    def extended() -> argparse.ArgumentParser:
        parser = build_parser()
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        spare = sub.add_parser("spare", help="a command only this test declares")
        spare.add_argument("--depth", type=int, default=3, help="how deep it goes")
        return parser

    monkeypatch.setattr(streams.cli.main, "build_parser", extended)
    section = headed(generated("reference/cli.md"))["claimstream spare"]
    assert "a command only this test declares" in section
    assert "| `--depth DEPTH` | `3` | how deep it goes |" in section


def test_the_policy_schema_is_published_beside_the_policy_page() -> None:
    from streams.core.records.policy_schema import policy_schema_text

    assert HOOK_MODULE.EXTRA_FILES["reference/policy.schema.json"]() == policy_schema_text()
    assert "](policy.schema.json)" in generated("reference/policy-file.md")
