"""The hot path's claims (Avro dict checked and built without pydantic validation) are the
contract's claims: the same accepted, the same refused for the same reason, equal when admitted."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.admission.intake import AdmittedClaim, admit, admit_micros, parse_claim
from streams.core.keys.journal import encode_state
from streams.core.keys.state import KeyState
from streams.core.records.contracts import (
    Claim,
    RejectReason,
    SourceClass,
    instant,
    micros,
    micros_from_seconds,
)
from streams.core.records.errors import RejectedInput
from streams.core.records.lean import LeanClaim
from streams.core.records.policy import load_policy
from streams.settings import Settings
from streams.wire.codec import claim_from_avro
from streams.wire.registry import FolderRegistry, WireCodec
from tests.support.avro import avro_body
from tests.support.strategies import DATETIMES, INT64

CODEC = WireCodec(FolderRegistry())
POLICY = load_policy(Settings().policy)
NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)
FRAME = CODEC.encode(
    "t", Claim(claim_id="c", subject="s", field="f", status="present", source="x", observed_at=NOW)
)[:5]  # the magic byte and the current Claim schema's id

texts = st.text(max_size=12) | st.sampled_from(["", " ", "paid", "PAID ", "billing-api", "crm"])
doubles = st.floats(allow_nan=False)  # infinities included; NaN equals nothing, itself neither
values = st.one_of(
    st.none(),
    st.booleans(),
    INT64,
    doubles,
    texts,
    st.fixed_dictionaries(
        {"amount_minor": INT64, "currency": st.sampled_from(["USD", "usd", "EUR", ""])}
    ),
)
avro_fields = {
    "claim_id": texts,
    "subject": texts,
    "field": st.sampled_from(sorted(POLICY.fields)) | texts,
    "status": st.sampled_from(["present", "not_found", "forbidden", "unavailable", "error"]),
    "value": values,
    "unit": st.none() | st.sampled_from(["ms", "s", "kg", "USD", ""]),
    "source": st.sampled_from(["billing-api", "crm", "chat", "nobody", "", " "]),
    "replica": st.none() | texts,
    "source_class": st.sampled_from(["observation", "user", "inference"]),
    "observed_at": DATETIMES | st.just(NOW + timedelta(hours=1)),
    "valid_from": st.none() | DATETIMES,
    "valid_to": st.none() | DATETIMES,
    "epoch": st.none() | INT64,
    "lineage": st.none() | texts,
    "scope": st.none() | texts,
    "confidence": st.none() | doubles,
    "trace_id": st.none() | texts,
    "producer": st.none() | texts,
    "attributes": st.dictionaries(texts, texts, max_size=2),
}
avro_claims = st.fixed_dictionaries(avro_fields)


def outcome(decode: Any, data: bytes) -> tuple[str, object]:
    """What a path makes of a record: its claim and admission, or the reason it refused."""
    try:
        claim = decode(data)
        admitted = admit(claim, POLICY, NOW)
    except RejectedInput as exc:
        return "refused", exc.reason
    return "admitted", (claim, admitted, journaled(admitted))


def journaled(admitted: AdmittedClaim) -> bytes:
    """How the claim is stored: the key state encoding reads the model's fields directly."""
    return encode_state(KeyState(admitted.claim.subject, admitted.claim.field, (admitted,)))


def same_on(data: bytes) -> None:
    lean = outcome(CODEC.decode_claim, data)
    validated = outcome(lambda d: CODEC.decode(Claim, d), data)
    assert lean == validated


@settings(max_examples=500, deadline=None)
@given(data=avro_claims)
def test_the_lean_path_decides_every_avro_claim_as_the_pydantic_path(data: dict[str, Any]) -> None:
    same_on(FRAME + avro_body(data))


@settings(max_examples=300, deadline=None)
@given(data=avro_claims, at=st.integers(0, 400), junk=st.binary(min_size=1, max_size=8))
def test_the_lean_path_refuses_broken_bytes_as_the_pydantic_path(
    data: dict[str, Any], at: int, junk: bytes
) -> None:
    body = avro_body(data)
    at %= len(body) + 1
    # Bytes spliced in, cut off or appended: invalid UTF-8, bad enum indexes, short reads...
    for broken in (body[:at] + junk + body[at:], body[:at], junk, junk + body):
        same_on(FRAME + broken)
    same_on(junk)  # not even framed


