"""What the operator reads of a run's pods and Jobs: the API's JSON turned into the
observations a verdict is made from (domain/pod_outcome.py).

Only the fields a verdict needs are read, from the JSON itself, never the client's
models: the watches (k8s/run_watch.py) and the list of a run's pods (k8s/jobs.py) pass
every object through here, and the rest of it (the pod spec, the Job's template) is
never turned into objects.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from achilles.domain.pod_outcome import ContainerObservation, JobObservation, PodObservation
from achilles.k8s.run_metadata import RUN_ID_LABEL, RUNNER_CONTAINER, run_id_of, run_secret_name


def _get(obj: Any, *path: str) -> Any:
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def _timestamp(value: Any) -> datetime:
    # RFC 3339 in UTC, as the API server writes it ("2026-12-02T01:49:32Z").
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def pod_from_json(pod: dict[str, Any], deleted: bool = False) -> PodObservation | None:
    run_id = (_get(pod, "metadata", "labels") or {}).get(RUN_ID_LABEL)
    if run_id is None or not str(run_id).isdigit():
        return None
    status = pod.get("status") or {}
    runner = None
    for container in status.get("containerStatuses") or []:
        if container.get("name") != RUNNER_CONTAINER:
            continue
        waiting = _get(container, "state", "waiting") or {}
        terminated = _get(container, "state", "terminated") or {}
        runner = ContainerObservation(
            waiting_reason=waiting.get("reason"),
            waiting_message=waiting.get("message"),
            terminated_reason=terminated.get("reason"),
            terminated_message=terminated.get("message"),
            exit_code=terminated.get("exitCode"),
        )
    unschedulable = None
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("reason") == "Unschedulable":
            unschedulable = condition.get("message") or "Unschedulable"
    # The kubelet's words for a Secret it could not find:
    # `secret "achilles-run-7" not found`.
    missing = f'"{run_secret_name(int(run_id))}" not found'
    return PodObservation(
        run_id=int(run_id),
        name=str(_get(pod, "metadata", "name")),
        phase=status.get("phase") or "Unknown",
        reason=status.get("reason"),
        message=status.get("message"),
        created_at=_timestamp(_get(pod, "metadata", "creationTimestamp")),
        runner=runner,
        unschedulable_message=unschedulable,
        deleted=deleted,
        waiting_for_run_secret=runner is not None
        and runner.waiting_reason == "CreateContainerConfigError"
        and missing in (runner.waiting_message or ""),
    )


def job_from_json(job: dict[str, Any], deleted: bool = False) -> JobObservation | None:
    name = str(_get(job, "metadata", "name") or "")
    run_id = run_id_of(name)
    if run_id is None:
        return None
    failed_reason = failed_message = None
    succeeded = False
    for condition in _get(job, "status", "conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "Failed":
            failed_reason, failed_message = condition.get("reason"), condition.get("message")
        if condition.get("type") == "Complete":
            succeeded = True
    return JobObservation(
        run_id=run_id,
        name=name,
        failed_reason=failed_reason,
        failed_message=failed_message,
        succeeded=succeeded,
        active_deadline_seconds=_get(job, "spec", "activeDeadlineSeconds"),
    )
