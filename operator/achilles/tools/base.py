"""What a tool is: a name, a description, a pydantic argument model, and a handler.

The argument model's JSON schema is exactly what the model is offered, and the
same model validates what the model sends back: malformed JSON, a missing field
or a wrong type becomes an error message fed back to the model, never a crash.
A handler may raise `ToolError` for an expected failure ("document not found");
its message is fed back too. Any other exception is a bug and fails the run.

Handlers receive a `ToolContext`: who the run acts for (owner id and timezone),
the Knowledge Store (read-only, under the owner's rights), a database
transaction factory for tools that keep their own state (e.g. the inbox), and
the clock.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar
from zoneinfo import ZoneInfo

from pydantic import BaseModel, ConfigDict, ValidationError

from achilles.domain.run_trace import StepKind
from achilles.errors import ToolError
from achilles.ks.store import KnowledgeStore

if TYPE_CHECKING:
    from achilles.db.database import Session

# The Chat Completions API's rule for function names.
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_MAX_SHOWN_INPUT = 80


@dataclass(frozen=True)
class ToolContext:
    run_id: int
    agent_id: int
    owner_user_id: int
    owner_timezone: ZoneInfo
    knowledge: KnowledgeStore
    # `with ctx.transaction() as session:` - one committed transaction (normal
    # rights, not the KS reader's); for tools with state of their own.
    transaction: Callable[[], AbstractContextManager[Session]]
    # Aware UTC "now"; injected so tests control time.
    now: Callable[[], datetime]


class ToolArgs(BaseModel):
    """Base of every tool's argument model: unknown fields are errors the model can read."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class NoArgs(ToolArgs):
    """For tools that take no arguments."""


ArgsT = TypeVar("ArgsT", bound=ToolArgs)


def error_result(message: str) -> str:
    """A tool result that tells the model what went wrong."""
    return json.dumps({"error": message}, ensure_ascii=False)


@dataclass(frozen=True)
class ToolResult:
    """A call's result text for the model, and its error message when it is an error
    result (what the run's journal keeps of it: the result's size and the error)."""

    content: str
    error: str | None = None
    # SHA-256 of the call's canonical arguments, when the tool keeps one (MCP calls).
    argument_sha256: bytes | None = None
    # The run ends after this reply's calls, succeeded with this output (a call that
    # waits for its owner's approval, `tools/approvals.py`).
    ends_run: str | None = None

    @classmethod
    def failed(cls, message: str, *, journal: str | None = None) -> ToolResult:
        """An error result: `message` for the model; `journal`, when given, is what the
        run's steps keep instead (the same diagnosis without what the model sent)."""
        return cls(error_result(message), message if journal is None else journal)


def describe_validation_error(exc: ValidationError, *, with_input: bool = True) -> str:
    """One line naming each bad argument; `with_input` quotes what the model sent (its
    start), which the model needs and the run's journal never keeps: a model's argument
    may be the owner's documents, and the steps keep only its size."""
    parts = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"]) or "arguments"
        part = f"{where}: {error['msg']}"
        if with_input:
            shown = repr(error.get("input"))
            if len(shown) > _MAX_SHOWN_INPUT:
                shown = shown[:_MAX_SHOWN_INPUT] + "..."
            part += f" (got {shown})"
        parts.append(part)
    return "; ".join(parts)


class ModelTool(Protocol):
    """What the toolbox offers and dispatches to: a built-in `Tool`, or a tool of an MCP
    server (`tools/mcp.py`)."""

    @property
    def name(self) -> str: ...

    @property
    def step_kind(self) -> StepKind: ...

    def spec(self) -> dict[str, Any]: ...

    def call(self, arguments: str, ctx: ToolContext) -> ToolResult: ...


@dataclass(frozen=True)
class Tool(Generic[ArgsT]):
    name: str
    description: str
    args_model: type[ArgsT]
    # Returns anything JSON-serialisable; it becomes the tool message's content.
    handler: Callable[[ArgsT, ToolContext], object]
    # What a call of it is in the run's steps: an inbox ask is one of its own.
    step_kind: StepKind = StepKind.TOOL_CALL

    def __post_init__(self) -> None:
        if not _TOOL_NAME.match(self.name):
            raise ValueError(f"tool name {self.name!r} must match {_TOOL_NAME.pattern}")

    def spec(self) -> dict[str, Any]:
        """The Chat Completions `tools` entry the model sees."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.args_model.model_json_schema(),
            },
        }

    def invoke(self, arguments: str, ctx: ToolContext) -> str:
        """Validate the model's JSON arguments, run the handler, return the result text."""
        return self.call(arguments, ctx).content

    def call(self, arguments: str, ctx: ToolContext) -> ToolResult:
        """`invoke`, telling an error result apart."""
        try:
            args = self.args_model.model_validate_json(arguments.strip() or "{}")
        except ValidationError as exc:
            invalid = f"invalid arguments for {self.name}: "
            return ToolResult.failed(
                invalid + describe_validation_error(exc),
                journal=invalid + describe_validation_error(exc, with_input=False),
            )
        try:
            result = self.handler(args, ctx)
        except ToolError as exc:
            return ToolResult.failed(str(exc))
        return ToolResult(json.dumps(result, ensure_ascii=False, default=str))


def tool(
    name: str,
    *,
    args: type[ArgsT],
    description: str | None = None,
    step_kind: StepKind = StepKind.TOOL_CALL,
) -> Callable[[Callable[[ArgsT, ToolContext], object]], Tool[ArgsT]]:
    """Decorator: turn `handler(args, ctx)` into a `Tool`; the docstring is the description."""

    def wrap(handler: Callable[[ArgsT, ToolContext], object]) -> Tool[ArgsT]:
        text = description or inspect.getdoc(handler)
        if not text:
            raise ValueError(f"tool {name!r} needs a description (or a docstring)")
        return Tool(
            name=name, description=text, args_model=args, handler=handler, step_kind=step_kind
        )

    return wrap
