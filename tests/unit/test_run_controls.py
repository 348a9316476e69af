"""The run controls' pure rules (issue 22): the effective cap and threshold, the failure
streak, and the loop stopping at the token cap (over the loop tests' fake ports)."""

from __future__ import annotations

import pytest

from achilles.domain.run_controls import (
    RunOutcome,
    counts_in_failure_streak,
    effective_max_run_tokens,
    effective_suspend_after,
    failure_streak,
    is_token_cap_reached,
)
from achilles.domain.runs import FailReason, RunState
from achilles.runner.loop import AgentLoop, Outcome
from tests.unit.loop_support import FakeJournal, ScriptedModel, make_loop, reply

FAILED, SUCCEEDED = RunState.FAILED, RunState.SUCCEEDED


@pytest.mark.parametrize(
    ("agent", "platform", "expected"),
    [(None, None, None), (None, 500, 500), (50, 500, 50), (50, None, 50)],
)
def test_the_agents_cap_else_the_platforms(
    agent: int | None, platform: int | None, expected: int | None
) -> None:
    assert effective_max_run_tokens(agent, platform) == expected


@pytest.mark.parametrize(
    ("agent", "platform", "expected"),
    [(None, None, None), (None, 3, 3), (5, 3, 5), (0, 3, None), (1, None, 1)],
)
def test_the_agents_threshold_else_the_platforms_and_zero_is_never(
    agent: int | None, platform: int | None, expected: int | None
) -> None:
    assert effective_suspend_after(agent, platform) == expected


@pytest.mark.parametrize(
    ("tokens", "cap", "reached"),
    [(0, None, False), (10**9, None, False), (24, 25, False), (25, 25, True), (30, 25, True)],
)
def test_the_cap_is_reached_at_it(tokens: int, cap: int | None, reached: bool) -> None:
    assert is_token_cap_reached(tokens, cap) is reached


@pytest.mark.parametrize(
    ("state", "reason", "counts"),
    [
        (SUCCEEDED, None, True),
        (FAILED, FailReason.ERROR, True),
        (FAILED, FailReason.TOKEN_CAP, True),
        (FAILED, FailReason.STALE, True),
        (FAILED, FailReason.CANCELLED, False),
        (RunState.SKIPPED, "budget_exceeded", False),
        (RunState.QUEUED, None, False),
    ],
)
def test_what_counts_in_a_streak(state: RunState, reason: str | None, counts: bool) -> None:
    assert counts_in_failure_streak(state, reason) is counts


def _runs(*outcomes: tuple[RunState, str | None]) -> list[RunOutcome]:
    """Newest first, numbered from the newest (the highest id) down."""
    return [RunOutcome(100 - i, state, reason) for i, (state, reason) in enumerate(outcomes)]


@pytest.mark.parametrize(
    ("outcomes", "threshold", "streak"),
    [
        ([], 1, None),
        ([(FAILED, "error")], 1, (100,)),
        ([(FAILED, "error")], 2, None),
        ([(FAILED, "error"), (FAILED, "stale"), (SUCCEEDED, None)], 2, (100, 99)),
        ([(FAILED, "error"), (SUCCEEDED, None), (FAILED, "error")], 2, None),
        ([(FAILED, "error"), (FAILED, "cancelled"), (FAILED, "token_cap")], 2, (100, 98)),
        ([(FAILED, "cancelled"), (FAILED, "cancelled")], 1, None),
    ],
)
def test_the_streak_is_the_last_n_counted_runs_all_failed(
    outcomes: list[tuple[RunState, str | None]], threshold: int, streak: tuple[int, ...] | None
) -> None:
    assert failure_streak(_runs(*outcomes), threshold) == streak


def test_a_streak_is_at_least_one_run() -> None:
    with pytest.raises(ValueError, match="at least one"):
        failure_streak([], 0)


def _loop(model: ScriptedModel, journal: FakeJournal, cap: int | None) -> AgentLoop:
    return make_loop(model, journal, max_iterations=10, max_run_tokens=cap)


SEARCH = [("search_knowledge", '{"query": "a"}')]


def test_the_call_that_reaches_the_cap_is_counted_then_the_run_fails() -> None:
    model = ScriptedModel(*(reply(calls=SEARCH, tokens=10) for _ in range(5)))
    journal = FakeJournal()
    result = _loop(model, journal, cap=25).run([{"role": "user", "content": "go"}])
    assert result.outcome is Outcome.FAILED
    assert (result.iterations, result.tokens) == (3, 30)
    assert journal.writes == [
        ("tokens", 10),
        ("tokens", 10),
        ("tokens", 10),
        ("failed/token_cap", "the run used 30 tokens, reaching its cap of 25 (maxRunTokens)"),
    ]
    assert len(model.replies) == 2  # no fourth call


def test_a_final_answer_at_the_cap_succeeds_and_no_cap_lets_it_run() -> None:
    journal = FakeJournal()
    model = ScriptedModel(reply("done", tokens=40))
    assert _loop(model, journal, cap=25).run([]).outcome is Outcome.SUCCEEDED
    model = ScriptedModel(*(reply(calls=SEARCH, tokens=10) for _ in range(4)), reply("ok"))
    result = _loop(model, FakeJournal(), cap=None).run([{"role": "user", "content": "go"}])
    assert (result.outcome, result.tokens) == (Outcome.SUCCEEDED, 50)


def test_a_refused_token_write_stops_the_run_before_the_cap_is_judged() -> None:
    # A cancelled run: the write of the call's tokens is refused, and nothing else is tried.
    journal = FakeJournal(refuse_after=1)
    model = ScriptedModel(*(reply(calls=SEARCH, tokens=10) for _ in range(3)))
    result = _loop(model, journal, cap=15).run([{"role": "user", "content": "go"}])
    assert result.outcome is Outcome.ROW_LOST
    assert journal.writes == [("tokens", 10)]
