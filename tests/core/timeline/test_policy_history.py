"""Policy histories as JSON lines: what `history_line` writes `history_from_lines` reads back, and
a bad line is refused naming its line number, the key and the problem."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.records.errors import ClaimstreamError, PolicyError
from streams.core.records.policy import policy_from_text
from streams.core.timeline.policy_history import history_from_lines, history_line
from tests.support.builders import REPO
from tests.support.examples import examples
from tests.support.strategies import DATETIMES

EXAMPLE = (REPO / "examples" / "policy.yaml").read_text()
T0 = datetime(2026, 12, 1, tzinfo=UTC)
MINIMAL = """version: "t1"
sources:
  billing-api: {authority: system_of_record}
fields:
  order.payment_status: {type: enum, values: [paid, unpaid], freshness: 60s}
"""


def _text(version: str) -> str:
    return MINIMAL.replace('"t1"', f'"{version}"')


def test_a_written_line_is_one_json_object_with_the_instant_in_utc() -> None:
    line = history_line(datetime(2026, 12, 1, 13, 30, tzinfo=UTC), EXAMPLE)
    assert "\n" not in line
    assert json.loads(line) == {"since": "2026-12-01T13:30:00Z", "policy": EXAMPLE}
    offset = datetime.fromisoformat("2026-12-01T14:30:00+01:00")
    assert json.loads(history_line(offset, EXAMPLE))["since"] == "2026-12-01T13:30:00Z"


def test_the_example_policy_reads_back_as_loaded() -> None:
    history = history_from_lines([history_line(T0, EXAMPLE)])
    [entry] = history.entries
    assert (entry.since, entry.policy) == (T0, policy_from_text(EXAMPLE))
    assert history.in_force(T0 - timedelta(days=1)) == entry.policy  # the first, before it


@settings(max_examples=examples(50), deadline=None)
@given(st.lists(st.tuples(DATETIMES, st.integers(0, 3)), min_size=1, max_size=6))
def test_lines_read_back_as_the_history_they_record(entries: list[tuple[datetime, int]]) -> None:
    """Any instants, any order, versions taken again (a rollback): the policy in force at each
    instant is the one of the last line with the latest `since` at or before it."""
    lines = [history_line(since, _text(f"v{n}")) for since, n in entries]
    history = history_from_lines(lines)
    assert [(e.since, e.policy.version) for e in history.entries] == sorted(
        [(since, f"v{n}") for since, n in entries], key=lambda entry: entry[0]
    )
    for since, _ in entries:
        expected = [f"v{n}" for s, n in entries if s == since][-1]
        assert history.in_force(since).version == expected


def test_blank_lines_and_other_keys_are_ignored() -> None:
    first = json.loads(history_line(T0, _text("t1"))) | {"version": "t1", "published_by": "ann"}
    second = history_line(T0 + timedelta(hours=1), _text("t2"))
    history = history_from_lines(["", json.dumps(first), "  ", second, ""])
    assert [e.policy.version for e in history.entries] == ["t1", "t2"]


GOOD = history_line(T0, _text("t1"))


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("{not json", "history.jsonl:2: not JSON: "),
        ('["a", "list"]', "history.jsonl:2: a line is a JSON object with `since` and `policy`"),
        (json.dumps({"policy": MINIMAL}), "history.jsonl:2: since: give the RFC 3339 instant"),
        (
            json.dumps({"since": "2026-12-01T00:00:00", "policy": _text("t2")}),
            "history.jsonl:2: since: '2026-12-01T00:00:00' is not an RFC 3339 instant: "
            "'2026-12-01T00:00:00' needs a UTC offset",
        ),
        (
            json.dumps({"since": "tomorrow", "policy": _text("t2")}),
            "history.jsonl:2: since: 'tomorrow' is not an RFC 3339 instant",
        ),
        (
            json.dumps({"since": "2026-12-02T00:00:00Z", "policy": {"version": "t2"}}),
            "history.jsonl:2: policy: give the policy's YAML text, as a string",
        ),
        (
            json.dumps({"since": "2026-12-02T00:00:00Z", "policy": "version: [unclosed"}),
            "history.jsonl:2: policy: not valid YAML",
        ),
        (
            json.dumps({"since": "2026-12-02T00:00:00Z", "policy": "- a list"}),
            "history.jsonl:2: policy: (top): a policy is a mapping",
        ),
        (
            json.dumps(
                {"since": "2026-12-02T00:00:00Z", "policy": _text("t2").replace("60s", "soon")}
            ),
            "history.jsonl:2: policy: fields.order.payment_status.freshness: 'soon' is not a "
            "duration",
        ),
        (
            history_line(T0 + timedelta(days=1), _text("t1").replace("60s", "30s")),
            "history.jsonl:2: policy version 't1' is also line 1's, with other content",
        ),
    ],
)
def test_a_bad_line_is_refused_naming_its_number_and_problem(line: str, problem: str) -> None:
    with pytest.raises(PolicyError) as caught:
        history_from_lines([GOOD, line, GOOD], "history.jsonl")
    assert isinstance(caught.value, ClaimstreamError)
    assert str(caught.value).startswith(problem)


def test_a_version_taken_again_with_the_same_text_is_a_rollback() -> None:
    lines = [
        GOOD,
        history_line(T0 + timedelta(1), _text("t2")),
        history_line(T0 + timedelta(2), _text("t1")),
    ]
    history = history_from_lines(lines)
    assert [e.policy.version for e in history.entries] == ["t1", "t2", "t1"]


def test_an_empty_history_is_refused() -> None:
    with pytest.raises(PolicyError, match=r"^history.jsonl: holds no policy"):
        history_from_lines(["", "  "], "history.jsonl")


def test_writing_refuses_what_would_not_read_back() -> None:
    with pytest.raises(PolicyError, match="needs a UTC offset"):
        history_line(datetime(2026, 12, 1), EXAMPLE)
    with pytest.raises(PolicyError, match=r"^policy: fields.order.payment_status.freshness"):
        history_line(T0, MINIMAL.replace("60s", "soon"))