odd_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=5),
    st.binary(max_size=5),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=12), st.integers() | st.text(max_size=3), max_size=3),
    st.just(NOW),
    st.just(datetime(2026, 1, 1)),  # no offset
)


@settings(max_examples=500, deadline=None)
@given(
    data=avro_claims,
    changes=st.dictionaries(
        st.sampled_from([*Claim.model_fields, "extra"]), odd_values, max_size=3
    ),
    dropped=st.sets(st.sampled_from(sorted(Claim.model_fields)), max_size=2),
)
def test_any_dict_is_built_or_refused_as_parse_claim_does(
    data: dict[str, Any], changes: dict[str, Any], dropped: set[str]
) -> None:
    mangled = {k: v for k, v in {**data, **changes}.items() if k not in dropped}
    try:
        expected: object = parse_claim(mangled)
    except RejectedInput as exc:
        expected = exc.reason
    try:
        lean: object = claim_from_avro(dict(mangled))
    except RejectedInput as exc:
        lean = exc.reason
    assert lean == expected


# -- the hot path's admission: lean claims and integer time against the contract's ------------

SKEW = POLICY.defaults.max_clock_skew
around_skew = st.integers(-3, 3).map(lambda d: NOW + SKEW + timedelta(microseconds=d))
recent = st.datetimes(
    min_value=datetime(2026, 11, 29),
    max_value=datetime(2026, 11, 30, 12, 1),
    timezones=st.just(UTC),
)
# Values each field accepts (and a few it refuses), with the unit they come in.
fitting: dict[str, st.SearchStrategy[tuple[Any, str | None]]] = {
    "account.balance": st.tuples(
        st.fixed_dictionaries(
            {"amount_minor": INT64, "currency": st.sampled_from(["USD", " usd", "EUR"])}
        ),
        st.sampled_from([None, "USD", "EUR"]),
    ),
    "api.latency": st.tuples(st.floats() | INT64, st.sampled_from(["ms", "s", "us", None, "kg"])),
    "contract.seats": st.tuples(INT64 | st.floats(-1e3, 1e3), st.sampled_from([None, None, "s"])),
    "customer.email_verified": st.tuples(st.booleans() | INT64, st.none()),
    "customer.shipping_address": st.tuples(texts, st.none()),
    "order.payment_status": st.tuples(
        st.sampled_from(["paid", " PAID ", "Overdue", "refunded", "maybe", ""]), st.none()
    ),
    "service.retry_timeout": st.tuples(st.floats(0, 1e6), st.sampled_from(["s", "ms", "min"])),
    "subscription.renews_at": st.tuples(
        st.sampled_from(["2026-12-01T00:00:00Z", "2026-12-01T01:00:00+01:00", "2026-12-01", "x"]),
        st.none(),
    ),
}


