"""What a run's pod or Job says about the run: the verdict the Job watcher folds in.

Kubernetes tells us that a runner died long before its heartbeat goes stale (DESIGN.md
§4, "Reaping"): a failed or evicted pod, an OOM kill, the Job's active deadline, a
pod that never starts. Each becomes `failed/error` with a precise `error` text. Pure:
the k8s layer turns API objects into these observations.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

# A pod that has not started its runner this long after it was created (image pull
# failing, nowhere to schedule it) fails its run instead of waiting forever.
START_DEADLINE = timedelta(seconds=60)

# A run's Secret (its run secret, made right after its Job) that is still missing this
# long after the run was dispatched is the sweeper's to make (`services/outcomes.py`):
# its dispatcher died between the two creates, or could not make it. Past every create
# a dispatch pass may still start and finish (`services/dispatch.py`, k8s/jobs.py).
RUN_SECRET_GRACE = timedelta(seconds=45)

# Waiting reasons that never resolve by themselves: fail at once.
HOPELESS_WAITING_REASONS = frozenset({"InvalidImageName", "ErrImageNeverPull", "RunContainerError"})
# Waiting reasons that may resolve, which the kubelet retries: a registry hiccup, or a
# Secret it could not read yet (`CreateContainerConfigError`: "failed to sync secret
# cache" while the API server restarts, or a Secret created a moment later). Fail after
# START_DEADLINE (found by `achilles chaos apiserver-restart`: failing such a pod at once
# failed a healthy run).
SLOW_WAITING_REASONS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "CreateContainerError",
        "CreateContainerConfigError",
        "ContainerCreating",
    }
)


@dataclass(frozen=True)
class ContainerObservation:
    waiting_reason: str | None = None
    waiting_message: str | None = None
    terminated_reason: str | None = None
    terminated_message: str | None = None
    exit_code: int | None = None


@dataclass(frozen=True)
class PodObservation:
    run_id: int
    name: str
    phase: str  # Pending | Running | Succeeded | Failed | Unknown
    reason: str | None  # pod-level: Evicted, DeadlineExceeded, ...
    message: str | None
    created_at: datetime
    runner: ContainerObservation | None
    unschedulable_message: str | None = None
    deleted: bool = False
    # The runner waits for its run's Secret, which does not exist (yet).
    waiting_for_run_secret: bool = False


@dataclass(frozen=True)
class JobObservation:
    run_id: int
    name: str
    failed_reason: str | None  # the Job's Failed condition reason (DeadlineExceeded, ...)
    failed_message: str | None
    succeeded: bool
    active_deadline_seconds: int | None


@dataclass(frozen=True)
class Verdict:
    """The run must fail with `error`; `ended` = the runner is gone for sure.

    `unclaimed_only`: the verdict holds only for a run no runner has claimed. A runner
    that exits 0 has either written its run's end or found the run claimed by another
    (Kubernetes may start a Job's pod twice, e.g. when the API server restarts: its
    controller then creates a second pod), so its pod says nothing about a claimed run.
    """

    error: str
    ended: bool
    unclaimed_only: bool = False


def _clip(text: str | None, limit: int = 300) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def pod_verdict(
    pod: PodObservation, now: datetime, start_deadline: timedelta = START_DEADLINE
) -> Verdict | None:
    """None while the pod gives no reason to fail its run."""
    runner = pod.runner or ContainerObservation()
    prefix = f"pod {pod.name}"
    if pod.phase == "Failed":
        if pod.reason == "Evicted":
            return Verdict(f"{prefix} was evicted: {_clip(pod.message)}", ended=True)
        if pod.reason == "DeadlineExceeded":
            return Verdict(
                f"{prefix} was killed at the run's active deadline (runTimeoutSeconds):"
                f" {_clip(pod.message)}",
                ended=True,
            )
        if runner.terminated_reason == "OOMKilled":
            return Verdict(
                f"{prefix}: the runner was OOMKilled (exit code {runner.exit_code},"
                " over its memory limit)",
                ended=True,
            )
        if runner.exit_code is not None:
            detail = _clip(runner.terminated_message) or runner.terminated_reason or "Error"
            return Verdict(
                f"{prefix}: the runner exited with code {runner.exit_code} ({detail})",
                ended=True,
            )
        return Verdict(
            f"{prefix} failed: {pod.reason or 'unknown reason'} {_clip(pod.message)}".rstrip(),
            ended=True,
        )
    if pod.phase == "Succeeded":
        return Verdict(
            f"{prefix}: the runner exited without recording an outcome",
            ended=True,
            unclaimed_only=True,
        )
    if pod.phase != "Pending":
        return None
    if runner.waiting_reason in HOPELESS_WAITING_REASONS:
        return Verdict(
            f"{prefix} cannot start: {runner.waiting_reason}: {_clip(runner.waiting_message)}",
            ended=False,
        )
    if pod.waiting_for_run_secret:
        # Not the start deadline's: the sweeper makes its Secret once an operator runs
        # (after a dispatcher killed between the two creates, the next one may start
        # long after); the Job's active deadline (`runTimeoutSeconds`) bounds the wait.
        return None
    too_old = now - pod.created_at > start_deadline
    if too_old and runner.waiting_reason in SLOW_WAITING_REASONS:
        return Verdict(
            f"{prefix} did not start within {int(start_deadline.total_seconds())} s:"
            f" {runner.waiting_reason}: {_clip(runner.waiting_message)}",
            ended=False,
        )
    if too_old and pod.unschedulable_message is not None:
        return Verdict(
            f"{prefix} could not be scheduled within {int(start_deadline.total_seconds())} s:"
            f" {_clip(pod.unschedulable_message)}",
            ended=False,
        )
    return None


def job_verdict(job: JobObservation) -> Verdict | None:
    if job.failed_reason is None:
        return None
    if job.failed_reason == "DeadlineExceeded":
        return Verdict(
            f"Job {job.name} was stopped at its active deadline"
            f" ({job.active_deadline_seconds} s, runTimeoutSeconds): the run hung or ran too long",
            ended=True,
        )
    return Verdict(
        f"Job {job.name} failed: {job.failed_reason}: {_clip(job.failed_message)}", ended=True
    )


NEVER = datetime.max.replace(tzinfo=UTC)


def may_fail(pod: PodObservation, start_deadline: timedelta = START_DEADLINE) -> bool:
    """Whether some instant gives this pod a verdict. False: folding it can write nothing,
    now or later, so it costs no transaction (most pod events: Running, a young Pending)."""
    return pod_verdict(pod, NEVER, start_deadline) is not None
