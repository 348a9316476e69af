"""The demo `achilles dev up` ends with: an owner with documents, a model, tools and an
agent that really run.

The demo model is the offline model server the stack runs on the host (`achilles
model-server`, reached by pods at the host's end of the node's veth), following its
built-in script (`achilles/modelserver/default_script.yaml`); the agent is
`examples/agent.yaml`, owned by `alice`, with the demo's MCP tools (`demo_tools`: the
registry's mcp-server-time and server-memory, run by the stack). Its owner's Knowledge
Store is `examples/knowledge/demo.yaml` and `projects.yaml`.

`achilles dev demo` asks the agent for a run and follows it to its end, through the
operator and a real Job: the run searches alice's documents, reads the best one, asks the
time tool (read-only: no approval), and asks alice before it writes a note of what it read
to server-memory: an approval waiting in her web inbox. The demo then prints what to look
at: the run's steps, the inbox item, the web inbox's URL. Approving it there wakes the
agent, whose next run makes the call once (the server's own file shows it).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from achilles.db.database import Database
from achilles.errors import LocalStackError
from achilles.services.users import upsert_user
from achilles_dev.demo_tools import service_manifests, start_demo_servers, tool_manifests
from achilles_dev.stack import LocalStack
from achilles_dev.versions import bin_dir
from achilles_dev.waiting import wait_until

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DEMO_OWNER = "alice"
DEMO_MODEL = "gpt-small"
DEMO_AGENT = ("default", "weekly-digest")
# Alice's Knowledge Store: the documents with their access lists (bob's review is not
# hers to read), and this week's project notes her weekly digest reads.
DEMO_KNOWLEDGE = (EXAMPLES / "knowledge" / "demo.yaml", EXAMPLES / "knowledge" / "projects.yaml")
FIELD_MANAGER = "achilles-dev-demo"
OPERATOR_DEPLOYMENT = ("achilles-system", "achilles-operator")
# The operator lists an MCP server's tools when its AgentTool is new (a session of its own:
# a few seconds for a stdio server behind supergateway, up to its timeout when loaded).
TOOLS_READY_TIMEOUT = 180.0


def demo_manifests(model_server_url: str, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The demo's model (pointing at the local model server), tools and agent (picking
    them on top of the Knowledge Store core)."""
    model: dict[str, Any] = {
        "apiVersion": "achilles.io/v1alpha1",
        "kind": "AgentModel",
        "metadata": {"name": DEMO_MODEL},
        "spec": {"baseURL": model_server_url, "model": "achilles-demo", "default": True},
    }
    inbox = yaml.safe_load((EXAMPLES / "agenttool.yaml").read_text())
    agent = yaml.safe_load((EXAMPLES / "agent.yaml").read_text())
    agent["spec"]["tools"] = [inbox["metadata"]["name"], *(t["metadata"]["name"] for t in tools)]
    return [model, inbox, *tools, agent]


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


def _load_knowledge(database: Database) -> None:
    from achilles.ks.bundle import KnowledgeBundle
    from achilles.services.knowledge import load_bundle

    for path in DEMO_KNOWLEDGE:
        load_bundle(database, KnowledgeBundle.model_validate(yaml.safe_load(path.read_text())))


def install_demo(stack: LocalStack) -> None:
    """Owner and documents, MCP servers, model, tools and agent; then wait for the operator
    to be up and to have listed the tools the agent picks."""
    database = Database(stack.config.database_url, pool_size=1, application_name="achilles-dev")
    try:
        upsert_user(database, DEMO_OWNER, timezone=None, active=True)
        _load_knowledge(database)  # loading again changes nothing
    finally:
        database.dispose()
    start_demo_servers(stack.config, stack.report)
    tools = tool_manifests(stack.config)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix="achilles-demo-") as file:
        yaml.safe_dump_all(
            [
                *service_manifests(stack.config),
                *demo_manifests(stack.config.model_server_url, tools),
            ],
            file,
        )
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
    names = [tool["metadata"]["name"] for tool in tools]
    # On an `up` of a stack that ran the demo, the node starts the operator's Deployment
    # (kept in etcd) before these servers: its start-up listing finds them down, and the
    # operator lists them again with its backoff (1 s doubling to 60 s) until they answer.
    wait_until(
        lambda: all(_tool_listed(stack, tool) for tool in names) and _agent_tools_resolved(stack),
        timeout=TOOLS_READY_TIMEOUT,
        what=f"the operator to list the demo's MCP tools ({', '.join(names)}) for the agent",
        interval=0.5,
    )
    documents = ", ".join(str(path.relative_to(EXAMPLES.parent)) for path in DEMO_KNOWLEDGE)
    servers = ", ".join(
        f"{tool['metadata']['name']} -> {tool['spec']['mcp']['url']}" for tool in tools
    )
    stack.report(
        f"demo: owner {DEMO_OWNER} with the documents of {documents};"
        f" AgentModel {DEMO_MODEL} -> {stack.config.model_server_url}; AgentTools {servers};"
        f" Agent {'/'.join(DEMO_AGENT)}; operator {namespace}/{name} ready"
    )


