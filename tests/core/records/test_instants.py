"""`micros` adds up the parts of an instant's distance from the epoch: it equals the division
of that distance by a microsecond, and `instant` inverts it, over datetime's whole range and in
any offset."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from streams.core.records.instants import EPOCH, instant, micros, micros_from_seconds

_OFFSETS = st.integers(min_value=-23 * 60, max_value=23 * 60).map(
    lambda minutes: timezone(timedelta(minutes=minutes))
)


@given(moment=st.datetimes(timezones=st.just(UTC) | _OFFSETS))
def test_micros_is_the_distance_from_the_epoch_in_microseconds(moment: datetime) -> None:
    assert micros(moment) == (moment - EPOCH) // timedelta(microseconds=1)


@given(moment=st.datetimes(timezones=st.just(UTC)))
def test_instant_inverts_micros(moment: datetime) -> None:
    assert instant(micros(moment)) == moment


@given(seconds=st.floats(min_value=0, max_value=2**34, allow_nan=False))
def test_micros_from_seconds_rounds_as_fromtimestamp(seconds: float) -> None:
    assert instant(micros_from_seconds(seconds)) == datetime.fromtimestamp(seconds, UTC)
