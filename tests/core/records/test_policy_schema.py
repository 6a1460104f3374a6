"""The policy file's JSON Schema: shipped as generated, the example policies pass it, mistakes an
editor should flag fail it, and what it accepts the loader loads."""

from __future__ import annotations

import ast
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

import streams.core
from streams.core.records.errors import PolicyError
from streams.core.records.policy import load_policy, policy_from_text
from streams.core.records.policy_schema import duration_text, policy_json_schema, policy_schema_text
from streams.packaged import example_path
from tests.support.builders import REPO

SHIPPED = REPO / "examples" / "policy.schema.json"
VALIDATOR = Draft202012Validator(policy_json_schema())
EXAMPLE_POLICIES = [REPO / "examples" / "policy.yaml", REPO / "deploy/kubernetes/policy.yaml"]


def problems(document: object) -> list[str]:
    return [error.message for error in VALIDATOR.iter_errors(document)]


def example() -> dict[str, Any]:
    data = yaml.safe_load((REPO / "examples" / "policy.yaml").read_text())
    assert isinstance(data, dict)
    return data


def loads(document: dict[str, Any]) -> None:
    """load_policy on the document written as a file; raises PolicyError if refused."""
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "policy.yaml"
        path.write_text(yaml.safe_dump(document, sort_keys=False))
        load_policy(path)


def test_the_shipped_schema_is_the_generated_one() -> None:
    assert SHIPPED.read_text() == policy_schema_text(), (
        "examples/policy.schema.json is stale: write it again with "
        "`claimstream policy schema > examples/policy.schema.json`"
    )
    assert example_path("policy.schema.json").resolve() == SHIPPED.resolve()
    Draft202012Validator.check_schema(json.loads(SHIPPED.read_text()))


def test_the_example_policy_names_the_schema_beside_it_for_editors() -> None:
    first_line = (REPO / "examples" / "policy.yaml").read_text().splitlines()[0]
    assert first_line == "# yaml-language-server: $schema=policy.schema.json"
    assert (REPO / "examples" / first_line.rsplit("=", 1)[1]).resolve() == SHIPPED.resolve()


@pytest.mark.parametrize("path", EXAMPLE_POLICIES, ids=lambda path: path.parent.name)
def test_the_example_policies_pass_the_schema(path: Path) -> None:
    assert problems(yaml.safe_load(path.read_text())) == []


@pytest.mark.parametrize(
    ("where", "mistake"),
    [
        (("defaults",), {"freshnes": "5m"}),
        (("fields", "account.balance"), {"on_conflcit": "surface"}),
        (("sources", "crm"), {"linage": "crm"}),
        ((), {"field": {}}),
    ],
    ids=["defaults", "field", "source", "top"],
)
def test_a_mistyped_key_fails_the_schema_as_it_fails_the_loader(
    where: tuple[str, ...], mistake: dict[str, Any]
) -> None:
    document = example()
    target = document
    for key in where:
        target = target[key]
    target.update(mistake)
    (unknown,) = mistake
    assert any(repr(unknown) in problem for problem in problems(document)), problems(document)
    with pytest.raises(PolicyError, match="Extra inputs are not permitted"):
        loads(document)


@pytest.mark.parametrize(
    ("where", "wrong"),
    [
        (("defaults",), {"min_independent_sources": "two"}),
        (("defaults",), {"min_independent_sources": 0}),
        (("defaults",), {"freshness": "5 minutes"}),
        (("defaults",), {"max_clock_skew": "none"}),  # only freshness may be unbounded
        (("defaults",), {"on_conflict": "ignore"}),
        (("fields", "account.balance"), {"type": "currency"}),
        (("sources", "crm"), {"authority": "asserted"}),  # from a claim's class, not the policy
        ((), {"version": ""}),
    ],
    ids=lambda case: json.dumps(case),
)
def test_a_wrong_type_or_value_fails_the_schema_as_it_fails_the_loader(
    where: tuple[str, ...], wrong: dict[str, Any]
) -> None:
    document = example()
    target = document
    for key in where:
        target = target[key]
    target.update(wrong)
    assert problems(document) != []
    with pytest.raises(PolicyError):
        loads(document)


def test_defaults_are_shown_as_a_policy_writes_them() -> None:
    defaults = policy_json_schema()["$defs"]["Defaults"]["properties"]
    assert (defaults["freshness"]["default"], defaults["max_clock_skew"]["default"]) == (
        "5m",
        "30s",
    )
    assert defaults["freshness"]["description"].startswith("How old a claim may be")


