"""`make dev` as a test: a whole local stack on a real node, the chart installed as a user
would (the operator and the API as their Deployments, from the engine image, under their
ServiceAccounts and RBAC), the demo applied, and one run of the demo agent through a real
Job whose container runs as non-root with no service-account token: it reads alice's
documents, calls the read-only time tool of a registry's MCP server, and leaves one
approval of a write (server-memory) waiting in her inbox; the API reached from the host at
the URL `achilles dev env` exports, with a token `achilles dev token` gets.
With `tracing.otlpEndpoint` set on the release, as a user would, the run's trace reaches a
real collector (Jaeger v2) on the host: the operator's dispatch span, then the runner's."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from click.testing import CliRunner
from kubernetes import client

from achilles.cli.main import cli
from achilles.k8s.client import api_client
from achilles.k8s.run_metadata import RUN_SELECTOR
from achilles_dev.chart import (
    ChartInstall,
    install_chart,
    install_into_stack,
    merged_values,
    user_values,
)
from achilles_dev.config import Ports, StackConfig
from achilles_dev.demo import (
    DEMO_AGENT,
    DEMO_MODEL,
    DEMO_OWNER,
    OPERATOR_DEPLOYMENT,
    demo_outcome,
    install_demo,
    run_demo,
)
from achilles_dev.demo_tools import (
    MEMORY_TOOL,
    SERVICE_HOST,
    SERVICE_PORT,
    TIME_TOOL,
    TOOLS_NAMESPACE,
)
from achilles_dev.health import stack_checks
from achilles_dev.invariants import InvariantMonitor, pod_lister
from achilles_dev.jaeger import RunningJaeger, Span, start_jaeger
from achilles_dev.mcp_servers import memory_entities
from achilles_dev.postgres import default_data_root
from achilles_dev.stack import LocalStack
from achilles_dev.stack_components import MCP_MEMORY, MCP_TIME
from achilles_dev.versions import bin_dir
from tests.cluster.conftest import EXTERNAL_KUBECONFIG, external_kubeconfig, fail_on_violations
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster
RUNS_NAMESPACE = "achilles-runs"  # the chart's default (values.yaml runsNamespace)


@pytest.fixture(scope="module")
def dev_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    if external_kubeconfig() is not None or os.geteuid() != 0:
        pytest.skip(
            f"a stack of our own with a real node (needs root; {EXTERNAL_KUBECONFIG} unset)"
        )
    postgres_dir = default_data_root() / f"test-demo-{uuid.uuid4().hex[:8]}"
    config = StackConfig(
        state_dir=tmp_path_factory.mktemp("dev"),
        ports=Ports.free(),
        postgres_dir=postgres_dir,
        durable=False,
        node="containerd",
    )
    stack = LocalStack(config)
    try:
        stack.up()
        install_into_stack(stack)
        install_demo(stack)
        # The seed's invariants over the stack's journal and run pods while the module
        # runs (issue 36 item 10); the restart test's down and up are failed samples.
        with api_client(config.kubeconfig) as api:
            monitor = InvariantMonitor(
                config.database_url, pod_lister(client.CoreV1Api(api), RUNS_NAMESPACE)
            ).start()
            try:
                yield stack
            finally:
                verdict = monitor.stop()
        fail_on_violations(verdict, "the demo's stack ran")
    finally:
        stack.down()
        shutil.rmtree(postgres_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def demo_jaeger(
    dev_stack: LocalStack, jaeger_binary: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningJaeger]:
    """A collector on the address pods reach the host at, and the release told to export
    to it (`helm upgrade` with `tracing.otlpEndpoint`, the user's values kept)."""
    jaeger = start_jaeger(
        tmp_path_factory.mktemp("jaeger"), otlp_host=dev_stack.config.apiserver_host
    )
    try:
        install = ChartInstall(kubeconfig=dev_stack.config.kubeconfig, bin_dir=bin_dir())
        traced = {"tracing": {"otlpEndpoint": jaeger.otlp_endpoint}}
        install = replace(install, values=merged_values(user_values(install), traced))
        install_chart(install, extra_args=("--force-conflicts",))
        namespace, name = OPERATOR_DEPLOYMENT
        install.kubectl(
            "-n", namespace, "rollout", "status", f"deployment/{name}", "--timeout=300s"
        )
        yield jaeger
    finally:
        jaeger.stop()


def test_the_demo_agent_runs_through_the_operator_deployment(
    dev_stack: LocalStack, demo_jaeger: RunningJaeger, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_demo(dev_stack, timeout=300) == 0
    _assert_demo_asks_one_approval(dev_stack, capsys.readouterr().out)
    namespace, name = DEMO_AGENT
    with api_client(dev_stack.config.kubeconfig) as api:
        agent: Any = client.CustomObjectsApi(api).get_namespaced_custom_object(
            "achilles.io", "v1alpha1", namespace, "agents", name
        )
        assert agent["status"]["lastRun"]["state"] == "succeeded"
        assert agent["status"]["phase"] == "Ready"
        _assert_demo_run_shows_its_steps(dev_stack, int(agent["status"]["lastRun"]["id"]))
        _assert_tools_are_in_cluster_services(api)
        operator_ns, operator_name = OPERATOR_DEPLOYMENT
        deployment: Any = client.AppsV1Api(api).read_namespaced_deployment(
            operator_name, operator_ns
        )
        assert deployment.status.ready_replicas == 1
        pod_spec = deployment.spec.template.spec
        assert pod_spec.service_account_name == operator_name
        assert pod_spec.containers[0].command == ["achilles"]
        pods: Any = client.CoreV1Api(api).list_namespaced_pod(
            "achilles-runs", label_selector=RUN_SELECTOR
        )
    (run_pod,) = pods.items
    spec: Any = run_pod.spec
    assert spec.automount_service_account_token is False
    assert spec.security_context.run_as_non_root is True
    container: Any = spec.containers[0]
    assert container.security_context.read_only_root_filesystem is True
    assert container.security_context.capabilities.drop == ["ALL"]
    assert not any(
        mount.mount_path.startswith("/var/run/secrets/kubernetes.io")
        for mount in container.volume_mounts or []
    )

    # The run is `succeeded` once the runner wrote it; its container ends a moment later
    # (the runner closes its pool and exits), and the kubelet reports that after.
    def runner_exit_code() -> tuple[str, int] | None:
        with api_client(dev_stack.config.kubeconfig) as api:
            pod: Any = client.CoreV1Api(api).read_namespaced_pod(
                run_pod.metadata.name, "achilles-runs"
            )
        terminated = (pod.status.container_statuses or [None])[0]
        state = terminated.state.terminated if terminated is not None else None
        return None if state is None else ("exit code", int(state.exit_code))

    ended = wait_for(runner_exit_code, 60, what="the run pod's container to end")
    assert ended == ("exit code", 0)


def _assert_tools_are_in_cluster_services(api: client.ApiClient) -> None:
    """The run above called both servers through their Services (issue 38 item 5): each
    AgentTool names its Service's cluster IP, and the Service's EndpointSlice names the
    stack's process behind it."""
    core, discovery = client.CoreV1Api(api), client.DiscoveryV1Api(api)
    tools: Any = client.CustomObjectsApi(api).list_cluster_custom_object(
        "achilles.io", "v1alpha1", "agenttools"
    )
    urls = {
        tool["metadata"]["name"]: tool["spec"].get("mcp", {}).get("url") for tool in tools["items"]
    }
    for component, tool in ((MCP_TIME, TIME_TOOL), (MCP_MEMORY, MEMORY_TOOL)):
        service: Any = core.read_namespaced_service(component, TOOLS_NAMESPACE)
        assert service.spec.cluster_ip == SERVICE_HOST[component]
        assert urls[tool] == f"http://{service.spec.cluster_ip}:{SERVICE_PORT}/mcp"
        slices: Any = discovery.list_namespaced_endpoint_slice(
            TOOLS_NAMESPACE, label_selector=f"kubernetes.io/service-name={component}"
        )
        (endpoints,) = slices.items
        assert [port.name for port in endpoints.ports] == ["http"]


def _assert_demo_run_shows_its_steps(dev_stack: LocalStack, run_id: int) -> None:
    """`achilles runs show RUN --steps` on the demo's run (issue 21, done when): its model
    and tool calls as the run pod's runner recorded them, and what it used."""
    url = ("--database-url", dev_stack.config.database_url)
    shown = CliRunner().invoke(cli, ["runs", "show", str(run_id), "--steps", *url])
    assert shown.exit_code == 0, shown.output
    assert "steps: " in shown.stdout
    assert f"{DEMO_MODEL} (achilles-demo at " in shown.stdout  # used model: name (id at host)
    as_json = CliRunner().invoke(cli, ["runs", "show", str(run_id), "--steps", "--json", *url])
    assert as_json.exit_code == 0, as_json.output
    record = json.loads(as_json.stdout)
    kinds = [step["kind"] for step in record["steps"]]
    assert kinds[0] == "model_call", kinds
    assert set(kinds) <= {"model_call", "tool_call"}, kinds
    assert [step["seq"] for step in record["steps"]] == list(range(1, len(kinds) + 1))
    # It searched alice's Knowledge Store and read her notes, asked the read-only time
    # tool (made: no approval), and ended asking before the write (issue 38 item 7).
    calls = [(s["tool"], s["status"]) for s in record["steps"] if s["kind"] == "tool_call"]
    assert calls == [
        ("search_knowledge", "ok"),
        ("read_document", "ok"),
        ("time__get_current_time", "ok"),
        ("memory__create_entities", "ok"),
    ], calls
    assert record["steps"][-1]["tool"] == "memory__create_entities"
    assert record["output"].startswith(
        "Waiting for the owner's approval of memory__create_entities (inbox item"
    ), record["output"]
    assert record["used"]["model"] == DEMO_MODEL
    assert {"time__get_current_time", "memory__create_entities"} <= set(record["used"]["tools"])


def _assert_demo_asks_one_approval(dev_stack: LocalStack, guide: str) -> None:
    """One approval waits in alice's inbox, of a note of the document the run read; the
    server has not been written to; `dev demo` printed where to decide it (the web
    inbox's URL), and the API shows it to alice as the web inbox does."""
    outcome = demo_outcome(dev_stack)
    (waiting,) = outcome.waiting
    assert waiting.function == "memory__create_entities"
    assert f"achilles runs show {outcome.run_id} --steps" in guide, guide
    assert f"memory__create_entities (inbox item {waiting.item_id})" in guide, guide
    assert f"web inbox: {dev_stack.config.api_url}" in guide, guide
    assert memory_entities(dev_stack.config.demo_memory_file) == []

    state = ("--state-dir", str(dev_stack.config.state_dir))
    token = CliRunner().invoke(cli, ["dev", "token", DEMO_OWNER, *state])
    assert token.exit_code == 0, token.output
    shown = httpx.get(
        f"{dev_stack.config.api_url}/v1/inbox/{waiting.item_id}/approval",
        headers={"Authorization": f"Bearer {token.stdout.strip()}"},
        timeout=10,
    )
    assert shown.status_code == 200, shown.text
    approval = shown.json()
    assert (approval["agent_tool"], approval["tool"], approval["state"]) == (
        "memory",
        "create_entities",
        "pending",
    )
    (entity,) = approval["arguments"]["entities"]
    assert entity["name"] == "Projects you follow, this week"  # examples/knowledge/projects.yaml


def _demo_trace(jaeger: RunningJaeger, trace_id: str) -> list[Span] | None:
    """The run's whole trace: the operator's dispatch span and the runner's spans."""
    spans = jaeger.trace(trace_id)
    names = {span.name.split(" ")[0] for span in spans or []}
    return spans if {"dispatch", "invoke_agent", "chat", "execute_tool"} <= names else None


def test_the_demo_runs_trace_joins_the_dispatch_span_in_a_real_collector(
    dev_stack: LocalStack, demo_jaeger: RunningJaeger
) -> None:
    """The operator (the chart's Deployment) and the run's pod on the real node both
    export to the collector; the Job's TRACEPARENT makes them one trace."""
    with api_client(dev_stack.config.kubeconfig) as api:
        jobs: Any = client.BatchV1Api(api).list_namespaced_job(
            "achilles-runs", label_selector=RUN_SELECTOR
        )
    if not jobs.items:  # this test alone: the run is its own
        assert run_demo(dev_stack, timeout=300) == 0
        with api_client(dev_stack.config.kubeconfig) as api:
            jobs = client.BatchV1Api(api).list_namespaced_job(
                "achilles-runs", label_selector=RUN_SELECTOR
            )
    job = jobs.items[-1]
    env = {e.name: e.value for e in job.spec.template.spec.containers[0].env}
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == demo_jaeger.otlp_endpoint
    _, trace_id, dispatch_id, _ = env["TRACEPARENT"].split("-")

    spans = wait_for(lambda: _demo_trace(demo_jaeger, trace_id), 60, what="the run's trace")
    (dispatch,) = [s for s in spans if s.name == "dispatch"]
    assert dispatch.span_id == dispatch_id
    assert dispatch.service == "achilles-operator"
    assert dispatch.parent_id is None
    assert dispatch.attributes["k8s.job.name"] == job.metadata.name
    assert dispatch.attributes["achilles.dispatch.outcome"] == "created"
    (root,) = [s for s in spans if s.name.startswith("invoke_agent ")]
    assert root.service == "achilles-runner"
    assert root.parent_id == dispatch.span_id
    assert root.attributes["achilles.run.id"] == dispatch.attributes["achilles.run.id"]
    assert root.attributes["achilles.run.state"] == "succeeded"
    steps = [s for s in spans if s not in (dispatch, root)]
    assert {s.parent_id for s in steps} == {root.span_id}
    for chat in [s for s in steps if s.name.startswith("chat ")]:
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.usage.input_tokens"] > 0
        assert chat.attributes["gen_ai.usage.output_tokens"] > 0
    for tool in [s for s in steps if s.name.startswith("execute_tool ")]:
        assert tool.name == f"execute_tool {tool.attributes['gen_ai.tool.name']}"
        assert tool.attributes["gen_ai.tool.call.id"]


def test_dev_status_finds_every_part_healthy(dev_stack: LocalStack) -> None:
    """`achilles dev status` on the stack `make dev` makes: the processes, the release
    and the operator as the chart's Deployment, ready (issue 14, defect 1)."""
    checks = {check.name: check for check in stack_checks(dev_stack)}
    assert [name for name, check in checks.items() if not check.healthy] == []
    assert checks["release"].state == "deployed"
    assert checks["operator"].state == "ready"
    assert checks["model-server"].state == "running"
    assert checks["mcp-time"].state == checks["mcp-memory"].state == "running"
    assert checks["api"].state == "ready"
    assert checks["api"].detail.endswith("2/2 ready, node port 30080")


def test_the_api_answers_the_host_at_the_exported_url(dev_stack: LocalStack) -> None:
    """`achilles dev env` exports ACHILLES_API_URL; curl (here httpx) on the host reaches
    it; a token from `achilles dev token alice` reads /v1/me as alice."""
    state = ("--state-dir", str(dev_stack.config.state_dir))
    env = CliRunner().invoke(cli, ["dev", "env", *state])
    assert env.exit_code == 0, env.output
    exported = dict(
        line.removeprefix("export ").split("=", 1)
        for line in env.stdout.splitlines()
        if line.startswith("export ACHILLES_")
    )
    url = exported["ACHILLES_API_URL"]
    assert url == dev_stack.config.api_url
    health = httpx.get(f"{url}/healthz", timeout=10)
    assert health.status_code == 200
    assert health.json() == {"status": "ok"}

    token = CliRunner().invoke(cli, ["dev", "token", DEMO_OWNER, *state])
    assert token.exit_code == 0, token.output
    bearer = {"Authorization": f"Bearer {token.stdout.strip()}"}
    me = httpx.get(f"{url}/v1/me", headers=bearer, timeout=10)
    assert me.status_code == 200, me.text
    assert me.json() == {"user_key": DEMO_OWNER, "is_admin": False, "via": "oidc"}
    # The web inbox's sign-in goes to the stack's provider, which accepts its redirect URI
    # (<ACHILLES_API_URL>/auth/callback) and shows its sign-in form.
    with httpx.Client(timeout=10) as browser:
        login = browser.get(f"{url}/auth/login")
        assert login.status_code == 302, login.text
        authorize = login.headers["location"]
        assert authorize.startswith(exported["ACHILLES_OIDC_ISSUER"])
        assert "redirect_uri=" + quote(f"{url}/auth/callback", safe="") in authorize
        form = browser.get(authorize, follow_redirects=True)
        assert form.status_code == 200, form.text
        assert 'name="username"' in form.text


def test_dev_down_then_up_applies_the_demo_at_once(dev_stack: LocalStack) -> None:
    """`achilles dev down && achilles dev up && achilles dev demo`: the API server starts
    anew and its single-default-model policy refuses every AgentModel until its parameters
    synced ("paramKind kind AgentModel not yet synced"), which stopped a newcomer's demo for
    ~45 s and made a CI run red (issue 18, item 0). `dev up` now returns only once the
    policy judges, so the demo's `kubectl apply` of its model is admitted at once."""
    dev_stack.down()
    assert dev_stack.up() is True
    install_into_stack(dev_stack)
    install_demo(dev_stack)  # raises LocalStackError naming the refusal if refused
    with api_client(dev_stack.config.kubeconfig) as api:
        model: Any = client.CustomObjectsApi(api).get_cluster_custom_object(
            "achilles.io", "v1alpha1", "agentmodels", DEMO_MODEL
        )
    assert model["spec"]["default"] is True
