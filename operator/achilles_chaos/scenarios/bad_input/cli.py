"""Malformed CLI arguments: one `error:` line, the documented exit code, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from achilles_chaos.scenario import Context

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


def cli_calls(ctx: Context) -> tuple[int, list[str]]:
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
