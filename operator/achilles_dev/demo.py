"""The demo `achilles dev up` ends with: an owner, a model and an agent that really run.

The demo model is the offline model server the stack runs on the host (`achilles
model-server`, reached by pods at the host's end of the node's veth); the agent is
`examples/agent.yaml`, owned by `alice`. `achilles dev demo` then asks it for a run and
follows that run to its end, through the operator and a real Job: the README's first
command shows the whole product working.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from achilles.db.database import Database
from achilles.errors import LocalStackError
from achilles.services.users import upsert_user
from achilles_dev.stack import LocalStack
from achilles_dev.versions import bin_dir

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DEMO_OWNER = "alice"
DEMO_MODEL = "gpt-small"
DEMO_AGENT = ("default", "weekly-digest")
FIELD_MANAGER = "achilles-dev-demo"
OPERATOR_DEPLOYMENT = ("achilles-system", "achilles-operator")


def demo_manifests(model_server_url: str) -> list[dict[str, Any]]:
    """The demo's model (pointing at the local model server), tool and agent."""
    model: dict[str, Any] = {
        "apiVersion": "achilles.io/v1alpha1",
        "kind": "AgentModel",
        "metadata": {"name": DEMO_MODEL},
        "spec": {"baseURL": model_server_url, "model": "achilles-demo", "default": True},
    }
    tool = yaml.safe_load((EXAMPLES / "agenttool.yaml").read_text())
    agent = yaml.safe_load((EXAMPLES / "agent.yaml").read_text())
    return [model, tool, agent]


def _kubectl(stack: LocalStack, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [str(bin_dir() / "kubectl"), "--kubeconfig", str(stack.config.kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise LocalStackError(f"kubectl {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def install_demo(stack: LocalStack) -> None:
    """Owner, model, tool and agent; then wait for the operator to be up."""
    database = Database(stack.config.database_url, pool_size=1, application_name="achilles-dev")
    try:
        upsert_user(database, DEMO_OWNER, timezone=None, active=True)
    finally:
        database.dispose()
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix="achilles-demo-") as file:
        yaml.safe_dump_all(demo_manifests(stack.config.model_server_url), file)
        file.flush()
        _kubectl(
            stack,
            "apply",
            "--server-side",
            "--force-conflicts",
            f"--field-manager={FIELD_MANAGER}",
            "-f",
            file.name,
        )
    namespace, name = OPERATOR_DEPLOYMENT
    _kubectl(stack, "-n", namespace, "rollout", "status", f"deployment/{name}", "--timeout=300s")
    stack.report(
        f"demo: owner {DEMO_OWNER}, AgentModel {DEMO_MODEL} -> {stack.config.model_server_url},"
        f" Agent {'/'.join(DEMO_AGENT)}; operator {namespace}/{name} ready"
    )


def run_demo(stack: LocalStack, timeout: float) -> int:
    """`achilles run-now --wait` on the demo agent; its exit code."""
    namespace, name = DEMO_AGENT
    argv = [sys.executable, "-m", "achilles", "run-now", f"{namespace}/{name}", "--wait"]
    argv += ["--timeout", str(timeout), "--kubeconfig", str(stack.config.kubeconfig)]
    return subprocess.run(argv, check=False).returncode
