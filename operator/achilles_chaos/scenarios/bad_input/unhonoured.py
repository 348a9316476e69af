"""Resources the API server accepts but the operator cannot honour: a missing owner or
model, unknown tools, an unreachable model, a missing Secret, an owner zone that is no
zone. Each must show on the Agent or end its run with a clear error."""

from __future__ import annotations

from collections.abc import Callable

from achilles.k8s.annotations import RUN_REQUESTED_AT
from achilles_chaos import models
from achilles_chaos.scenario import Context
from achilles_chaos.scenarios.bad_input.common import OWNER, START_TIMEOUT
from achilles_chaos.waiting import ChaosTimeout, wait_for


def accepted_but_wrong(ctx: Context, good_model: str) -> Callable[[], list[str]]:
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
