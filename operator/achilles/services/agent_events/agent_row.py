"""An Agent's row: the CR reconciled into its `agents` row, and its status from the
journal, in one transaction (the reconcile of an Agent event, `services.agent_events`).

Level-triggered: every event of an Agent (and every periodic resync) makes the row say
what the CR says and recomputes the status from the journal; doing it twice changes
nothing. The row is keyed by the CR's uid, so a re-created CR of the same name is a
new agent with a journal of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from achilles.db.database import Database
from achilles.db.inbox import settings as inbox_settings
from achilles.db.journal import agents as agent_rows
from achilles.db.journal import catalogue, owed_spec
from achilles.db.journal import reconcile as reconcile_rows
from achilles.domain.agent_status import agent_status
from achilles.domain.schedule import schedule_to_db
from achilles.k8s.resources.agent import AgentSpec


@dataclass(frozen=True)
class AgentObject:
    """The parts of an Agent CR the operator reads."""

    uid: str
    namespace: str
    name: str
    generation: int | None
    spec: AgentSpec
    status: dict[str, Any]


@dataclass(frozen=True)
class AgentReconciled:
    agent_id: int | None
    status: dict[str, Any]
    # Spec fields the operator must write back onto the CR (owner deactivated; the
    # default model given to a new agent).
    spec_patch: dict[str, Any]


def definition_of(agent: AgentObject, model_name: str | None) -> agent_rows.AgentDefinition:
    spec = agent.spec
    return agent_rows.AgentDefinition(
        uid=agent.uid,
        namespace=agent.namespace,
        cr_name=agent.name,
        name=spec.display_name or agent.name,
        description=spec.description,
        prompt=spec.prompt,
        schedule=schedule_to_db(spec.schedule) if spec.schedule is not None else None,
        model_name=model_name,
        tool_names=tuple(spec.tools),
        enabled=spec.enabled,
        admin_paused=spec.admin_paused,
        max_run_tokens=spec.max_run_tokens,
        suspend_after_failures=spec.suspend_after_failures,
    )


def reconcile_agent(
    database: Database, agent: AgentObject, *, is_new: bool = False
) -> AgentReconciled:
    spec_patch: dict[str, Any] = {}
    with database.transaction() as session:
        # The clock, the owner and the row (locked) in one statement (db/journal/reconcile.py).
        start = reconcile_rows.begin_reconcile(session, agent.uid, agent.spec.owner)
        now, owner, row = start.now, start.owner, start.row
        # What the operator still owes this CR (a withdrawn model, a deactivated owner)
        # wins over what the CR says until it is delivered: re-creating a model of that
        # name meanwhile must not revive the agent silently (seed 000).
        owed = owed_spec.settle_owed(
            session,
            row.agent_id if row else None,
            row.owed if row else None,
            {
                owed_spec.MODEL_FIELD: agent.spec.model,
                owed_spec.ENABLED_FIELD: agent.spec.enabled,
            },
        )
        model_name = owed.get(owed_spec.MODEL_FIELD, agent.spec.model)
        if model_name is None and is_new and owed_spec.MODEL_FIELD not in owed:
            # DESIGN §2: the list's preset is offered to a new agent, at creation only.
            model_name = catalogue.default_model_name(session)
            if model_name is not None:
                spec_patch["model"] = model_name
        if owner is None:
            # No user, no row (agents.user_id is NOT NULL); a row from before the
            # owner's deletion went with it (CASCADE).
            agent_rows.delete_agent_by_uid(session, agent.uid)
            status = agent_status(
                None,
                owner_missing=True,
                unknown_tools=(),
                schedule=None,
                previous=agent.status,
                generation=agent.generation,
                now=now,
            )
            return AgentReconciled(None, status, spec_patch)
        definition = definition_of(agent, model_name)
        if owed.get(owed_spec.ENABLED_FIELD) is False:
            definition = agent_rows.AgentDefinition(**{**definition.__dict__, "enabled": False})
        if not owner.active and definition.enabled:
            # Owner deactivation writes the owner's own switch (seed 000: no third lock).
            definition = agent_rows.AgentDefinition(**{**definition.__dict__, "enabled": False})
            spec_patch["enabled"] = False
        agent_id, created, schedule_changed = agent_rows.upsert_agent(
            session, definition, owner.user_id, row
        )
        unknown_tools = agent_rows.link_tools(
            session, agent_id, definition.tool_names, inserted=created
        )
        if unknown_tools:
            # A tool created while this reconcile linked: found now, or it finds this
            # agent awaiting it (recorded below, in this transaction).
            unknown_tools = agent_rows.link_awaited_tools(session, agent_id, unknown_tools)
        agent_rows.record_unknown_tools(
            session, agent_id, unknown_tools, row.unknown_tools if row is not None else None
        )
        if agent.spec.wake_on_reply is not None:
            # The owner's consent, as the portal writes it: the spec wins over the CLI's.
            inbox_settings.mirror_wake_on_reply(session, agent_id, agent.spec.wake_on_reply)
        status_row = reconcile_rows.settle_slot_and_status(
            session, agent_id, start, reset=schedule_changed
        )
        missing_model = None
        if model_name is not None and not status_row.locks.has_model:
            if agent_rows.link_named_model(session, agent_id, model_name):
                # Created while this reconcile wrote the row: settle with it.
                status_row = reconcile_rows.settle_slot_and_status(
                    session, agent_id, start, reset=schedule_changed
                )
            else:
                missing_model = model_name
    status = agent_status(
        status_row,
        owner_missing=False,
        unknown_tools=unknown_tools,
        missing_model=missing_model,
        schedule=definition.schedule,
        previous=agent.status,
        generation=agent.generation,
        now=now,
    )
    return AgentReconciled(agent_id, status, spec_patch)


def forget_agent(database: Database, uid: str) -> int | None:
    """The CR is gone: remove the row; its runs and links cascade. The old id, if any."""
    with database.transaction() as session:
        return agent_rows.delete_agent_by_uid(session, uid)