def test_every_key_says_what_it_is_for() -> None:
    """An editor shows a key's description on hover, and the reference page prints it."""
    schema = policy_json_schema()
    objects = {"Policy": schema, **schema["$defs"]}
    undescribed = [
        f"{name}.{key}"
        for name, node in objects.items()
        for key, spec in node.get("properties", {}).items()
        if not spec.get("description")
    ]
    assert undescribed == []


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("250ms", 0.25), ("90s", 90), ("5m", 300), ("36h", 129600), ("2d", 172800)],
)
def test_duration_text_writes_what_the_loader_reads(text: str, seconds: float) -> None:
    document = example()
    document["defaults"]["escalate_after"] = text
    assert problems(document) == []
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "policy.yaml"
        path.write_text(yaml.safe_dump(document))
        parsed = load_policy(path).defaults.escalate_after
    assert parsed.total_seconds() == seconds
    assert duration_text(parsed) == text


# Policies drawn within the schema: every key it names, in each of the forms it allows.
DURATIONS = st.one_of(
    st.builds(
        lambda n, unit, space: f"{n}{space}{unit}",
        st.integers(0, 10_000),
        st.sampled_from(["ms", "s", "m", "h", "d"]),
        st.sampled_from(["", " "]),
    ),
    st.builds(lambda n: f"{n}.5s", st.integers(0, 100)),
    st.integers(0, 86_400),
    st.floats(0, 86_400, allow_nan=False),
)
UNBOUNDED = st.sampled_from(["none", "None", None])
OBSERVED = st.sampled_from(["system_of_record", "cached", "derived"])
NAMES = st.text("abcdefghijklmnopqrstuvwxyz.-_", min_size=1, max_size=12)


def _optional(**keys: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional=keys)


RULES = _optional(
    freshness=DURATIONS | UNBOUNDED,
    on_conflict=st.sampled_from(["block", "degrade", "surface", "most_recent"]),
    min_independent_sources=st.integers(1, 5),
    epoch_change=st.sampled_from(["reobserve", "accept"]),
    escalate_after=DURATIONS | st.none(),
    case=st.sampled_from(["preserve", "fold", None]),
)
# Each type with the keys it takes (the part the schema leaves to `policy check`).
TYPED = st.one_of(
    st.builds(
        lambda values: {"type": "enum", "values": values}, st.lists(NAMES, min_size=1, max_size=4)
    ),
    st.builds(lambda code: {"type": "money", "currency": code}, st.sampled_from(["USD", "EUR"])),
    st.builds(
        lambda extra: {"type": "number", **extra},
        _optional(unit=NAMES, tolerance=st.floats(0, 10, allow_nan=False)),
    ),
    st.builds(lambda extra: {"type": "integer", **extra}, _optional(unit=NAMES)),
    st.sampled_from([{"type": kind} for kind in ("string", "boolean", "timestamp")]),
)


@st.composite
def policies(draw: st.DrawFn) -> dict[str, Any]:
    sources = draw(
        st.dictionaries(
            NAMES,
            st.builds(
                lambda authority, extra: {"authority": authority, **extra},
                OBSERVED,
                _optional(lineage=NAMES | st.none(), principal=NAMES | st.none()),
            ),
            min_size=1,
            max_size=4,
        )
    )
    source = st.sampled_from(sorted(sources))
    field = st.builds(
        lambda typed, rules, authorities: {**typed, **rules, **authorities},
        TYPED,
        RULES,
        _optional(authorities=st.dictionaries(source, OBSERVED, max_size=2)),
    )
    document: dict[str, Any] = {
        "version": draw(NAMES),
        "sources": sources,
        "fields": draw(st.dictionaries(NAMES, field, min_size=1, max_size=4)),
    }
    document |= draw(
        _optional(
            defaults=_optional(
                freshness=DURATIONS | UNBOUNDED,
                max_clock_skew=DURATIONS,
                min_independent_sources=st.integers(1, 5),
            ),
            signing=_optional(
                required=st.booleans(),
                max_age=DURATIONS,
                keys=st.lists(
                    st.builds(
                        lambda key_id, signed: {
                            "key_id": key_id,
                            "algorithm": "hmac-sha256",
                            "secret_env": "CLAIMSTREAM_KEY",
                            "sources": signed,
                        },
                        NAMES,
                        st.lists(source, min_size=1, max_size=2),
                    ),
                    max_size=2,
                ),
            ),
        )
    )
    return document


@settings(max_examples=150, deadline=None)
@given(policies())
def test_a_policy_the_schema_accepts_loads(document: dict[str, Any]) -> None:
    assert problems(document) == []
    loads(document)


@settings(max_examples=100, deadline=None)
@given(policies(), NAMES, st.data())
def test_an_unknown_key_anywhere_fails_both(
    document: dict[str, Any], unknown: str, data: st.DataObject
) -> None:
    places = [document, *document["sources"].values(), *document["fields"].values()]
    place = data.draw(st.sampled_from(places))
    if unknown in place:
        return
    place[unknown] = "5m"
    assert problems(document) != []
    with pytest.raises(PolicyError):
        policy_from_text(yaml.safe_dump(document))


def test_the_core_does_not_import_a_schema_validator() -> None:
    imported = set()
    for path in Path(streams.core.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module.split(".")[0])
    assert "pydantic" in imported  # the walk sees the core's imports
    assert "jsonschema" not in imported
