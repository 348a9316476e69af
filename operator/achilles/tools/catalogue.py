"""The built-in tool catalogue: what an `AgentTool`'s `implementation` name maps to.

Every agent gets `CORE_TOOLS` (the three locked, read-only Knowledge Store
tools); they are not in the `tools` table. Optional tools are grouped into
toolsets keyed by implementation name; an `AgentTool` (row in `tools`) names
one, and the runner offers that toolset when the agent picked it and the tool's
`agents_allowed` is true at run start.

Adding a tool is one small module plus one line here:

1. Write `achilles/tools/<name>.py` with one function per tool the model may call:

       class AskArgs(ToolArgs):
           question: str = Field(min_length=1, description="...")

       @tool("ask_human", args=AskArgs)
       def ask_human(args: AskArgs, ctx: ToolContext) -> dict[str, Any]:
           '''What the model reads as the tool's description.'''
           with ctx.transaction() as session:   # DB-backed tools: use achilles.db.* functions
               ...
           return {...}                          # anything JSON-serialisable

   Raise `ToolError("...")` for failures the model should hear about; argument
   validation is automatic (the pydantic model is also the schema the model sees).
2. Add the toolset to `OPTIONAL_TOOLSETS` below: `"inbox": (inbox.ask_human, ...)`.

3. Optionally, if the toolset has something to tell the model when a run starts
   (e.g. the inbox: replies people gave since the last run), add a function
   `(ctx: ToolContext) -> str | None` to `RUN_START_NOTES`; the runner calls it once,
   after the claim, and adds a non-None note as a user message after the owner's prompt.

Function names must be unique across the catalogue (checked at import).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from achilles.tools import clock, inbox, ks
from achilles.tools.base import ModelTool, Tool, ToolContext
from achilles.tools.toolbox import Toolbox

CORE_TOOLS: tuple[Tool[Any], ...] = ks.CORE_TOOLS

# implementation name (AgentTool `implementation`, `tools.implementation`) -> its tools
OPTIONAL_TOOLSETS: Mapping[str, tuple[Tool[Any], ...]] = {
    "clock": (clock.current_time,),
    "inbox": inbox.INBOX_TOOLS,
}


RunStartNote = Callable[[ToolContext], str | None]

# implementation name -> the note its toolset adds when a run starts (or None)
RUN_START_NOTES: Mapping[str, RunStartNote] = {
    "inbox": inbox.run_start_note,
}


def known_implementations() -> frozenset[str]:
    return frozenset(OPTIONAL_TOOLSETS)


@dataclass(frozen=True)
class ToolSelection:
    toolbox: Toolbox
    # Implementations an agent selected that this build does not know (skipped).
    unknown: tuple[str, ...]
    # Hooks of the selected toolsets to call once at run start (see RUN_START_NOTES).
    run_start_notes: tuple[RunStartNote, ...] = ()


def select_tools(implementations: Iterable[str], extra: Sequence[ModelTool] = ()) -> ToolSelection:
    """The core tools plus the named optional toolsets, in a stable order, then `extra`
    (the tools of the agent's MCP sources, `tools/mcp.py`)."""
    chosen: list[ModelTool] = list(CORE_TOOLS)
    unknown: list[str] = []
    notes: list[RunStartNote] = []
    for name in sorted(set(implementations)):
        toolset = OPTIONAL_TOOLSETS.get(name)
        if toolset is None:
            unknown.append(name)
            continue
        chosen.extend(toolset)
        if name in RUN_START_NOTES:
            notes.append(RUN_START_NOTES[name])
    chosen.extend(extra)
    return ToolSelection(
        toolbox=Toolbox(chosen), unknown=tuple(unknown), run_start_notes=tuple(notes)
    )


def _check_unique_names() -> None:
    everything = [*CORE_TOOLS, *(t for toolset in OPTIONAL_TOOLSETS.values() for t in toolset)]
    Toolbox(everything)  # raises on a duplicate function name


_check_unique_names()
