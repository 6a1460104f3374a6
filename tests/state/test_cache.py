"""The decoded-state cache bounded by estimated bytes: eviction, per-task forgetting, misses, and
the estimate held against what decoded states measure."""

from __future__ import annotations

import gc
import tracemalloc
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.admission.intake import admit, parse_claim
from streams.core.keys.journal import decode_state, encode_state
from streams.core.keys.state import KeyState, Limits, state_key
from streams.core.keys.transitions import add_claim
from streams.core.records.contracts import Claim
from streams.core.records.errors import ContractError
from streams.devkit.synthetic import generate_claims
from streams.state.cache import KEY_BYTES, StateCache, decoded_bytes
from streams.state.task import TaskStore
from tests.support.builders import POLICY, state_of

NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)


def test_the_estimate_counts_a_states_parts() -> None:
    one, three = state_of("a", ["paid"]), state_of("b", ["paid", "unpaid", "paid"])
    assert decoded_bytes(KeyState(subject="a", field="f")) == KEY_BYTES
    assert decoded_bytes(three) > decoded_bytes(one) > KEY_BYTES


def test_the_least_recently_used_states_leave_past_the_byte_bound() -> None:
    states = {k: state_of(k, ["paid"]) for k in ("a", "b", "c")}
    size = decoded_bytes(states["a"])
    cache = StateCache(100, capacity_bytes=2 * size)
    cache.put(b"a", states["a"])
    cache.put(b"b", states["b"])
    assert cache.get(b"a") is states["a"]  # a is now the most recent
    cache.put(b"c", states["c"])
    assert cache.get(b"b") is None
    assert cache.get(b"a") is states["a"]
    assert cache.get(b"c") is states["c"]
    assert cache.bytes == 2 * size


def test_a_state_put_again_is_counted_once_at_its_new_size() -> None:
    small, grown = state_of("a", ["paid"]), state_of("a", ["paid", "unpaid", "paid"])
    cache = StateCache(100, capacity_bytes=10**6)
    cache.put(b"a", small)
    cache.put(b"a", grown)
    assert cache.bytes == decoded_bytes(grown)
    cache.discard(b"a")
    assert (cache.bytes, len(cache)) == (0, 0)


def test_the_newest_state_stays_even_past_the_bound() -> None:
    cache = StateCache(100, capacity_bytes=1)
    cache.put(b"a", state_of("a", ["paid"]))
    big = state_of("b", ["paid", "unpaid"])
    cache.put(b"b", big)
    assert cache.get(b"a") is None
    assert cache.get(b"b") is big
    assert cache.bytes == decoded_bytes(big)


def test_a_task_forgets_its_own_states_and_their_bytes() -> None:
    cache = StateCache(100, capacity_bytes=10**6)
    mine, theirs = TaskStore(cache), TaskStore(cache)
    mine.put(b"a", state_of("a", ["paid"]))
    theirs_state = state_of("b", ["paid", "unpaid"])
    theirs.put(b"b", theirs_state)
    mine.evict()
    assert cache.get(b"a") is None
    assert cache.get(b"b") is theirs_state
    assert cache.bytes == decoded_bytes(theirs_state)


def test_a_state_evicted_by_bytes_is_decoded_again_and_counted_as_a_miss() -> None:
    first, second = state_of("a", ["paid"]), state_of("b", ["unpaid"])
    store = TaskStore(StateCache(100, capacity_bytes=decoded_bytes(first)))
    for key, state in ((b"a", first), (b"b", second)):
        store.put(key, state)
        store.journal()
        store.journaled()
    assert store.cache.misses == 0
    again = store.get(b"a")  # b pushed it out
    assert again is not None
    assert again is not first
    assert encode_state(again) == encode_state(first)
    assert store.cache.misses == 1
    assert store.get(b"a") is again  # now cached, in b's place
    assert store.cache.misses == 1


@settings(max_examples=40, deadline=None)
@given(
    writes=st.lists(
        st.tuples(st.integers(0, 5), st.lists(st.sampled_from(["paid", "unpaid"]), min_size=1)),
        min_size=1,
        max_size=25,
    ),
    reads=st.lists(st.integers(0, 5), max_size=25),
    bound_keys=st.integers(1, 4),
)
def test_a_read_through_a_byte_bounded_cache_is_the_decode_of_the_stored_bytes(
    writes: list[tuple[int, list[str]]], reads: list[int], bound_keys: int
) -> None:
    cache = StateCache(100, capacity_bytes=bound_keys * decoded_bytes(state_of("x", ["paid"])))
    store = TaskStore(cache)
    stored: dict[bytes, bytes] = {}
    for subject, values in writes:
        key = f"s{subject}".encode()
        store.put(key, state_of(f"s{subject}", values))
        stored.update(store.journal())
        store.journaled()
    assert cache.bytes <= cache.capacity_bytes or len(cache) == 1
    for subject in reads:
        key = f"s{subject}".encode()
        cached, misses = cache.get(key), cache.misses
        state = store.get(key)
        if key not in stored:
            assert state is None
            continue
        assert state is not None
        assert encode_state(state) == stored[key] == encode_state(decode_state(stored[key]))
        assert cache.misses == misses + (cached is None)


def _transitioned(count: int, subjects: int, seed: int = 5) -> list[KeyState]:
    """The states a generated workload leaves, each with its last arbitration, as the worker's
    cache holds them (what was emitted built its decision, as sending it does)."""
    states: dict[str, KeyState] = {}
    for data in generate_claims(count, NOW, seed=seed, subjects=subjects, bad_share=0.0):
        try:
            claim: Claim = parse_claim(data)
            admitted = admit(claim, POLICY, NOW)
        except ContractError:
            continue
        rules = POLICY.rules_for(claim.field)
        assert rules is not None
        key = state_key(claim.subject, claim.field)
        step = add_claim(states.get(key), admitted, rules, POLICY.version, NOW, Limits())
        if step.emitted is not None:  # built for sending, on the emitted copy alone
            assert step.emitted.decision is not None
        states[key] = step.state
    return list(states.values())


def _workload_states(count: int, subjects: int) -> list[bytes]:
    """The encoded states a generated workload leaves, as a worker's key store holds them."""
    return [encode_state(state) for state in _transitioned(count, subjects)]


def test_the_estimate_follows_what_decoded_states_measure() -> None:
    encoded = _workload_states(3000, 300)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        decoded = [decode_state(data) for data in encoded]
        measured = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    estimated = sum(decoded_bytes(state) for state in decoded) - KEY_BYTES * len(decoded)
    assert 0.8 < estimated / measured < 1.25, (estimated, measured)


def test_the_estimate_follows_what_states_after_a_transition_measure() -> None:
    """A state a transition left holds its arbitration and the decision built from it, as the
    worker's cache keeps it: the estimate counts them too."""
    gc.collect()
    tracemalloc.start()
    try:
        states = _transitioned(6000, 800, seed=7)
        held = [state for state in states if state.arbitration is not None]
        with_arbitration = sum(decoded_bytes(state) for state in held)
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        for state in held:
            state.arbitration = None
        gc.collect()
        measured = before - tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    estimated = with_arbitration - sum(decoded_bytes(state) for state in held)
    assert 0.75 < estimated / measured < 1.3, (estimated, measured)
