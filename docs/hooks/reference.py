"""The Reference section, generated from the code at build time so that it cannot drift.

MkDocs loads this file as a hook (`hooks:` in mkdocs.yml); `on_files` adds one page per entry of
`PAGES`, built from what the code itself enumerates: the settings model, the argument parser, the
metrics registry, the worker's endpoint table, the Avro schemas, the rule table, the alert rules
and the policy model. Nothing generated is committed; tests/docs checks that every item the code
enumerates appears on its page.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # mkdocs loads the hook by path: the package sits beside it
    sys.path.insert(0, str(REPO))

from pydantic import BaseModel  # noqa: E402
from pydantic.fields import FieldInfo  # noqa: E402

ALERT_RULES = REPO / "deploy" / "prometheus" / "rules"
SCHEMAS = REPO / "schemas"
GENERATED = "This page is generated from the code when the site is built."


# --- Markdown ---------------------------------------------------------------------------------


def cell(text: object) -> str:
    """Text that stays inside one table cell: one line, its pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def code(text: object) -> str:
    """Inline code in a table cell, on one line; empty stays empty. Its pipes stay as they are:
    the site's tables never split a code span, and would print an escape inside one."""
    text = " ".join(str(text).split())
    return f"`{text}`" if text else ""


def table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + " --- |" * len(headers)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def page(title: str, intro: str, *sections: str) -> str:
    return "\n\n".join([f"# {title}", intro.strip(), f"*{GENERATED}*", *sections]) + "\n"


# --- Settings (streams/settings.py) -------------------------------------------------------------


def _type_name(annotation: Any) -> str:
    name = getattr(annotation, "__name__", None)
    if name and not getattr(annotation, "__args__", None):
        return str(name)
    text = str(annotation)
    for module in ("typing.", "pathlib.", "pydantic.types.", "streams.settings."):
        text = text.replace(module, "")
    return text


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value = field.get_default(call_default_factory=True)
    else:
        value = field.default
    if value is None:
        return "unset"
    if isinstance(value, Path) and value.is_absolute():
        return code(f"{value.parent.name}/{value.name}") + " (in the package)"
    return code(getattr(value, "value", value))


def settings_page() -> str:
    from streams.settings import ENV_PREFIX, Settings, Topics

    rows = [
        [
            code(name),
            code(_type_name(field.annotation)),
            _default(field),
            code(ENV_PREFIX + name.upper()),
            cell(field.description or ""),
        ]
        for name, field in Settings.model_fields.items()
        if field.annotation is not Topics
    ]
    topics = [
        [
            code(f"topics.{name}"),
            _default(field),
            code(f"{ENV_PREFIX}TOPIC_{name.upper()}"),
            cell(field.description or ""),
        ]
        for name, field in Topics.model_fields.items()
    ]
    intro = f"""
A worker reads its settings from their defaults, then a YAML file (`--settings FILE` or
`{ENV_PREFIX}SETTINGS`), then the environment: each setting's variable is `{ENV_PREFIX}` and its
name in capitals. A `{ENV_PREFIX}*` variable that names no setting is reported at start with the
closest setting it may have meant. Seconds for `_s`, MiB for `_mb`; unset means none (the setting
is off, or its fallback applies). The model is `Settings` in `streams/settings.py`.
"""
    topics_intro = f"""
The topic names nest under `topics:` in the settings file and are `{ENV_PREFIX}TOPIC_<NAME>` in
the environment.
"""
    return page(
        "Settings",
        intro,
        "## Settings\n\n" + table(["setting", "type", "default", "variable", "what it does"], rows),
        "## Topics\n\n"
        + topics_intro.strip()
        + "\n\n"
        + table(["setting", "default", "variable", "what it holds"], topics),
    )


# --- Command line (streams/cli/main.py) ----------------------------------------------------------


def commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ("claimstream",), about: str = ""
) -> Iterator[tuple[tuple[str, ...], str, argparse.ArgumentParser]]:
    """Every command and subcommand of the parser, depth first, with its help line."""
    yield path, about or (parser.description or ""), parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                yield from commands(sub, (*path, name), helps.get(name, ""))


