"""Tools: argument validation fed back to the model, the catalogue, the clock, KS results."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from achilles.ks.store import Document, RelatedDocument, SearchHit
from achilles.tools.base import NoArgs, Tool, ToolContext, tool
from achilles.tools.catalogue import (
    CORE_TOOLS,
    OPTIONAL_TOOLSETS,
    known_implementations,
    select_tools,
)
from achilles.tools.ks import MAX_BODY_CHARS


class FakeKnowledge:
    """The KS port with one visible document (id 1) for user 10."""

    def __init__(self, body: str = "Body text.") -> None:
        self.body = body
        self.calls: list[tuple[str, int]] = []

    def search(self, user_id: int, query: str, *, limit: int) -> list[SearchHit]:
        self.calls.append(("search", user_id))
        return [SearchHit(1, "Runbook", "the **runbook**", 0.5)] if user_id == 10 else []

    def read(self, user_id: int, document_id: int) -> Document | None:
        self.calls.append(("read", user_id))
        if user_id == 10 and document_id == 1:
            return Document(1, "runbook", "Runbook", self.body, datetime(2026, 1, 1, tzinfo=UTC))
        return None

    def related(
        self, user_id: int, document_id: int, *, limit: int
    ) -> list[RelatedDocument] | None:
        if user_id == 10 and document_id == 1:
            return [RelatedDocument(2, "Handbook", "references", "incoming")]
        return None


@contextmanager
def _no_database() -> Iterator[Any]:
    raise AssertionError("these tools do not touch the database")
    yield


def _ctx(knowledge: FakeKnowledge | None = None, user_id: int = 10) -> ToolContext:
    return ToolContext(
        run_id=1,
        agent_id=2,
        owner_user_id=user_id,
        owner_timezone=ZoneInfo("America/New_York"),
        knowledge=knowledge or FakeKnowledge(),
        transaction=_no_database,
        now=lambda: datetime(2026, 7, 4, 16, 30, tzinfo=UTC),
    )


def _invoke(name: str, arguments: str, ctx: ToolContext | None = None) -> Any:
    toolbox = select_tools(["clock"]).toolbox
    return json.loads(toolbox.invoke(name, arguments, ctx or _ctx()))


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ("{not json", "invalid arguments for read_document: arguments: Invalid JSON"),
        ('{"document_id": "abc"}', "document_id: Input should be a valid integer"),
        ('{"document_id": 0}', "document_id: Input should be greater than or equal to 1"),
        ("{}", "document_id: Field required"),
        ('{"document_id": 1, "user_id": 99}', "user_id: Extra inputs are not permitted"),
        ("[1]", "Input should be an object"),
    ],
)
def test_bad_arguments_become_an_error_result_naming_the_field(
    arguments: str, message: str
) -> None:
    result = _invoke("read_document", arguments)
    assert set(result) == {"error"}
    assert message in result["error"]


def test_the_owner_comes_from_the_context_never_from_the_model() -> None:
    knowledge = FakeKnowledge()
    _invoke("search_knowledge", '{"query": "runbook"}', _ctx(knowledge))
    _invoke("read_document", '{"document_id": 1}', _ctx(knowledge))
    assert knowledge.calls == [("search", 10), ("read", 10)]
    # An owner without access gets "not found", same as a missing document.
    assert _invoke("read_document", '{"document_id": 1}', _ctx(user_id=11)) == {
        "error": "document 1 not found"
    }
    assert _invoke("read_document", '{"document_id": 2}') == {"error": "document 2 not found"}


def test_ks_tools_return_compact_json() -> None:
    assert _invoke("search_knowledge", '{"query": "runbook", "limit": 3}') == {
        "results": [{"id": 1, "title": "Runbook", "snippet": "the **runbook**"}]
    }
    assert _invoke("related_documents", '{"document_id": 1}') == {
        "document_id": 1,
        "related": [
            {"id": 2, "title": "Handbook", "relation": "references", "direction": "incoming"}
        ],
    }
    assert _invoke("related_documents", '{"document_id": 5}') == {"error": "document 5 not found"}


def test_a_huge_document_is_truncated_and_says_so() -> None:
    result = _invoke("read_document", '{"document_id": 1}', _ctx(FakeKnowledge("x" * 50_000)))
    assert len(result["body"]) == MAX_BODY_CHARS
    assert result["truncated"] is True


def test_current_time_is_in_the_owners_zone_and_takes_empty_arguments() -> None:
    for arguments in ("", "{}", "  "):
        assert _invoke("current_time", arguments) == {
            "local_time": "2026-07-04T12:30:00-04:00",
            "timezone": "America/New_York",
            "weekday": "Saturday",
            "utc_time": "2026-07-04T16:30:00+00:00",
        }


def test_an_invented_tool_is_an_error_listing_the_real_ones() -> None:
    result = _invoke("delete_everything", "{}")
    assert result["error"].startswith("unknown tool 'delete_everything'; available tools: ")
    assert "search_knowledge" in result["error"]


def test_every_agent_gets_the_three_core_tools_and_only_known_optional_ones() -> None:
    core = ("search_knowledge", "read_document", "related_documents")
    assert select_tools([]).toolbox.names == core
    selection = select_tools(["clock", "teleporter", "clock"])
    assert selection.toolbox.names == (*core, "current_time")
    assert selection.unknown == ("teleporter",)
    assert "clock" in known_implementations()


def test_specs_are_the_pydantic_schemas_the_model_sees() -> None:
    specs = {s["function"]["name"]: s for s in select_tools(["clock"]).toolbox.specs()}
    search = specs["search_knowledge"]["function"]
    assert search["parameters"]["required"] == ["query"]
    assert search["parameters"]["additionalProperties"] is False
    assert search["parameters"]["properties"]["limit"]["maximum"] == 20
    assert search["description"].startswith("Full-text search")
    assert specs["current_time"]["function"]["parameters"]["properties"] == {}


def test_tool_names_are_unique_across_the_catalogue() -> None:
    names = [t.name for t in CORE_TOOLS] + [
        t.name for toolset in OPTIONAL_TOOLSETS.values() for t in toolset
    ]
    assert len(names) == len(set(names))


def test_a_tool_needs_a_valid_name_and_a_description() -> None:
    with pytest.raises(ValueError, match="must match"):
        Tool(name="has space", description="d", args_model=NoArgs, handler=lambda a, c: None)
    with pytest.raises(ValueError, match="needs a description"):

        @tool("undocumented", args=NoArgs)
        def undocumented(args: NoArgs, ctx: ToolContext) -> None:
            return None


def test_only_selected_toolsets_contribute_run_start_notes() -> None:
    assert select_tools(["clock"]).run_start_notes == ()
    assert len(select_tools(["inbox", "clock"]).run_start_notes) == 1
