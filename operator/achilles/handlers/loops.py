"""The operator's cluster-wide loops, each a thread beside kopf's event loop.

kopf runs the per-object handlers; what is not about one object runs here: the
scheduler, the dispatcher, the pod/Job watchers, the reaper sweep and the status
writer. Every loop is safe with two replicas because the database decides (row locks,
SKIP LOCKED, the dispatch advisory lock, the one-active-run and request-key indexes).
Loops wake on NOTIFY from the journal and on their own tick; an error ends one pass
(logged, counted), never the loop.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TypeVar

from achilles.db.database import Database
from achilles.db.journal.status import agent_status_rows, agents_of_owners, run_owners
from achilles.db.notifications import RUNS_CHANNEL, SCHEDULE_CHANNEL, listen
from achilles.domain.runs import RunState
from achilles.handlers import metrics
from achilles.handlers.config import OperatorConfig
from achilles.k8s.jobs import RunJobs
from achilles.k8s.objects import ObjectRef, Resources
from achilles.k8s.resources.kinds import AGENT, AGENT_MODEL, AGENT_TOOL
from achilles.services import agents, catalogue, dispatch, outcomes, reply_wakes, scheduler
from achilles.services.status import StatusQueue, WrittenStatuses, journal_fields

log = logging.getLogger("achilles.operator")
T = TypeVar("T")

SCHEDULER_MAX_SLEEP = 10.0
# The scheduler's slot repair (closed locks, missing slots, moved zones) reads every
# agent: every pass would cost O(agents) per slot and per NOTIFY (docs/performance.md).
SCHEDULE_REPAIR_EVERY = 15.0
DISPATCH_TICK = 5.0
SWEEP_TICK = 10.0
ORPHAN_SWEEP_EVERY = 6  # sweeps: about a minute
WATCH_TIMEOUT_SECONDS = 300
MAX_BACKOFF = 30.0
SHUTDOWN_SECONDS = 5.0
# An owner's other agents get the weekly budget a run changed in turns (StatusQueue):
# at most 100 patches every 10 s per replica, however many agents an owner has.
SIBLING_REFRESH_SECONDS = 10.0
SIBLING_BATCH = 100
WATCH_THREADS = frozenset({"achilles-pod-watch", "achilles-job-watch"})


@dataclass
class Wake:
    """A level-triggered wake-up: set by anyone, cleared by the loop that waits on it."""

    event: threading.Event = field(default_factory=threading.Event)

    def set(self) -> None:
        self.event.set()

    def wait(self, timeout: float) -> None:
        self.event.wait(timeout)
        self.event.clear()


@dataclass
class Engine:
    config: OperatorConfig
    database: Database
    resources: Resources
    jobs: RunJobs
    stop: threading.Event = field(default_factory=threading.Event)
    schedule_wake: Wake = field(default_factory=Wake)
    dispatch_wake: Wake = field(default_factory=Wake)
    status_wake: Wake = field(default_factory=Wake)
    statuses: StatusQueue = field(
        default_factory=lambda: StatusQueue(SIBLING_REFRESH_SECONDS, SIBLING_BATCH)
    )
    last_pass: dict[str, float] = field(default_factory=dict)
    last_schedule_repair: float = float("-inf")
    threads: list[threading.Thread] = field(default_factory=list)
    # Handler calls that failed (database or API down), retried by the sweeper.
    retries: dict[str, Callable[[], None]] = field(default_factory=dict)
    retries_lock: threading.Lock = field(default_factory=threading.Lock)
    # The journal fields of each Agent's status as last patched (patch only changes).
    written_statuses: WrittenStatuses = field(default_factory=WrittenStatuses)

    # --- lifecycle ---

    def start(self) -> None:
        loops: dict[str, Callable[[], None]] = {
            "listener": self._listen,
            "scheduler": self._scheduler,
            "dispatcher": self._dispatcher,
            "pod-watch": self._watch_pods,
            "job-watch": self._watch_jobs,
            "sweeper": self._sweeper,
            "status": self._status_writer,
        }
        for name, target in loops.items():
            thread = threading.Thread(target=target, name=f"achilles-{name}", daemon=True)
            thread.start()
            self.threads.append(thread)

    def shutdown(self) -> None:
        """Let the loops finish the pass they are in (a pass is one short transaction),
        within SHUTDOWN_SECONDS in all. The watchers are not waited for: a watch stream
        wakes only at its next event, holds nothing between events, and the next leader
        lists before it watches; the threads are daemons and end with the process."""
        self.stop.set()
        for wake in (self.schedule_wake, self.dispatch_wake, self.status_wake):
            wake.set()
        deadline = time.monotonic() + SHUTDOWN_SECONDS
        for thread in self.threads:
            if thread.name not in WATCH_THREADS:
                thread.join(timeout=max(0.0, deadline - time.monotonic()))

    def mark_dirty(self, agent_ids: Iterable[int]) -> None:
        self.statuses.mark(agent_ids)
        self.status_wake.set()

    def want_reconcile(self, agent_ids: Iterable[int]) -> None:
        """Reconcile these agents at their next event, which the status writer's patch of
        their moved nextRunAt causes: their owner's zone moved or stopped being a zone, and
        the `Scheduled` condition follows it."""
        ids = list(agent_ids)
        self.statuses.want_reconcile(ids)
        self.mark_dirty(ids)

    def retry_later(self, key: str, call: Callable[[], None]) -> None:
        with self.retries_lock:
            self.retries[key] = call  # the newest event of an object supersedes older ones

    def retry_done(self, key: str) -> None:
        with self.retries_lock:
            self.retries.pop(key, None)

    def _retry_failed_handlers(self) -> bool:
        with self.retries_lock:
            pending = list(self.retries.items())
        for key, call in pending:
            with self.retries_lock:
                if self.retries.get(key) is not call:
                    continue  # superseded meanwhile
            call()  # on failure it re-registers itself; on success it clears its key
        return True

    def health(self) -> dict[str, float]:
        now = time.monotonic()
        return {loop: round(now - at, 1) for loop, at in self.last_pass.items()}

    def _pass(self, loop: str, work: Callable[[], T]) -> T | None:
        """One pass of a loop: its result, or None when it raised (logged and counted)."""
        started = time.monotonic()
        try:
            result = work()
        except Exception:
            metrics.LOOP_ERRORS.labels(loop).inc()
            log.exception("%s pass failed", loop)
            return None
        finally:
            metrics.LOOP_SECONDS.labels(loop).observe(time.monotonic() - started)
        self.last_pass[loop] = time.monotonic()
        return result

    # --- loops ---

    def _listen(self) -> None:
        def on_notify(channel: str, payload: str) -> None:
            if channel == RUNS_CHANNEL:
                self.dispatch_wake.set()
                if payload.isdigit():
                    self.mark_dirty([int(payload)])
            elif channel == SCHEDULE_CHANNEL:
                self.schedule_wake.set()

        listen(self.database.url, on_notify, self.stop, on_connected=self.dispatch_wake.set)

    def _scheduler(self) -> None:
        while not self.stop.is_set():
            sleep = SCHEDULER_MAX_SLEEP
            tick = self._pass("scheduler", self._schedule_once)
            if tick is not None and tick.nearest_next_run is not None and tick.now is not None:
                sleep = min(sleep, max(0.0, (tick.nearest_next_run - tick.now).total_seconds()))
            self.schedule_wake.wait(sleep)

    def _schedule_once(self) -> scheduler.TickResult:
        repair = time.monotonic() - self.last_schedule_repair >= SCHEDULE_REPAIR_EVERY
        tick = scheduler.schedule_due_agents(self.database, repair=repair)
        if repair:
            self.last_schedule_repair = time.monotonic()
        for agent_id, outcome in tick.enqueued:
            metrics.RUNS_ENQUEUED.labels("scheduled", outcome.state, outcome.reason or "").inc()
            if outcome.state is RunState.SKIPPED:
                message = f"scheduled run {outcome.run_id} skipped: {outcome.reason}"
                self._agent_event(agent_id, "Normal", "RunSkipped", message)
        if tick.enqueued:
            self.dispatch_wake.set()
            self.mark_dirty(agent_id for agent_id, _ in tick.enqueued)
        # A zone changed: nextRunAt moved, and the Scheduled condition may have too.
        self.want_reconcile([*tick.rescheduled, *tick.unschedulable])
        return tick

    def _dispatcher(self) -> None:
        backoff = 0.0
        while not self.stop.is_set():
            done = self._pass("dispatcher", self._dispatch_once)
            wait = DISPATCH_TICK
            if done is None or done.rejected is not None:
                # The API server or the database refused: back off, the runs stay queued.
                backoff = min(MAX_BACKOFF, max(1.0, backoff * 2))
                wait = backoff
            else:
                backoff = 0.0
                if done.progressed and done.waiting:
                    wait = 0.0  # a full batch left the queue and more wait: go on at once
            if wait > 0:
                self.dispatch_wake.wait(wait)

    def _dispatch_once(self) -> dispatch.DispatchResult:
        done = dispatch.dispatch_queued_runs(self.database, self.jobs, self.config.job_template)
        now = datetime.now(UTC)
        for run in done.created:
            metrics.JOBS_CREATED.inc()
            if run.scheduled_for is not None:
                metrics.SLOT_TO_JOB.observe(max(0.0, (now - run.scheduled_for).total_seconds()))
        for run in done.skipped:
            # As the same refusal at enqueue: the budget ran out while the run waited.
            metrics.RUNS_ENQUEUED.labels(run.trigger, RunState.SKIPPED, "budget_exceeded").inc()
            message = f"{run.trigger} run {run.run_id} skipped: budget_exceeded"
            self._event_on(run, "Normal", "RunSkipped", message)
        for withdrawn in done.withdrawn:
            # A closed lock leaves no row: the run is gone, and its request (if it was
            # one) is refused in the status, where `achilles run-now --wait` looks.
            run = withdrawn.run
            self._event_on(run, "Warning", "RunRefused", withdrawn.refusal)
            if run.request_key is not None and run.agent_name and run.agent_namespace:
                ref = _agent_ref(run.agent_name, run.agent_namespace, run.agent_uid)
                refused = {"request": run.request_key, "message": withdrawn.refusal}
                self.resources.patch_status(ref, {"withdrawnRunRequest": refused})
        self.mark_dirty(run.agent_id for run in [*done.skipped, *(w.run for w in done.withdrawn)])
        metrics.EXECUTING.set(done.executing)
        metrics.QUEUE_DEPTH.set(done.waiting)
        if done.rejected is not None:
            log.warning("Job creation refused (%s); the runs stay queued", done.rejected)
        return done

    def _report_failures(self, failed: Iterable[outcomes.FailedRun], reason: str) -> None:
        for run in failed:
            metrics.RUNS_FINISHED.labels(run.reason).inc()
            self._run_event(run.run_id, "Warning", reason, f"run {run.run_id} failed: {run.error}")

    def _watch_pods(self) -> None:
        while not self.stop.is_set():
            if self._pass("pod-watch", self._follow_pods) is None:
                self.stop.wait(2.0)

    def _follow_pods(self) -> bool:
        """List (nothing is missed while no watch ran), then watch until it times out."""
        self._report_failures(
            outcomes.fold_listing(
                self.database, self.jobs, start_deadline=self.config.start_deadline
            ),
            "RunFailed",
        )
        for pod in self.jobs.watch_pods(WATCH_TIMEOUT_SECONDS):
            if self.stop.is_set():
                break
            failed = outcomes.fold_pod(
                self.database, self.jobs, pod, start_deadline=self.config.start_deadline
            )
            if failed is not None:
                self._report_failures([failed], "RunFailed")
        return True

    def _watch_jobs(self) -> None:
        while not self.stop.is_set():
            if self._pass("job-watch", self._follow_jobs) is None:
                self.stop.wait(2.0)

    def _follow_jobs(self) -> bool:
        for job in self.jobs.watch_jobs(WATCH_TIMEOUT_SECONDS):
            if self.stop.is_set():
                break
            failed = outcomes.fold_job(
                self.database, job, self.jobs, start_deadline=self.config.start_deadline
            )
            if failed is not None:
                self._report_failures([failed], "RunFailed")
        return True

    def _sweeper(self) -> None:
        passes = 0
        while not self.stop.is_set():
            self._pass("sweeper", self._sweep_once)
            self._pass("pending-pods", self._judge_pending_pods)
            self._pass("retries", self._retry_failed_handlers)
            self._pass("owners", self._follow_owner_deactivation)
            self._pass("reply-wakes", self._wake_for_waiting_replies)
            if passes % ORPHAN_SWEEP_EVERY == 0:
                self._pass("orphans", self._forget_deleted_objects)
            passes += 1
            self.stop.wait(SWEEP_TICK)

    def _follow_owner_deactivation(self) -> bool:
        """Owner deactivated (`users.active`): switch their agents off. Read from the rows
        on every pass, never remembered here, so a second deactivation is followed too."""
        agents.switch_off_agents_of_inactive_owners(self.database)
        return self.deliver_owed_specs()

    def _wake_for_waiting_replies(self) -> bool:
        """A reply whose wake was lost (it came during a run, or never reached the
        cluster) gets its run now: derived from the rows, so nothing is lost to a restart."""
        for wake in reply_wakes.wake_for_waiting_replies(self.database):
            owed = wake.owed
            if wake.result is None:
                continue  # a lock closed meanwhile: owed again once it opens
            metrics.RUNS_ENQUEUED.labels(
                "manual", wake.result.state, wake.result.reason or ""
            ).inc()
            if owed.namespace and owed.name:
                message = (
                    f"run {wake.result.run_id} {wake.result.state}"
                    f"{': ' + wake.result.reason if wake.result.reason else ''}"
                    f" for the reply to inbox item {owed.item_id} that no run has taken yet"
                )
                reason = "RunQueued" if wake.result.is_queued else "RunSkipped"
                self.resources.post_event(
                    _agent_ref(owed.name, owed.namespace, owed.uid), "Normal", reason, message
                )
            self.mark_dirty([owed.agent_id])
            self.dispatch_wake.set()
        return True

    def deliver_owed_specs(self) -> bool:
        """Spec writes the database owes Agent resources (`db/journal/owed_spec.py`: a
        withdrawn model, a deactivated owner): patch each CR, tell its owner, forget."""
        for owed in agents.owed_specs(self.database):
            if self.resources.patch_agent_spec(owed.namespace, owed.name, owed.patch):
                ref = _agent_ref(owed.name, owed.namespace, owed.uid)
                for write in owed.writes.values():
                    self.resources.post_event(ref, write.event_type, write.reason, write.message)
            agents.spec_delivered(self.database, owed)
        return True

    def _forget_deleted_objects(self) -> bool:
        """Whatever was deleted while no operator watched: Agents (their rows and runs),
        AgentModels (withdrawn from their agents) and AgentTools (their links)."""
        listed_at = agents.database_clock(self.database)  # before the listings begin
        live = self.resources.agent_uids()
        if live is not None:
            for agent_id in agents.forget_agents_not_in(self.database, live, listed_at=listed_at):
                self.jobs.delete_for_agent(agent_id)
                log.info("agent row %s removed: its Agent no longer exists", agent_id)
        converged = catalogue.forget_deleted_catalogue(
            self.database,
            live_models=self.resources.object_names(AGENT_MODEL.plural),
            live_tools=self.resources.object_names(AGENT_TOOL.plural),
            listed_at=listed_at,
        )
        for name, stopped in converged.withdrawn_models.items():
            log.info(
                "model %s withdrawn from %d agent(s): its AgentModel no longer exists",
                name,
                len(stopped),
            )
        for name in converged.removed_tools:
            log.info("tool %s removed: its AgentTool no longer exists", name)
        return self.deliver_owed_specs()

    def _sweep_once(self) -> outcomes.SweepResult:
        swept = outcomes.sweep(self.database, self.jobs, stale_after=self.config.stale_after)
        silence = int(self.config.stale_after.total_seconds())
        for run_id in swept.reaped:
            metrics.RUNS_REAPED.inc()
            message = f"run {run_id} reaped: no heartbeat for {silence} s; its Job was deleted"
            self._run_event(run_id, "Warning", "RunReaped", message)
        self._report_failures(swept.failed, "RunFailed")
        if swept.requeued:
            self.dispatch_wake.set()
        return swept

    def _judge_pending_pods(self) -> bool:
        """Pods stuck before starting fail their run at the start deadline, event or not."""
        self._report_failures(
            outcomes.fold_pending_pods(
                self.database, self.jobs, start_deadline=self.config.start_deadline
            ),
            "RunFailed",
        )
        return True

    def _status_writer(self) -> None:
        while not self.stop.is_set():
            self.status_wake.wait(SWEEP_TICK)
            if self._pass("status", self._write_dirty_statuses) is None:
                self.stop.wait(1.0)

    def _write_dirty_statuses(self) -> bool:
        now, siblings = self.statuses.take()
        if not now and not siblings:
            return True
        try:
            return self._write_statuses(now, siblings)
        except Exception:
            self.statuses.put_back(now, siblings)  # try again on the next pass
            raise

    def _write_statuses(self, agent_ids: set[int], siblings: set[int]) -> bool:
        with self.database.transaction() as session:
            # The owners' other agents share the weekly budget: their turn comes later.
            self.statuses.mark_siblings(set(agents_of_owners(session, agent_ids)) - agent_ids)
            rows = agent_status_rows(session, agent_ids | siblings)
        for row in rows:
            if row.namespace is None or row.cr_name is None:
                continue
            fields = journal_fields(row)
            if not self.written_statuses.changed(row.agent_id, fields):
                continue
            ref = ObjectRef(AGENT.kind, AGENT.plural, row.cr_name, row.namespace, row.uid)
            if self.resources.patch_status(ref, fields):
                self.written_statuses.record(row.agent_id, fields)
            else:
                self.written_statuses.forget(row.agent_id)  # the Agent is gone
        return True

    # --- Events ---

    def _agent_event(self, agent_id: int, event_type: str, reason: str, message: str) -> None:
        with self.database.transaction() as session:
            rows = agent_status_rows(session, [agent_id])
        for row in rows:
            if row.namespace and row.cr_name:
                self.resources.post_event(
                    ObjectRef(AGENT.kind, AGENT.plural, row.cr_name, row.namespace, row.uid),
                    event_type,
                    reason,
                    message,
                )

    def _event_on(
        self, run: dispatch.DispatchableRun, event_type: str, reason: str, message: str
    ) -> None:
        """An Event on the Agent of a run the dispatcher took (its row may be gone)."""
        if run.agent_name and run.agent_namespace:
            ref = _agent_ref(run.agent_name, run.agent_namespace, run.agent_uid)
            self.resources.post_event(ref, event_type, reason, message)

    def _run_event(self, run_id: int, event_type: str, reason: str, message: str) -> None:
        with self.database.transaction() as session:
            owner = run_owners(session, [run_id]).get(run_id)
        if owner is not None and owner.namespace and owner.cr_name:
            self.resources.post_event(
                ObjectRef(AGENT.kind, AGENT.plural, owner.cr_name, owner.namespace, owner.uid),
                event_type,
                reason,
                message,
            )
            self.mark_dirty([owner.agent_id])


def _agent_ref(name: str, namespace: str, uid: str | None) -> ObjectRef:
    return ObjectRef(AGENT.kind, AGENT.plural, name, namespace, uid)
