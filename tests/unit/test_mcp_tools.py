"""The admin's rules over an MCP server's tools (`domain/mcp_tools.py`), table-driven."""

from __future__ import annotations

import re

import pytest

from achilles.domain.mcp_tools import (
    Approval,
    ListedTool,
    SourceRules,
    arguments_digest,
    canonical_arguments,
    cut_result,
    function_name,
    listing_digest,
    needs_approval,
    offered_tools,
)

SCHEMA = {"type": "object", "properties": {"x": {"type": "string"}}}


def _tool(
    name: str = "t", read_only: bool | None = None, destructive: bool | None = None
) -> ListedTool:
    return ListedTool(name, None, SCHEMA, read_only, destructive)


@pytest.mark.parametrize(
    ("policy", "read_only", "destructive", "expected"),
    [
        (Approval.WRITES, True, None, False),  # says it only reads
        (Approval.WRITES, True, False, False),
        (Approval.WRITES, True, True, True),  # contradicts itself: asked
        (Approval.WRITES, False, False, True),  # additive writes are writes
        (Approval.WRITES, False, None, True),
        (Approval.WRITES, None, None, True),  # says nothing: treated as a write
        (Approval.ALWAYS, True, False, True),
        (Approval.NEVER, False, True, False),
    ],
)
def test_which_calls_wait_for_approval(
    policy: Approval, read_only: bool | None, destructive: bool | None, expected: bool
) -> None:
    assert needs_approval(policy, _tool(read_only=read_only, destructive=destructive)) is expected


@pytest.mark.parametrize(
    ("catalogue", "tool", "expected"),
    [
        ("time", "get_current_time", "time__get_current_time"),
        ("mcp.everything", "get-sum", None),  # the dot is replaced, a digest added
        ("a" * 60, "tool", None),  # too long: cut, a digest added
    ],
)
def test_function_names_are_what_the_model_api_accepts_and_unique(
    catalogue: str, tool: str, expected: str | None
) -> None:
    name = function_name(catalogue, tool)
    assert re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", name)
    if expected is not None:
        assert name == expected
    assert function_name(catalogue, tool + "x") != name


def test_two_names_that_sanitise_alike_stay_apart() -> None:
    assert function_name("a.b", "t") != function_name("a_b", "t")


def test_the_allowlist_filters_and_the_policy_applies_per_tool() -> None:
    rules = SourceRules(
        allowed_tools=frozenset({"read", "write"}),
        approval=Approval.WRITES,
        tool_approvals={"read": Approval.ALWAYS},
    )
    listed = [_tool("read", True, False), _tool("write", False), _tool("other", True)]
    offered = offered_tools("src", listed, rules)
    assert [(o.function_name, o.needs_approval) for o in offered] == [
        ("src__read", True),
        ("src__write", True),
    ]


def test_the_listing_digest_ignores_order_and_descriptions_but_not_schemas() -> None:
    one = [_tool("a", True), _tool("b")]
    reordered = [ListedTool("b", "reworded", SCHEMA), ListedTool("a", None, SCHEMA, True)]
    assert listing_digest(one) == listing_digest(reordered)
    changed = [_tool("a", True), ListedTool("b", None, {"type": "object"})]
    assert listing_digest(one) != listing_digest(changed)


def test_arguments_are_canonical_and_digested() -> None:
    assert canonical_arguments({"b": 1, "a": "é"}) == '{"a":"é","b":1}'
    assert arguments_digest({"b": 1, "a": 2}) == arguments_digest({"a": 2, "b": 1})
    assert len(arguments_digest({})) == 32


@pytest.mark.parametrize(
    ("text", "limit", "kept"),
    [("short", 100, "short"), ("é" * 1000, 300, None), ("x" * 5000, 256, None)],
)
def test_results_are_cut_to_their_cap_and_say_so(text: str, limit: int, kept: str | None) -> None:
    cut = cut_result(text, limit)
    assert len(cut.encode()) <= limit
    if kept is not None:
        assert cut == kept
    else:
        assert cut.endswith(f"bytes of {len(text.encode())}]")
