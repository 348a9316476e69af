"""The set of tools one run offers the model, and dispatch of the model's calls to them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from achilles.domain.run_trace import StepKind
from achilles.tools.base import ModelTool, ToolContext, ToolResult


class Toolbox:
    def __init__(self, tools: Sequence[ModelTool]) -> None:
        by_name: dict[str, ModelTool] = {}
        for item in tools:
            if item.name in by_name:
                raise ValueError(f"two tools are named {item.name!r}")
            by_name[item.name] = item
        self._tools = by_name

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._tools)

    def specs(self) -> list[dict[str, Any]]:
        return [item.spec() for item in self._tools.values()]

    def invoke(self, name: str, arguments: str, ctx: ToolContext) -> str:
        """Run one tool call; an unknown tool (the model made one up) is an error result."""
        return self.call(name, arguments, ctx).content

    def call(self, name: str, arguments: str, ctx: ToolContext) -> ToolResult:
        """`invoke`, telling an error result apart."""
        found = self._tools.get(name)
        if found is None:
            return ToolResult.failed(
                f"unknown tool {name!r}; available tools: {', '.join(self._tools)}"
            )
        return found.call(arguments, ctx)

    def step_kind(self, name: str) -> StepKind:
        """What a call of `name` is in the run's steps."""
        found = self._tools.get(name)
        return StepKind.TOOL_CALL if found is None else found.step_kind
