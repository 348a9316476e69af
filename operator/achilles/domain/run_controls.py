"""The run controls owners and admins set (issue 22): a cap on one run's tokens, and the
failed runs in a row after which an agent is no longer scheduled.

Each is an Agent spec field with an AgentPlatform default. Pure rules, shared by the
runner (the cap), the scheduler (the streak) and the status (its words).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from achilles.domain.runs import FailReason, RunState


def effective_max_run_tokens(agent: int | None, platform: int | None) -> int | None:
    """The tokens one run of the agent may spend: its own cap, else the platform's;
    None: no cap."""
    return agent if agent is not None else platform


def effective_suspend_after(agent: int | None, platform: int | None) -> int | None:
    """How many failed runs in a row suspend the agent's schedule: its own number (0:
    never, whatever the platform says), else the platform's; None: never."""
    if agent is not None:
        return agent or None
    return platform


def is_token_cap_reached(tokens: int, cap: int | None) -> bool:
    """The run's tokens reached its cap (the call that crossed it is counted first)."""
    return cap is not None and tokens >= cap


def token_cap_message(tokens: int, cap: int) -> str:
    return f"the run used {tokens} tokens, reaching its cap of {cap} (maxRunTokens)"


@dataclass(frozen=True)
class RunOutcome:
    """An ended run as the failure streak reads it."""

    run_id: int
    state: RunState
    reason: str | None


def counts_in_failure_streak(state: RunState, reason: str | None) -> bool:
    """Runs that ran and ended by themselves count: succeeded (it breaks a streak) and
    failed. A skipped run never ran (budget, overlap) and a cancelled one was stopped by
    a person: neither says anything about whether the agent works."""
    if state is RunState.SUCCEEDED:
        return True
    return state is RunState.FAILED and reason != FailReason.CANCELLED


def failure_streak(newest_first: Sequence[RunOutcome], threshold: int) -> tuple[int, ...] | None:
    """The ids of the last `threshold` counted runs when every one of them failed (the
    agent is to be suspended), else None. `newest_first`: the agent's ended runs since
    its last edit, newest first (the ones that do not count are passed over)."""
    if threshold < 1:
        raise ValueError("a failure streak is at least one run long")
    counted = [run for run in newest_first if counts_in_failure_streak(run.state, run.reason)]
    last = counted[:threshold]
    if len(last) < threshold or any(run.state is not RunState.FAILED for run in last):
        return None
    return tuple(run.run_id for run in last)


# Auto-suspend closes the owner's lock (seed 000 has two locks, no third): the operator
# switches the agent off, and the owner's switch is what resumes it.
RESUME_HINT = (
    "the operator switched it off (spec.enabled: false); fix what made the runs fail"
    " (prompt, model, tools, maxRunTokens...) and set spec.enabled: true to resume"
)


def suspension_message(threshold: int, run_ids: Sequence[int]) -> str:
    runs = ", ".join(str(run_id) for run_id in sorted(run_ids))
    return f"the last {threshold} runs failed (runs {runs}): " + RESUME_HINT