def mostly(usual: list[str], otherwise: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """One of `usual`, or now and then (one draw in len(usual) + 1) one of `otherwise`."""
    return st.sampled_from([*usual, None]).flatmap(
        lambda picked: otherwise if picked is None else st.just(picked)
    )


@st.composite
def admissible(draw: st.DrawFn) -> dict[str, Any]:
    """Avro claims most of which the policy admits: known fields with fitting values, recent
    times; and around them what it refuses (blank provenance, unknown sources, the future, bad
    types, NaN confidence)."""
    data = draw(avro_claims)
    field = draw(mostly(sorted(fitting), texts))
    value, unit = draw(fitting.get(field, st.tuples(values, st.none())))
    names = mostly(["c1", "gen-7-0", "subj-1"], texts)
    data |= {
        "claim_id": draw(names),
        "subject": draw(names),
        "field": field,
        "status": draw(st.sampled_from(["present"] * 4 + ["not_found", "error"])),
        "value": value,
        "unit": unit,
        "source": draw(st.sampled_from(["billing-api", "crm", "reporting-replica", "chat", "x"])),
        "observed_at": draw(recent | around_skew | st.just(datetime(1970, 1, 1, tzinfo=UTC))),
        "valid_from": draw(st.none() | st.none() | recent),
        "valid_to": draw(st.none() | st.none() | recent),
        "epoch": draw(st.none() | st.none() | INT64),
        "scope": draw(st.none() | st.none() | texts),
        "confidence": draw(st.none() | st.floats()),  # NaN and the infinities included
    }
    return data


def orderings(admitted: AdmittedClaim) -> tuple[object, ...]:
    """Everything admission works out, the engine's orderings with it."""
    return (
        admitted.authority,
        admitted.value,
        admitted.lineage,
        admitted.rank,
        admitted.recency,
        admitted.statement,
        admitted.observes,
        admitted.scope_key,
        admitted.plain,
        admitted.observed_us,
        admitted.valid_from_us,
        admitted.valid_to_us,
    )


def admission(decode: Any, admit_with: Any, body: bytes) -> tuple[str, object]:
    try:
        claim = decode(body)
        admitted = admit_with(claim)
    except RejectedInput as exc:
        return "refused", exc.reason
    return "admitted", (claim.as_claim(), orderings(admitted), journaled(admitted))


@settings(max_examples=500, deadline=None)
@given(data=admissible(), source_class=st.none() | st.sampled_from(SourceClass))
def test_the_hot_path_admits_as_the_contract_path_with_datetimes(
    data: dict[str, Any], source_class: SourceClass | None
) -> None:
    body = FRAME + avro_body(data)
    hot = admission(
        CODEC.decode_claim, lambda c: admit_micros(c, POLICY, micros(NOW), source_class), body
    )
    contract = admission(
        lambda d: CODEC.decode(Claim, d), lambda c: admit(c, POLICY, NOW, source_class), body
    )
    assert hot == contract
    # Integer time decides as the datetimes would.
    observed = data["observed_at"]
    if hot == ("refused", RejectReason.FUTURE_OBSERVATION):
        assert observed > NOW + SKEW
    if hot[0] == "admitted":
        assert datetime(1970, 1, 1, tzinfo=UTC) <= observed <= NOW + SKEW
        start, end = data["valid_from"], data["valid_to"]
        assert start is None or end is None or end > start


@settings(max_examples=300, deadline=None)
@given(seconds=st.floats(min_value=0, max_value=2**34, allow_nan=False))
def test_posix_seconds_become_the_microseconds_fromtimestamp_rounds_to(seconds: float) -> None:
    assert instant(micros_from_seconds(seconds)) == datetime.fromtimestamp(seconds, UTC)


EDGES = (micros(datetime(1, 1, 1, tzinfo=UTC)), micros(datetime.max.replace(tzinfo=UTC)))


@settings(max_examples=200, deadline=None)
@given(
    data=avro_claims,
    observed=st.sampled_from([EDGES[0] - 1, EDGES[0], EDGES[1], EDGES[1] + 1, -(2**63)]) | INT64,
    valid_to=st.none() | st.sampled_from([EDGES[1], EDGES[1] + 1, 2**63 - 1]),
)
def test_instants_read_as_longs_overflow_where_fastavro_does(
    data: dict[str, Any], observed: int, valid_to: int | None
) -> None:
    same_on(FRAME + avro_body({**data, "observed_at": observed, "valid_to": valid_to}))


def test_a_lean_claim_is_its_contract_claim() -> None:
    claim = Claim(
        claim_id="c",
        subject="s",
        field="order.payment_status",
        status="present",
        value="paid",
        source="crm",
        observed_at=NOW,
        valid_from=NOW - timedelta(days=1),
        attributes={"k": "v"},
    )
    lean = LeanClaim.of(claim)
    assert lean == claim
    assert claim == lean
    assert lean.as_claim() == claim
    assert (lean.observed_us, lean.valid_from_us, lean.valid_to_us) == (
        claim.observed_us,
        claim.valid_from_us,
        None,
    )
    renamed = lean.with_subject("t")
    assert renamed.subject == "t"
    assert lean.subject == "s"
    assert renamed == claim.model_copy(update={"subject": "t"})
    assert lean != LeanClaim.of(claim.model_copy(update={"value": "unpaid"}))
