"""The declarative script an offline model server follows (YAML or JSON).

A script is an ordered list of rules. For each `/v1/chat/completions` request
the server answers with the first rule whose `when` conditions all hold (and
whose `times` budget is not used up). A request no rule matches gets HTTP 422.

```yaml
rules:
  - name: search first                 # optional; shown in logs and errors
    when:                              # every condition given must hold; none = always
      turn: 0                          # assistant messages so far (0 = first call)
      last_role: user                  # role of the last message: system|user|assistant|tool
      last_tool: search_knowledge      # the last message is this tool's result
      contains: onboarding             # some message's content contains this (any case)
      last_contains: not found         # the last message's content contains this (any case)
      result_has: /results/0/id        # the last message is a JSON tool result with this pointer
      result_lacks: /error             # ... without this pointer
      tools_offered: [read_document]   # all of these tools are offered
      tools_not_offered: [current_time]  # none of these is offered
      model: demo-model                # the request's `model`
    times: 2                           # optional: fire at most this often (per server)
    reply:
      content: "text"                  # the answer (or text next to tool calls)
      tool_calls:
        - name: read_document
          arguments: {document_id: "${last_result:/results/0/id}"}  # object, or a raw
          # string sent verbatim - e.g. "{not json" to test malformed arguments
      usage: {prompt_tokens: 12, completion_tokens: 5}   # default: estimated from sizes
      omit_usage: false                # true: the response has no `usage`
      delay_seconds: 0                 # wait before answering (timeouts, long runs)
      hold: first-answer               # wait until ModelServer.release("first-answer")
      # (then any delay): a test orders what happens while a call is in flight; the
      # request is recorded before the wait, and the server's stop ends it
      error: {status: 500, message: "overloaded", retry_after_ms: 10}  # answer with an error
```

Placeholders in `content` and in `arguments` strings:
`${last_user}` (last user message), `${tools}` (offered tool names, comma-separated),
`${last_result}` (last tool result, raw text), `${last_result:/json/pointer}`,
`${result.TOOL}` / `${result.TOOL:/json/pointer}` (the most recent result of TOOL).
A pointer goes on into a string that holds JSON (an MCP tool's `{"result": "<text>"}`:
`${result.time__get_current_time:/result/datetime}`).
A string that is exactly one placeholder keeps the JSON type of the value (so
`document_id: "${last_result:/results/0/id}"` sends a number). A placeholder that
does not resolve makes the server answer HTTP 422 naming it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from achilles.domain.validation import describe_document_error
from achilles.errors import ModelScriptError


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Condition(_Strict):
    turn: int | None = Field(default=None, ge=0)
    last_role: Literal["system", "user", "assistant", "tool"] | None = None
    last_tool: str | None = None
    contains: str | None = None
    last_contains: str | None = None
    result_has: str | None = Field(default=None, pattern=r"^/")
    result_lacks: str | None = Field(default=None, pattern=r"^/")
    tools_offered: tuple[str, ...] = ()
    tools_not_offered: tuple[str, ...] = ()
    model: str | None = None


class ScriptedToolCall(_Strict):
    name: str = Field(min_length=1)
    arguments: dict[str, Any] | str = Field(default_factory=dict)


class ScriptedUsage(_Strict):
    prompt_tokens: int = Field(ge=0)
    completion_tokens: int = Field(ge=0)


class ScriptedError(_Strict):
    status: int = Field(ge=400, le=599)
    message: str = "scripted error"
    type: str = "server_error"
    retry_after_ms: int | None = Field(default=None, ge=0)


class Reply(_Strict):
    content: str | None = None
    tool_calls: tuple[ScriptedToolCall, ...] = ()
    usage: ScriptedUsage | None = None
    omit_usage: bool = False
    delay_seconds: float = Field(default=0.0, ge=0)
    # A gate the answer waits at until the test releases it (`ModelServer.release`).
    hold: str | None = Field(default=None, min_length=1)
    error: ScriptedError | None = None

    @model_validator(mode="after")
    def _says_something(self) -> Reply:
        if self.error is not None and (self.content is not None or self.tool_calls):
            raise ValueError("a reply is either an error or an answer, not both")
        if self.error is None and self.content is None and not self.tool_calls:
            raise ValueError("a reply needs content, tool_calls or an error")
        return self


class Rule(_Strict):
    name: str | None = None
    when: Condition = Field(default_factory=Condition)
    times: int | None = Field(default=None, ge=1)
    reply: Reply

    def label(self, index: int) -> str:
        return self.name or f"rules[{index}]"


class Script(_Strict):
    rules: tuple[Rule, ...] = Field(min_length=1)


DEFAULT_SCRIPT_PATH = Path(__file__).with_name("default_script.yaml")


def parse_script(data: object, *, source: str) -> Script:
    try:
        return Script.model_validate(data)
    except ValidationError as exc:
        raise ModelScriptError(describe_document_error(exc, source, data)) from exc


def load_script(path: Path | None = None) -> Script:
    """A script from a YAML/JSON file; the built-in demo script when `path` is None."""
    path = path or DEFAULT_SCRIPT_PATH
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ModelScriptError(f"cannot read model script {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ModelScriptError(f"{path}: not valid YAML/JSON: {exc}") from exc
    return parse_script(data, source=str(path))
