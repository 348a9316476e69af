"""The `ks load` file format and the search query shaping, without a database."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from achilles.db.knowledge.store import any_word_query
from achilles.ks.bundle import KnowledgeBundle


def test_a_full_bundle_parses_with_from_and_to_links() -> None:
    bundle = KnowledgeBundle.model_validate(
        {
            "users": [{"key": "alice", "timezone": "Europe/Berlin"}],
            "groups": [{"name": "eng", "members": ["alice", "bob"]}],
            "documents": [
                {"key": "a", "title": "A", "body": "...", "readers": ["carol"], "groups": ["eng"]}
            ],
            "links": [{"from": "a", "to": "b"}],
        }
    )
    assert bundle.links[0].relation == "related"
    assert bundle.referenced_users() == {"alice", "bob", "carol"}
    assert bundle.referenced_groups() == {"eng"}


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"documents": [{"key": "a", "title": "A"}]}, "documents.0.body", "Field required"),
        ({"documents": [{"key": " a", "title": "A", "body": ""}]}, "documents.0.key", "pattern"),
        ({"users": [{"key": "x", "timezone": "Mars/Olympus"}]}, "users.0.timezone", "unknown IANA"),
        ({"links": [{"from": "a", "to": "a"}]}, "links.0", "cannot link to itself"),
        (
            {"documents": [{"key": "a", "title": "A", "body": "", "acl": []}]},
            "documents.0.acl",
            "Extra inputs",
        ),
        (
            {"documents": [{"key": "a", "title": "A", "body": ""}] * 2},
            "",
            "documents: 'a' appears twice",
        ),
    ],
)
def test_bad_bundles_name_the_field(data: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(ValidationError) as raised:
        KnowledgeBundle.model_validate(data)
    error = raised.value.errors()[0]
    assert ".".join(str(p) for p in error["loc"]) == field
    assert message in error["msg"]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("deployment runbook", "deployment or runbook"),
        ('"exact phrase" -excluded OR x', "exact or phrase or excluded or OR or x"),
        ("Übersicht über Pläne", "Übersicht or über or Pläne"),
        ("?!  --", None),
    ],
)
def test_search_matches_any_word_and_drops_operators(query: str, expected: str | None) -> None:
    assert any_word_query(query) == expected
