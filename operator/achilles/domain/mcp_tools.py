"""Tools from MCP servers (issue 38): the admin's rules over a server's tools, pure.

An AgentTool with `implementation: mcp` names an MCP server. What the server lists is
data: its names, descriptions, hints and input schemas are the server's words, which the
platform shows people and offers the model, never instructions it follows. These rules
decide, from that listing and the AgentTool's spec:

- which of the server's tools agents may call (the admin's allowlist, on top of
  `agentsAllowed`; absent: every listed tool);
- whether a call waits for the owner's approval (`approval`: never, always, or writes:
  every tool that does not say it is read-only and not destructive — MCP's annotations
  are hints, so a tool that says nothing is treated as one that writes);
- the function name the model sees (`<agenttool>__<tool>`, within the Chat Completions
  rule `^[a-zA-Z0-9_-]{1,64}$`, so two servers' `search` never collide);
- the digest of the listing people compare (names, hints and input schemas), the
  digest of a call's arguments the run's journal keeps instead of the arguments, and a
  result cut to its cap;
- whether a failed listing is tried again soon (the server may answer in a moment) or
  waits for an edit (`listing_retried`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from typing import Any

from achilles.domain.vocabulary import ConditionReason

# The AgentTool implementation whose tools come from an MCP server (`spec.mcp`).
MCP_IMPLEMENTATION = "mcp"
# The Chat Completions API's rule for function names (as `tools/base.py` checks).
FUNCTION_NAME_MAX = 64
_NOT_IN_FUNCTION_NAME = re.compile(r"[^a-zA-Z0-9_-]")
SEPARATOR = "__"
# What a cut result says at its end, so the model knows it did not see everything.
CUT_MARK = "\n[result cut at {limit} bytes of {size}]"


# The listing verdicts that time may mend: a server that does not answer (down, starting,
# refused, timed out, answering something else) may answer at the next try, so the
# operator lists it again with its workqueue's backoff. A header's Secret missing or
# unreadable waits for the admin (a new Secret, the chart's RBAC, an edit) and the
# periodic relist; a listing that worked waits for that relist too.
RETRIED_LISTINGS = frozenset({ConditionReason.SERVER_UNREACHABLE})


def listing_retried(reason: str | None) -> bool:
    """Whether an MCP AgentTool whose Ready condition gives `reason` is listed again
    soon, without an edit."""
    return reason in RETRIED_LISTINGS


class Approval(StrEnum):
    NEVER = "never"
    ALWAYS = "always"
    WRITES = "writes"


# How long an approval waits for its owner; unanswered, it expires and the agent hears so.
APPROVAL_TTL = timedelta(days=7)
# The inbox item of an approval: one per call (tool and arguments).
APPROVAL_KEY_PREFIX = "approval-"


def approval_key(tool_id: int, mcp_tool: str, digest: bytes) -> str:
    """The inbox key of the approval of one call (tool, arguments): asking the same call
    again is the same item (seed 003: one question, one row)."""
    tool = hashlib.sha256(mcp_tool.encode()).hexdigest()[:8]
    return f"{APPROVAL_KEY_PREFIX}{tool_id}-{tool}-{digest.hex()[:24]}"


def approval_question(function: str, arguments_text: str, reason: str | None) -> str:
    """What the owner is asked: the tool, the exact arguments, the agent's reason."""
    lines = [
        f"May I call {function}? Approve to have it made once with exactly these arguments;"
        " reject and it is never made.",
        f"Arguments: {arguments_text}",
    ]
    if reason:
        lines.append(f"Reason: {reason}")
    return "\n".join(lines)


class ApprovalState(StrEnum):
    """An approval's life: asked, decided, then (approved) performed once."""

    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"
    EXECUTING = "executing"  # a run claimed it and is calling the tool
    EXECUTED = "executed"
    FAILED = "failed"  # the approved call was made and failed (or its outcome is unknown)


@dataclass(frozen=True)
class ListedTool:
    """One tool as the server lists it (its annotations' two hints; None: not said)."""

    name: str
    description: str | None
    input_schema: dict[str, Any]
    read_only: bool | None = None
    destructive: bool | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
            "read_only": self.read_only,
            "destructive": self.destructive,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ListedTool:
        return cls(
            name=str(data["name"]),
            description=data.get("description"),
            input_schema=dict(data.get("input_schema") or {"type": "object"}),
            read_only=data.get("read_only"),
            destructive=data.get("destructive"),
        )


