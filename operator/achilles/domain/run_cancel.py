"""A cancelled run's outcome and its answer in words (an Event on the Agent, a CLI line):
the same words whether the operator honoured the Agent's annotation
(services/agent_events.py) or `achilles runs cancel` asked (services/run_cancel.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from achilles.domain.runs import RunState


@dataclass(frozen=True)
class CancelledRun:
    run_id: int
    agent_id: int
    cancelled: bool  # False: it had ended already (or was stopping already): nothing changed
    state: RunState  # the state it is in now (failed, when this cancel ended it)
    reason: str | None
    was_running: bool  # its runner had claimed it
    dispatched: bool  # a Job was (or was being) made for it
    stopping: bool = False  # it ends once its pod is gone (its Job is to be deleted)


def describe(outcome: CancelledRun) -> str:
    """The answer in words, for an Event or a CLI line."""
    was = "running" if outcome.was_running else "queued"
    if outcome.cancelled and outcome.stopping:
        return (
            f"run {outcome.run_id} cancelled (it was {was}): its pod is being stopped, and the"
            " run ends failed/cancelled once it is gone (the agent stays held until then)"
        )
    if outcome.cancelled:
        return f"run {outcome.run_id} cancelled (it was {was})"
    if outcome.stopping:
        return f"run {outcome.run_id} is being cancelled already: nothing changed"
    how = outcome.state.value + (f"/{outcome.reason}" if outcome.reason else "")
    return f"run {outcome.run_id} had already ended ({how}): nothing changed"
