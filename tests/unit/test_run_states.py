"""The run state machine (seed 000), and that the journal's guards are derived from it."""

from __future__ import annotations

import pytest

from achilles.domain.runs import (
    ACTIVE_STATES,
    TERMINAL_STATES,
    RunState,
    can_transition,
    in_definition_order,
    is_terminal,
    states_that_may_become,
)

S = RunState

TRANSITIONS = [
    (S.QUEUED, S.RUNNING, True),
    (S.QUEUED, S.FAILED, True),  # its pod never started
    (S.QUEUED, S.SKIPPED, True),  # its owner's budget ran out while it waited
    (S.QUEUED, S.SUCCEEDED, False),
    (S.RUNNING, S.SKIPPED, False),
    (S.RUNNING, S.SUCCEEDED, True),
    (S.RUNNING, S.FAILED, True),
    (S.RUNNING, S.QUEUED, False),
    (S.SUCCEEDED, S.FAILED, False),
    (S.FAILED, S.RUNNING, False),
    (S.SKIPPED, S.QUEUED, False),
]


@pytest.mark.parametrize(("current", "target", "allowed"), TRANSITIONS)
def test_transitions(current: RunState, target: RunState, allowed: bool) -> None:
    assert can_transition(current, target) is allowed
    assert (current in states_that_may_become(target)) is allowed


def test_guards_read_off_the_table() -> None:
    assert states_that_may_become(S.RUNNING) == {S.QUEUED}
    assert states_that_may_become(S.SUCCEEDED) == {S.RUNNING}
    assert states_that_may_become(S.FAILED) == {S.QUEUED, S.RUNNING}
    # Written as a terminal row at enqueue, or a waiting run refused at dispatch.
    assert states_that_may_become(S.SKIPPED) == {S.QUEUED}
    # Only ever inserted.
    assert states_that_may_become(S.QUEUED) == frozenset()


def test_terminal_states_lead_nowhere() -> None:
    for state in RunState:
        assert is_terminal(state) is (state in TERMINAL_STATES)
        if is_terminal(state):
            assert not any(can_transition(state, target) for target in RunState)
    assert ACTIVE_STATES.isdisjoint(TERMINAL_STATES)
    assert set(RunState) == ACTIVE_STATES | TERMINAL_STATES


def test_sets_render_in_the_enums_order() -> None:
    assert in_definition_order(TERMINAL_STATES) == [S.SUCCEEDED, S.FAILED, S.SKIPPED]
    assert in_definition_order([S.RUNNING, S.QUEUED]) == [S.QUEUED, S.RUNNING]
