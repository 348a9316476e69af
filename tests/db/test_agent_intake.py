"""The start-up intake (issue 20): a listed Agent whose row, status and observedGeneration
already agree costs no write and no statement; anything that a reconcile would change is
reconciled in full.

Through the real database and the service the Agent handler calls
(`services/agent_events.py`), with the CR's status as the API server keeps it after the
operator's merge patch (null fields dropped). Statements are counted on the engine."""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import Engine, text

from achilles.db.database import Database
from achilles.domain.agent_event import AgentEvent, AgentReconciliation
from achilles.domain.agent_status import needs_patch
from achilles.k8s.annotations import RUN_REQUESTED_AT
from achilles.k8s.resources.agent_tool import AgentToolSpec
from achilles.services import catalogue, users
from achilles.services.agent_events import reconcile_agent_event, settled_from_memory
from achilles.services.agent_intake import SettledAgents
from tests.db.factories import make_model, make_owner
from tests.db.statements import Statements


def _as_stored(value: Any) -> Any:
    """What a merge patch leaves on the object: null fields are removed, not stored."""
    if isinstance(value, dict):
        return {k: _as_stored(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_as_stored(v) for v in value]
    return value


class Cluster:
    """Agent CRs as the API server would hold them, written by the operator's answers."""

    def __init__(self, owner: str, model: str) -> None:
        self.owner, self.model = owner, model
        self.objects: dict[str, dict[str, Any]] = {}

    def create(self, name: str, **spec: Any) -> str:
        uid = str(uuid.uuid4())
        self.objects[name] = {
            "uid": uid,
            "generation": 1,
            "spec": {
                "owner": self.owner,
                "prompt": "Summarise my week.",
                "model": self.model,
                "schedule": {"type": "interval", "everyHours": 6},
                **spec,
            },
            "status": {},
        }
        return uid

    def change(self, name: str, **spec: Any) -> None:
        obj = self.objects[name]
        obj["spec"] = {**obj["spec"], **spec}
        obj["generation"] += 1

    def event(self, name: str) -> AgentEvent:
        obj = self.objects[name]
        return AgentEvent(
            uid=obj["uid"],
            namespace="team",
            name=name,
            generation=obj["generation"],
            deleted=False,
            spec=obj["spec"],
            status=obj["status"],
            annotations={},
        )

    def apply(self, name: str, answer: AgentReconciliation) -> bool:
        """The handler's part: patch the status when it differs. True when patched."""
        obj = self.objects[name]
        assert answer.status is not None
        if not needs_patch(obj["status"], answer.status):
            return False
        obj["status"] = _as_stored({**obj["status"], **answer.status})
        return True


@pytest.fixture
def cluster(db: Engine) -> Cluster:
    return Cluster(make_owner(db), make_model(db))


def _reconcile_all(database: Database, cluster: Cluster) -> None:
    for name in cluster.objects:
        cluster.apply(name, reconcile_agent_event(database, cluster.event(name)))


def _xmin(db: Engine, uid: str) -> str:
    with db.connect() as conn:
        return str(
            conn.execute(text("SELECT xmin FROM agents WHERE cr_uid = :u"), {"u": uid}).scalar()
        )


def test_a_listed_agent_that_agrees_costs_no_statement(
    db: Engine, database: Database, cluster: Cluster
) -> None:
    uids = [cluster.create(f"agent-{i}") for i in range(3)]
    _reconcile_all(database, cluster)
    before = {uid: _xmin(db, uid) for uid in uids}
    settled = SettledAgents(database)
    first = reconcile_agent_event(database, cluster.event("agent-0"), settled)
    assert first.unchanged  # the snapshot is read here, once
    statements = Statements(database)
    for name in ("agent-1", "agent-2"):
        answer = reconcile_agent_event(database, cluster.event(name), settled)
        assert answer.unchanged
        assert not cluster.apply(name, answer)  # the status it has is the status it keeps
        assert answer.agent_id == cluster.objects[name]["status"]["databaseId"]
    assert statements.count == 0
    assert {uid: _xmin(db, uid) for uid in uids} == before
    # Without the snapshot the same event is a transaction of its own.
    reconcile_agent_event(database, cluster.event("agent-1"))
    assert statements.count > 0  # a full reconcile (tests/db/test_reconcile_statements.py)


def test_a_snapshot_read_at_start_leaves_the_first_listed_agent_no_statement(
    db: Engine, database: Database, cluster: Cluster
) -> None:
    cluster.create("agent-0")
    _reconcile_all(database, cluster)
    settled = SettledAgents(database)
    settled.preload().join(timeout=60)  # the operator's start: kopf lists next
    statements = Statements(database)
    answer = reconcile_agent_event(database, cluster.event("agent-0"), settled)
    assert answer.unchanged
    assert statements.count == 0


def test_what_a_reconcile_would_change_is_reconciled(
    db: Engine, database: Database, cluster: Cluster
) -> None:
    for name in ("same", "new-prompt", "run-ended", "wake", "owner-off", "unknown-tool"):
        cluster.create(name, wakeOnReply=False)
    _reconcile_all(database, cluster)
    cluster.change("new-prompt", prompt="Summarise my month.")  # a new generation
    cluster.change("wake", wakeOnReply=True)
    cluster.objects["wake"]["generation"] -= 1  # as if observed: only the setting differs
    cluster.change("unknown-tool", tools=["no-such-tool"])
    cluster.objects["unknown-tool"]["generation"] -= 1
    with db.begin() as conn:
        agent_id = conn.execute(
            text("SELECT id FROM agents WHERE cr_name = 'run-ended'")
        ).scalar_one()
        conn.execute(
            text(
                "INSERT INTO agent_runs (agent_id, trigger, state, reason, finished_at)"
                " VALUES (:a, 'manual', 'skipped', 'already_running', now())"
            ),
            {"a": agent_id},
        )
    settled = SettledAgents(database)
    answers = {
        name: reconcile_agent_event(database, cluster.event(name), settled)
        for name in cluster.objects
    }
    assert {name for name, answer in answers.items() if answer.unchanged} == {"same", "owner-off"}
    assert cluster.apply("run-ended", answers["run-ended"])  # lastRun came from the journal
    assert answers["new-prompt"].status is not None
    assert answers["new-prompt"].status["observedGeneration"] == 2
    # A digest answers once: the same listing again is reconciled in full.
    assert not reconcile_agent_event(database, cluster.event("same"), settled).unchanged
    # An owner deactivated while no operator ran: the row still says enabled.
    users.upsert_user(database, cluster.owner, timezone=None, active=False)
    with db.begin() as conn:  # and nothing owed yet: only the owner's state says it
        conn.execute(
            text(
                "UPDATE agents SET enabled = true, meta = meta - 'owed_spec'"
                " WHERE cr_name = 'owner-off'"
            )
        )
    again = SettledAgents(database)
    answer = reconcile_agent_event(database, cluster.event("owner-off"), again)
    assert not answer.unchanged
    assert answer.spec_patch == {"enabled": False}


def test_an_agent_awaiting_a_tool_is_never_settled_from_the_snapshot(
    db: Engine, database: Database, cluster: Cluster
) -> None:
    """Its row and status agree with its CR, but a listing (a retry's fresh read, when a
    new tool requeues it) must reconcile it: that links the tool."""
    cluster.create("awaiting", tools=["later-tool"])
    _reconcile_all(database, cluster)
    assert not reconcile_agent_event(
        database, cluster.event("awaiting"), SettledAgents(database)
    ).unchanged
    catalogue.mirror_tool(database, "later-tool", AgentToolSpec(implementation="inbox"))
    answer = reconcile_agent_event(database, cluster.event("awaiting"), SettledAgents(database))
    assert not answer.unchanged
    cluster.apply("awaiting", answer)
    (tools,) = [
        c
        for c in cluster.objects["awaiting"]["status"]["conditions"]
        if c["type"] == "ToolsResolved"
    ]
    assert tools["status"] == "True"
    # Linked and recorded as such: settled from now on.
    assert reconcile_agent_event(
        database, cluster.event("awaiting"), SettledAgents(database)
    ).unchanged


def test_kopfs_event_loop_settles_a_listed_agent_from_memory_or_hands_it_on(
    db: Engine, database: Database, cluster: Cluster
) -> None:
    """`settled_from_memory` (the handler's event-loop path) never waits and never reads:
    None sends the Agent to the thread's full answer."""
    for name in ("same", "asked", "changed", "early"):
        cluster.create(name)
    _reconcile_all(database, cluster)
    settled = SettledAgents(database)
    # The snapshot not read yet: handed on at once, no statement (the thread reads it).
    statements = Statements(database)
    assert settled_from_memory(database, cluster.event("early"), settled) is None
    assert statements.count == 0
    settled.preload().join(timeout=60)
    statements = Statements(database)
    answer = settled_from_memory(database, cluster.event("same"), settled)
    assert answer is not None
    assert answer.unchanged
    assert answer.agent_id == cluster.objects["same"]["status"]["databaseId"]
    assert not cluster.apply("same", answer)
    # A run request its status has not answered: the thread answers it.
    asked = replace(cluster.event("asked"), annotations={RUN_REQUESTED_AT: "request-1"})
    assert settled_from_memory(database, asked, settled) is None
    cluster.change("changed", prompt="Summarise my month.")
    assert settled_from_memory(database, cluster.event("changed"), settled) is None
    assert statements.count == 0
    # While the snapshot is being read again (its lock held), nothing waits for it.
    with settled._lock:
        assert settled_from_memory(database, cluster.event("early"), settled) is None
    # ... and the thread's answer still finds the digests the loop did not take.
    assert reconcile_agent_event(database, cluster.event("early"), settled).unchanged
