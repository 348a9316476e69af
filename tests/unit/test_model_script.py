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


def test_a_pointer_goes_on_into_a_string_that_holds_json() -> None:
    """An MCP tool's result is `{"result": "<the server's text>"}`, often JSON itself."""
    text = json.dumps({"datetime": "2026-12-05T23:00:00+01:00", "is_dst": False})
    conversation = _conversation(
        {"role": "user", "content": "time?"},
        {
            "role": "assistant",
            "tool_calls": [{"id": "t", "function": {"name": "time__now", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "t", "content": json.dumps({"result": text})},
    )
    assert render("${last_result:/result/datetime}", conversation) == "2026-12-05T23:00:00+01:00"
    assert render("${result.time__now:/result/is_dst}", conversation) is False
    with pytest.raises(UnresolvedPlaceholder):
        render("${last_result:/result/nothing}", conversation)


DOCUMENT: dict[str, Any] = {
    "id": 5,
    "title": "Projects you follow, this week",
    "body": "Atlas shipped.",
}
TIME = {"timezone": "Europe/Berlin", "datetime": "2026-12-05T23:00:00+01:00"}


def _walk(tools: tuple[str, ...], first: str = "What changed this week?") -> list[Any]:
    """The built-in demo script against a runner that answers each tool call as the
    demo's tools do; every reply, until one without tool calls."""
    script = load_script()
    messages: list[dict[str, Any]] = [{"role": "user", "content": first}]
    fired = [0] * len(script.rules)
    replies: list[Any] = []
    results: dict[str, Any] = {
        "search_knowledge": {"results": [{"id": 5, "title": DOCUMENT["title"]}]},
        "read_document": DOCUMENT,
        "time__get_current_time": {"result": json.dumps(TIME)},
    }
    while len(replies) < 6:
        conversation = _conversation(*messages, tools=("search_knowledge", *tools))
        index = first_match(script, conversation, fired)
        assert index is not None, messages
        answer = render_answer(script.rules[index].reply, conversation)
        replies.append(answer)
        if not answer.tool_calls:
            return replies
        # Call ids are unique in a conversation (the model server's are).
        ids = [f"c{len(replies)}-{n}" for n in range(len(answer.tool_calls))]
        calls = [
            {"id": call_id, "function": {"name": c.name, "arguments": c.arguments}}
            for call_id, c in zip(ids, answer.tool_calls, strict=True)
        ]
        messages.append({"role": "assistant", "content": None, "tool_calls": calls})
        for call_id, call in zip(ids, answer.tool_calls, strict=True):
            if call.name == "memory__create_entities":
                return replies  # the run ends waiting for the owner's approval
            content = json.dumps(results[call.name])
            messages.append({"role": "tool", "tool_call_id": call_id, "content": content})
    raise AssertionError("the demo script does not end")


def test_the_demo_script_reads_checks_the_time_and_asks_to_keep_a_note() -> None:
    replies = _walk(("time__get_current_time", "memory__create_entities"))

    called = [call.name for reply in replies for call in reply.tool_calls]
    assert called == [
        "search_knowledge",
        "read_document",
        "time__get_current_time",
        "memory__create_entities",
    ]
    note = json.loads(replies[-1].tool_calls[0].arguments)
    reason = note.pop("reason_for_owner")
    assert note == {
        "entities": [
            {
                "name": DOCUMENT["title"],
                "entityType": "document",
                "observations": ["Atlas shipped."],
            }
        ]
    }
    assert f'I read "{DOCUMENT["title"]}" (document 5)' in reason
    assert TIME["datetime"] in reason


def test_the_demo_script_without_the_tools_answers_from_the_document() -> None:
    for tools in ((), ("time__get_current_time",)):
        replies = _walk(tools)
        assert [c.name for r in replies for c in r.tool_calls] == [
            "search_knowledge",
            "read_document",
        ]
        assert replies[-1].content.startswith(f'From "{DOCUMENT["title"]}" (document 5)')


def test_the_demo_script_tells_what_became_of_a_decided_call() -> None:
    note = 'Approvals decided since your last run (...):\n{"outcome": "executed"}'
    (reply,) = _walk(("memory__create_entities",), first=note)
    assert reply.content.endswith('{"outcome": "executed"}')


def test_a_script_file_that_is_not_yaml_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules: [\n")
    with pytest.raises(ModelScriptError, match="not valid YAML"):
        load_script(bad)
    with pytest.raises(ModelScriptError, match="cannot read model script"):
        load_script(tmp_path / "missing.yaml")
