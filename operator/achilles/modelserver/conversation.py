"""What a script sees of a chat request, how its conditions match, how placeholders render.

Pure functions over the request's JSON, so script behaviour is unit-testable
without a server.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from achilles.modelserver.script import Condition, Reply, Script

_PLACEHOLDER = re.compile(
    r"\$\{(?P<name>[a-z_]+)(?:\.(?P<tool>[A-Za-z0-9_-]+))?(?::(?P<pointer>/[^}]*))?\}"
)
_MISSING = object()


class UnresolvedPlaceholder(Exception):
    """A `${...}` in a reply has no value for this conversation."""


@dataclass(frozen=True)
class Conversation:
    model: str
    messages: tuple[dict[str, Any], ...]
    tools_offered: tuple[str, ...]

    @classmethod
    def from_request(cls, body: dict[str, Any]) -> Conversation:
        tools = []
        for entry in body.get("tools") or ():
            function = entry.get("function") if isinstance(entry, dict) else None
            if isinstance(function, dict) and isinstance(function.get("name"), str):
                tools.append(function["name"])
        messages = tuple(m for m in body.get("messages") or () if isinstance(m, dict))
        return cls(model=str(body.get("model", "")), messages=messages, tools_offered=tuple(tools))

    @property
    def turn(self) -> int:
        return sum(1 for m in self.messages if m.get("role") == "assistant")

    @property
    def last(self) -> dict[str, Any]:
        return self.messages[-1] if self.messages else {}

    def _tool_name_of(self, call_id: object) -> str | None:
        for message in self.messages:
            for call in message.get("tool_calls") or ():
                if isinstance(call, dict) and call.get("id") == call_id:
                    function = call.get("function") or {}
                    name = function.get("name")
                    return name if isinstance(name, str) else None
        return None

    @property
    def last_tool(self) -> str | None:
        if self.last.get("role") != "tool":
            return None
        return self._tool_name_of(self.last.get("tool_call_id"))

    def latest_result(self, tool: str | None) -> str | None:
        """The last message if it is a tool result (`tool` None), else the newest result
        of `tool` anywhere in the conversation; as text."""
        if tool is None:
            return _text(self.last) if self.last.get("role") == "tool" else None
        for message in reversed(self.messages):
            if message.get("role") == "tool" and (
                self._tool_name_of(message.get("tool_call_id")) == tool
            ):
                return _text(message)
        return None

    @property
    def last_user(self) -> str:
        for message in reversed(self.messages):
            if message.get("role") == "user":
                return _text(message)
        return ""


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def resolve_pointer(document: Any, pointer: str) -> Any:
    """RFC 6901 JSON pointer; `_MISSING` when a step does not exist. A step into a string
    that holds JSON goes on inside it: an MCP tool's result is `{"result": "<the server's
    text>"}`, and that text is often a JSON document of its own (`/result/datetime`)."""
    current = document
    for raw in pointer.split("/")[1:]:
        step = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(current, str):
            current = _parsed(current)
        if isinstance(current, dict) and step in current:
            current = current[step]
        elif isinstance(current, list) and step.isdigit() and int(step) < len(current):
            current = current[int(step)]
        else:
            return _MISSING
    return current


def _parsed(text: str | None) -> Any:
    if text is None:
        return _MISSING
    try:
        return json.loads(text)
    except ValueError:
        return _MISSING


def _result_has(conversation: Conversation, pointer: str) -> bool:
    value = resolve_pointer(_parsed(conversation.latest_result(None)), pointer)
    return value is not _MISSING and value is not None


def matches(condition: Condition, conversation: Conversation) -> bool:
    last = conversation.last
    checks = (
        condition.turn is None or conversation.turn == condition.turn,
        condition.last_role is None or last.get("role") == condition.last_role,
        condition.last_tool is None or conversation.last_tool == condition.last_tool,
        condition.contains is None
        or any(condition.contains.lower() in _text(m).lower() for m in conversation.messages),
        condition.last_contains is None or condition.last_contains.lower() in _text(last).lower(),
        condition.result_has is None or _result_has(conversation, condition.result_has),
        condition.result_lacks is None
        or (
            conversation.last_tool is not None
            and not _result_has(conversation, condition.result_lacks)
        ),
        all(name in conversation.tools_offered for name in condition.tools_offered),
        not any(name in conversation.tools_offered for name in condition.tools_not_offered),
        condition.model is None or conversation.model == condition.model,
    )
    return all(checks)


