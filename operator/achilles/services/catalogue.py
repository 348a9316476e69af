"""Models, tools and platform settings: cluster-scoped CRs mirrored into their tables."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from achilles.db.database import Database
from achilles.db.journal import agent_links, catalogue
from achilles.db.journal.settings import Settings, write_settings
from achilles.db.outbox.settings import write_notification_settings
from achilles.db.tools import sources
from achilles.k8s.resources.agent_model import AgentModelSpec
from achilles.k8s.resources.agent_platform import AgentPlatformSpec
from achilles.k8s.resources.agent_tool import AgentToolSpec
from achilles.services.mcp_sources import source_row

# The Agents a catalogue change touched, as this service returns them (the handlers
# requeue them by this type, and import no query module).
AgentRef = catalogue.AgentRef


@dataclass(frozen=True)
class ModelMirrored:
    model_id: int
    default_conflict: str | None  # the other default model, when two claim it
    # A new model: the agents with none, whose CR may name it (reconciled before it
    # existed); their handler reads them again (`agents_awaiting_a_model`).
    awaiting: list[catalogue.AgentRef] = field(default_factory=list)
    # The object this name mirrored before was deleted unseen (another uid now): its
    # agents were withdrawn from it as its delete event would have (seed 000: a model
    # deleted and created again revives nobody); their CRs are owed `spec.model: null`.
    withdrawn: list[catalogue.AgentRef] = field(default_factory=list)


def mirror_model(
    database: Database, name: str, spec: AgentModelSpec, *, uid: str | None = None
) -> ModelMirrored:
    """The model's row as its object says; `uid`: that object's (issue 36 item 8)."""
    secret = spec.api_key_secret_ref
    with database.transaction() as session:
        agent_links.lock_model_name(session, name, shared=False)
        _found, mirrored = catalogue.model_uid(session, name)
        withdrawn: list[catalogue.AgentRef] = []
        if catalogue.is_another_object(mirrored, uid):
            withdrawn = catalogue.withdraw_model(session, name)
        model_id, created = catalogue.upsert_model(
            session,
            catalogue.ModelRow(
                name=name,
                base_url=spec.base_url,
                provider_model=spec.model,
                api_key_secret_name=secret.name if secret else None,
                api_key_secret_key=secret.key if secret else None,
                is_default=spec.is_default,
                uid=uid,
            ),
        )
        conflict = None
        if not catalogue.set_default_model(session, name, spec.is_default):
            conflict = catalogue.default_model_name(session)
        awaiting = catalogue.agents_awaiting_a_model(session) if created else []
    return ModelMirrored(model_id, conflict, awaiting, withdrawn)


def withdraw_model(
    database: Database, name: str, *, uid: str | None = None
) -> list[catalogue.AgentRef]:
    """DESIGN §4: its agents stop (model_id NULL); re-adding the name revives nobody.
    Their CRs are owed `spec.model: null` (delivered by `agents.deliver_owed_specs`).
    `uid`: the deleted object's; a newer object of the name is left alone."""
    with database.transaction() as session:
        return catalogue.withdraw_model(session, name, uid=uid)


@dataclass(frozen=True)
class CatalogueConverged:
    """Rows whose resource was deleted while no operator watched, now gone too."""

    withdrawn_models: dict[str, list[catalogue.AgentRef]] = field(default_factory=dict)
    # Each removed tool's agents, which were linked to it (`remove_tool`).
    removed_tools: dict[str, list[catalogue.AgentRef]] = field(default_factory=dict)


