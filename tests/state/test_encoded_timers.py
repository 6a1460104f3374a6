"""A restore takes each key's timer from its changelog record without decoding the state: the
timer read so equals the one the decoded state gives, for every stored form, in either store."""

from __future__ import annotations

import json
import tempfile
from datetime import datetime, timedelta
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.decision.summary import DecisionSummary
from streams.core.keys.journal import UnknownStateFormat, decode_state, encode_state
from streams.core.keys.state import KeyState
from streams.core.records.contracts import Outcome
from streams.core.records.instants import EPOCH
from streams.state import task
from streams.state.cache import StateCache
from streams.state.keystore import MemoryKeyStore, Timer
from streams.state.rocks import Budget, RocksKeyStore
from streams.state.task import TaskStore, encoded_timer, timer_of
from tests.support.journal import written
from tests.support.strategies import key_states

LATEST = 2**63 - 2  # every timer is due by then
# The disk store keeps instants as unsigned micros: the engine's timers are never before 1970.
TIMED_STATES = key_states().filter(
    lambda s: all(t is None or t >= EPOCH for t in (s.next_check_at, s.conflict_since))
)


@settings(max_examples=300, deadline=None)
@given(state=key_states())
def test_a_records_timer_is_the_one_its_decoded_state_gives(state: KeyState) -> None:
    expected = timer_of(state)
    assert encoded_timer(encode_state(state)) == expected
    for version in (1, 2, 3):
        data = written(state, version)
        assert encoded_timer(data) == expected == timer_of(decode_state(data)), version


def test_the_current_form_is_timed_without_decoding_the_state(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = KeyState("s", "f", next_check_at=EPOCH + timedelta(seconds=5))
    data = encode_state(state)

    def undecodable(data: bytes) -> KeyState:
        raise AssertionError("decoded")

    monkeypatch.setattr(task, "decode_state", undecodable)
    assert encoded_timer(data) == timer_of(state) == Timer(5_000_000)


@pytest.mark.parametrize("open_since", [None, EPOCH + timedelta(seconds=2)])
def test_a_timer_that_waits_for_its_field_to_be_decided_again_is_not_indexed(
    open_since: datetime | None,
) -> None:
    """Kept on the state (and in its record) to fire later, but never due meanwhile; an open
    conflict stays listed as one."""
    summary = DecisionSummary("d1", Outcome.CONFLICT, None, None, "authority_conflict", EPOCH, None)
    state = KeyState(
        "s",
        "f",
        history=(summary,) if open_since else (),
        conflict_since=open_since,
        next_check_at=EPOCH + timedelta(seconds=5),
        timer_waits=True,
    )
    data = encode_state(state)
    assert decode_state(data) == state
    expected = Timer(None, "f", 2_000_000) if open_since else None
    assert encoded_timer(data) == timer_of(state) == expected


@pytest.mark.parametrize(
    "data",
    [
        *(json.dumps({"version": v, "subject": "s", "field": "f"}).encode() for v in (4, 0, "3")),
        *(msgspec.msgpack.encode({"version": v, "subject": "s", "field": "f"}) for v in (6, 3)),
    ],
)
def test_a_record_of_a_format_this_release_does_not_read_stops_the_load(data: bytes) -> None:
    version = (json.loads(data) if data[:1] == b"{" else msgspec.msgpack.decode(data))["version"]
    store = TaskStore(StateCache(2))
    with pytest.raises(UnknownStateFormat) as refused:
        store.load_all([(b"s|f", data)], "changelog partition 0, ")
    assert refused.value.version == version
    assert "(changelog partition 0, key b's|f')" in str(refused.value)


def _observed(store: TaskStore) -> tuple[object, ...]:
    return store.due(LATEST, 100), sorted(store.open_conflicts())


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.lists(st.tuples(st.integers(0, 3), st.none() | TIMED_STATES), min_size=1, max_size=4),
        max_size=5,
    )
)
def test_loaded_records_time_their_keys_as_their_journaled_states_do(
    batches: list[list[tuple[int, KeyState | None]]],
) -> None:
    """Changelog records loaded in batches (a restore) leave the timers and open conflicts that
    journaling the same states leaves, in the memory and the disk store alike."""
    with tempfile.TemporaryDirectory() as directory:
        disk = RocksKeyStore(Path(directory) / "rocksdb", Budget(1 << 20))
        loaded = [TaskStore(StateCache(2)), TaskStore(StateCache(2), disk)]
        journaled = TaskStore(StateCache(2), MemoryKeyStore())
        try:
            for batch in batches:
                records = [
                    (f"k{n}".encode(), None if state is None else encode_state(state))
                    for n, state in batch
                ]
                for store in loaded:
                    store.load_all(records)
                for key, data in records:  # the same states, as the loop would journal them
                    if data is None:
                        journaled.load(key, None)
                    else:
                        journaled.put(key, decode_state(data))
                journaled.journal()
                journaled.journaled()
                expected = _observed(journaled)
                assert [_observed(store) for store in loaded] == [expected, expected]
        finally:
            disk.close()