def arguments(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    """The options and positionals a command takes itself (help and subcommands aside)."""
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        yield action


def _argument_name(action: argparse.Action) -> str:
    if action.option_strings:
        names = ", ".join(action.option_strings)
        takes = action.nargs != 0
        metavar = action.metavar or action.dest.upper()
        return f"{names} {metavar}" if takes else names
    return str(action.metavar or action.dest)


def _argument_help(action: argparse.Action, prog: str) -> str:
    text = action.help or ""
    if "%(" in text:
        text = text % {**vars(action), "prog": prog}
    if action.choices and not isinstance(action, argparse._SubParsersAction):
        text += " (one of: " + ", ".join(str(choice) for choice in action.choices) + ")"
    if action.required and action.option_strings:
        text += " (required)"
    return text


def _argument_default(action: argparse.Action) -> str:
    if action.default in (None, argparse.SUPPRESS) or action.nargs == 0:
        return ""
    if isinstance(action.default, datetime):
        return "the current time"  # worked out when the parser is built
    return code(action.default)


def cli_page() -> str:
    from streams.cli.main import build_parser

    sections = []
    for path, about, parser in commands(build_parser()):
        rows = [
            [code(_argument_name(a)), _argument_default(a), cell(_argument_help(a, parser.prog))]
            for a in arguments(parser)
        ]
        body = f"## {' '.join(path)}\n\n{cell(about)}\n"
        if rows:
            body += "\n" + table(["argument", "default", "what it does"], rows)
        sections.append(body)
    intro = """
Every command of `claimstream`, read from its argument parser (`build_parser` in
`streams/cli/main.py`). `claimstream COMMAND --help` prints the same.
"""
    return page("Command line", intro, *sections)


# --- Metrics (streams/ops/metrics.py) ----------------------------------------------------------


def metric_families() -> list[tuple[str, str, tuple[str, ...], str]]:
    """(exposed name, type, labels, help) of every family a worker registers itself."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.metrics import MetricWrapperBase

    from streams.core.records.policy import load_policy
    from streams.ops.metrics import Metrics
    from streams.ops.stall_watch import StallWatch
    from streams.ops.stalls import LoopLagProbe
    from streams.packaged import example_path

    registry = CollectorRegistry()
    # As streams/worker/app.py wires them: the metrics, then the loop's probes on its registry.
    Metrics(load_policy(example_path("policy.yaml")), registry)
    LoopLagProbe(registry)
    StallWatch(registry)
    families = []
    for collector in registry._collector_to_names:
        if not isinstance(collector, MetricWrapperBase):
            continue  # the process and platform collectors: Prometheus' standard families
        kind = collector._type
        name = collector._name + ("_total" if kind == "counter" else "")
        families.append((name, kind, tuple(collector._labelnames), collector._documentation))
    return families


def metrics_page() -> str:
    rows = [
        [code(name), kind, ", ".join(code(label) for label in labels), cell(doc)]
        for name, kind, labels, doc in metric_families()
    ]
    intro = """
The metrics a worker serves on `GET /metrics`, read from its registry (`Metrics` in
`streams/ops/metrics.py`, and the event loop's probes in `streams/ops/stalls.py` and
`streams/ops/stall_watch.py`), in the order it registers them. Beside them are Prometheus' own
process and platform families (`process_*`, `python_*`) and Faust's, prefixed
`claimstream_faust_`. Labels are bounded: `field` and `source` take only the names the policy
declares (anything else is `_other`).
"""
    return page("Metrics", intro, table(["metric", "type", "labels", "what it counts"], rows))


# --- Web API (streams/worker/app.py ENDPOINTS) ---------------------------------------------------


def endpoints() -> list[tuple[str, str, str]]:
    """(method, path, description) of every endpoint a worker serves, as its index lists them."""
    from streams.worker.app import ENDPOINTS

    index = [
        ("GET", "/", "this list of endpoints, as JSON"),
        ("GET", "/api", "this list of endpoints, as JSON"),
    ]
    listed = [(*entry.split(" ", 1), about) for entry, about in ENDPOINTS.items()]
    return index + [(method, path, about) for method, path, about in listed]


def web_api_page() -> str:
    rows = [[method, code(path), cell(about)] for method, path, about in endpoints()]
    intro = """
What a worker serves on `web_host`:`web_port` (default `127.0.0.1:6066`), read from its endpoint
table (`ENDPOINTS` in `streams/worker/app.py`; the console's routes are `ROUTES` in
`streams/console/api.py` and `WRITE_ROUTES` in `streams/console/writes.py`). A key is `{subject}|{field}`, its `|` written `%7C` in a path.
`GET /` and `GET /api` answer this table as JSON.
"""
    return page("Web API", intro, table(["method", "path", "what it answers"], rows))


# --- Avro records (schemas/*.avsc) -------------------------------------------------------------


def _avro_type(kind: Any) -> str:
    if isinstance(kind, list):
        return " or ".join(_avro_type(k) for k in kind)
    if isinstance(kind, dict):
        if kind.get("type") == "array":
            return f"array of {_avro_type(kind['items'])}"
        if kind.get("type") == "map":
            return f"map of {_avro_type(kind['values'])}"
        if "logicalType" in kind:
            return f"{kind['type']} ({kind['logicalType']})"
        return str(kind.get("name", kind.get("type")))
    return str(kind).removeprefix("claimstream.")


def schemas() -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) for path in sorted(SCHEMAS.glob("*.avsc"))]


def records_page() -> str:
    sections = []
    for schema in schemas():
        name, doc = schema["name"], cell(schema.get("doc", ""))
        if schema["type"] == "record":
            rows = [
                [
                    code(f["name"]),
                    code(_avro_type(f["type"])),
                    code(json.dumps(f["default"])) if "default" in f else "",
                    cell(f.get("doc", "")),
                ]
                for f in schema["fields"]
            ]
            body = table(["field", "type", "default", "what it holds"], rows)
        elif schema["type"] == "enum":
            body = "Symbols: " + ", ".join(code(s) for s in schema["symbols"]) + "\n"
        else:
            body = f"Type: {code(_avro_type(schema))}\n"
        sections.append(f"## {name}\n\n{schema['type']} `claimstream.{name}`: {doc}\n\n{body}")
    intro = """
The Avro schemas of the records claimstream reads and writes, from `schemas/` (namespace
`claimstream`). Earlier versions are kept in `schemas/history/`; each change stays compatible with
them.
"""
    return page("Avro records", intro, *sections)


# --- Rules (streams/core/rules/engine.py RULES) ---------------------------------------------------


def step_docs() -> dict[str, str]:
    """The docstrings of the core's functions, read from their source: a module compiled with
    mypyc keeps none at run time."""
    found = {}
    for path in sorted((REPO / "streams" / "core").glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef):
                found[node.name] = ast.get_docstring(node) or ""
    return found


def rules_page() -> str:
    from streams.core.rules.engine import RULES

    docs = step_docs()

    rows = [
        [
            str(position),
            code(rule.name),
            "revises the verdict" if rule.revises else "decides",
            ", ".join(code(name) for name in rule.sets) or "nothing",
            "yes" if rule.plain else "no: nothing to look at there",
            cell(rule.apply.__doc__ or docs.get(rule.apply.__name__, "")),
        ]
        for position, rule in enumerate(RULES, start=1)
    ]
    intro = """
The steps a key's claims go through, in the order they run (`RULES` in
`streams/core/rules/engine.py`). Deciding steps run until one returns a verdict; the revising ones
run after it and may replace it. *Sets* names the context a step writes for later steps; *plain
keys* says whether it runs on claims without epoch, period or scope. See
[how a decision is made](../explanation/how-a-decision-is-made.md).
"""
    headers = ["#", "rule", "role", "sets", "plain keys", "what it does"]
    return page("Rules", intro, table(headers, rows))


# --- Alerts (deploy/prometheus/rules/*.yml) ----------------------------------------------------


def alert_rules() -> list[dict[str, Any]]:
    found = []
    for path in sorted(ALERT_RULES.glob("*.yml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            found += [rule for rule in group["rules"] if "alert" in rule]
    return found


def runbook_anchor(rule: dict[str, Any]) -> str:
    """The anchor the rule's runbook_url ends with: a section of docs/runbook.md."""
    return str(rule["annotations"]["runbook_url"]).rpartition("#")[2]


