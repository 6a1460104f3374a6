"""How often the bench reads a worker's progress: seldom while the next mark is far."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from streams.devkit.bench.worker import CLOSEST_POLL_S, POLL_S, next_look_s


def test_before_any_progress_the_worker_is_read_every_poll_interval() -> None:
    assert next_look_s(0, None, 10.0, 1000) == POLL_S
    assert next_look_s(50, (10.0, 50), 10.0, 1000) == POLL_S  # one read: no rate yet


def test_the_wait_is_half_the_time_the_rate_says_the_mark_is_away() -> None:
    # 1,000 claims a second since the first read; 2,000 to go: 2 s away, read again in 1 s.
    assert next_look_s(3000, (0.0, 1000), 2.0, 5000) == 1.0


@given(st.floats(1, 1e6), st.floats(0.01, 100), st.integers(1, 10**6), st.integers(0, 10**6))
def test_a_wait_never_passes_the_mark_at_the_measured_rate_by_more_than_the_closest_poll(
    per_s: float, elapsed: float, first_done: int, to_go: int
) -> None:
    done = first_done + per_s * elapsed
    wait = next_look_s(done, (0.0, first_done), elapsed, done + to_go)
    assert CLOSEST_POLL_S <= wait <= 5.0
    assert wait * per_s <= max(to_go / 2, CLOSEST_POLL_S * per_s) * (1 + 1e-9)
