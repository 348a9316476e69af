"""The run journal's vocabulary and state machine (seed 000, `agent_runs`).

A run row lives by in-place transitions: `queued` on insert, `running` when the
runner claims it, then one terminal state. `skipped` is written directly as a
terminal row when a runtime gate closes at enqueue, or a queued run becomes `skipped`
when the budget gate, checked again at dispatch, has closed while it waited. Terminal
rows never change again.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from enum import StrEnum


class RunTrigger(StrEnum):
    MANUAL = "manual"
    SCHEDULED = "scheduled"


class RunState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"


class SkipReason(StrEnum):
    """Runtime gates that closed when the engine tried to start a run."""

    BUDGET_EXCEEDED = "budget_exceeded"
    ALREADY_RUNNING = "already_running"


class FailReason(StrEnum):
    ITERATION_CAP = "iteration_cap"
    ERROR = "error"
    STALE = "stale"
    # 0013_run_controls: the run's tokens reached its cap (the call that crossed it
    # counted); an owner or admin cancelled the run (queued or running).
    TOKEN_CAP = "token_cap"  # noqa: S105 - a reason code, not a secret
    CANCELLED = "cancelled"


# States covered by the one-active-run lock (partial unique index on agent_runs).
ACTIVE_STATES: frozenset[RunState] = frozenset({RunState.QUEUED, RunState.RUNNING})
TERMINAL_STATES: frozenset[RunState] = frozenset(
    {RunState.SUCCEEDED, RunState.FAILED, RunState.SKIPPED}
)

_ALLOWED: dict[RunState, frozenset[RunState]] = {
    # A queued run can fail without ever running: its pod never started. It is skipped
    # when its owner's budget ran out while it waited (the gate is checked again when
    # it is dispatched: the seed's overrun is for runs already running, not waiting).
    RunState.QUEUED: frozenset({RunState.RUNNING, RunState.FAILED, RunState.SKIPPED}),
    RunState.RUNNING: frozenset({RunState.SUCCEEDED, RunState.FAILED}),
    RunState.SUCCEEDED: frozenset(),
    RunState.FAILED: frozenset(),
    RunState.SKIPPED: frozenset(),
}

# The runner beats every HEARTBEAT_INTERVAL; a running row silent for
# STALE_AFTER (three missed beats) is reaped as failed/stale.
HEARTBEAT_INTERVAL = timedelta(seconds=30)
STALE_AFTER = timedelta(seconds=90)
# How long a run's pod may still be seen after the run ended, or after it was asked to
# stop, before it is taken for a zombie that no longer counts (a node that no longer
# answers never confirms its pod gone): more than the run pods' termination grace
# (`terminationGracePeriodSeconds`, 30 s in the chart), after which the kubelet has
# killed the runner if it still can. Seed 002: one active run is one runner alive per
# agent, and a zombie does not lock its agent.
STOP_GRACE = timedelta(seconds=60)


def can_transition(current: RunState, target: RunState) -> bool:
    return target in _ALLOWED[current]


def states_that_may_become(target: RunState) -> frozenset[RunState]:
    """Where a run may come from to end up in `target` (the journal's guards use this)."""
    return frozenset(state for state, targets in _ALLOWED.items() if target in targets)


def in_definition_order(states: Iterable[RunState]) -> list[RunState]:
    """`states` in the enum's order, so SQL built from a set is spelled the same every time."""
    chosen = set(states)
    return [state for state in RunState if state in chosen]


def is_terminal(state: RunState) -> bool:
    return state in TERMINAL_STATES
