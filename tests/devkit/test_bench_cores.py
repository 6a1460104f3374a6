"""The bench's view of its processes on the cores: CPU time read from /proc, pinning."""

from __future__ import annotations

import os
import time

import pytest

from streams.devkit.bench.cores import cpu_seconds, pin, split_cores


def test_the_worker_gets_the_lowest_core_and_the_others_the_rest() -> None:
    assert split_cores({3, 1, 2}) == (frozenset({1}), frozenset({2, 3}))
    with pytest.raises(ValueError, match="at least 2 cores"):
        split_cores({0})


def test_cpu_time_is_read_for_all_of_a_process_and_grows_with_its_work() -> None:
    before = cpu_seconds(os.getpid())
    ends = time.process_time() + 0.05
    while time.process_time() < ends:
        pass
    assert cpu_seconds(os.getpid()) > before


def test_pinning_sets_every_thread_of_a_process() -> None:
    allowed = os.sched_getaffinity(0)
    chosen = {min(allowed)}
    try:
        pin(os.getpid(), chosen)
        assert os.sched_getaffinity(0) == chosen
    finally:
        pin(os.getpid(), allowed)
    assert os.sched_getaffinity(0) == allowed