def _object(stack: LocalStack, *args: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(_kubectl(stack, "get", *args, "-o", "json"))
    return found


def _ready(status: dict[str, Any], kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True" for c in status.get("conditions") or []
    )


def _tool_listed(stack: LocalStack, name: str) -> bool:
    status = _object(stack, "agenttool", name).get("status") or {}
    return _ready(status, "Ready") and bool(status.get("toolCount"))


def _agent_tools_resolved(stack: LocalStack) -> bool:
    namespace, name = DEMO_AGENT
    status = _object(stack, "-n", namespace, "agent", name).get("status") or {}
    return _ready(status, "ToolsResolved")


def run_demo(stack: LocalStack, timeout: float) -> int:
    """`achilles run-now --wait` on the demo agent, then what to look at; its exit code."""
    namespace, name = DEMO_AGENT
    argv = [sys.executable, "-m", "achilles", "run-now", f"{namespace}/{name}", "--wait"]
    argv += ["--timeout", str(timeout), "--kubeconfig", str(stack.config.kubeconfig)]
    code = subprocess.run(argv, check=False).returncode
    if code == 0:
        for line in demo_guide(stack, demo_outcome(stack)):
            print(line, flush=True)
    return code


@dataclass(frozen=True)
class WaitingApproval:
    item_id: int
    function: str  # as the model called it: <agenttool>__<tool>


@dataclass(frozen=True)
class DemoOutcome:
    run_id: int
    agent_id: int
    waiting: tuple[WaitingApproval, ...]  # the agent's approvals waiting for alice


def demo_outcome(stack: LocalStack) -> DemoOutcome:
    """The demo agent's last run and the approvals it waits for."""
    from achilles.domain.inbox import ItemState
    from achilles.domain.mcp_tools import ApprovalState
    from achilles.errors import NotFound
    from achilles.services import inbox, tool_approvals

    namespace, name = DEMO_AGENT
    status = _object(stack, "-n", namespace, "agent", name).get("status") or {}
    run_id, agent_id = int(status["lastRun"]["id"]), int(status["databaseId"])
    database = Database(stack.config.database_url, pool_size=1, application_name="achilles-dev")
    waiting = []
    try:
        blocked = inbox.list_items(database, agent_ref=str(agent_id), states=[ItemState.BLOCKED])
        for listing in blocked:
            try:
                approval = tool_approvals.approval_of_item(
                    database, listing.item.id, owner_key=None
                )
            except NotFound:
                continue  # a question, not an approval
            if approval.state is ApprovalState.PENDING:
                function = f"{approval.tool_name}__{approval.mcp_tool}"
                waiting.append(WaitingApproval(listing.item.id, function))
    finally:
        database.dispose()
    return DemoOutcome(run_id, agent_id, tuple(waiting))


def demo_guide(stack: LocalStack, outcome: DemoOutcome) -> list[str]:
    """What the newcomer should look at after the demo's run."""
    from achilles_dev.oidc import DEV_PASSWORD

    lines = [
        "",
        f"the demo agent's run {outcome.run_id} ended; look at it (after"
        ' `eval "$(achilles dev env)"`):',
        f"  achilles runs show {outcome.run_id} --steps   # what it searched, read and called",
    ]
    for approval in outcome.waiting:
        lines += [
            f"it waits for {DEMO_OWNER}'s approval of {approval.function}"
            f" (inbox item {approval.item_id}):",
            f"  web inbox: {stack.config.api_url}  (sign in as {DEMO_OWNER},"
            f" password {DEV_PASSWORD}), Approve or Reject",
            f"  or: achilles inbox approval {approval.item_id};"
            f" achilles inbox approve|reject {approval.item_id}",
            "  approving wakes the agent: its next run makes the call once"
            f" (server-memory's record: {stack.config.demo_memory_file})",
        ]
    return lines