def forget_deleted_catalogue(
    database: Database,
    *,
    live_models: set[str] | None,
    live_tools: set[str] | None,
    listed_at: datetime,
) -> CatalogueConverged:
    """Models and tools whose AgentModel/AgentTool no longer exists (deleted while the
    operator was down, or in a watch gap): withdrawn and removed exactly as their delete
    event would have done. Cluster-scoped names are unique, so a row is judged by its
    name. `live_*` are listings that began at `listed_at` (the database's clock; None:
    that listing failed, judge nothing): a row made since may belong to a resource
    created after its listing, so only older rows are judged."""
    withdrawn: dict[str, list[catalogue.AgentRef]] = {}
    removed: dict[str, list[catalogue.AgentRef]] = {}
    with database.transaction() as session:
        if live_models is not None:
            for name in catalogue.model_names(session, created_before=listed_at):
                if name not in live_models:
                    withdrawn[name] = catalogue.withdraw_model(session, name)
        if live_tools is not None:
            for name in catalogue.tool_names(session, created_before=listed_at):
                if name not in live_tools:
                    unlinked = catalogue.delete_tool(session, name)
                    if unlinked is not None:
                        removed[name] = unlinked
    return CatalogueConverged(withdrawn, removed)


@dataclass(frozen=True)
class ToolMirrored:
    tool_id: int
    # A new tool: the agents whose last reconcile found it missing from their
    # `spec.tools`; their handler reads them again (`agents_awaiting_a_tool`).
    awaiting: list[catalogue.AgentRef] = field(default_factory=list)
    # The object this name mirrored before was deleted unseen (another uid now): its
    # links went as its delete event would have taken them; those agents are read again.
    unlinked: list[catalogue.AgentRef] = field(default_factory=list)


def mirror_tool(
    database: Database, name: str, spec: AgentToolSpec, *, uid: str | None = None
) -> ToolMirrored:
    """The tool's row as its object says; `uid`: that object's (issue 36 item 8)."""
    with database.transaction() as session:
        agent_links.lock_tool_name(session, name, shared=False)
        _found, mirrored = catalogue.tool_uid(session, name)
        unlinked: list[catalogue.AgentRef] = []
        if catalogue.is_another_object(mirrored, uid):
            unlinked = catalogue.delete_tool(session, name) or []
        tool_id, created = catalogue.upsert_tool(
            session, name, spec.description, spec.implementation, spec.agents_allowed, uid=uid
        )
        # An MCP source's server and rules (issue 38); its tools are listed afterwards
        # (`services/mcp_sources.discover`), outside this transaction.
        if spec.mcp is not None:
            sources.write_source(session, tool_id, source_row(spec.mcp))
        else:
            sources.delete_source(session, tool_id)
        awaiting = catalogue.agents_awaiting_a_tool(session, name) if created else []
    return ToolMirrored(tool_id, awaiting, unlinked)


def remove_tool(
    database: Database, name: str, *, uid: str | None = None
) -> list[catalogue.AgentRef]:
    """The tool and its links gone (DESIGN §4: its agents keep the KS core); the agents
    that were linked to it, whose CRs still name it: their handler reads them again, they
    show it unknown and link to it if it is created again (`agents_awaiting_a_tool`).
    `uid`: the deleted object's; a newer object of the name is left alone."""
    with database.transaction() as session:
        _found, mirrored = catalogue.tool_uid(session, name)
        if catalogue.is_another_object(mirrored, uid):
            return []
        return catalogue.delete_tool(session, name) or []


def mirror_platform(database: Database, spec: AgentPlatformSpec) -> None:
    with database.transaction() as session:
        webhook = spec.notifications
        write_notification_settings(
            session,
            webhook_url=webhook.webhook_url if webhook else None,
            secret_name=webhook.secret_ref.name if webhook else None,
            secret_key=webhook.secret_ref.key if webhook else None,
            retention_days=spec.run_retention_days,
        )
        write_settings(
            session,
            Settings(
                timezone=spec.timezone,
                weekly_token_budget=spec.weekly_token_budget,
                max_iterations=spec.max_iterations,
                max_concurrency=spec.max_concurrency,
                run_timeout_seconds=spec.run_timeout_seconds,
                platform_prompt=spec.platform_prompt,
                max_run_tokens=spec.max_run_tokens,
                suspend_after_failures=spec.suspend_after_failures,
            ),
        )
