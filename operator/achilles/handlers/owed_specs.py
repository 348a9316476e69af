"""Spec writes the database owes Agent resources (`db/journal/owed_spec.py`: a withdrawn
model, a deactivated owner): patch each CR, tell its owner, forget. Called by the sweeper
and the scheduler, and at once by the AgentModel handler; what a failure leaves stays
owed in the database."""

from __future__ import annotations

from achilles.handlers.agent_queue import agent_ref
from achilles.handlers.context import Handles
from achilles.services import agents


def deliver_owed_specs(context: Handles) -> bool:
    for owed in agents.owed_specs(context.database):
        if context.resources.patch_agent_spec(owed.namespace, owed.name, owed.patch):
            ref = agent_ref(owed.name, owed.namespace, owed.uid)
            for write in owed.writes.values():
                context.resources.post_event(ref, write.event_type, write.reason, write.message)
        agents.spec_delivered(context.database, owed)
    return True
