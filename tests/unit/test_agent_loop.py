"""The loop's rules over fake ports: tokens as it goes, the cap, failures, refused writes, stop."""

from __future__ import annotations

import threading

from achilles.errors import ModelCallFailed
from achilles.runner.loop import Outcome
from tests.unit.loop_support import FakeJournal, ScriptedModel, reply, run_loop


def test_tokens_are_written_after_every_call_then_the_answer() -> None:
    model = ScriptedModel(
        reply(calls=[("search_knowledge", '{"query": "a"}')], tokens=7),
        reply("the answer", tokens=5),
    )
    journal = FakeJournal()
    result = run_loop(model, journal)
    assert result.outcome is Outcome.SUCCEEDED
    assert (result.iterations, result.tokens) == (2, 12)
    assert journal.writes == [("tokens", 7), ("tokens", 5), ("succeeded", "the answer")]
    # The tool result went back to the model under the call's id.
    assert model.seen[1][-1] == {"role": "tool", "tool_call_id": "c0", "content": '{"results": []}'}


def test_the_cap_counts_model_calls_and_skips_the_last_calls_tools() -> None:
    search = ("search_knowledge", '{"query": "a"}')
    model = ScriptedModel(*(reply(calls=[search], tokens=3) for _ in range(3)))
    journal = FakeJournal()
    result = run_loop(model, journal, max_iterations=3)
    assert result.outcome is Outcome.FAILED
    assert journal.writes[-1] == (
        "failed/iteration_cap",
        "the model was still calling tools after 3 iterations",
    )
    assert [w for w in journal.writes if w[0] == "tokens"] == [("tokens", 3)] * 3
    assert len(model.seen) == 3


def test_a_model_failure_is_recorded_with_its_detail() -> None:
    model = ScriptedModel(ModelCallFailed("model API returned HTTP 500: boom"))
    journal = FakeJournal()
    assert run_loop(model, journal).outcome is Outcome.FAILED
    assert journal.writes == [("failed/error", "model API returned HTTP 500: boom")]


def test_an_empty_final_answer_is_an_error_not_a_success() -> None:
    journal = FakeJournal()
    run_loop(ScriptedModel(reply("  ", tokens=2)), journal)
    assert journal.writes[-1] == (
        "failed/error",
        "the model ended without an answer (finish_reason 'stop')",
    )


def test_no_usage_counts_nothing_and_writes_nothing() -> None:
    journal = FakeJournal()
    run_loop(ScriptedModel(reply("ok", tokens=0)), journal)
    assert journal.writes == [("succeeded", "ok")]


def test_a_refused_token_write_stops_everything() -> None:
    model = ScriptedModel(reply(calls=[("search_knowledge", '{"query": "a"}')]), reply("x"))
    journal = FakeJournal(refuse_after=0)
    result = run_loop(model, journal)
    assert result.outcome is Outcome.ROW_LOST
    assert journal.writes == []
    assert len(model.seen) == 1  # no tool ran, no second call


def test_a_stop_request_ends_the_loop_without_writing_a_verdict() -> None:
    stop = threading.Event()
    stop.set()
    journal = FakeJournal()
    model = ScriptedModel(reply("never asked"))
    assert run_loop(model, journal, stop=stop).outcome is Outcome.STOPPED
    assert journal.writes == []
    assert model.seen == []


def test_the_deadline_fails_the_run_and_caps_each_request() -> None:
    journal = FakeJournal()
    model = ScriptedModel(reply(calls=[("search_knowledge", '{"query": "a"}')]), reply("late"))
    # clock: 90 s at the first call (10 s left), then past the deadline.
    result = run_loop(model, journal, clock_values=[90.0, 101.0])
    assert result.outcome is Outcome.FAILED
    assert model.timeouts == [10.0]
    assert journal.writes[-1] == ("failed/error", "run timed out: it exceeded its limit of 100 s")