def _value(match: re.Match[str], conversation: Conversation) -> Any:
    name, tool, pointer = match["name"], match["tool"], match["pointer"]
    if name == "last_user" and tool is None and pointer is None:
        return conversation.last_user
    if name == "tools" and tool is None and pointer is None:
        return ", ".join(conversation.tools_offered)
    if (name == "last_result" and tool is None) or (name == "result" and tool is not None):
        text = conversation.latest_result(tool)
        if text is None:
            raise UnresolvedPlaceholder(f"{match[0]}: no such tool result in the conversation")
        if pointer is None:
            return text
        value = resolve_pointer(_parsed(text), pointer)
        if value is _MISSING:
            raise UnresolvedPlaceholder(f"{match[0]}: the tool result has no {pointer}")
        return value
    raise UnresolvedPlaceholder(f"{match[0]}: unknown placeholder")


def render(template: str, conversation: Conversation) -> Any:
    """Fill placeholders; a string that is exactly one placeholder keeps the value's type."""
    whole = _PLACEHOLDER.fullmatch(template)
    if whole is not None:
        return _value(whole, conversation)

    def text_of(match: re.Match[str]) -> str:
        value = _value(match, conversation)
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)

    return _PLACEHOLDER.sub(text_of, template)


def render_arguments(arguments: Any, conversation: Conversation) -> Any:
    if isinstance(arguments, str):
        return render(arguments, conversation)
    if isinstance(arguments, dict):
        return {key: render_arguments(value, conversation) for key, value in arguments.items()}
    if isinstance(arguments, list):
        return [render_arguments(value, conversation) for value in arguments]
    return arguments


@dataclass(frozen=True)
class RenderedCall:
    name: str
    arguments: str  # JSON text, or the scripted raw string verbatim


@dataclass(frozen=True)
class RenderedAnswer:
    content: str | None
    tool_calls: tuple[RenderedCall, ...]
    prompt_tokens: int
    completion_tokens: int
    include_usage: bool


def render_answer(reply: Reply, conversation: Conversation) -> RenderedAnswer:
    content = None
    if reply.content is not None:
        rendered = render(reply.content, conversation)
        content = rendered if isinstance(rendered, str) else json.dumps(rendered)
    calls = []
    for call in reply.tool_calls:
        if isinstance(call.arguments, str):
            # A raw string goes out verbatim (after placeholders): malformed on purpose, maybe.
            rendered_raw = render(call.arguments, conversation)
            text = rendered_raw if isinstance(rendered_raw, str) else json.dumps(rendered_raw)
        else:
            text = json.dumps(render_arguments(call.arguments, conversation), ensure_ascii=False)
        calls.append(RenderedCall(name=call.name, arguments=text))
    if reply.usage is not None:
        prompt, completion = reply.usage.prompt_tokens, reply.usage.completion_tokens
    else:
        prompt = estimate_tokens(json.dumps(conversation.messages))
        completion = estimate_tokens((content or "") + "".join(c.arguments for c in calls))
    return RenderedAnswer(
        content=content,
        tool_calls=tuple(calls),
        prompt_tokens=prompt,
        completion_tokens=completion,
        include_usage=not reply.omit_usage,
    )


def estimate_tokens(text: str) -> int:
    """Roughly four characters a token; deterministic, never zero."""
    return max(1, math.ceil(len(text) / 4))


def first_match(script: Script, conversation: Conversation, fired: list[int]) -> int | None:
    """Index of the first rule that matches and still has `times` left."""
    for index, rule in enumerate(script.rules):
        if rule.times is not None and fired[index] >= rule.times:
            continue
        if matches(rule.when, conversation):
            return index
    return None
