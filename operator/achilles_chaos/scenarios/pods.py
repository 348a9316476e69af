"""Pods that go wrong: one that never starts (an image that is not there, a command that
cannot be executed), a runner OOM-killed by its memory limit, a run that hangs past
runTimeoutSeconds."""

from __future__ import annotations

import json

from achilles.domain.pod_outcome import START_DEADLINE
from achilles_chaos import models
from achilles_chaos.journal import Row
from achilles_chaos.kube import RUNS_NAMESPACE
from achilles_chaos.scenario import Context
from achilles_chaos.waiting import wait_for

START_TIMEOUT = 240.0
MISSING_IMAGE = "localhost/achilles/no-such-runner:chaos"
MISSING_COMMAND = "/usr/local/bin/no-such-runner"


def _run_all(ctx: Context, names: list[str], ids: dict[str, int], timeout: float) -> dict[int, Row]:
    before = ctx.last_run_id()
    for name in names:
        ctx.request(name)
    runs = ctx.new_runs([ids[n] for n in names], before, 60)
    return ctx.wait_ended(runs.values(), timeout, f"the runs of {', '.join(names)} to end")


def _latency(row: Row) -> float:
    """From the Job's creation (dispatched_at) to the run's end."""
    start = row["dispatched_at"] or row["created_at"]
    return float((row["finished_at"] - start).total_seconds())


def never_starts(ctx: Context) -> None:
    r = ctx.result
    deadline = START_DEADLINE.total_seconds()
    r.injected = f"runner image {MISSING_IMAGE}; runner command {MISSING_COMMAND}"
    model = ctx.model("m")
    names = ["nostart-0", "nostart-1"]
    boot = ctx.operator("boot")
    for name in names:
        ctx.agent(name, models.QUICK.prompt(), model)
    ids = ctx.agent_ids(names)
    boot.stop()
    figures: dict[str, float] = {}
    for case, env, words in (
        ("image", {"ACHILLES_RUNNER_IMAGE": MISSING_IMAGE}, ("ErrImagePull", "ImagePullBackOff")),
        ("command", {"ACHILLES_RUNNER_COMMAND": MISSING_COMMAND}, ("no such file", "not found")),
    ):
        op = ctx.operator(case, env=env)
        rows = _run_all(ctx, names, ids, deadline + 120)
        slowest = max(_latency(row) for row in rows.values())
        figures[case] = slowest
        for run_id, row in rows.items():
            r.check(
                row["state"] == "failed" and row["reason"] == "error",
                f"{case}: run {run_id} ended {row['state']}/{row['reason']}",
            )
            error = row["error"] or ""
            r.check(
                any(word.lower() in error.lower() for word in words),
                f"{case}: run {run_id}'s error does not name the cause: {error!r}",
            )
            r.note(f"{case}: run {run_id} failed after {_latency(row):.1f}s: {error}")
        r.check(
            slowest <= deadline + 15,
            f"{case}: failed {slowest:.0f}s after its Job was made"
            f" (start deadline {deadline:.0f}s)",
        )
        leftover = set(ctx.kube.job_run_ids()) & set(rows)
        if case == "image":
            r.check(not leftover, f"the Jobs of pods that never started remain: {leftover}")
        op.stop()
    # The agents are free and run normally again.
    op = ctx.operator("fixed")
    rows = _run_all(ctx, names, ids, START_TIMEOUT)
    r.check(all(row["state"] == "succeeded" for row in rows.values()), f"afterwards: {rows}")
    r.figures.update(seconds_to_failed=figures)
    r.figure = (
        f"missing image failed in {figures['image']:.0f}s (start deadline {deadline:.0f}s), "
        f"missing command in {figures['command']:.0f}s, both naming the cause; then ran again"
    )
    ctx.check_journal()
    ctx.check_status(names)
    r.check(op.alive(), "the operator exited")


def oom(ctx: Context) -> None:
    r = ctx.result
    limit = "192Mi"
    r.injected = (
        f"runner memory limit {limit}; the model answers {models.OOM_REPLY_BYTES >> 20} MiB"
    )
    resources = {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": limit}}
    op = ctx.operator(env={"ACHILLES_RUNNER_RESOURCES": json.dumps(resources)})
    model = ctx.model("huge", ctx.cluster.broken.base_url("oom"))
    names = ["hog-0", "hog-1"]
    for name in names:
        ctx.agent(name, models.QUICK.prompt(), model)
    ids = ctx.agent_ids(names)
    rows = _run_all(ctx, names, ids, START_TIMEOUT)
    for run_id, row in rows.items():
        r.check(
            row["state"] == "failed"
            and row["reason"] == "error"
            and "OOMKilled" in (row["error"] or ""),
            f"run {run_id} ended {row['state']}/{row['reason']}: {row['error']!r}",
        )
        r.check(row["started_at"] is not None, f"run {run_id} was killed before it ran")
        r.note(f"run {run_id}: {row['error']}")
    r.check(ctx.cluster.broken.hits("oom") >= len(names), "the model was never asked")
    named = sum("OOMKilled" in (row["error"] or "") for row in rows.values())
    r.figure = f"{named}/{len(rows)} runs failed/error naming OOMKilled, mid-run"
    ctx.check_journal()
    ctx.check_jobs(rows)
    ctx.check_status(names)
    r.check(op.alive(), "the operator exited")


def run_deadline(ctx: Context) -> None:
    r = ctx.result
    timeout = 20
    r.injected = f"a run hanging on its model past runTimeoutSeconds={timeout}"
    op = ctx.operator()
    ctx.platform(runTimeoutSeconds=timeout)
    model = ctx.model("m")
    ctx.agent("hangs", models.HOLD.prompt(), model)
    ids = ctx.agent_ids(["hangs"])
    rows = _run_all(ctx, ["hangs"], ids, timeout + START_TIMEOUT)
    (row,) = rows.values()
    ran = (row["finished_at"] - (row["started_at"] or row["created_at"])).total_seconds()
    error = row["error"] or ""
    r.check(
        row["state"] == "failed" and row["reason"] == "error",
        f"ended {row['state']}/{row['reason']}",
    )
    r.check(
        "deadline" in error.lower() or "timed out" in error.lower(),
        f"the error does not name the deadline: {error!r}",
    )
    r.check(ran <= timeout + 15, f"the hung run lasted {ran:.0f}s (limit {timeout}s)")
    r.note(f"run {row['id']}: {error}")

    def job_failed() -> list[str] | None:
        job = ctx.kube.batch.read_namespaced_job(f"achilles-run-{row['id']}", RUNS_NAMESPACE)
        conditions = (job.status.conditions if job.status else None) or []
        found = [str(c.reason) for c in conditions if c.type == "Failed" and c.status == "True"]
        return found or None

    reasons = wait_for(job_failed, 60, what="the Job's Failed condition")
    r.note(f"the Job's Failed condition: {reasons}")
    # The agent is free to run again.
    ctx.platform(runTimeoutSeconds=900)
    ctx.set_prompt("hangs", models.QUICK.prompt())
    ctx.wait_prompt(ids["hangs"], models.QUICK.prompt())
    again = _run_all(ctx, ["hangs"], ids, START_TIMEOUT)
    r.check(all(row["state"] == "succeeded" for row in again.values()), f"afterwards: {again}")
    r.figures.update(ran_seconds=ran, error=error, job_failed=reasons)
    r.figure = f"failed/error after {ran:.0f}s ({error[:90]}); Job {reasons}; ran again"
    ctx.check_journal()
    ctx.check_status(["hangs"])
    r.check(op.alive(), "the operator exited")