@dataclass(frozen=True)
class SourceRules:
    """The admin's rules over one server's tools (the AgentTool's spec.mcp)."""

    allowed_tools: frozenset[str] | None = None  # None: every listed tool
    approval: Approval = Approval.WRITES
    tool_approvals: dict[str, Approval] = field(default_factory=dict)

    def is_allowed(self, tool: str) -> bool:
        return self.allowed_tools is None or tool in self.allowed_tools

    def policy_of(self, tool: str) -> Approval:
        return self.tool_approvals.get(tool, self.approval)


def is_harmless(tool: ListedTool) -> bool:
    """The tool says it only reads: readOnlyHint true and not destructive."""
    return tool.read_only is True and tool.destructive is not True


def needs_approval(policy: Approval, tool: ListedTool) -> bool:
    """Whether a call of `tool` waits for its owner's approval under `policy`."""
    if policy is Approval.NEVER:
        return False
    if policy is Approval.ALWAYS:
        return True
    return not is_harmless(tool)


@dataclass(frozen=True)
class OfferedTool:
    """A listed tool agents may call, as the runner offers it."""

    function_name: str  # what the model calls
    tool: ListedTool
    needs_approval: bool


def offered_tools(
    catalogue_name: str, listed: Iterable[ListedTool], rules: SourceRules
) -> list[OfferedTool]:
    """The listed tools the allowlist lets through, in the server's order."""
    return [
        OfferedTool(
            function_name=function_name(catalogue_name, tool.name),
            tool=tool,
            needs_approval=needs_approval(rules.policy_of(tool.name), tool),
        )
        for tool in listed
        if rules.is_allowed(tool.name)
    ]


@dataclass(frozen=True)
class HeaderRef:
    """A header whose value is key `secret_key` of Secret `secret_name` (runs namespace)."""

    name: str
    secret_name: str
    secret_key: str


def header_env(tool_id: int, index: int) -> str:
    """The run pod's variable that carries header `index` of tool `tool_id`'s source:
    its Job names the Secret's key (`valueFrom`), never the value."""
    return f"ACHILLES_MCP_{tool_id}_HEADER_{index}"


@dataclass(frozen=True)
class HeaderSecret:
    """One MCP header's value as a run pod's variable from a Secret's key (by reference)."""

    env: str
    secret_name: str
    secret_key: str


@dataclass(frozen=True)
class RunSource:
    """An MCP source as a run uses it: where, with which credentials (by reference), its
    limits, and the tools it offers (the last listing through the admin's rules)."""

    tool_id: int
    catalogue_name: str
    url: str
    headers: tuple[HeaderRef, ...]
    timeout_seconds: int
    max_result_bytes: int
    offered: tuple[OfferedTool, ...]


def function_name(catalogue_name: str, tool: str) -> str:
    """`<agenttool>__<tool>` with what the model's API refuses replaced by `_`; a name
    too long keeps its start and ends with a digest of the whole, so it stays unique."""
    whole = f"{catalogue_name}{SEPARATOR}{tool}"
    name = _NOT_IN_FUNCTION_NAME.sub("_", whole)
    if len(name) <= FUNCTION_NAME_MAX and name == whole:
        return name
    digest = hashlib.sha256(whole.encode()).hexdigest()[:8]
    return f"{name[: FUNCTION_NAME_MAX - 9]}_{digest}"


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def listing_digest(tools: Sequence[ListedTool]) -> str:
    """`sha256:<hex>` of the tools' names, hints and input schemas (descriptions left
    out: a reworded description changes nothing a call sends)."""
    material = [
        [tool.name, tool.read_only, tool.destructive, tool.input_schema]
        for tool in sorted(tools, key=lambda tool: tool.name)
    ]
    return "sha256:" + hashlib.sha256(_canonical(material)).hexdigest()


def canonical_arguments(arguments: dict[str, Any]) -> str:
    """The arguments as the text people approve and the call sends (keys sorted)."""
    return _canonical(arguments).decode()


def arguments_digest(arguments: dict[str, Any]) -> bytes:
    """SHA-256 of the canonical arguments: what a run's step keeps of them."""
    return hashlib.sha256(_canonical(arguments)).digest()


def cut_result(text: str, limit: int) -> str:
    """`text` within `limit` bytes of UTF-8, marked when it was cut."""
    data = text.encode()
    if len(data) <= limit:
        return text
    mark = CUT_MARK.format(limit=limit, size=len(data))
    keep = max(0, limit - len(mark.encode()))
    return data[:keep].decode(errors="ignore") + mark
