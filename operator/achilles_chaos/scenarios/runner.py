"""Faults of the runner's container process: SIGKILL in waves, SIGSTOP past the stale
threshold, and healthy long runs under CPU and database stress (no false stale)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from datetime import UTC, datetime

import psycopg

from achilles_chaos import models
from achilles_chaos.operator import HEARTBEAT_SECONDS, STALE_AFTER_SECONDS
from achilles_chaos.report import percentile
from achilles_chaos.sampling import Sampler
from achilles_chaos.scenario import Context
from achilles_chaos.waiting import wait_for

START_TIMEOUT = 240.0  # a wave of runner pods starting on two loaded cores


def runner_sigkill(ctx: Context) -> None:
    """SIGKILL the runner's container process of every run of a wave; each run must be
    failed via its pod within 30 s, and every agent must run again afterwards."""
    r = ctx.result
    kills, wave = (10, 10) if ctx.quick else (100, 20)
    r.injected = f"SIGKILL of the runner x {kills} ({kills // wave} waves of {wave})"
    op = ctx.operator()
    ctx.platform(maxConcurrency=wave)
    model = ctx.model("m")
    names = [f"k-{i:02d}" for i in range(wave)]
    for name in names:
        ctx.agent(name, models.HOLD.prompt(), model)
    ids = ctx.agent_ids(names)
    latencies: list[float] = []
    killed: list[int] = []
    for number in range(kills // wave):
        before = ctx.last_run_id()
        for name in names:
            ctx.request(name)
        runs = ctx.new_runs(ids.values(), before, 60)
        pids = ctx.wait_running(runs.values(), START_TIMEOUT)
        twice = sorted(run for run, run_pids in pids.items() if len(run_pids) > 1)
        if twice:  # the Job controller, its informers behind, started a second pod
            r.note(f"wave {number + 1}: runs with two runner processes, both killed: {twice}")
        killed_at = {}
        for run_id, run_pids in pids.items():
            for pid in run_pids:
                os.kill(pid, signal.SIGKILL)
            killed_at[run_id] = datetime.now(UTC)
        rows = ctx.wait_ended(pids, 60, f"wave {number + 1}'s killed runs to end")
        for run_id, row in rows.items():
            killed.append(run_id)
            latencies.append((row["finished_at"] - killed_at[run_id]).total_seconds())
            r.check(
                row["state"] == "failed" and row["reason"] == "error",
                f"killed run {run_id} ended {row['state']}/{row['reason']}",
            )
            r.check(
                "exited with code 137" in (row["error"] or ""),
                f"killed run {run_id}: error does not name the kill: {row['error']!r}",
            )
        r.note(f"wave {number + 1}: {len(rows)} killed, slowest failed after {max(latencies):.1f}s")
    # Every agent runs again, to the end.
    for name in names:
        ctx.set_prompt(name, models.QUICK.prompt())
    for agent_id in ids.values():
        ctx.wait_prompt(agent_id, models.QUICK.prompt())
    before = ctx.last_run_id()
    for name in names:
        ctx.request(name)
    again = ctx.new_runs(ids.values(), before, 60)
    ended = ctx.wait_ended(again.values(), START_TIMEOUT, "every agent's next run to end")
    succeeded = sum(1 for row in ended.values() if row["state"] == "succeeded")
    r.check(succeeded == len(names), f"only {succeeded}/{len(names)} agents ran again")
    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
    r.figures.update(
        kills=len(killed), p50_seconds=p50, p99_seconds=p99, max_seconds=max(latencies)
    )
    r.check(len(killed) == kills, f"{len(killed)} runs killed, not {kills}")
    r.check(max(latencies) <= 30, f"slowest killed run failed after {max(latencies):.1f}s > 30s")
    r.figure = (
        f"{len(killed)}/{kills} failed via the pod; p50 {p50:.1f}s, p99 {p99:.1f}s, "
        f"max {max(latencies):.1f}s; {succeeded}/{len(names)} ran again"
    )
    ctx.check_journal()
    ctx.check_jobs([*killed, *again.values()])
    ctx.check_status(names)
    ctx.check_operators_alive([op])


def runner_sigstop(ctx: Context) -> None:
    """Freeze the runner past the stale threshold: reaped, the run holds its agent while
    its Job is deleted with its pods (the node kills the frozen runner at the end of its
    termination grace), then ends failed/stale (0021); the agent's next run never runs
    beside it (the invariant monitor), and nothing changes the reaped row afterwards."""
    r = ctx.result
    r.injected = (
        f"SIGSTOP of the runner past the {STALE_AFTER_SECONDS}s stale threshold, then SIGCONT"
    )
    op = ctx.operator()
    model = ctx.model("m")
    names = ["frozen-0", "frozen-1"] if ctx.quick else ["frozen-0", "frozen-1", "frozen-2"]
    for name in names:
        ctx.agent(name, models.HOLD.prompt(), model)
    ids = ctx.agent_ids(names)
    before = ctx.last_run_id()
    for name in names:
        ctx.request(name)
    runs = ctx.new_runs(ids.values(), before, 60)
    pids = ctx.wait_running(runs.values(), START_TIMEOUT)
    sampler = _Sampler(ctx)
    sampler.start()
    try:
        frozen_at = datetime.now(UTC)
        for run_pids in pids.values():
            for pid in run_pids:
                os.kill(pid, signal.SIGSTOP)
        # The threshold, the reaper's pass, then the pod's termination grace (30 s, the
        # Kubernetes default) before the kubelet kills the frozen runner.
        reaped = ctx.wait_ended(pids, STALE_AFTER_SECONDS + 90, "the frozen runs to be reaped")
        lag = max((row["finished_at"] - frozen_at).total_seconds() for row in reaped.values())
        for run_id, row in reaped.items():
            r.check(
                row["reason"] == "stale",
                f"frozen run {run_id} ended failed/{row['reason']}: {row['error']}",
            )
        jobs_gone = wait_for(
            lambda: not (set(ctx.kube.job_run_ids()) & set(pids)) or None,
            60,
            what="the reaped runs' Jobs to be deleted",
        )
        # The pods are gone (the reaped rows ended only then): the agents are free.
        for name, agent_id in ids.items():
            ctx.set_prompt(name, models.QUICK.prompt())
            ctx.wait_prompt(agent_id, models.QUICK.prompt())
        before = ctx.last_run_id()
        for name in names:
            ctx.request(name)
        nexts = ctx.new_runs(ids.values(), before, 60)
        for pid in (pid for run_pids in pids.values() for pid in run_pids):
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                r.note(f"runner {pid} was already gone before SIGCONT")
        wait_for(
            lambda: not (set(ctx.cluster.runner_pids()) & set(pids)),
            120,
            what="the thawed runners to exit",
        )
        ended = ctx.wait_ended(nexts.values(), START_TIMEOUT, "the agents' next runs to end")
    finally:
        sampler.stop()
    after = ctx.journal.runs_by_id(pids)
    for run_id, row in after.items():
        first = reaped[run_id]
        same = all(
            row[k] == first[k]
            for k in ("state", "reason", "error", "finished_at", "tokens_used", "heartbeat_at")
        )
        r.check(same, f"the zombie of run {run_id} wrote after it was reaped: {first} -> {row}")
    succeeded = [run for run, row in ended.items() if row["state"] == "succeeded"]
    r.check(
        len(succeeded) == len(names),
        f"next runs succeeded: {succeeded} of {sorted(nexts.values())}",
    )
    r.check(sampler.max_active <= 1, f"{sampler.max_active} active runs of one agent at once")
    r.figures.update(reap_seconds=lag, max_active=sampler.max_active, zombies=len(pids))
    r.figure = (
        f"{len(pids)} frozen runs ended failed/stale {lag:.1f}s after SIGSTOP, once their "
        f"pods were gone (threshold {STALE_AFTER_SECONDS}s), Jobs deleted: {bool(jobs_gone)}; "
        f"0 writes after, max {sampler.max_active} active run per agent"
    )
    ctx.check_journal()
    ctx.check_jobs([*pids, *nexts.values()])
    ctx.check_status(names)
    ctx.check_operators_alive([op])


class _Sampler(Sampler):
    """Samples the scenario's runs every 0.2 s: the most active rows of one agent seen at
    once, and every terminal row's first image (for regressions)."""

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx, name="chaos-sampler", every=0.2)
        self.max_active = 0

    def _run(self) -> None:
        for _ in self._ticks():
            try:
                rows = self.ctx.runs()
            except psycopg.Error:
                continue
            per_agent: dict[int, int] = {}
            for row in rows:
                if row["state"] in ("queued", "running"):
                    per_agent[row["agent_id"]] = per_agent.get(row["agent_id"], 0) + 1
            self.max_active = max([self.max_active, *per_agent.values()])
            self.samples += 1


