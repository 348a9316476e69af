"""A reply to a blocked item wakes the agent through its Agent resource (DESIGN.md §2, §5).

The chart's CRDs are installed (session release); the Agent is a real resource
in a namespace of its own. `achilles inbox reply` runs as a person would, with
the cluster's kubeconfig, and must leave the run request in the annotation
(honouring it is the operator's job, tested elsewhere).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine, text

from achilles.errors import NotFound
from achilles.k8s.run_request import RUN_REQUESTED_AT, request_run
from tests.cluster.conftest import Cluster
from tests.cluster.install.api import Achilles
from tests.cluster.install.conftest import Release
from tests.crd_cases import agent
from tests.db import inbox_support as box
from tests.db.factories import make_agent

pytestmark = pytest.mark.cluster


def test_reply_to_a_blocked_item_requests_a_run(
    cluster: Cluster,
    achilles_release: Release,
    admin_api: Achilles,
    namespace: str,
    db: Engine,
    database_url: str,
) -> None:
    admin_api.create(agent("waker"), namespace)
    agent_id = make_agent(db, name="waker")
    with db.begin() as conn:
        conn.execute(
            text(
                "UPDATE agents SET cr_namespace = :ns, cr_name = 'waker',"
                ' meta = \'{"inbox": {"wake_on_reply": true}}\'::jsonb WHERE id = :a'
            ),
            {"ns": namespace, "a": agent_id},
        )
    item = box.ask(db, agent_id).item

    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "achilles",
            "inbox",
            "reply",
            str(item.id),
            "--text",
            "Go",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={
            **os.environ,
            "ACHILLES_DATABASE_URL": database_url,
            "KUBECONFIG": str(cluster.kubeconfig),
        },
    )
    assert result.returncode == 0, result.stderr
    wake = json.loads(result.stdout)["wake"]
    assert wake["requested"] is True
    assert wake["delivered"] is True, wake
    value = wake["annotation"][RUN_REQUESTED_AT]
    assert datetime.fromisoformat(value.replace("Z", "+00:00")).tzinfo is not None

    annotations = admin_api.get("Agent", "waker", namespace)["metadata"]["annotations"]
    assert annotations[RUN_REQUESTED_AT] == value
    # Only the annotation was written: the owner's spec is as it was.
    assert admin_api.get("Agent", "waker", namespace)["spec"]["prompt"] == "Summarise my week."


def test_run_request_for_a_missing_agent_is_not_found(cluster: Cluster, namespace: str) -> None:
    with pytest.raises(NotFound, match=f"Agent {namespace}/ghost does not exist"):
        request_run(namespace, "ghost", datetime.now(UTC), kubeconfig=cluster.kubeconfig)
