"""The ticks a turn starts: the due timers' and the sweep's shares of the loop's time, priced
at what a record and a tick cost."""

from __future__ import annotations

import pytest

from streams.arbiter.pacing import (
    IDLE_SWEEP_SHARE,
    SWEEP_SHARE,
    Costs,
    Pacing,
)

WITHIN_S = 0.01


class Clock:
    """The turns' instants, moved by the test, never by the machine's load."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def pacing(record_cost: float, tick_cost: float, clock: Clock | None = None) -> Pacing:
    paced = Pacing(batch_size=500, most=64, within_s=WITHIN_S, clock=clock or Clock())
    paced.record_cost, paced.tick_cost = record_cost, tick_cost
    return paced


def a_fetch_wait_later(paced: Pacing, live: int) -> tuple[int, int]:
    paced._last -= 1.0  # long ago: counted as one fetch wait
    return paced.budgets(live)


def test_a_tick_is_priced_at_its_own_time_and_its_part_of_the_commit() -> None:
    paced = Pacing(batch_size=500, most=64, within_s=WITHIN_S)
    # 100 records decided in 20 ms, 10 of them ticks taking 5 ms; the commit took 10 ms more.
    paced.measured(Costs(batch_s=0.030, decided_s=0.020, records=100, ticks=10, ticks_s=0.005))
    assert paced.record_cost == pytest.approx(0.0003)
    assert paced.tick_cost == pytest.approx(0.0005 + 0.0001)
    # A batch of no ticks leaves the tick's price; the next one with ticks moves it a fifth.
    paced.measured(Costs(batch_s=0.010, decided_s=0.010, records=100, ticks=0, ticks_s=0.0))
    assert paced.tick_cost == pytest.approx(0.0006)
    paced.measured(Costs(batch_s=0.011, decided_s=0.010, records=10, ticks=10, ticks_s=0.010))
    assert paced.tick_cost == pytest.approx(0.8 * 0.0006 + 0.2 * 0.0011)


def test_one_dear_tick_does_not_stop_the_sweep() -> None:
    """A tick priced above a fetch wait's whole share: one a turn once the credit is full,
    so that the next tick's measure can bring the price back down."""
    paced = pacing(record_cost=0.0001, tick_cost=0.5)
    started = []
    for _ in range(3):
        _, sweep = a_fetch_wait_later(paced, live=0)
        paced.swept(sweep)
        started.append(sweep)
    assert started == [1, 1, 1]


def test_the_sweep_takes_its_share_at_the_price_of_a_tick() -> None:
    paced = pacing(record_cost=0.0001, tick_cost=0.0005)
    timers, sweep = a_fetch_wait_later(paced, live=10)
    assert timers == 25  # a quarter of 10 ms at 0.1 ms a record
    assert sweep == int(WITHIN_S * SWEEP_SHARE / 0.0005)
    paced.swept(sweep)
    timers, sweep = a_fetch_wait_later(paced, live=0)  # no input: the idle shares
    assert timers == 50
    assert sweep == int(WITHIN_S * IDLE_SWEEP_SHARE / 0.0005)


def test_a_full_batch_waiting_gives_the_timers_one_tick_and_the_sweep_none() -> None:
    paced = pacing(record_cost=0.0001, tick_cost=0.0005)
    assert a_fetch_wait_later(paced, live=500) == (1, 0)


def test_the_sweeps_share_adds_up_over_turns_shorter_than_a_tick() -> None:
    """A trickle of input fetched every millisecond: no turn affords a tick on its own."""
    clock = Clock()
    paced = pacing(record_cost=0.0001, tick_cost=0.0005, clock=clock)
    paced.budgets(live=1)
    started = 0
    for _ in range(100):
        clock.now += 0.001  # one millisecond since the last turn
        _, sweep = paced.budgets(live=1)
        assert sweep <= 1
        paced.swept(sweep)
        started += sweep
    # 100 ms at its share, 0.5 ms a tick (give or take the last tick's credit).
    assert started == pytest.approx(0.1 * SWEEP_SHARE / 0.0005, abs=1)


def test_the_sweeps_credit_never_exceeds_a_fetch_waits_share() -> None:
    paced = pacing(record_cost=0.0001, tick_cost=0.0001)
    for _ in range(10):
        a_fetch_wait_later(paced, live=0)  # nothing to sweep: none spent
    assert paced.sweep_credit == pytest.approx(WITHIN_S * IDLE_SWEEP_SHARE)


def test_before_anything_is_measured_each_gets_the_most() -> None:
    paced = Pacing(batch_size=500, most=64, within_s=WITHIN_S)
    assert paced.budgets(live=10) == (64, 64)
