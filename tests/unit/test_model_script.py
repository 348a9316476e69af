"""Model server scripts: parsing with clear errors, conversation matching, placeholders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from achilles.errors import ModelScriptError
from achilles.modelserver.conversation import (
    Conversation,
    UnresolvedPlaceholder,
    first_match,
    matches,
    render,
    render_answer,
)
from achilles.modelserver.script import Condition, Reply, load_script, parse_script


def _conversation(*messages: dict[str, Any], tools: tuple[str, ...] = ()) -> Conversation:
    return Conversation.from_request(
        {
            "model": "m",
            "messages": list(messages),
            "tools": [{"type": "function", "function": {"name": n}} for n in tools],
        }
    )


SEARCH_RESULT = json.dumps({"results": [{"id": 42, "title": "Runbook"}]})
CONVERSATION = _conversation(
    {"role": "system", "content": "platform"},
    {"role": "user", "content": "Find the Runbook"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "search_knowledge", "arguments": "{}"},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": SEARCH_RESULT},
    tools=("search_knowledge", "read_document"),
)


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        ({}, True),
        ({"turn": 1}, True),
        ({"turn": 0}, False),
        ({"last_role": "tool"}, True),
        ({"last_tool": "search_knowledge"}, True),
        ({"last_tool": "read_document"}, False),
        ({"contains": "runbook"}, True),
        ({"contains": "payroll"}, False),
        ({"last_contains": "find the"}, False),
        ({"result_has": "/results/0/id"}, True),
        ({"result_has": "/results/1/id"}, False),
        ({"result_lacks": "/error"}, True),
        ({"tools_offered": ["read_document"]}, True),
        ({"tools_offered": ["current_time"]}, False),
        ({"tools_not_offered": ["current_time"]}, True),
        ({"model": "other"}, False),
        ({"turn": 1, "last_tool": "search_knowledge", "result_has": "/results"}, True),
    ],
)
def test_conditions(condition: dict[str, Any], expected: bool) -> None:
    assert matches(Condition.model_validate(condition), CONVERSATION) is expected


def test_placeholders_keep_the_json_type_when_they_are_the_whole_string() -> None:
    assert render("${last_result:/results/0/id}", CONVERSATION) == 42
    assert (
        render(
            "doc ${last_result:/results/0/id}: ${result.search_knowledge:/results/0/title}",
            CONVERSATION,
        )
        == "doc 42: Runbook"
    )
    assert render("${last_user}", CONVERSATION) == "Find the Runbook"
    assert render("${tools}", CONVERSATION) == "search_knowledge, read_document"
    assert render("${last_result}", CONVERSATION) == SEARCH_RESULT
    assert render("no placeholders $ { }", CONVERSATION) == "no placeholders $ { }"


@pytest.mark.parametrize(
    "template",
    ["${last_result:/results/5}", "${result.read_document}", "${nonsense}", "${last_user:/x}"],
)
def test_unresolvable_placeholders_say_which(template: str) -> None:
    with pytest.raises(
        UnresolvedPlaceholder, match=template.replace("$", r"\$").replace("{", r"\{")
    ):
        render(template, CONVERSATION)


def test_rendered_tool_calls_and_estimated_or_scripted_usage() -> None:
    reply = Reply.model_validate(
        {
            "tool_calls": [
                {
                    "name": "read_document",
                    "arguments": {"document_id": "${last_result:/results/0/id}"},
                },
                {"name": "read_document", "arguments": "{broken"},
            ]
        }
    )
    answer = render_answer(reply, CONVERSATION)
    assert [c.arguments for c in answer.tool_calls] == ['{"document_id": 42}', "{broken"]
    assert answer.prompt_tokens > 0
    assert answer.completion_tokens > 0
    scripted = render_answer(
        Reply.model_validate(
            {"content": "x", "usage": {"prompt_tokens": 3, "completion_tokens": 4}}
        ),
        CONVERSATION,
    )
    assert (scripted.prompt_tokens, scripted.completion_tokens) == (3, 4)


def test_rules_fire_in_order_and_respect_times() -> None:
    script = parse_script(
        {
            "rules": [
                {"times": 1, "reply": {"error": {"status": 500}}},
                {"when": {"turn": 5}, "reply": {"content": "never"}},
                {"reply": {"content": "fallback"}},
            ]
        },
        source="t",
    )
    fired = [0, 0, 0]
    assert first_match(script, CONVERSATION, fired) == 0
    fired[0] += 1
    assert first_match(script, CONVERSATION, fired) == 2


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, "t: rules: required"),
        ({"rules": []}, "t: rules: must have at least 1 item"),
        ([1], "t: must be an object (got [1])"),
        ({"rules": [1]}, "t: rules[0]: must be an object (got 1)"),
        ({"rules": [{"reply": {}}]}, "t: rules[0].reply: a reply needs content"),
        (
            {"rules": [{"reply": {"content": "x", "error": {"status": 500}}}]},
            "t: rules[0].reply: a reply is either an error or an answer",
        ),
        (
            {"rules": [{"when": {"turns": 1}, "reply": {"content": "x"}}]},
            "t: rules[0].when.turns: unknown field",
        ),
        (
            {"rules": [{"reply": {"error": {"status": 200}}}]},
            "t: rules[0].reply.error.status: must be greater than or equal to 400 (got 200)",
        ),
        (
            {"rules": [{"when": {"result_has": "x"}, "reply": {"content": "x"}}]},
            "t: rules[0].when.result_has: ",
        ),
    ],
)
def test_malformed_scripts_are_refused_naming_the_field(data: Any, message: str) -> None:
    """One line a person can act on: the field as written in the file, never pydantic's
    class names ("instance of Script") or an empty field name."""
    with pytest.raises(ModelScriptError) as raised:
        parse_script(data, source="t")
    assert str(raised.value).startswith(message)
    for internal in ("Script", "Rule", "Reply", "dictionary", "Value error", ": :"):
        assert internal not in str(raised.value)


def test_the_built_in_demo_script_is_valid() -> None:
    assert len(load_script().rules) == 5


def test_a_script_file_that_is_not_yaml_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules: [\n")
    with pytest.raises(ModelScriptError, match="not valid YAML"):
        load_script(bad)
    with pytest.raises(ModelScriptError, match="cannot read model script"):
        load_script(tmp_path / "missing.yaml")