def alerts_page() -> str:
    rules = alert_rules()
    rows = [
        [
            f"[{rule['alert']}](#{rule['alert'].lower()})",
            rule.get("labels", {}).get("severity", ""),
            code(rule.get("for", "")),
            cell(rule["annotations"].get("summary", "")),
            f"[runbook](../runbook.md#{runbook_anchor(rule)})",
        ]
        for rule in rules
    ]
    details = [
        f"## {rule['alert']}\n\n{cell(rule['annotations'].get('description', ''))}\n\n"
        f"```promql\n{str(rule['expr']).strip()}\n```\n"
        for rule in rules
    ]
    intro = """
The alerting rules in `deploy/prometheus/rules/`, each with what to do in the
[runbook](../runbook.md). In Prometheus, a rule's `runbook_url` is the `runbook_base` external
label followed by the same anchor.
"""
    headers = ["alert", "severity", "for", "summary", "runbook"]
    return page("Alerts", intro, table(headers, rows), *details)


# --- Policy file (streams/core/records/policy.py) -------------------------------------------------


def policy_models() -> list[type[BaseModel]]:
    """The policy model and every model nested in it, top first."""
    from streams.core.records.policy import Policy

    found: list[type[BaseModel]] = []
    pending: list[type[BaseModel]] = [Policy]
    while pending:
        model = pending.pop(0)
        if model in found:
            continue
        found.append(model)
        for field in model.model_fields.values():
            pending += _nested_models(field.annotation)
    return found


