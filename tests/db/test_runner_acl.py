"""An adversarial model cannot make an agent read what its owner cannot: not by id, not by
search, not through links. The database's row-level security answers, not the prompt."""

from __future__ import annotations

import json

from sqlalchemy import Engine

from tests.db.ks_fixtures import load_demo_knowledge
from tests.db.runner_support import run_scripted


def test_a_model_asking_for_another_owners_documents_gets_nothing(
    db: Engine, database_url: str
) -> None:
    ks = load_demo_knowledge(db)
    secret = ks.documents["bob-secret"]
    script = {
        "rules": [
            {
                "when": {"turn": 0},
                "reply": {
                    "tool_calls": [
                        {"name": "read_document", "arguments": {"document_id": secret}},
                        {
                            "name": "search_knowledge",
                            "arguments": {"query": "Zanzibar salary bonus"},
                        },
                        {
                            "name": "related_documents",
                            "arguments": {"document_id": ks.documents["alice-notes"]},
                        },
                        {"name": "related_documents", "arguments": {"document_id": secret}},
                    ]
                },
            },
            {
                "when": {"turn": 1},
                "reply": {
                    "content": "${result.read_document}\n${result.search_knowledge}\n"
                    "${result.related_documents}"
                },
            },
        ]
    }
    run = run_scripted(db, database_url, script)
    assert run.code == 0, run.log

    row = run.row
    assert row.state == "succeeded"
    assert row.output is not None
    assert "Zanzibar" not in row.output
    assert "salary" not in row.output

    messages = run.requests[1].body["messages"]
    tool_messages = [m for m in messages if m["role"] == "tool"]
    results = [json.loads(m["content"]) for m in tool_messages]
    assert results[0] == {"error": f"document {secret} not found"}
    assert results[1] == {"results": []}
    # alice's notes link to bob's review; the link is invisible because one end is.
    assert [r["title"] for r in results[2]["related"]] == ["Engineering handbook"]
    assert results[3] == {"error": f"document {secret} not found"}


def test_the_same_script_as_the_documents_reader_does_see_it(db: Engine, database_url: str) -> None:
    """The control: bob's own agent reads bob's document, so the refusals above are ACL."""
    ks = load_demo_knowledge(db)
    secret = ks.documents["bob-secret"]
    script = {
        "rules": [
            {
                "when": {"turn": 0},
                "reply": {
                    "tool_calls": [{"name": "read_document", "arguments": {"document_id": secret}}]
                },
            },
            {"when": {"turn": 1}, "reply": {"content": "${last_result:/title}"}},
        ]
    }
    run = run_scripted(db, database_url, script, owner="bob")
    assert run.code == 0, run.log
    assert run.row.output == "Bob's salary review"
