"""What the operator did not see still happens (issue 18, items 1, 5 and 6), on the real
control plane and PostgreSQL with `achilles operator` as a real process:

- an AgentModel and an AgentTool deleted while the operator is down are withdrawn when
  it starts again: its agents' `spec.model` cleared, phase NoModel, the tool's links
  gone; re-creating the model revives nobody;
- a reply that lands while the agent runs wakes it once that run ends (the reply's own
  wake is a `skipped/already_running` row), and the woken run takes the reply; the
  owner's consent is the Agent's `spec.wakeOnReply`;
- an owner deactivated, reactivated (the owner switches the agent back on) and
  deactivated again gets `spec.enabled: false` written again, through the CLI and
  through `users` directly.

The runs are the slow runner (`slow_runner.py`, which takes inbox replies as
the runner's start note does); the test ends each run itself when it needs it ended.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from sqlalchemy import text
from sqlalchemy.engine import Engine

from achilles.db.database import Database
from achilles.k8s.annotations import RUN_REQUESTED_AT, format_run_request
from achilles.services.run_journal import RunJournal
from tests.cluster.conftest import Cluster
from tests.cluster.install.api import Achilles
from tests.cluster.install.conftest import Release
from tests.cluster.install.operator_support import (
    agent_spec,
    agent_status,
    journal_rows,
    new_owner,
    running_operator,
)
from tests.cluster.install.test_operator_runs import _env
from tests.crd_cases import agent, agent_model, agent_tool
from tests.db import inbox_support as box
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

HOLD_SECONDS = 600.0  # the slow runner holds its run until the test ends it


@pytest.fixture(scope="module")
def runs(achilles_release: Release) -> Iterator[RunJournal]:
    """The runner's own journal writes, to end a held run when the test needs it ended."""
    database = Database(achilles_release.database_url)
    yield RunJournal(database)
    database.dispose()


def _events(api: Achilles, namespace: str, reason: str, name: str) -> list[Any]:
    core = client.CoreV1Api(api.custom.api_client)
    return [
        event
        for event in core.list_namespaced_event(namespace).items
        if event.reason == reason and event.involved_object.name == name
    ]


def _wait_phase(
    api: Achilles,
    name: str,
    namespace: str,
    phase: str,
    log: Callable[[], str] = lambda: "",
    timeout: float = 90,
) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        status = agent_status(api, name, namespace)
        return status if status.get("phase") == phase else None

    found: dict[str, Any] = wait_for(reached, timeout, what=f"{name}: phase {phase} ({log()})")
    return found


def _wait_event(api: Achilles, namespace: str, reason: str, name: str) -> None:
    wait_for(lambda: _events(api, namespace, reason, name), 30, what=f"a {reason} Event on {name}")


def _wait_mirrored(journal: Engine, model: str, tool: str) -> None:
    """Agents link only tools already in the catalogue: create them after it."""
    wait_for(
        lambda: journal_rows(
            journal,
            "SELECT 1 FROM agent_models m, tools t WHERE m.name = :m AND t.name = :t",
            m=model,
            t=tool,
        ),
        60,
        what=f"AgentModel {model} and AgentTool {tool} mirrored",
    )


