"""An Agent's retry taken from the workqueue (`handlers.agents.handle_queued` of an
`AgentToRead`) reads the Agent afresh and reconciles it through the real database; one
that is gone meanwhile is handled as its deletion: its row and its Jobs go, and the
queue's re-add of an earlier failure is settled."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

from sqlalchemy import Engine, text

from achilles.db.database import Database
from achilles.handlers.agent_queue import AgentToRead, QueuedAgent
from achilles.handlers.agents import AgentReconciler, handle_queued
from achilles.handlers.context import StatusMarks
from achilles.handlers.statuses import WrittenStatuses
from achilles.k8s.jobs import RunJobs
from achilles.k8s.objects import ObjectRef, Resources
from achilles.runtime.workqueue import WorkQueue
from tests.db.factories import make_owner
from tests.db.reconciling import reconcile_event


class Jobs:
    def __init__(self) -> None:
        self.deleted_for: list[list[int]] = []

    def delete_for_agents(self, agent_ids: list[int]) -> None:
        self.deleted_for.append(agent_ids)


def _agent_rows(db: Engine, uid: str) -> int:
    with db.connect() as conn:
        query = text("SELECT count(*) FROM agents WHERE cr_uid = :uid")
        return int(conn.execute(query, {"uid": uid}).scalar_one())


def test_an_agent_gone_before_its_retry_is_read_is_handled_as_deleted(
    db: Engine, database: Database
) -> None:
    made = reconcile_event(database, "gone", make_owner(db), uid="uid-gone")
    assert made.agent_id is not None
    ref = ObjectRef("Agent", "agents", "gone", "team", "uid-gone")
    read: list[ObjectRef] = []

    def read_object(asked: ObjectRef) -> dict[str, object] | None:
        read.append(asked)
        return None  # the API server has no such Agent any more

    queue: WorkQueue[str, QueuedAgent] = WorkQueue()
    jobs = Jobs()
    reconciler = AgentReconciler(
        database=database,
        resources=cast(Resources, SimpleNamespace(read_object=read_object)),
        jobs=cast(RunJobs, jobs),
        queue=queue,
        settled_agents=None,
        written=WrittenStatuses(),
        marks=cast(StatusMarks, None),  # a deletion marks nothing
        emit=lambda signal: None,
    )
    queue.add_rate_limited("uid-gone", AgentToRead(ref))  # an earlier failure's re-add
    queue.put("uid-gone", AgentToRead(ref))  # ... and a requeue, ready now
    taken = queue.take(0)
    assert taken is not None

    handle_queued(reconciler, taken[1])
    queue.done("uid-gone")

    assert read == [ref]  # read afresh on its turn
    assert _agent_rows(db, "uid-gone") == 0
    assert jobs.deleted_for == [[made.agent_id]]
    # The handling succeeded: the earlier failure's re-add is settled with it.
    assert not queue.retrying("uid-gone")
    assert queue.take(0) is None