# --- no false stale ------------------------------------------------------------------------

CPU_HOG = "while True:\n    pass\n"
# Statements that keep PostgreSQL's CPU busy, and a lock that holds every heartbeat back.
DB_BURN = "SELECT count(*) FROM generate_series(1, 20000000) AS s WHERE s % 7 = 3"
DB_LOCK_SECONDS = 3.0


def no_false_stale(ctx: Context) -> None:
    """Healthy runs held by their model for more than 3x the stale threshold while every
    core is saturated and the database is slowed: none may be reaped."""
    r = ctx.result
    hold_seconds = 70  # > 3x the threshold, with room for the runs claimed apart on a busy node
    count = 3 if ctx.quick else 6
    cores = os.cpu_count() or 2
    r.injected = (
        f"{count} healthy {hold_seconds}s runs (>{3 * STALE_AFTER_SECONDS}s); {2 * cores} CPU "
        f"hogs on {cores} cores; DB burning CPU and table-locked {DB_LOCK_SECONDS:.0f}s in 5s"
    )
    op = ctx.operator()
    model = ctx.model("m")
    names = [f"healthy-{i}" for i in range(count)]
    for name in names:
        ctx.agent(name, models.held(hold_seconds).prompt(), model)
    ids = ctx.agent_ids(names)
    before = ctx.last_run_id()
    for name in names:
        ctx.request(name)
    runs = ctx.new_runs(ids.values(), before, 60)
    wait_for(
        lambda: all(
            row["started_at"] is not None for row in ctx.journal.runs_by_id(runs.values()).values()
        ),
        START_TIMEOUT,
        what="every healthy run to be claimed",
        interval=0.5,
    )
    stress = _Stress(ctx, cores)
    silence: list[float] = []
    stress.start()
    stressed_from = ctx.journal.now()
    try:

        def sample() -> bool:
            rows = ctx.journal.rows(
                "SELECT extract(epoch FROM now() - heartbeat_at) AS quiet, state FROM agent_runs"
                " WHERE id = ANY(%s)",
                (list(runs.values()),),
            )
            silence.extend(float(row["quiet"]) for row in rows if row["state"] == "running")
            return all(row["state"] not in ("queued", "running") for row in rows)

        wait_for(sample, hold_seconds + 120, what="the healthy runs to end", interval=0.5)
    finally:
        stress.stop()
    rows = ctx.journal.runs_by_id(runs.values())
    reaped = [run for run, row in rows.items() if row["reason"] == "stale"]
    succeeded = [run for run, row in rows.items() if row["state"] == "succeeded"]
    durations = [
        (row["finished_at"] - row["started_at"]).total_seconds()
        for row in rows.values()
        if row["started_at"] and row["finished_at"]
    ]
    r.check(not reaped, f"healthy runs reaped as stale: {reaped}")
    r.check(len(succeeded) == count, f"{len(succeeded)}/{count} healthy runs succeeded: {rows}")
    # How long every run was running under the stress (until the first of them ended).
    stressed = min(
        ((row["finished_at"] - stressed_from).total_seconds() for row in rows.values()),
        default=0.0,
    )
    r.check(
        stressed > 3 * STALE_AFTER_SECONDS,
        f"the runs were under stress together for {stressed:.0f}s, not > "
        f"{3 * STALE_AFTER_SECONDS}s",
    )
    loudest = max(silence, default=0.0)
    r.figures.update(
        reaped=len(reaped),
        max_silence_seconds=loudest,
        run_seconds=min(durations, default=0),
        stressed_seconds=stressed,
        db_statements=stress.statements,
        lock_holds=stress.locks,
    )
    r.figure = (
        f"{len(reaped)}/{count} reaped; longest heartbeat silence {loudest:.1f}s (beat "
        f"{HEARTBEAT_SECONDS}s, threshold {STALE_AFTER_SECONDS}s); all {count} under stress "
        f"together for {stressed:.0f}s"
    )
    ctx.check_journal()
    ctx.check_operators_alive([op])