def _achilles(release: Release, cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "achilles", *args],
        env={
            **os.environ,
            "ACHILLES_DATABASE_URL": release.database_url,
            "KUBECONFIG": str(cluster.kubeconfig),
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _model_cleared(api: Achilles, name: str, namespace: str) -> bool:
    return "model" not in agent_spec(api, name, namespace)


def test_a_model_and_a_tool_deleted_while_the_operator_is_down_are_withdrawn_at_its_start(
    cluster: Cluster,
    achilles_release: Release,
    admin_api: Achilles,
    journal: Engine,
    namespace: str,
    tmp_path: Path,
) -> None:
    model, tool = f"m-{uuid.uuid4().hex[:6]}", f"t-{uuid.uuid4().hex[:6]}"
    owner = new_owner(journal)
    names = ("one", "two")
    with running_operator(
        cluster, achilles_release, tmp_path / "before.log", **_env(cluster, HOLD_SECONDS)
    ):
        admin_api.create(agent_model(model))
        admin_api.create(agent_tool(tool))
        _wait_mirrored(journal, model, tool)
        schedule = {"type": "interval", "everyHours": 2}
        for name in names:
            admin_api.create(
                agent(name, owner=owner, model=model, tools=[tool], schedule=schedule), namespace
            )
        for name in names:
            _wait_phase(admin_api, name, namespace, "Ready")
        wait_for(
            lambda: (
                len(
                    journal_rows(
                        journal,
                        "SELECT 1 FROM agent_tools l JOIN tools t ON t.id = l.tool_id"
                        " WHERE t.name = :t",
                        t=tool,
                    )
                )
                == 2
            ),
            30,
            what="both agents linked to the tool",
        )
    # No operator watches: both deletions go unseen.
    admin_api.delete("AgentModel", model)
    admin_api.delete("AgentTool", tool)

    with running_operator(
        cluster, achilles_release, tmp_path / "after.log", **_env(cluster, HOLD_SECONDS)
    ) as operator:
        for name in names:
            # A fresh operator: its start (slow on a busy machine) is in this wait.
            try:
                status = _wait_phase(admin_api, name, namespace, "NoModel", operator.log, 240)
            except AssertionError as exc:
                state = journal_rows(journal, "SELECT name, created_at, now() FROM agent_models")
                metas = journal_rows(journal, "SELECT cr_name, model_id, meta FROM agents")
                raise AssertionError(f"{exc}; models {state}; agents {metas}; {operator.log()}")
            # The spec write is owed apart from the status (docs/operator.md): it follows.
            wait_for(
                functools.partial(_model_cleared, admin_api, name, namespace),
                60,
                what=f"{name}'s spec.model cleared",
            )
            assert status.get("nextRunAt") is None
            _wait_event(admin_api, namespace, "ModelWithdrawn", name)
        assert journal_rows(journal, "SELECT 1 FROM agent_models WHERE name = :m", m=model) == []
        assert journal_rows(journal, "SELECT 1 FROM tools WHERE name = :t", t=tool) == []

        # The admin puts the model back: nobody is revived (seed 000).
        admin_api.create(agent_model(model))
        wait_for(
            lambda: journal_rows(journal, "SELECT 1 FROM agent_models WHERE name = :m", m=model),
            60,
            what="the model back in the allowlist",
        )
        for name in names:
            assert agent_status(admin_api, name, namespace)["phase"] == "NoModel"
            assert "model" not in agent_spec(admin_api, name, namespace)
        admin_api.delete("AgentModel", model)


def test_a_reply_during_a_run_wakes_the_agent_when_the_run_ends(
    cluster: Cluster,
    achilles_release: Release,
    admin_api: Achilles,
    journal: Engine,
    runs: RunJournal,
    namespace: str,
    tmp_path: Path,
) -> None:
    model, tool = f"m-{uuid.uuid4().hex[:6]}", f"inbox-{uuid.uuid4().hex[:6]}"
    with running_operator(
        cluster, achilles_release, tmp_path / "op.log", **_env(cluster, HOLD_SECONDS)
    ) as operator:
        admin_api.create(agent_model(model))
        admin_api.create(agent_tool(tool, implementation="inbox"))
        _wait_mirrored(journal, model, tool)
        # A manual-only agent whose owner consents, in its spec, to be woken by replies.
        manifest = agent(
            "asker", owner=new_owner(journal), model=model, tools=[tool], wakeOnReply=True
        )
        admin_api.create(manifest, namespace)
        status = wait_for(
            lambda: (
                (s := agent_status(admin_api, "asker", namespace)).get("phase") == "Ready" and s
            ),
            60,
            what="Ready",
        )
        agent_id = status["databaseId"]
        meta = journal_rows(journal, "SELECT meta FROM agents WHERE id = :a", a=agent_id)[0].meta
        assert meta["inbox"]["wake_on_reply"] is True
        item = box.ask(journal, agent_id).item

        first = format_run_request(datetime.now(UTC))
        admin_api.patch(
            "Agent", "asker", {"metadata": {"annotations": {RUN_REQUESTED_AT: first}}}, namespace
        )
        running = wait_for(
            lambda: (
                journal_rows(
                    journal,
                    "SELECT id FROM agent_runs WHERE agent_id = :a AND state = 'running'",
                    a=agent_id,
                )
                or [None]
            )[0],
            90,
            what=f"the first run to be running ({operator.log()})",
        )

        reply = ("inbox", "reply", str(item.id), "--text", "Go", "--json")
        replied = _achilles(achilles_release, cluster, *reply)
        assert replied.returncode == 0, replied.stderr
        wake = json.loads(replied.stdout)["wake"]
        assert wake["delivered"] is True, wake
        lost = wake["annotation"][RUN_REQUESTED_AT]
        # The reply's own wake lands on the running agent: a skipped row, as before.
        skipped = wait_for(
            lambda: journal_rows(
                journal,
                "SELECT state, reason FROM agent_runs WHERE agent_id = :a AND request_key = :k",
                a=agent_id,
                k=lost,
            ),
            60,
            what="the reply's wake to be handled",
        )
        assert [tuple(row) for row in skipped] == [("skipped", "already_running")]

        assert runs.succeed(running.id, "ended by the test, before the reply was taken")

        woken = wait_for(
            lambda: journal_rows(
                journal,
                "SELECT id, trigger, request_key FROM agent_runs"
                " WHERE agent_id = :a AND id > :r AND state IN ('queued', 'running')",
                a=agent_id,
                r=running.id,
            ),
            60,
            what=f"a run woken by the reply after the first ended ({operator.log()})",
        )[0]
        assert (woken.trigger, woken.request_key) == ("manual", f"{lost}+1")
        # The woken run takes the reply at its start.
        wait_for(
            lambda: journal_rows(
                journal,
                "SELECT 1 FROM agent_inbox_items WHERE id = :i AND reply_seen_at IS NOT NULL",
                i=item.id,
            ),
            90,
            what=f"the woken run to take the reply ({operator.log()})",
        )
        wait_for(
            lambda: [
                e
                for e in _events(admin_api, namespace, "RunQueued", "asker")
                if f"inbox item {item.id}" in (e.message or "")
            ],
            30,
            what="a RunQueued Event naming the inbox item",
        )
        assert runs.succeed(woken.id, "used the reply")
        states = journal_rows(
            journal, "SELECT state FROM agent_runs WHERE agent_id = :a ORDER BY id", a=agent_id
        )
        assert [row.state for row in states] == ["succeeded", "skipped", "succeeded"]
        admin_api.delete("Agent", "asker", namespace)
        admin_api.delete("AgentTool", tool)
        admin_api.delete("AgentModel", model)


def test_an_owner_deactivated_a_second_time_is_switched_off_a_second_time(
    cluster: Cluster,
    achilles_release: Release,
    admin_api: Achilles,
    journal: Engine,
    namespace: str,
    tmp_path: Path,
) -> None:
    model = f"m-{uuid.uuid4().hex[:6]}"
    owner = new_owner(journal)
    with running_operator(
        cluster, achilles_release, tmp_path / "op.log", **_env(cluster, HOLD_SECONDS)
    ) as operator:
        admin_api.create(agent_model(model))
        admin_api.create(agent("d", owner=owner, model=model), namespace)
        wait_for(
            lambda: agent_status(admin_api, "d", namespace).get("phase") == "Ready",
            60,
            what="Ready",
        )
        for deactivation in ("the CLI", "the users table"):
            if deactivation == "the CLI":
                done = _achilles(achilles_release, cluster, "users", "upsert", owner, "--inactive")
                assert done.returncode == 0, done.stderr
            else:  # whoever owns `users` (an Auth service) flips the flag itself
                with journal.begin() as conn:
                    conn.execute(
                        text("UPDATE users SET active = false WHERE key = :k"), {"k": owner}
                    )
            wait_for(
                lambda: (
                    agent_spec(admin_api, "d", namespace).get("enabled") is False
                    and agent_status(admin_api, "d", namespace).get("phase") == "OwnerInactive"
                ),
                60,
                what=f"spec.enabled false after deactivation by {deactivation} ({operator.log()})",
            )
            # Reactivated, the agent stays off until its owner switches it on.
            done = _achilles(achilles_release, cluster, "users", "upsert", owner)
            assert done.returncode == 0, done.stderr
            admin_api.patch("Agent", "d", {"spec": {"enabled": True}}, namespace)
            wait_for(
                lambda: agent_status(admin_api, "d", namespace).get("phase") == "Ready",
                60,
                what="Ready again, switched on by its owner",
            )
        assert len(_events(admin_api, namespace, "OwnerDeactivated", "d")) >= 2
        admin_api.delete("AgentModel", model)
