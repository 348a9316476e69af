"""What every scenario gets: its own namespace, owner, models and operators, helpers to make
agents and ask for runs, the checks every scenario ends with, and a clean-up that leaves
the stack as it found it (no Agents, rows, Jobs or pods of the scenario; the platform's
settings back to the chart's)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.exceptions import ApiException

from achilles_chaos.cluster import SUITE_PLATFORM, ChaosCluster
from achilles_chaos.journal import TERMINAL, Row, TerminalWatch, malformed_rows, two_active
from achilles_chaos.kube import manifest
from achilles_chaos.operator import OperatorProcess
from achilles_chaos.report import Result
from achilles_chaos.waiting import ChaosTimeout, timed, wait_for

OWNER = "chaos-owner"
# The platform spec fields and the platform_settings columns they become.
PLATFORM_COLUMNS = {
    "maxConcurrency": "agent_max_concurrency",
    "runTimeoutSeconds": "agent_run_timeout_seconds",
    "maxIterations": "agent_max_iterations",
    "weeklyTokenBudget": "agent_weekly_token_budget",
}


@dataclass
class Context:
    cluster: ChaosCluster
    result: Result
    quick: bool
    namespace: str = ""
    operators: list[OperatorProcess] = field(default_factory=list)
    models: list[str] = field(default_factory=list)
    watch: TerminalWatch = field(default_factory=TerminalWatch)
    platform_changed: bool = False

    def __post_init__(self) -> None:
        slug = self.result.scenario[:30]
        self.namespace = f"chaos-{slug}-{uuid.uuid4().hex[:5]}"
        self.cluster.kube.create_namespace(self.namespace)
        self.cluster.journal.users([OWNER])

    @property
    def kube(self) -> Any:
        return self.cluster.kube

    @property
    def journal(self) -> Any:
        return self.cluster.journal

    # --- operators ----------------------------------------------------------------------

    def operator(
        self, name: str = "a", *, start: bool = True, env: dict[str, str] | None = None
    ) -> OperatorProcess:
        process = OperatorProcess(self.cluster, f"{self.result.scenario}-{name}", dict(env or {}))
        self.operators.append(process)
        if start:
            process.start()
            if not self.cluster.platform_mirrored:
                self.wait_platform(SUITE_PLATFORM, timeout=90)
                self.cluster.platform_mirrored = True
        return process

    def stop_operators(self) -> None:
        for process in self.operators:
            process.stop()

    # --- the platform -------------------------------------------------------------------

    def platform(self, **spec: int) -> None:
        """Set AgentPlatform/default fields; return once the operator mirrored them."""
        self.platform_changed = True
        self.kube.patch("AgentPlatform", "default", {"spec": spec})
        self.wait_platform(spec)

    def wait_platform(self, spec: dict[str, Any], timeout: float = 60) -> None:
        def mirrored() -> bool:
            row = self.journal.one("SELECT * FROM platform_settings")
            return row is not None and all(
                row[PLATFORM_COLUMNS[key]] == value for key, value in spec.items()
            )

        wait_for(mirrored, timeout, what=f"the operator to mirror AgentPlatform {spec}")

    # --- models and agents --------------------------------------------------------------

    def model(self, name: str, base_url: str | None = None, **spec: Any) -> str:
        full = f"{self.namespace}-{name}"[:63]
        body = {"baseURL": base_url or self.cluster.models.base_url, "model": "chaos", **spec}
        self.kube.create(manifest("AgentModel", full, body))
        self.models.append(full)
        return full

    def agent(self, name: str, prompt: str, model: str | None, **spec: Any) -> None:
        body = {"owner": OWNER, "prompt": prompt, **spec}
        if model is not None:
            body["model"] = model
        self.kube.create(manifest("Agent", name, body), self.namespace)

    def agent_ids(self, names: Iterable[str], timeout: float = 120) -> dict[str, int]:
        """Wait for the operator to have a row for each of `names`."""
        wanted = set(names)

        def rows() -> dict[str, int] | None:
            found = self.journal.agent_ids(self.namespace)
            return {n: found[n] for n in wanted} if wanted <= set(found) else None

        return wait_for(rows, timeout, what=f"rows for {len(wanted)} agent(s)", interval=0.5)

    def set_prompt(self, name: str, prompt: str) -> None:
        self.kube.patch("Agent", name, {"spec": {"prompt": prompt}}, self.namespace)

    def wait_prompt(self, agent_id: int, prompt: str, timeout: float = 60) -> None:
        wait_for(
            lambda: (
                self.journal.scalar("SELECT prompt FROM agents WHERE id = %s", (agent_id,))
                == prompt
            ),
            timeout,
            what=f"agent {agent_id}'s new prompt in its row",
        )

    def request(self, name: str) -> str:
        return str(self.kube.request_run(self.namespace, name))

    # --- runs ---------------------------------------------------------------------------

    def runs(self) -> list[Row]:
        rows: list[Row] = self.journal.runs(self.namespace)
        self.watch.observe(rows)
        return rows

    def wait_runs(
        self, predicate: Callable[[list[Row]], bool], timeout: float, what: str
    ) -> list[Row]:
        def check() -> list[Row] | None:
            rows = self.runs()
            return rows if predicate(rows) else None

        found: list[Row] = wait_for(check, timeout, what=what, interval=0.5)
        return found

    def wait_running(self, run_ids: Iterable[int], timeout: float) -> dict[int, list[int]]:
        """Wait until each run is claimed and its runner process is found: run id -> pids."""
        wanted = set(run_ids)

        def ready() -> dict[int, list[int]] | None:
            rows = self.journal.runs_by_id(wanted)
            ended = {run: row for run, row in rows.items() if row["state"] in TERMINAL}
            if ended:  # it will never run: say why at once rather than time out
                raise ChaosTimeout(
                    f"{len(ended)} of {len(wanted)} run(s) ended before running: "
                    + "; ".join(
                        f"run {run} {row['state']}/{row['reason']}: {row['error']}"
                        for run, row in sorted(ended.items())
                    )
                )
            if any(row["state"] != "running" for row in rows.values()) or len(rows) < len(wanted):
                return None
            pids = self.cluster.runner_pids()
            return {run: pids[run] for run in wanted} if wanted <= set(pids) else None

        found: dict[int, list[int]] = wait_for(
            ready, timeout, what=f"{len(wanted)} run(s) running with their runner found"
        )
        return found

    def new_runs(self, agent_ids: Iterable[int], after: int, timeout: float) -> dict[int, int]:
        """agent id -> id of its first run newer than run id `after`."""
        wanted = set(agent_ids)

        def found() -> dict[int, int] | None:
            rows = self.journal.rows(
                "SELECT DISTINCT ON (agent_id) agent_id, id FROM agent_runs"
                " WHERE agent_id = ANY(%s) AND id > %s ORDER BY agent_id, id",
                (list(wanted), after),
            )
            got = {int(r["agent_id"]): int(r["id"]) for r in rows}
            return got if set(got) == wanted else None

        result: dict[int, int] = wait_for(found, timeout, what="a new run of each agent")
        return result

    def wait_ended(self, run_ids: Iterable[int], timeout: float, what: str) -> dict[int, Row]:
        """Wait until every run is terminal; its rows."""
        wanted = list(run_ids)

        def ended() -> dict[int, Row] | None:
            rows: dict[int, Row] = self.journal.runs_by_id(wanted)
            done = len(rows) == len(wanted) and all(
                row["state"] not in ("queued", "running") for row in rows.values()
            )
            return rows if done else None

        try:
            found: dict[int, Row] = wait_for(ended, timeout, what=what, interval=0.5)
        except ChaosTimeout as error:
            rows = self.journal.runs_by_id(wanted)
            active = {
                run: rows[run]["state"] if run in rows else "no row"
                for run in wanted
                if run not in rows or rows[run]["state"] in ("queued", "running")
            }
            raise ChaosTimeout(f"{error}; not ended: {active}") from None
        return found

    def last_run_id(self) -> int:
        return int(self.journal.scalar("SELECT coalesce(max(id), 0) FROM agent_runs"))

    # --- the checks every scenario ends with --------------------------------------------

    def check_journal(self, *, settled: bool = True) -> list[Row]:
        """Rows well-formed, never two active per agent, terminal rows unchanged; with
        `settled`, nothing left queued or running."""
        rows = self.runs()
        r = self.result
        bad = malformed_rows(rows)
        r.check(not bad, f"malformed rows: {bad[:5]}")
        doubled = two_active(rows)
        r.check(not doubled, f"agents with two active runs: {doubled}")
        r.check(not self.watch.regressions, f"terminal rows changed: {self.watch.regressions[:3]}")
        if settled:
            stuck = [row["id"] for row in rows if row["state"] in ("queued", "running")]
            r.check(not stuck, f"runs left active: {stuck[:10]}")
        return rows

    def check_jobs(self, run_ids: Iterable[int]) -> None:
        """At most one Job per run, and no Job for a run that never existed.

        A second pod of one Job is not a failure: Kubernetes documents that a Job with
        `parallelism: 1` may start its pod twice (the Job controller creates another when
        it lost sight of the first, as after an API server restart). The claim
        (`queued -> running`, guarded) lets one runner run it; the other finds it claimed
        and exits 0, which the operator ignores for a claimed run. The journal checks
        (never two active rows, no terminal row changed) prove nothing ran twice."""
        ids = set(run_ids)
        jobs = [run for run in self.kube.job_run_ids() if run in ids]
        self.result.check(len(jobs) == len(set(jobs)), "a run has two Jobs")
        doubled = {run: n for run, n in self.kube.pods_per_run().items() if run in ids and n > 1}
        if doubled:
            self.result.figures["runs_with_a_second_pod"] = len(doubled)
            self.result.note(f"Kubernetes started a second pod for runs {sorted(doubled)}")

    def check_status(self, names: Iterable[str], timeout: float = 60) -> None:
        """Each Agent's status.lastRun agrees with the journal's last run of that agent."""
        ids = self.journal.agent_ids(self.namespace)
        pending = {name for name in names if name in ids}

        def agreed() -> bool:
            for name in sorted(pending):
                last = self.journal.one(
                    "SELECT id, state FROM agent_runs WHERE agent_id = %s ORDER BY id DESC LIMIT 1",
                    (ids[name],),
                )
                shown = self.kube.status(name, self.namespace).get("lastRun") or {}
                if last is not None and (shown.get("id"), shown.get("state")) != (
                    last["id"],
                    last["state"],
                ):
                    return False
                pending.discard(name)
            return True

        try:
            wait_for(agreed, timeout, what="status.lastRun to agree with the journal", interval=1)
        except ChaosTimeout:
            self.result.check(
                False, f"status.lastRun disagrees with the journal: {sorted(pending)[:5]}"
            )

    def check_operators_alive(self, processes: Iterable[OperatorProcess] | None = None) -> None:
        for process in processes if processes is not None else self.operators:
            self.result.check(
                process.alive(),
                f"operator {process.name} exited with {process.exit_code()}:\n{process.log_tail()}",
            )

    # --- clean-up -----------------------------------------------------------------------

    def cleanup(self) -> None:
        """Everything of this scenario goes: operators, Agents, models, rows, Jobs, pods."""
        kube, journal = self.kube, self.journal
        with timed("clean-up: stop the operators"):
            self.stop_operators()
        with timed("clean-up: delete the namespace, models and Jobs"):
            kube.delete_namespace(self.namespace)
            for name in self.models:
                kube.delete("AgentModel", name)
            kube.delete_run_jobs()
        if journal.reachable():
            journal.execute("DELETE FROM agents WHERE cr_namespace = %s", (self.namespace,))
            if self.models:
                journal.execute("DELETE FROM agent_models WHERE name = ANY(%s)", (self.models,))
        if self.platform_changed:
            # Back to the suite's settings; the next scenario's first operator mirrors them.
            kube.patch("AgentPlatform", "default", {"spec": SUITE_PLATFORM})
            self.cluster.platform_mirrored = False
        wait_for(
            lambda: not kube.live_run_pods(), 180, what="the scenario's run pods to go", interval=1
        )
        # The namespace goes in the background (its name is the scenario's own); a suite
        # that keeps its stack waits for every one at its end (`ChaosCluster.down`).
        self.cluster.deleted_namespaces.append(self.namespace)


def settle_time(started: float) -> float:
    return time.monotonic() - started


def api_refusal(call: Callable[[], Any]) -> tuple[int, str] | None:
    """(status, message) when the API server refuses `call`, None when it accepts it."""
    from achilles_chaos.kube import refusal

    try:
        call()
    except ApiException as error:
        return int(error.status or 0), refusal(error)
    return None
