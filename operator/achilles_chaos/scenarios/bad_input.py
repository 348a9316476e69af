"""Bad input at every door: malformed custom resources at the API server, resources the API
server accepts but the operator cannot honour, malformed CLI arguments, and model replies
no provider should send. Each must meet a clear error, no crash loop, no corrupted row."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from achilles.k8s.annotations import RUN_REQUESTED_AT
from achilles.k8s.client import api_client
from achilles_chaos import models
from achilles_chaos.journal import malformed_rows
from achilles_chaos.kube import Kube, manifest, refusal
from achilles_chaos.scenario import Context
from achilles_chaos.waiting import ChaosTimeout, wait_for

START_TIMEOUT = 240.0
OWNER = "chaos-mallory"  # bad input spends its own owner's budget, nobody else's
LOOSE_OWNER = "chaos-absurd"  # the owner of the run whose model claims absurd token counts
PORTAL_USER = "chaos-portal"

# --- 1. custom resources the API server must refuse -----------------------------------------

GOOD_AGENT: dict[str, Any] = {"owner": OWNER, "prompt": "hello"}


def _agent(**spec: Any) -> dict[str, Any]:
    return {**GOOD_AGENT, **spec}


@dataclass(frozen=True)
class BadResource:
    id: str
    body: dict[str, Any]
    says: str  # what the refusal must mention (the field, or the rule)


def _bad_resources() -> list[BadResource]:
    agent = "Agent"
    weekly = {"type": "calendar", "cadence": "weekly", "time": "09:00"}
    cases: list[tuple[str, str, str, dict[str, Any] | None, str]] = [
        ("no-spec", agent, "nospec", None, "spec"),
        ("empty-spec", agent, "empty", {}, "owner"),
        ("owner-number", agent, "ownernum", _agent(owner=42), "spec.owner"),
        ("owner-empty", agent, "ownerempty", _agent(owner=""), "spec.owner"),
        ("owner-newline", agent, "ownernl", _agent(owner="bob\nrm -rf /"), "spec.owner"),
        ("prompt-null", agent, "promptnull", _agent(prompt=None), "prompt"),
        ("prompt-list", agent, "promptlist", _agent(prompt=["a", "b"]), "spec.prompt"),
        ("prompt-100k", agent, "promptbig", _agent(prompt="p" * 100_000), "spec.prompt"),
        ("schedule-string", agent, "schedstr", _agent(schedule="every day"), "spec.schedule"),
        (
            "interval-fraction",
            agent,
            "frac",
            _agent(schedule={"type": "interval", "everyHours": 1.5}),
            "spec.schedule.everyHours",
        ),
        (
            "interval-huge",
            agent,
            "huge",
            _agent(schedule={"type": "interval", "everyHours": 10**12}),
            "spec.schedule.everyHours",
        ),
        (
            "time-25h",
            agent,
            "t25",
            _agent(schedule={"type": "calendar", "cadence": "daily", "time": "25:00"}),
            "spec.schedule.time",
        ),
        (
            "weekday-name",
            agent,
            "wdname",
            _agent(schedule={**weekly, "weekday": "monday"}),
            "spec.schedule.weekday",
        ),
        (
            "type-capitalised",
            agent,
            "typecap",
            _agent(schedule={"type": "Interval", "everyHours": 2}),
            "spec.schedule.type",
        ),
        ("tools-string", agent, "toolsstr", _agent(tools="inbox"), "spec.tools"),
        ("tools-empty-name", agent, "toolsempty", _agent(tools=[""]), "spec.tools"),
        ("tools-500", agent, "tools500", _agent(tools=[f"t{i}" for i in range(500)]), "spec.tools"),
        ("model-path", agent, "modelpath", _agent(model="../etc/passwd"), "spec.model"),
        ("model-300", agent, "model300", _agent(model="m" * 300), "spec.model"),
        ("enabled-string", agent, "enstr", _agent(enabled="true"), "spec.enabled"),
        ("enabled-number", agent, "ennum", _agent(enabled=1), "spec.enabled"),
        ("display-10k", agent, "disp", _agent(displayName="d" * 10_000), "spec.displayName"),
        ("unknown-field", agent, "unknown", _agent(replicas=3), "replicas"),
        ("name-uppercase", agent, "Bad_Name", _agent(), "metadata.name"),
        ("name-300", agent, "n" * 300, _agent(), "metadata.name"),
        (
            "model-javascript-url",
            "AgentModel",
            "x-js",
            {"baseURL": "javascript:alert(1)", "model": "m"},
            "spec.baseURL",
        ),
        ("model-no-url", "AgentModel", "x-nourl", {"model": "m"}, "spec.baseURL"),
        (
            "model-empty-id",
            "AgentModel",
            "x-emptyid",
            {"baseURL": "http://a/v1", "model": ""},
            "spec.model",
        ),
        (
            "model-default-yes",
            "AgentModel",
            "x-defyes",
            {"baseURL": "http://a/v1", "model": "m", "default": "yes"},
            "spec.default",
        ),
        (
            "model-secret-no-key",
            "AgentModel",
            "x-nokey",
            {"baseURL": "http://a/v1", "model": "m", "apiKeySecretRef": {"name": "s"}},
            "spec.apiKeySecretRef.key",
        ),
        ("tool-empty-impl", "AgentTool", "x-tool1", {"implementation": ""}, "spec.implementation"),
        (
            "tool-allowed-no",
            "AgentTool",
            "x-tool2",
            {"implementation": "inbox", "agentsAllowed": "no"},
            "spec.agentsAllowed",
        ),
        ("platform-other-name", "AgentPlatform", "other", {}, "metadata.name"),
    ]
    resources = []
    for case_id, kind, name, spec, says in cases:
        body = manifest(kind, name, spec if spec is not None else {})
        if spec is None:
            del body["spec"]
        resources.append(BadResource(case_id, body, says))
    return resources


# Patches of AgentPlatform/default and of a valid Agent that the API server must refuse.
BAD_PLATFORM_PATCHES: list[tuple[str, dict[str, Any], str]] = [
    ("platform-negative-cap", {"maxConcurrency": -5}, "spec.maxConcurrency"),
    ("platform-mars-zone", {"timezone": "Mars/Olympus"}, "spec.timezone"),
    ("platform-zero-timeout", {"runTimeoutSeconds": 0}, "spec.runTimeoutSeconds"),
    ("platform-budget-text", {"weeklyTokenBudget": "lots"}, "spec.weeklyTokenBudget"),
]
BAD_AGENT_PATCHES: list[tuple[str, dict[str, Any], str]] = [
    ("owner-changed", {"owner": "eve"}, "owner"),
    ("schedule-broken", {"schedule": {"type": "interval"}}, "spec.schedule.everyHours"),
]


def _refusals(ctx: Context) -> tuple[int, list[str]]:
    """Create or patch every bad resource; (how many were refused well, what went wrong)."""
    kube = ctx.kube
    problems: list[str] = []
    refused = 0

    def expect_refusal(case_id: str, call: Callable[[], Any], says: str) -> None:
        nonlocal refused
        try:
            call()
        except ApiException as error:
            message = refusal(error)
            if error.status in (400, 403, 404, 422) and says.lower() in message.lower():
                refused += 1
            else:
                problems.append(
                    f"{case_id}: refused {error.status} without naming {says}: {message[:200]}"
                )
            return
        problems.append(f"{case_id}: accepted")

    for case in _bad_resources():
        namespace = ctx.namespace if case.body["kind"] == "Agent" else None
        expect_refusal(case.id, partial(kube.create, case.body, namespace), case.says)
    for case_id, patch, says in BAD_PLATFORM_PATCHES:
        expect_refusal(
            case_id,
            partial(kube.patch, "AgentPlatform", "default", {"spec": patch}),
            says,
        )
    ctx.agent("patched", "hello", None, owner=OWNER)
    for case_id, patch, says in BAD_AGENT_PATCHES:
        expect_refusal(
            case_id,
            partial(kube.patch, "Agent", "patched", {"spec": patch}, ctx.namespace),
            says,
        )
    # Only admins may pause: the portal's identity is refused by the admission policy.
    binding = _bind_portal(kube)
    try:
        with api_client(ctx.cluster.kubeconfig) as portal_api:
            portal_api.default_headers["Impersonate-User"] = PORTAL_USER
            portal = Kube(portal_api)
            body = manifest("Agent", "sneaky", _agent(adminPaused=True))
            expect_refusal(
                "portal-sets-admin-paused",
                partial(portal.create, body, ctx.namespace),
                "adminPaused",
            )
    finally:
        client.RbacAuthorizationV1Api(kube.api).delete_cluster_role_binding(binding)
    # A second default model: the single-default policy refuses it.
    first = ctx.model("default-a", default=True)
    expect_refusal(
        "second-default-model",
        lambda: kube.create(
            manifest(
                "AgentModel",
                f"{first}-b",
                {"baseURL": "http://a/v1", "model": "m", "default": True},
            )
        ),
        "default",
    )
    kube.patch("AgentModel", first, {"spec": {"default": False}})
    return refused, problems


def _bind_portal(kube: Kube) -> str:
    name = f"chaos-portal-{int(time.time())}"
    rbac = client.RbacAuthorizationV1Api(kube.api)
    roles = [
        role.metadata.name
        for role in rbac.list_cluster_role().items
        if role.metadata and role.metadata.name and role.metadata.name.endswith("-portal")
    ]
    if not roles:
        raise RuntimeError("the chart's portal ClusterRole is missing")
    rbac.create_cluster_role_binding(
        client.V1ClusterRoleBinding(
            metadata=client.V1ObjectMeta(name=name),
            role_ref=client.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=roles[0]
            ),
            subjects=[
                client.RbacV1Subject(
                    kind="User", name=PORTAL_USER, api_group="rbac.authorization.k8s.io"
                )
            ],
        )
    )
    return name


# --- 2. resources the API server accepts but the operator cannot honour ---------------------


def _accepted_but_wrong(ctx: Context, good_model: str) -> Callable[[], list[str]]:
    """Each must show on the Agent (phase, condition) or end its run with a clear error.

    Starts the runs and returns their judgement, to be called later: the no-secret run
    takes the start deadline to fail, and the other checks run meanwhile."""
    kube, journal, problems = ctx.kube, ctx.journal, []
    host_ip = ctx.cluster.config.network.host_ip
    closed = ctx.model("closed-port", f"http://{host_ip}:1/v1")
    no_secret = ctx.model("no-secret", None, apiKeySecretRef={"name": "chaos-missing", "key": "k"})
    # The users table is the platform's: nothing stops it from holding a zone that is none.
    journal.execute(
        "INSERT INTO users (key, timezone) VALUES ('chaos-martian', 'Mars/Olympus'),"
        " ('chaos-venusian', 'Europe/Berlin')"
        " ON CONFLICT (key) DO UPDATE SET timezone = excluded.timezone"
    )
    ctx.agent("ghost-owner", "hello", good_model, owner="chaos-nobody")
    ctx.agent("ghost-model", "hello", "chaos-no-such-model", owner=OWNER)
    ctx.agent(
        "ghost-tools", models.QUICK.prompt(), good_model, owner=OWNER, tools=["chaos-no-such-tool"]
    )
    ctx.agent("closed-port", models.QUICK.prompt(), closed, owner=OWNER)
    ctx.agent("no-secret", models.QUICK.prompt(), no_secret, owner=OWNER)
    ctx.agent(
        "martian",
        models.QUICK.prompt(),
        good_model,
        owner="chaos-martian",
        schedule={"type": "calendar", "cadence": "daily", "time": "09:00"},
    )
    ctx.agent(
        "venusian",
        models.QUICK.prompt(),
        good_model,
        owner="chaos-venusian",
        schedule={"type": "interval", "everyHours": 24},
    )
    ctx.agent(
        "scheduled",
        models.QUICK.prompt(),
        good_model,
        owner=OWNER,
        schedule={"type": "interval", "everyHours": 24},
    )

    def phase(name: str, wanted: str) -> None:
        try:
            wait_for(
                lambda: kube.status(name, ctx.namespace).get("phase") == wanted,
                60,
                what=f"{name}'s phase {wanted}",
            )
        except ChaosTimeout:
            problems.append(
                f"{name}: phase {kube.status(name, ctx.namespace).get('phase')!r}, not {wanted}"
            )

    phase("ghost-owner", "OwnerMissing")
    phase("ghost-model", "NoModel")
    # A refused request writes no row and says why.
    value = ctx.request("ghost-model")
    try:
        wait_for(
            lambda: kube.status("ghost-model", ctx.namespace).get("lastHandledRunRequest") == value,
            60,
            what="the refused request to be handled",
        )
    except ChaosTimeout as error:
        problems.append(f"ghost-model: {error}")
    tools = [
        c
        for c in kube.status("ghost-tools", ctx.namespace).get("conditions", [])
        if c.get("type") == "ToolsResolved"
    ]
    if not tools or tools[0].get("status") != "False":
        problems.append(f"ghost-tools: ToolsResolved is {tools}")
    # Annotation values that are not requests: ignored, nothing written.
    for value in ("   ", "x" * 10_000):
        kube.patch(
            "Agent",
            "ghost-tools",
            {"metadata": {"annotations": {RUN_REQUESTED_AT: value}}},
            ctx.namespace,
        )
    ids = ctx.agent_ids(["ghost-tools", "closed-port", "no-secret", "scheduled", "venusian"])
    wait_for(
        lambda: journal.scalar("SELECT next_run_at FROM agents WHERE id = %s", (ids["venusian"],)),
        60,
        what="venusian's first slot",
    )
    runs_before = journal.scalar(
        "SELECT count(*) FROM agent_runs WHERE agent_id = %s", (ids["ghost-tools"],)
    )
    if runs_before:
        problems.append(
            f"ghost-tools: {runs_before} runs from annotation values that are no requests"
        )
    before = ctx.last_run_id()
    for name in ("ghost-tools", "closed-port", "no-secret"):
        ctx.request(name)
    # Later the venusian owner's zone turns into no zone; then a slot of a healthy agent
    # and of the venusian one come due together. The healthy one must still run.
    journal.execute("UPDATE users SET timezone = 'Venus/Maxwell' WHERE key = 'chaos-venusian'")
    journal.execute(
        "UPDATE agents SET next_run_at = now() - interval '1 second' WHERE id = ANY(%s)",
        ([ids["scheduled"], ids["venusian"]],),
    )

    def judge() -> list[str]:
        expected = {
            "ghost-tools": ("succeeded", ""),
            "closed-port": ("failed", "unreachable"),
            "no-secret": ("failed", "chaos-missing"),
            "scheduled": ("succeeded", ""),
        }
        for name, (state, says) in expected.items():
            try:
                (run,) = ctx.new_runs([ids[name]], before, 90).values()
                row = ctx.wait_ended([run], START_TIMEOUT, f"{name}'s run to end")[run]
            except ChaosTimeout as error:
                problems.append(f"{name}: no run ended: {error}")
                continue
            if row["state"] != state or says not in (row["error"] or ""):
                problems.append(f"{name}: {row['state']}/{row['reason']}: {row['error']!r}")
            else:
                ctx.result.note(f"{name}: {row['state']} {row['error'] or ''}".strip())
        venusian = journal.rows(
            "SELECT state, reason, error FROM agent_runs WHERE agent_id = %s", (ids["venusian"],)
        )
        ctx.result.note(f"venusian (owner zone now Venus/Maxwell): runs {venusian}")

        # The owner's zone is not a zone, from the start (martian) or since a moment ago
        # (venusian, whose spec did not change): the Agent must say so.
        for name, zone in (("martian", "Mars/Olympus"), ("venusian", "Venus/Maxwell")):

            def says_zone(name: str = name, zone: str = zone) -> bool:
                status = kube.status(name, ctx.namespace)
                conditions = status.get("conditions", [])
                return zone in " ".join(str(c.get("message", "")) for c in conditions)

            try:
                wait_for(says_zone, 60, what=f"the {name} Agent's status to name the bad zone")
            except ChaosTimeout:
                row = journal.one("SELECT id, next_run_at FROM agents WHERE cr_name = %s", (name,))
                status = kube.status(name, ctx.namespace)
                problems.append(
                    f"{name} (owner timezone {zone} in users): the Agent's status does not"
                    f" say why (phase {status.get('phase')!r}, row {row})"
                )
        return problems

    return judge


# --- 3. the CLI --------------------------------------------------------------------------

CALENDAR = '{"type":"calendar","cadence":"daily","time":"09:00"}'
# (arguments, expected exit code): 2 malformed input, 1 understood but impossible.
CLI_CASES: list[tuple[list[str], int]] = [
    (["runs", "list", "--state", "bogus"], 2),
    (["runs", "list", "--limit", "0"], 2),
    (["runs", "list", "--limit", "99999999"], 2),
    (["runs", "show", "abc"], 2),
    (["runs", "show", "0"], 2),
    (["runs", "show", "2147483647000"], 1),
    (["runs", "enqueue"], 2),
    (["runs", "enqueue", "99999999"], 1),
    (["runs", "enqueue", "1", "--trigger", "cron"], 2),
    (["runs", "list", "--agent", "x'; DROP TABLE agents; --"], 1),
    (["schedule", "next", "--schedule", "{not json", "--timezone", "UTC"], 2),
    (
        [
            "schedule",
            "next",
            "--schedule",
            '{"type":"interval","everyHours":0}',
            "--timezone",
            "UTC",
        ],
        2,
    ),
    (["schedule", "next", "--schedule", CALENDAR, "--timezone", "Mars/Olympus"], 2),
    (["users", "upsert", "bob", "--timezone", "Nowhere/Nope"], 2),
    (["users", "upsert", ""], 2),
    (["budget", "show", "--owner", "chaos-no-such-owner"], 1),
    (["run-now", "a/b/c"], 2),
    (["run-now", "chaos-no-such-namespace/no-such-agent"], 1),
    (["runner", "--run-id", "-5"], 2),
    (["inbox", "reply", "0", "--text", "x"], 2),
    (["inbox", "show", "99999999"], 1),
    (["no-such-command"], 2),
]


def _cli(ctx: Context) -> tuple[int, list[str]]:
    env = {
        **os.environ,
        "ACHILLES_DATABASE_URL": ctx.cluster.database_url,
        "KUBECONFIG": str(ctx.cluster.kubeconfig),
    }

    def run(case: tuple[list[str], int]) -> str | None:
        args, code = case
        command = f"`achilles {' '.join(args)}`"
        done = subprocess.run(
            [sys.executable, "-m", "achilles", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        if "Traceback" in done.stderr:
            return f"{command} crashed: {done.stderr.strip()[-400:]}"
        if done.returncode != code:
            said = done.stderr.strip()[-200:]
            return f"{command} exited {done.returncode}, not {code}: {said}"
        if code and not any(line.startswith("error:") for line in lines):
            return f"{command} printed no `error:` line: {done.stderr.strip()[-200:]}"
        return None

    with ThreadPoolExecutor(max_workers=4) as pool:
        outcomes = list(pool.map(run, CLI_CASES))
    if ctx.journal.scalar("SELECT to_regclass('agents') IS NOT NULL") is not True:
        outcomes.append("the agents table is gone")
    problems = [outcome for outcome in outcomes if outcome]
    return len(CLI_CASES) - len(problems), problems


# --- 4. model replies ------------------------------------------------------------------

# Behaviours of the scripted model server: (behaviour, expected state, text the error names).
SCRIPTED: list[tuple[models.Behaviour, str, str]] = [
    (models.UNKNOWN_TOOL, "succeeded", ""),
    (models.BAD_ARGUMENTS, "succeeded", ""),
    (models.HUGE, "succeeded", ""),
    (models.EMPTY, "failed", "without an answer"),
    (models.SERVER_ERROR, "failed", "500"),
    (models.LOOPS, "failed", "iterations"),
    (models.NO_USAGE, "succeeded", ""),
]
# Modes of the broken endpoint: expected state ("failed" with a non-empty error, unless said).
BROKEN: list[tuple[str, str]] = [
    ("not-json", "failed"),
    ("truncated", "failed"),
    ("wrong-shape", "failed"),
    ("no-choices", "failed"),
    ("html-502", "failed"),
    ("hang-up", "failed"),
    ("negative-tokens", "failed"),
    ("absurd-tokens", "any"),
]
SANE_TOKENS = 10**9  # more than any real run spends; a claim above it is a provider's bug


def _model_replies(ctx: Context, good_model: str) -> tuple[int, list[str]]:
    problems: list[str] = []
    names: dict[str, tuple[str, str]] = {}
    for behaviour, state, says in SCRIPTED:
        name = f"reply-{behaviour.marker}"
        ctx.agent(name, behaviour.prompt(), good_model, owner=OWNER)
        names[name] = (state, says)
    for mode, state in BROKEN:
        model = ctx.model(f"broken-{mode}", ctx.cluster.broken.base_url(mode))
        owner = LOOSE_OWNER if mode == "absurd-tokens" else OWNER
        ctx.agent(f"broken-{mode}", models.QUICK.prompt(), model, owner=owner)
        names[f"broken-{mode}"] = (state, "")
    ids = ctx.agent_ids(names)
    before = ctx.last_run_id()
    for name in names:
        ctx.request(name)
    runs = ctx.new_runs(ids.values(), before, 120)
    ended = ctx.wait_ended(runs.values(), START_TIMEOUT, "every run of a bad reply to end")
    for name, (state, says) in names.items():
        row = ended[runs[ids[name]]]
        summary = f"{row['state']}/{row['reason']} tokens {row['tokens_used']}"
        detail = (row["error"] or f"output {len(row['output'] or '')} chars")[:160]
        ctx.result.note(f"{name}: {summary}: {detail}")
        if state != "any" and (row["state"] != state or says not in (row["error"] or "")):
            problems.append(f"{name}: expected {state} naming {says!r}, got {summary}: {detail}")
        if row["state"] == "failed" and not (row["error"] or "").strip():
            problems.append(f"{name}: failed without an error")
        if row["tokens_used"] > SANE_TOKENS:
            problems.append(f"{name}: the journal recorded {row['tokens_used']} tokens for one run")
    return len(names) - len(problems), problems


def bad_input(ctx: Context) -> None:
    r = ctx.result
    op = ctx.operator()
    ctx.journal.users([OWNER, LOOSE_OWNER])
    good_model = ctx.model("good")
    refused, cr_problems = _refusals(ctx)
    crs = refused + len(cr_problems)
    judge_wrong = _accepted_but_wrong(ctx, good_model)
    cli_ok, cli_problems = _cli(ctx)
    replies_ok, reply_problems = _model_replies(ctx, good_model)
    wrong_problems = judge_wrong()
    for problem in [*cr_problems, *wrong_problems, *cli_problems, *reply_problems]:
        r.check(False, problem)
    rows = ctx.journal.rows("SELECT * FROM agent_runs")
    corrupted = malformed_rows(rows)
    r.check(not corrupted, f"malformed rows anywhere in the journal: {corrupted[:5]}")
    r.check(op.alive() and op.starts == 1, f"the operator crashed: {op.log_tail()}")
    r.injected = (
        f"{crs} malformed CRs/patches, 7 CRs the operator cannot honour, {len(CLI_CASES)} bad CLI"
        f" calls, {len(SCRIPTED) + len(BROKEN)} bad model replies"
    )
    r.figures.update(
        crs_refused=refused, crs=crs, cli_ok=cli_ok, cli=len(CLI_CASES), replies_ok=replies_ok,
        replies=len(SCRIPTED) + len(BROKEN), loop_errors=op.metric("achilles_loop_errors_total"),
    )  # fmt: skip
    r.figure = (
        f"CRs refused clearly {refused}/{crs}; CLI {cli_ok}/{len(CLI_CASES)} clean exits; "
        f"replies handled {replies_ok}/{len(SCRIPTED) + len(BROKEN)}; operator up, 0 restarts"
    )
    ctx.check_journal(settled=False)
