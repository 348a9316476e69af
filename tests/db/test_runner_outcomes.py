"""The runner end to end: a real `achilles runner` process, Postgres, and a scripted model
server reached through the real `openai` client. Each test inspects the journal row."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import Engine, select, update
from sqlalchemy.orm import Session

from achilles.db.inbox import board, replies
from achilles.db.journal.models import AgentRun, Tool
from achilles.domain.inbox import ReplyChannel, ReplyKind
from achilles.modelserver.script import load_script
from tests.db.factories import set_settings
from tests.db.ks_fixtures import KnowledgeFixture, load_demo_knowledge
from tests.db.runner_support import (
    add_model,
    add_tool,
    queue_run,
    run_row,
    run_scripted,
    run_to_end,
    serving,
)


@pytest.fixture
def ks(db: Engine) -> KnowledgeFixture:
    return load_demo_knowledge(db)


def _tool_results(request_body: dict[str, object]) -> list[str]:
    messages = request_body["messages"]
    assert isinstance(messages, list)
    return [m["content"] for m in messages if m["role"] == "tool"]


def test_the_demo_agent_searches_reads_and_answers(
    ks: KnowledgeFixture, db: Engine, database_url: str
) -> None:
    run = run_scripted(db, database_url, load_script())
    assert run.code == 0, run.log
    row, requests = run.row, run.requests
    assert (row.state, row.reason, row.error) == ("succeeded", None, None)
    assert row.output is not None
    assert row.output.startswith('From "Alice\'s onboarding notes"')
    assert "laptop, badge" in row.output
    assert [r.rule for r in requests] == [
        "search for the owner's request",
        "read the best hit",
        "answer from the document",
    ]
    assert row.tokens_used == sum(r.total_tokens or 0 for r in requests)
    # The model saw the platform layer as the system message, the owner's as the user's.
    first = requests[0].body["messages"]
    assert isinstance(first, list)
    assert [m["role"] for m in first] == ["system", "user"]
    assert first[1]["content"] == "What is in the onboarding checklist?"
    assert "Europe/Berlin" in first[0]["content"]


def test_tokens_are_the_exact_sum_of_reported_usage(
    ks: KnowledgeFixture, db: Engine, database_url: str
) -> None:
    script = {
        "rules": [
            {
                "when": {"turn": 0},
                "reply": {
                    "tool_calls": [{"name": "search_knowledge", "arguments": {"query": "x"}}],
                    "usage": {"prompt_tokens": 11, "completion_tokens": 7},
                },
            },
            {
                "when": {"turn": 1},
                "reply": {
                    "tool_calls": [{"name": "current_time_is_not_offered", "arguments": {}}],
                    "usage": {"prompt_tokens": 13, "completion_tokens": 5},
                },
            },
            {
                "when": {"turn": 2},
                "reply": {
                    "content": "done",
                    "usage": {"prompt_tokens": 17, "completion_tokens": 3},
                },
            },
        ]
    }
    run = run_scripted(db, database_url, script)
    assert run.code == 0, run.log
    row, requests = run.row, run.requests
    assert (row.state, row.output, row.tokens_used) == (
        "succeeded",
        "done",
        11 + 7 + 13 + 5 + 17 + 3,
    )
    # A made-up tool name is answered with an error, and the run goes on.
    assert "unknown tool 'current_time_is_not_offered'" in _tool_results(requests[2].body)[-1]


def test_an_implausible_usage_fails_the_run_and_counts_nothing(
    ks: KnowledgeFixture, db: Engine, database_url: str
) -> None:
    """A reply claiming more tokens than any context window holds is malformed: added as
    is, it would exhaust its owner's weekly budget for good (found by `achilles chaos
    bad-input`). The model server sends such a usage as scripted."""
    absurd = 2_000_000_000_000_000
    script = {
        "rules": [
            {
                "reply": {
                    "content": "cheap?",
                    "usage": {"prompt_tokens": absurd, "completion_tokens": 1},
                }
            }
        ]
    }
    run = run_scripted(db, database_url, script)
    assert run.code == 0, run.log
    row = run.row
    assert (row.state, row.reason, row.tokens_used, row.output) == ("failed", "error", 0, None)
    assert row.error is not None
    assert f"implausible usage: prompt_tokens = {absurd}" in row.error
    assert run.requests[0].total_tokens == absurd + 1  # the server did send it


def test_the_iteration_cap_fails_the_run_and_counts_every_call(
    ks: KnowledgeFixture, db: Engine, database_url: str
) -> None:
    set_settings(db, agent_max_iterations=3)
    script = {
        "rules": [
            {
                "reply": {
                    "tool_calls": [{"name": "search_knowledge", "arguments": {"query": "deploy"}}],
                    "usage": {"prompt_tokens": 6, "completion_tokens": 4},
                }
            }
        ]
    }
    run = run_scripted(db, database_url, script)
    assert run.code == 0, run.log
    row, requests = run.row, run.requests
    assert (row.state, row.reason, row.tokens_used) == ("failed", "iteration_cap", 30)
    assert row.error == "the model was still calling tools after 3 iterations"
    assert row.output is None
    assert len(requests) == 3


def test_http_500_from_the_model_fails_the_run_after_the_clients_retries(
    ks: KnowledgeFixture, db: Engine, database_url: str
) -> None:
    script = {
        "rules": [
            {"reply": {"error": {"status": 500, "message": "GPU on fire", "retry_after_ms": 5}}}
        ]
    }
    run = run_scripted(db, database_url, script, max_retries=2)
    assert run.code == 0, run.log
    row, requests = run.row, run.requests
    assert (row.state, row.reason, row.tokens_used) == ("failed", "error", 0)
    assert row.error is not None
    assert "HTTP 500" in row.error
    assert "after 2 retries" in row.error
    assert "GPU on fire" in row.error
    assert len(requests) == 3  # the first try and two retries


def test_a_transient_500_is_retried_and_the_run_succeeds(
    ks: KnowledgeFixture, db: Engine, database_url: str
) -> None:
    script = {
        "rules": [
            {"times": 1, "reply": {"error": {"status": 503, "retry_after_ms": 5}}},
            {
                "reply": {
                    "content": "recovered",
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1},
                }
            },
        ]
    }
    run = run_scripted(db, database_url, script, max_retries=2)
    assert run.code == 0, run.log
    row = run.row
    assert (row.state, row.output, row.tokens_used) == ("succeeded", "recovered", 2)


def test_a_model_that_times_out_fails_the_run_after_retries(
    ks: KnowledgeFixture, db: Engine, database_url: str
) -> None:
    script = {"rules": [{"reply": {"content": "too late", "delay_seconds": 60}}]}
    run = run_scripted(db, database_url, script, model_timeout=0.5, max_retries=1)
    assert run.code == 0, run.log
    row, requests = run.row, run.requests
    assert (row.state, row.reason, row.tokens_used) == ("failed", "error", 0)
    assert row.error is not None
    assert "timed out" in row.error
    assert len(requests) == 2


def test_malformed_tool_arguments_are_fed_back_and_the_model_recovers(
    ks: KnowledgeFixture, db: Engine, database_url: str
) -> None:
    notes = ks.documents["alice-notes"]
    script = {
        "rules": [
            {
                "when": {"turn": 0},
                "reply": {"tool_calls": [{"name": "read_document", "arguments": "{not json"}]},
            },
            {
                "when": {"turn": 1, "result_has": "/error"},
                "reply": {
                    "tool_calls": [{"name": "read_document", "arguments": {"document_id": "abc"}}]
                },
            },
            {
                "when": {"turn": 2, "result_has": "/error"},
                "reply": {
                    "tool_calls": [
                        {"name": "read_document", "arguments": {"document_id": notes, "x": 1}}
                    ]
                },
            },
            {
                "when": {"turn": 3, "result_has": "/error"},
                "reply": {
                    "tool_calls": [{"name": "read_document", "arguments": {"document_id": notes}}]
                },
            },
            {
                "when": {"turn": 4, "last_tool": "read_document", "result_has": "/title"},
                "reply": {"content": "Read: ${last_result:/title}"},
            },
        ]
    }
    run = run_scripted(db, database_url, script)
    assert run.code == 0, run.log
    row, requests = run.row, run.requests
    assert (row.state, row.output) == ("succeeded", "Read: Alice's onboarding notes")
    errors = [json.loads(_tool_results(r.body)[-1])["error"] for r in requests[1:4]]
    assert errors[0].startswith("invalid arguments for read_document: arguments: Invalid JSON")
    assert errors[1].startswith("invalid arguments for read_document: document_id: Input should be")
    assert errors[2].startswith("invalid arguments for read_document: x: Extra inputs")


def test_tools_offered_are_the_core_plus_allowed_optional_tools_as_at_run_start(
    ks: KnowledgeFixture, db: Engine, database_url: str
) -> None:
    script = {
        "rules": [
            {
                "when": {"turn": 0, "tools_offered": ["current_time"]},
                "reply": {"tool_calls": [{"name": "current_time"}]},
            },
            {
                "when": {"last_tool": "current_time"},
                "reply": {"content": "${tools} @ ${last_result:/timezone}"},
            },
            {"reply": {"content": "${tools}"}},
        ]
    }
    with serving(script) as server:
        model = add_model(db, server)
        clock = add_tool(db, "clock", "clock")
        unknown = add_tool(db, "teleport", "teleporter")  # not in this build's catalogue
        allowed_run = queue_run(db, owner="alice", model=model, tool_ids=[clock, unknown])
        code, log = run_to_end(database_url, allowed_run)
        assert code == 0, log
        assert "skipping tools unknown to this runner: teleporter" in log

        # The admin withdraws the tool after the next run was queued: the runner
        # reads `agents_allowed` at run start, so the tool is not offered.
        withdrawn_run = queue_run(db, owner="bob", model=model, tool_ids=[clock])
        with Session(db) as session, session.begin():
            session.execute(update(Tool).where(Tool.id == clock).values(agents_allowed=False))
        code, log = run_to_end(database_url, withdrawn_run)
        assert code == 0, log
        requests = server.recorded()

    core = "search_knowledge, read_document, related_documents"
    assert run_row(db, allowed_run).output == f"{core}, current_time @ Europe/Berlin"
    assert run_row(db, withdrawn_run).output == core
    offered_last = requests[-1].conversation.tools_offered
    assert "current_time" not in offered_last


def test_a_script_with_no_matching_rule_fails_the_run_with_the_servers_reason(
    ks: KnowledgeFixture, db: Engine, database_url: str
) -> None:
    script = {"rules": [{"when": {"contains": "never said"}, "reply": {"content": "x"}}]}
    run = run_scripted(db, database_url, script)
    assert run.code == 0, run.log
    row = run.row
    assert (row.state, row.reason) == ("failed", "error")
    assert row.error is not None
    assert "HTTP 422" in row.error
    assert "no rule matches" in row.error


def test_an_inbox_agent_starts_with_the_replies_people_gave(
    ks: KnowledgeFixture, db: Engine, database_url: str
) -> None:
    script = {"rules": [{"reply": {"content": "${last_user} | ${tools}"}}]}
    with serving(script) as server:
        inbox_tool = add_tool(db, "inbox", "inbox")
        run_id = queue_run(db, owner="alice", model=add_model(db, server), tool_ids=[inbox_tool])
        with Session(db) as session, session.begin():
            agent_id = session.execute(
                select(AgentRun.agent_id).where(AgentRun.id == run_id)
            ).scalar_one()
            item = board.ask(session, agent_id, "db", "Which database?").item
            replies.write_reply(
                session, item.id, "Postgres 16", ReplyKind.ANSWER, ReplyChannel.INBOX
            )
        code, log = run_to_end(database_url, run_id)
    assert code == 0, log
    output = run_row(db, run_id).output
    assert output is not None
    note, tools = output.split(" | ")
    assert f"item_id={item.id} key='db' reply_serial=1" in note
    assert "reply: Postgres 16" in note
    assert "inbox_acknowledge" in tools
