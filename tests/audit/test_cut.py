"""A cut's snapshot token (cut.py): it reads back as the same cut (every span, the instant to
the microsecond), it is the same whatever order the topics were gathered in, anything else
handed in as a token is refused with a ClaimstreamError, and a cut counts the offsets it spans.
Taking a cut needs a broker and is not held here."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.audit.cut import TOKEN_PREFIX, Cut, Span
from streams.core.records.errors import ClaimstreamError

AS_OF = datetime(2026, 12, 4, 12, 0, 0, 123456, tzinfo=UTC)
TOPICS = {
    "claims": (Span(0, 0, 10), Span(1, 5, 7)),
    "policies": (Span(0, 0, 2),),
    "aliases": (),
}

_offsets = st.integers(min_value=0, max_value=2**62)
_spans = st.builds(
    lambda p, start, length: Span(p, start, start + length),
    st.integers(min_value=0, max_value=10_000),
    _offsets,
    st.integers(min_value=0, max_value=2**40),
)
_instants = st.datetimes(
    min_value=datetime(1970, 1, 1),
    max_value=datetime(9000, 1, 1),
    timezones=st.just(UTC),
)


@settings(max_examples=200, deadline=None)
@given(
    as_of=_instants,
    topics=st.dictionaries(
        st.text(min_size=1, max_size=20), st.lists(_spans, max_size=4).map(tuple), max_size=5
    ),
)
def test_a_token_reads_back_as_its_cut(
    as_of: datetime, topics: dict[str, tuple[Span, ...]]
) -> None:
    cut = Cut(as_of, topics)
    token = cut.token()
    assert token.startswith(TOKEN_PREFIX)
    assert "\n" not in token
    assert "=" not in token
    again = Cut.from_token(token)
    assert again == cut
    assert again.as_of.microsecond == as_of.microsecond
    assert again.as_of.tzinfo is UTC
    assert again.token() == token


def test_the_instant_keeps_its_microseconds_whatever_its_offset() -> None:
    paris = AS_OF.astimezone(timezone(timedelta(hours=1)))
    cut = Cut.from_token(Cut(paris, TOPICS).token())
    assert cut.as_of == AS_OF
    assert cut.as_of.isoformat() == "2026-12-04T12:00:00.123456+00:00"
    assert Cut(paris, TOPICS).token() == Cut(AS_OF, TOPICS).token()


def test_the_token_is_the_same_whatever_order_the_topics_were_gathered_in() -> None:
    backwards = dict(reversed(list(TOPICS.items())))
    assert list(backwards) != list(TOPICS)
    assert Cut(AS_OF, backwards).token() == Cut(AS_OF, TOPICS).token()


def test_the_token_is_readable_json_under_its_prefix() -> None:
    body = Cut(AS_OF, TOPICS).token().removeprefix(TOKEN_PREFIX)
    data = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    assert data == {
        "as_of_us": 1_796_385_600_123_456,
        "topics": {
            "aliases": [],
            "claims": [[0, 0, 10], [1, 5, 7]],
            "policies": [[0, 0, 2]],
        },
    }


def _token(data: object) -> str:
    text = json.dumps(data).encode()
    return TOKEN_PREFIX + base64.urlsafe_b64encode(text).decode().rstrip("=")


@pytest.mark.parametrize(
    "token",
    [
        "",
        "csa2.e30",
        "eyJhc19vZl91cyI6MH0",  # no prefix
        TOKEN_PREFIX,
        TOKEN_PREFIX + "!!not base64!!",
        TOKEN_PREFIX + "A",  # one base64 character: no byte
        TOKEN_PREFIX + base64.urlsafe_b64encode(b"\xff\xfe not utf-8").decode(),
        TOKEN_PREFIX + base64.urlsafe_b64encode(b"not json").decode(),
        _token([]),
        _token("a string"),
        _token({}),
        _token({"as_of_us": 0}),
        _token({"topics": {}}),
        _token({"as_of_us": "yesterday", "topics": {}}),
        _token({"as_of_us": 0, "topics": []}),
        _token({"as_of_us": 0, "topics": "claims"}),
        _token({"as_of_us": 0, "topics": {"claims": 5}}),
        _token({"as_of_us": 0, "topics": {"claims": [[0, 1]]}}),
        _token({"as_of_us": 0, "topics": {"claims": [[0, "one", 2]]}}),
        _token({"as_of_us": 0, "topics": {"claims": [None]}}),
        _token({"as_of_us": 10**30, "topics": {}}),  # past any datetime
    ],
)
def test_anything_but_a_token_is_refused(token: str) -> None:
    with pytest.raises(ClaimstreamError):
        Cut.from_token(token)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(
    st.text(max_size=60).map(lambda body: TOKEN_PREFIX + body)
    | _json.map(_token)
    | st.fixed_dictionaries({"as_of_us": _json, "topics": _json}).map(_token)
    | st.fixed_dictionaries(
        {"as_of_us": st.integers(), "topics": st.dictionaries(st.text(max_size=3), _json)}
    ).map(_token)
)
def test_a_token_either_reads_or_is_refused_with_a_claimstream_error(token: str) -> None:
    try:
        cut = Cut.from_token(token)
    except ClaimstreamError:
        return
    assert all(isinstance(span, Span) for spans in cut.topics.values() for span in spans)


def test_a_cut_counts_the_offsets_it_spans() -> None:
    assert Cut(AS_OF, TOPICS).records == 10 + 2 + 2
    assert Cut(AS_OF, {}).records == 0
    assert Cut(AS_OF, {"claims": (Span(3, 40, 40),)}).records == 0
