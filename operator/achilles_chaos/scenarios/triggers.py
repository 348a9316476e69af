"""200 parallel triggers of one agent: annotation writes and `achilles runs enqueue` mixed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

from achilles.k8s.annotations import RUN_REQUESTED_AT, format_run_request
from achilles_chaos import models
from achilles_chaos.scenario import Context
from achilles_chaos.scenarios.runner import _Sampler
from achilles_chaos.waiting import wait_for


def parallel_triggers(ctx: Context) -> None:
    r = ctx.result
    per_door = 20 if ctx.quick else 100
    r.injected = (
        f"{2 * per_door} parallel triggers of one agent: {per_door} annotation writes, "
        f"{per_door} `achilles runs enqueue`"
    )
    op = ctx.operator()
    model = ctx.model("m")
    ctx.agent("target", models.HOLD.prompt(), model)
    agent_id = ctx.agent_ids(["target"])["target"]
    sampler = _Sampler(ctx)
    sampler.start()
    env = {**os.environ, "ACHILLES_DATABASE_URL": ctx.cluster.database_url}
    go = threading.Event()

    def annotate(number: int) -> str:
        go.wait()
        value = f"{format_run_request(datetime.now(UTC))[:-1]}-{number:03d}Z"
        ctx.kube.request_run(ctx.namespace, "target", value)
        return value

    try:
        with ThreadPoolExecutor(max_workers=16) as pool:
            written = [pool.submit(annotate, n) for n in range(per_door)]
            clis = [
                subprocess.Popen(
                    [sys.executable, "-m", "achilles", "runs", "enqueue", str(agent_id), "--json"],
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                for _ in range(per_door)
            ]
            go.set()
            values = [future.result() for future in written]
        outputs = [cli.communicate(timeout=300) for cli in clis]
        codes = [cli.returncode for cli in clis]
        last = (ctx.kube.get("Agent", "target", ctx.namespace) or {})["metadata"]["annotations"][
            RUN_REQUESTED_AT
        ]
        wait_for(
            lambda: ctx.kube.status("target", ctx.namespace).get("lastHandledRunRequest") == last,
            120,
            what="the last annotation value to be handled",
        )
        rows = ctx.runs()
    finally:
        sampler.stop()
    cli_results = []
    for (out, err), code in zip(outputs, codes, strict=True):
        r.check(code == 0, f"`achilles runs enqueue` exited {code}: {err.strip()[-300:]}")
        if code == 0:
            cli_results.append(json.loads(out))
    active = [row for row in rows if row["state"] in ("queued", "running")]
    skipped = [row for row in rows if row["state"] == "skipped"]
    other = [row["id"] for row in rows if row["state"] not in ("queued", "running", "skipped")]
    keys = [row["request_key"] for row in rows if row["request_key"]]
    r.check(len(active) == 1, f"{len(active)} active runs after the burst")
    r.check(not other, f"runs in other states: {other}")
    r.check(
        all(row["reason"] == "already_running" and row["tokens_used"] == 0 for row in skipped),
        "a skipped row with another reason or tokens",
    )
    r.check(len(keys) == len(set(keys)), "one annotation value answered twice")
    r.check(set(keys) <= set(values), "a request key no trigger wrote")
    r.check(sampler.max_active == 1, f"max {sampler.max_active} active runs at once")
    cli_rows = {int(result["run_id"]) for result in cli_results}
    r.check(cli_rows <= {int(row["id"]) for row in rows}, "a CLI result without its row")
    coalesced = per_door - len(keys)
    r.figures.update(
        triggers=2 * per_door, rows=len(rows), active=len(active), skipped=len(skipped),
        annotation_rows=len(keys), coalesced=coalesced, max_active=sampler.max_active,
    )  # fmt: skip
    r.figure = (
        f"{len(rows)} rows: {len(active)} active, {len(skipped)} skipped/already_running "
        f"({coalesced} annotation values coalesced); max {sampler.max_active} active at once"
    )
    ctx.check_journal(settled=False)
    r.check(op.alive(), "the operator exited")
