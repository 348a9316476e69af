"""What the operator knows of run pods and Jobs: kept by the two watchers, read by the sweeper.

The watchers list once, then follow a watch that resumes where it ended
(k8s/watching.py), so their cost follows what changes, not how many Jobs are kept
(`ttlSecondsAfterFinished`). From the events they keep, in memory:

- the runs whose Job exists (the sweeper's missing-Job repair reads it instead of
  listing every Job);
- the pods that have not started (the sweeper judges them against the start deadline,
  which no event announces, instead of listing them);
- the runs whose pod is still there, started or not (the dispatcher holds an agent's
  next run until its last run's pod is gone: seed 002's one runner alive per agent);
- the pods and Jobs already judged for good (`outcomes.Folded.settled`): nothing they
  say is folded again, whatever event or listing brings them back.

Each view is trusted only once synced (its first listing done, and no watch failure
since: a failure lists again); until then the sweeper does without it (no run is judged
missing, no pending pod judged) rather than act on a partial view. A restart loses
nothing: the first listing folds everything once, in one transaction per page.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TypeVar

from achilles.db.database import Database
from achilles.domain.pod_outcome import (
    START_DEADLINE,
    JobObservation,
    PodObservation,
    job_verdict,
    may_fail,
)
from achilles.k8s.jobs import RunJobs
from achilles.k8s.run_watch import job_watch, pod_watch
from achilles.k8s.watching import Change, ListWatch, Page
from achilles.services import outcomes
from achilles.telemetry.spans import NO_SPANS, Spans

log = logging.getLogger("achilles.operator")

T = TypeVar("T")
Report = Callable[[list[outcomes.FailedRun]], None]

WATCH_TIMEOUT_SECONDS = 300
# A pod in these phases runs nothing any more (its containers ended for good).
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


class RunObjects:
    def __init__(
        self,
        database: Database,
        jobs: RunJobs,
        *,
        start_deadline: timedelta = START_DEADLINE,
        watch_timeout_seconds: int = WATCH_TIMEOUT_SECONDS,
        spans: Spans = NO_SPANS,
    ) -> None:
        self.database = database
        self.spans = spans
        self.jobs = jobs
        self.start_deadline = start_deadline
        self.pod_watch = pod_watch(jobs, watch_timeout_seconds)
        self.job_watch = job_watch(jobs, watch_timeout_seconds)
        self._lock = threading.Lock()
        self._pending: dict[str, PodObservation] = {}  # pod name -> its latest observation
        self._present: dict[str, int] = {}  # pod name -> its run, while the pod runs or may
        self._listed_pods: set[str] = set()
        self._pods_synced = False
        self._job_runs: dict[str, int] = {}  # Job name -> run id
        self._listed_jobs: dict[str, int] = {}
        self._jobs_synced = False
        self._settled_pods: set[str] = set()
        self._settled_jobs: set[str] = set()

    # --- what the sweeper reads ---

    def existing_run_ids(self) -> set[int] | None:
        """The runs whose Job exists; None until the Job watcher is synced."""
        with self._lock:
            return set(self._job_runs.values()) if self._jobs_synced else None

    def pod_run_ids(self) -> set[int] | None:
        """The runs whose pod is still there (not deleted, not finished); None until the
        pod watcher is synced."""
        with self._lock:
            return set(self._present.values()) if self._pods_synced else None

    def pending_pods(self) -> list[PodObservation] | None:
        """The run pods not started yet; None until the pod watcher is synced."""
        with self._lock:
            return list(self._pending.values()) if self._pods_synced else None

    def judge_pending_pods(self) -> list[outcomes.FailedRun]:
        """Judge the pods not started again: one stuck waiting (a Secret that does not
        exist: `CreateContainerConfigError`) may never change after its first status, so
        no event comes once it passes the start deadline (found by `achilles chaos
        bad-input`, scenario no-secret). No pending pod that may fail: no transaction.
        First, a pod waiting for its own run Secret past the grace gets it."""
        pods = self.pending_pods()
        if not pods:
            return []
        given = outcomes.give_missing_run_secrets(self.database, self.jobs, pods)
        if given:
            log.warning("runs %s: their dispatcher made no run Secret; made one each", given)
        return self._fold_pods(pods)

    # --- the watchers: one pass each, until the watch ends or `stop` ---

    def follow_pods(
        self, stop: threading.Event, report: Report, gone: Callable[[], None] = lambda: None
    ) -> None:
        """`gone`: told when a run's pod is no longer there, and when a listing ends (the
        pods it did not bring are gone; before the first one the dispatcher held every
        agent whose run just ended): an agent may be waiting."""

        def page(page: Page[PodObservation]) -> list[outcomes.FailedRun]:
            failed = self._pod_page(page)
            if page.last:
                gone()
            return failed

        def change(change: Change[PodObservation]) -> list[outcomes.FailedRun]:
            with self._lock:
                was_present = change.item.name in self._present
            failed = self._pod_change(change)
            with self._lock:
                now_gone = was_present and change.item.name not in self._present
            if now_gone:
                gone()
            return failed

        self._follow(self.pod_watch, stop, report, page, change)

    def follow_jobs(self, stop: threading.Event, report: Report) -> None:
        self._follow(self.job_watch, stop, report, self._job_page, self._job_change)

    def _follow(
        self,
        watch: ListWatch[T],
        stop: threading.Event,
        report: Report,
        on_page: Callable[[Page[T]], list[outcomes.FailedRun]],
        on_change: Callable[[Change[T]], list[outcomes.FailedRun]],
    ) -> None:
        stream = watch.follow()
        try:
            while not stop.is_set():
                try:
                    item = next(stream, None)
                except Exception:
                    # The API server failed us: events may be missing until we list again.
                    self._unsync(watch)
                    watch.forget()
                    raise
                if item is None:
                    return  # the watch ended (its timeout): the next pass resumes it
                # A fold that raises (the database) leaves the watch where it was: the
                # next pass gets this page or event again.
                failed = on_page(item) if isinstance(item, Page) else on_change(item)
                if failed:
                    report(failed)
        finally:
            stream.close()

    def _unsync(self, watch: ListWatch[T]) -> None:
        with self._lock:
            if watch is self.pod_watch:
                self._pods_synced = False
            else:
                self._jobs_synced = False

    # --- pods ---

    def _pod_page(self, page: Page[PodObservation]) -> list[outcomes.FailedRun]:
        with self._lock:
            if page.first:
                self._listed_pods = set()
            for pod in page.items:
                self._note_pod(pod)
                self._listed_pods.add(pod.name)
            if page.last:
                # What the listing did not bring is gone (deleted while we did not watch).
                for name in set(self._pending) - self._listed_pods:
                    del self._pending[name]
                for name in set(self._present) - self._listed_pods:
                    del self._present[name]
                self._settled_pods &= self._listed_pods
                self._pods_synced = True
        return self._fold_pods(page.items)

    def _pod_change(self, change: Change[PodObservation]) -> list[outcomes.FailedRun]:
        pod = change.item
        with self._lock:
            self._note_pod(pod)
        failed = self._fold_pods([pod])
        if pod.deleted:
            with self._lock:
                self._settled_pods.discard(pod.name)
        return failed

    def _note_pod(self, pod: PodObservation) -> None:
        if pod.deleted or pod.phase != "Pending":
            self._pending.pop(pod.name, None)
        else:
            self._pending[pod.name] = pod
        if pod.deleted or pod.phase in FINISHED_PHASES:
            self._present.pop(pod.name, None)
        else:
            self._present[pod.name] = pod.run_id

    def _fold_pods(self, pods: Sequence[PodObservation]) -> list[outcomes.FailedRun]:
        with self._lock:
            fresh = [pod for pod in pods if pod.name not in self._settled_pods]
        # A span for a fold that may write (most events cost nothing and are not traced).
        judged = sum(may_fail(pod, self.start_deadline) for pod in fresh)
        spans = self.spans if judged else NO_SPANS
        with spans.span("fold pods", {"achilles.fold.judged": judged}) as span:
            folded = outcomes.fold_pods(
                self.database, self.jobs, fresh, start_deadline=self.start_deadline
            )
            span.set_attribute("achilles.fold.failed_runs", len(folded.failed))
        with self._lock:
            self._settled_pods |= folded.settled
        return folded.failed

    # --- Jobs ---

    def _job_page(self, page: Page[JobObservation]) -> list[outcomes.FailedRun]:
        with self._lock:
            if page.first:
                self._listed_jobs = {}
            self._listed_jobs.update((job.name, job.run_id) for job in page.items)
            if page.last:
                self._job_runs = dict(self._listed_jobs)
                self._settled_jobs &= self._job_runs.keys()
                self._jobs_synced = True
        return self._fold_jobs(page.items)

    def _job_change(self, change: Change[JobObservation]) -> list[outcomes.FailedRun]:
        job = change.item
        if change.type == "DELETED":
            with self._lock:
                self._job_runs.pop(job.name, None)
                self._settled_jobs.discard(job.name)
            # A cancelled run's Job goes after its pods: the run may end now.
            outcomes.job_gone(self.database, job.run_id)
            return []
        with self._lock:
            self._job_runs[job.name] = job.run_id
        return self._fold_jobs([job])

    def _fold_jobs(self, observed: Sequence[JobObservation]) -> list[outcomes.FailedRun]:
        with self._lock:
            fresh = [job for job in observed if job.name not in self._settled_jobs]
        judged = sum(job_verdict(job) is not None for job in fresh)
        spans = self.spans if judged else NO_SPANS
        with spans.span("fold jobs", {"achilles.fold.judged": judged}) as span:
            folded = outcomes.fold_jobs(
                self.database, self.jobs, fresh, start_deadline=self.start_deadline
            )
            span.set_attribute("achilles.fold.failed_runs", len(folded.failed))
        with self._lock:
            self._settled_jobs |= folded.settled
        return folded.failed
