"""The three locked Knowledge Store tools every agent has: search, read, related.

They are read-only and act strictly under the run owner's rights: the owner id
comes from the run's context, never from the model's arguments, and the store
enforces access in the database. A document the owner cannot see is reported
exactly like one that does not exist.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from achilles.errors import ToolError
from achilles.tools.base import Tool, ToolArgs, ToolContext, tool

# Keeps one huge document from swamping the model's context window.
MAX_BODY_CHARS = 20_000


class SearchArgs(ToolArgs):
    query: str = Field(
        min_length=1, max_length=1000, description="Words to look for; any word may match."
    )
    limit: int = Field(default=5, ge=1, le=20, description="Maximum number of results.")


class DocumentArgs(ToolArgs):
    document_id: int = Field(ge=1, description="A document id from search_knowledge results.")


class RelatedArgs(DocumentArgs):
    limit: int = Field(default=10, ge=1, le=50, description="Maximum number of results.")


@tool("search_knowledge", args=SearchArgs)
def search_knowledge(args: SearchArgs, ctx: ToolContext) -> dict[str, Any]:
    """Full-text search of the organisation's Knowledge Store (documents you may read).

    Returns document ids, titles and snippets, best match first.
    """
    hits = ctx.knowledge.search(ctx.owner_user_id, args.query, limit=args.limit)
    return {
        "results": [
            {"id": hit.document_id, "title": hit.title, "snippet": hit.snippet} for hit in hits
        ]
    }


@tool("read_document", args=DocumentArgs)
def read_document(args: DocumentArgs, ctx: ToolContext) -> dict[str, Any]:
    """Read one Knowledge Store document in full, by id."""
    document = ctx.knowledge.read(ctx.owner_user_id, args.document_id)
    if document is None:
        raise ToolError(f"document {args.document_id} not found")
    body = document.body
    truncated = len(body) > MAX_BODY_CHARS
    return {
        "id": document.document_id,
        "title": document.title,
        "body": body[:MAX_BODY_CHARS],
        "truncated": truncated,
        "updated_at": document.updated_at.isoformat(),
    }


@tool("related_documents", args=RelatedArgs)
def related_documents(args: RelatedArgs, ctx: ToolContext) -> dict[str, Any]:
    """Documents linked to the given one in the Knowledge Store graph, with the link's relation."""
    related = ctx.knowledge.related(ctx.owner_user_id, args.document_id, limit=args.limit)
    if related is None:
        raise ToolError(f"document {args.document_id} not found")
    return {
        "document_id": args.document_id,
        "related": [
            {
                "id": item.document_id,
                "title": item.title,
                "relation": item.relation,
                "direction": item.direction,
            }
            for item in related
        ],
    }


CORE_TOOLS: tuple[Tool[Any], ...] = (search_knowledge, read_document, related_documents)
