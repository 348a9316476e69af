"""When the sweeper runs each pass (handlers/controllers/sweeper.PassSchedule): at its period,
and a woken pass at the first tick after its wake, once however often it was woken.
The clock is the test's: ticks are instants, no time passes."""

from __future__ import annotations

from achilles.handlers.controllers.sweeper import SWEEP_TICK, PassSchedule
from achilles.runtime.wake import Wake

OWNERS_EVERY = 30.0
FAST_EVERY = SWEEP_TICK


def _schedule() -> tuple[PassSchedule, Wake]:
    wake = Wake()
    periods = {"fast": FAST_EVERY, "owners": OWNERS_EVERY, "slow": 600.0}
    return PassSchedule(periods, {"owners": wake}), wake


def _tick(schedule: PassSchedule, now: float) -> list[str]:
    due = [name for name in schedule.every if schedule.is_due(name, now)]
    for name in due:
        schedule.ran(name, now)
    return due


def test_every_pass_runs_at_the_first_tick_then_at_its_period() -> None:
    schedule, _ = _schedule()
    assert _tick(schedule, 0.0) == ["fast", "owners", "slow"]
    assert _tick(schedule, SWEEP_TICK) == ["fast"]
    assert _tick(schedule, OWNERS_EVERY) == ["fast", "owners"]
    assert _tick(schedule, OWNERS_EVERY + SWEEP_TICK) == ["fast"]


def test_a_woken_pass_runs_at_the_next_tick_and_its_period_starts_again() -> None:
    schedule, wake = _schedule()
    _tick(schedule, 0.0)
    wake.set()
    assert _tick(schedule, SWEEP_TICK) == ["fast", "owners"]
    assert _tick(schedule, 2 * SWEEP_TICK) == ["fast"]  # the wake was taken
    # The period counts from the woken pass: not at 30 s, at 35 s.
    assert _tick(schedule, OWNERS_EVERY) == ["fast"]
    assert _tick(schedule, SWEEP_TICK + OWNERS_EVERY) == ["fast", "owners"]


def test_a_burst_of_wakes_between_two_ticks_costs_one_pass() -> None:
    schedule, wake = _schedule()
    _tick(schedule, 0.0)
    for _ in range(50):
        wake.set()
    assert _tick(schedule, SWEEP_TICK) == ["fast", "owners"]
    assert _tick(schedule, 2 * SWEEP_TICK) == ["fast"]


def test_a_wake_set_while_its_pass_runs_runs_it_again_at_the_next_tick() -> None:
    """The wake is taken before the pass: what committed during the pass (its NOTIFY
    came after the pass began reading) is looked at next time."""
    schedule, wake = _schedule()
    _tick(schedule, 0.0)
    wake.set()
    assert schedule.is_due("owners", SWEEP_TICK)
    wake.set()  # during the pass
    schedule.ran("owners", SWEEP_TICK)
    assert _tick(schedule, 2 * SWEEP_TICK) == ["fast", "owners"]


def test_a_wake_taken_by_a_pass_due_on_its_period_is_not_run_twice() -> None:
    schedule, wake = _schedule()
    _tick(schedule, 0.0)
    wake.set()
    assert _tick(schedule, OWNERS_EVERY) == ["fast", "owners"]
    assert _tick(schedule, OWNERS_EVERY + SWEEP_TICK) == ["fast"]


def test_a_failed_pass_is_due_again_after_its_backoff_never_later_than_its_period() -> None:
    schedule, _ = _schedule()
    _tick(schedule, 0.0)
    schedule.ran("slow", 0.0, failed=True)  # 1 s, then 2, 4, ... to the loop's 30 s
    assert schedule.wait("slow") == 1.0
    assert schedule.is_due("slow", SWEEP_TICK)  # at the next tick, not 600 s later
    for failures in range(2, 8):
        schedule.ran("slow", SWEEP_TICK, failed=True)
        assert schedule.wait("slow") == min(30.0, 2.0 ** (failures - 1))
    assert not schedule.is_due("slow", SWEEP_TICK + 29.0)
    assert schedule.is_due("slow", SWEEP_TICK + 30.0)
    for _ in range(6):
        schedule.ran("owners", 0.0, failed=True)
    assert schedule.wait("owners") == OWNERS_EVERY  # 32 s of backoff: its period first
    schedule.ran("slow", SWEEP_TICK)  # worked: its period again
    assert schedule.wait("slow") == 600.0