class _Stress:
    """CPU hogs on the host and a database kept busy and locked, until stopped."""

    def __init__(self, ctx: Context, cores: int) -> None:
        self.ctx = ctx
        self.cores = cores
        self.hogs: list[subprocess.Popen[bytes]] = []
        self.statements = 0
        self.locks = 0
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        for _ in range(2 * self.cores):
            self.hogs.append(
                subprocess.Popen([sys.executable, "-c", CPU_HOG], stdin=subprocess.DEVNULL)
            )
        for _ in range(self.cores):
            self._spawn(self._burn)
        self._spawn(self._lock)

    def _spawn(self, target: object) -> None:
        thread = threading.Thread(target=target, daemon=True)  # type: ignore[arg-type]
        thread.start()
        self._threads.append(thread)

    def _burn(self) -> None:
        while not self._stop.is_set():
            try:
                with self.ctx.journal.connect() as conn:
                    while not self._stop.is_set():
                        conn.execute(DB_BURN.encode())
                        self.statements += 1
            except psycopg.Error:
                self._stop.wait(0.5)

    def _lock(self) -> None:
        """Every 5 s, hold agent_runs in SHARE ROW EXCLUSIVE mode (no UPDATE gets through:
        no heartbeat, no claim, no reaping) for DB_LOCK_SECONDS."""
        while not self._stop.is_set():
            try:
                with self.ctx.journal.connect() as conn, conn.transaction():
                    conn.execute(b"LOCK TABLE agent_runs IN SHARE ROW EXCLUSIVE MODE")
                    conn.execute(b"SELECT pg_sleep(%s)", (DB_LOCK_SECONDS,))
                    self.locks += 1
            except psycopg.Error:
                pass
            self._stop.wait(5.0 - DB_LOCK_SECONDS)

    def stop(self) -> None:
        self._stop.set()
        for hog in self.hogs:
            hog.kill()
            hog.wait(timeout=10)
        for thread in self._threads:
            thread.join(timeout=30)