def _nested_models(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in getattr(annotation, "__args__", ()) for m in _nested_models(arg)]


def _policy_type(annotation: Any) -> str:
    text = _type_name(annotation)
    for prefix in ("streams.core.records.policy.", "streams.core.records.contracts.", "datetime."):
        text = text.replace(prefix, "")
    return text


def policy_page() -> str:
    sections = []
    for model in policy_models():
        rows = [
            [
                code(name),
                code(_policy_type(field.annotation)),
                "required"
                if field.is_required()
                else "see below"
                if _nested_models(field.annotation)
                else _default(field),
                cell(field.description or ""),
            ]
            for name, field in model.model_fields.items()
        ]
        about = cell((model.__doc__ or "").strip())
        sections.append(
            f"## {model.__name__}\n\n{about}\n\n"
            + table(["key", "type", "default", "what it sets"], rows)
        )
    schema = """
The policy file's JSON Schema, [policy.schema.json](policy.schema.json), is generated from the
same model (`claimstream policy schema` prints it) and ships in the package as
`streams/examples/policy.schema.json`. An editor with the YAML language server validates and
completes a policy file that starts with a line naming it, as the example policy does:

```yaml
# yaml-language-server: $schema=policy.schema.json
```
"""
    intro = f"""
The keys of a policy file (`Policy` in `streams/core/records/policy.py`), top level first, then each
nested block. Durations are written `60s`, `10m`, `24h` or `1d`. `claimstream policy check FILE`
validates a file.
{schema}"""
    return page("Policy file", intro, *sections)


PAGES: dict[str, Callable[[], str]] = {
    "reference/settings.md": settings_page,
    "reference/cli.md": cli_page,
    "reference/metrics.md": metrics_page,
    "reference/web-api.md": web_api_page,
    "reference/records.md": records_page,
    "reference/rules.md": rules_page,
    "reference/alerts.md": alerts_page,
    "reference/policy-file.md": policy_page,
}


def policy_schema() -> str:
    from streams.core.records.policy_schema import policy_schema_text

    return policy_schema_text()


# Published beside the pages, not in the navigation.
EXTRA_FILES: dict[str, Callable[[], str]] = {
    "reference/policy.schema.json": policy_schema,
}


def on_files(files: Any, config: Any) -> Any:
    """MkDocs hook: add the generated reference pages (and the files they link) to the site."""
    from mkdocs.structure.files import File

    for path, generate in {**PAGES, **EXTRA_FILES}.items():
        files.append(File.generated(config, path, content=generate()))
    return files
