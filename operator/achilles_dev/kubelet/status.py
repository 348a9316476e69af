"""The pod status the stand-in reports, derived purely from what it knows of a pod's run.

The Job controller reads these fields exactly as it reads a real kubelet's: the phase
(a pod it counts as succeeded or failed must reach Succeeded/Failed, which is also when
it drops its `batch.kubernetes.io/job-tracking` finalizer), the containers' terminated
state with exit codes, and the Ready condition. Field names, reasons and messages are
the kubelet's, so tools and people read them the usual way.
"""

from __future__ import annotations

import datetime
from typing import Any

from achilles_dev.kubelet.runs import ContainerRun, PodRun

HOST_IP = "127.0.0.1"
Pod = dict[str, Any]


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def is_final(container: ContainerRun) -> bool:
    """Exited and not going to be restarted."""
    return container.has_exited and container.restart_not_before is None


def phase(run: PodRun) -> str:
    containers = list(run.containers.values())
    if run.failure_reason:
        # Failed once its processes are gone; until then it is still running on the node.
        return "Running" if any(c.is_running for c in containers) else "Failed"
    if containers and all(is_final(c) for c in containers):
        return "Succeeded" if all(c.exit_code == 0 for c in containers) else "Failed"
    if any(c.started_at for c in containers):
        return "Running"
    return "Pending"


def _container_id(container: ContainerRun) -> str | None:
    return f"achilles://{container.shim.pid}" if container.shim else None


def terminated_state(container: ContainerRun) -> dict[str, Any]:
    state: dict[str, Any] = {
        "exitCode": container.exit_code,
        "reason": container.reason or ("Completed" if container.exit_code == 0 else "Error"),
        "startedAt": container.started_at,
        "finishedAt": container.finished_at,
    }
    if container.message:
        state["message"] = container.message
    if container.shim:
        state["containerID"] = _container_id(container)
    return state


def _state(container: ContainerRun) -> dict[str, Any]:
    if container.waiting_reason:
        waiting = {"reason": container.waiting_reason}
        if container.waiting_message:
            waiting["message"] = container.waiting_message
        return {"waiting": waiting}
    if container.has_exited:
        return {"terminated": terminated_state(container)}
    if container.is_running:
        return {"running": {"startedAt": container.started_at}}
    return {"waiting": {"reason": "ContainerCreating"}}


def container_status(spec: dict[str, Any], container: ContainerRun) -> dict[str, Any]:
    running = container.is_running and not container.waiting_reason
    status: dict[str, Any] = {
        "name": container.name,
        "image": spec.get("image", ""),
        "imageID": "",
        "ready": running,
        "started": running,
        "restartCount": container.attempt,
        "state": _state(container),
        "lastState": {"terminated": container.last_terminated} if container.last_terminated else {},
    }
    if container.shim:
        status["containerID"] = _container_id(container)
    return status


def _condition(
    previous: dict[str, dict[str, Any]], kind: str, value: bool, reason: str | None
) -> dict[str, Any]:
    status = "True" if value else "False"
    old = previous.get(kind) or {}
    changed = old.get("status") != status
    condition: dict[str, Any] = {
        "type": kind,
        "status": status,
        "lastProbeTime": None,
        "lastTransitionTime": now() if changed else old.get("lastTransitionTime"),
    }
    if reason and not value:
        condition["reason"] = reason
    return condition


def pod_status(pod: Pod, run: PodRun) -> dict[str, Any]:
    """The whole `status` of a bound pod, to be sent as a JSON merge patch."""
    specs = {c["name"]: c for c in pod["spec"].get("containers", [])}
    previous = {c["type"]: c for c in pod.get("status", {}).get("conditions") or []}
    current_phase = phase(run)
    all_ready = bool(run.containers) and all(
        c.is_running and not c.waiting_reason for c in run.containers.values()
    )
    not_ready_reason = (
        "PodCompleted" if current_phase in ("Succeeded", "Failed") else "ContainersNotReady"
    )
    scheduled = previous.get("PodScheduled") or {
        "type": "PodScheduled",
        "status": "True",
        "lastProbeTime": None,
        "lastTransitionTime": now(),
    }
    status: dict[str, Any] = {
        "phase": current_phase,
        "hostIP": HOST_IP,
        "hostIPs": [{"ip": HOST_IP}],
        "podIP": HOST_IP,
        "podIPs": [{"ip": HOST_IP}],
        "startTime": run.started_at,
        "conditions": [
            _condition(
                previous,
                "PodReadyToStartContainers",
                current_phase != "Pending" or any(c.started_at for c in run.containers.values()),
                None,
            ),
            _condition(previous, "Initialized", True, None),
            _condition(previous, "Ready", all_ready, not_ready_reason),
            _condition(previous, "ContainersReady", all_ready, not_ready_reason),
            scheduled,
        ],
        "containerStatuses": [
            container_status(specs.get(name, {}), c) for name, c in run.containers.items()
        ],
        "observedGeneration": pod["metadata"].get("generation"),
    }
    if run.failure_reason:
        status["reason"] = run.failure_reason
        status["message"] = run.failure_message or ""
    return status


def comparable(status: dict[str, Any]) -> dict[str, Any]:
    """The status without transition times, to tell a real change from a re-render."""
    return {
        **status,
        "conditions": [
            {k: v for k, v in c.items() if k != "lastTransitionTime"} for c in status["conditions"]
        ],
    }
