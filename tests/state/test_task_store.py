"""The worker's state store: every key encoded, recently used keys decoded, nothing lost."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.keys.journal import encode_state
from streams.core.keys.state import KeyState
from streams.state.cache import StateCache
from streams.state.task import TaskStore
from tests.support.builders import state_of

FIELD = "order.payment_status"


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 5), st.lists(st.sampled_from(["paid", "unpaid"]), min_size=1)),
        max_size=20,
    ),
    st.integers(1, 3),
)
def test_a_key_reads_back_its_last_state_whether_cached_or_not(
    writes: list[tuple[int, list[str]]], capacity: int
) -> None:
    store = TaskStore(StateCache(capacity))
    latest: dict[bytes, KeyState] = {}
    for subject, values in writes:
        key = f"s{subject}|{FIELD}".encode()
        state = state_of(f"s{subject}", values)
        store.put(key, state)
        assert store.journal() == {key: encode_state(state)}
        store.journaled()  # the changelog acknowledged it: it reaches the key store
        latest[key] = state
    assert len(store.cache) <= capacity
    assert sorted(store) == sorted(latest)
    for key, state in latest.items():
        stored = store.get(key)
        assert stored is not None
        assert encode_state(stored) == encode_state(state)
    assert store.encoded_bytes == sum(len(encode_state(s)) for s in latest.values())


def test_a_key_changed_several_times_in_a_batch_is_journaled_once_with_its_last_state() -> None:
    store = TaskStore(StateCache(1))  # so small that the pending states outlive the cache
    first, last = state_of("a", ["paid"]), state_of("a", ["paid", "unpaid"])
    other = state_of("b", ["paid"])
    store.put(b"a", first)
    store.put(b"b", other)
    store.put(b"a", last)
    assert store.get(b"a") is last
    assert sorted(store) == [b"a", b"b"]
    assert len(store) == 2
    assert store.journal() == {b"a": encode_state(last), b"b": encode_state(other)}
    assert store.journal() == {}
    store.journaled()
    store.journaled()
    stored = store.get(b"b")
    assert stored is not None
    assert encode_state(stored) == encode_state(other)
    assert store.encoded_bytes == len(encode_state(last)) + len(encode_state(other))


def test_the_cache_keeps_the_most_recently_used_keys() -> None:
    cache = StateCache(2)
    states = {k: state_of(k, ["paid"]) for k in ("a", "b", "c")}
    cache.put(b"a", states["a"])
    cache.put(b"b", states["b"])
    assert cache.get(b"a") is states["a"]  # a is now the most recent
    cache.put(b"c", states["c"])
    assert cache.get(b"b") is None
    assert cache.get(b"a") is states["a"]
    assert cache.get(b"c") is states["c"]


def test_changelog_records_replace_cached_states_and_tombstones_delete() -> None:
    cache = StateCache(10)
    store = TaskStore(cache)
    old, new = state_of("a", ["paid"]), state_of("a", ["paid", "unpaid"])
    store.put(b"a", old)
    store.load(b"a", encode_state(new))
    stored = store.get(b"a")
    assert stored is not None
    assert encode_state(stored) == encode_state(new)
    store.load(b"a", None)
    assert store.get(b"a") is None
    assert store.encoded_bytes == 0


def test_a_moving_task_leaves_the_shared_cache() -> None:
    cache = StateCache(10)
    moving, staying = TaskStore(cache), TaskStore(cache)
    moving.put(b"a", state_of("a", ["paid"]))
    staying.put(b"b", state_of("b", ["paid"]))
    moving.evict()
    assert cache.get(b"a") is None
    assert cache.get(b"b") is not None
    assert moving.get(b"a") is not None  # still there, decoded again on demand


def test_task_records_are_journaled_restored_and_kept_out_of_the_keys() -> None:
    """A task-level record (reserved key) travels with the changelog like a key's state, and is
    never taken for a key: not iterated, not counted, not decoded as a state."""
    store = TaskStore(StateCache(4))
    store.put(b"o-1|order.payment_status", state_of("o-1", ["paid"]))
    store.put_encoded(b"\x00ledger", b"v1")
    assert store.get_encoded(b"\x00ledger") == b"v1"
    journaled = store.journal()
    assert journaled[b"\x00ledger"] == b"v1"
    assert list(store) == [b"o-1|order.payment_status"]
    assert len(store) == 1
    assert store.journal() == {}  # journaled once, until put again

    restored = TaskStore(StateCache(4))
    for key, data in journaled.items():
        restored.load(key, data)
    assert restored.get_encoded(b"\x00ledger") == b"v1"
    assert list(restored) == [b"o-1|order.payment_status"]
    assert len(restored) == 1
    restored.load(b"\x00ledger", None)
    assert restored.get_encoded(b"\x00ledger") is None
    assert len(restored) == 1
