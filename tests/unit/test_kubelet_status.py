"""The pod status the kubelet stand-in derives from its knowledge of a pod's run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from achilles_dev.kubelet.runs import ContainerRun, PodRun
from achilles_dev.kubelet.status import comparable, phase, pod_status
from achilles_dev.processes import ProcessRef

SHIM = ProcessRef(pid=4242, start_ticks=1)


def running() -> ContainerRun:
    return ContainerRun(name="main", shim=SHIM, started_at="2026-01-01T00:00:00Z")


def exited(code: int, restart_pending: bool = False) -> ContainerRun:
    container = running()
    container.exit_code, container.finished_at = code, "2026-01-01T00:00:05Z"
    if restart_pending:
        container.restart_not_before = 10.0
    return container


def run_of(*containers: ContainerRun, failure: str | None = None) -> PodRun:
    run = PodRun(
        uid="u",
        namespace="ns",
        name="p",
        directory=Path("/nonexistent"),
        started_at="2026-01-01T00:00:00Z",
    )
    for index, container in enumerate(containers):
        container.name = f"c{index}"
        run.containers[container.name] = container
    run.failure_reason = failure
    return run


@pytest.mark.parametrize(
    ("run", "expected"),
    [
        (run_of(ContainerRun(name="x")), "Pending"),
        (run_of(running()), "Running"),
        (run_of(exited(0)), "Succeeded"),
        (run_of(exited(3)), "Failed"),
        (run_of(exited(0), exited(1)), "Failed"),
        (run_of(exited(0), running()), "Running"),
        (run_of(exited(1, restart_pending=True)), "Running"),
        (run_of(running(), failure="DeadlineExceeded"), "Running"),  # until the process is gone
        (run_of(exited(143), failure="DeadlineExceeded"), "Failed"),
    ],
)
def test_phase(run: PodRun, expected: str) -> None:
    assert phase(run) == expected


def pod(conditions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u", "generation": 1},
        "spec": {"containers": [{"name": "c0", "image": "ignored"}]},
        "status": {"conditions": conditions or []},
    }


def test_terminated_container_reports_exit_code_reason_and_message() -> None:
    container = exited(3)
    container.message = "model unreachable"
    status = pod_status(pod(), run_of(container))
    assert status["phase"] == "Failed"
    assert status["containerStatuses"][0]["state"] == {
        "terminated": {
            "exitCode": 3,
            "reason": "Error",
            "message": "model unreachable",
            "startedAt": "2026-01-01T00:00:00Z",
            "finishedAt": "2026-01-01T00:00:05Z",
            "containerID": "achilles://4242",
        }
    }
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "PodCompleted")


def test_running_container_is_ready_and_transition_times_are_kept() -> None:
    earlier = {"type": "Ready", "status": "True", "lastProbeTime": None, "lastTransitionTime": "T0"}
    status = pod_status(pod([earlier]), run_of(running()))
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready == earlier
    assert status["containerStatuses"][0]["ready"] is True
    assert status["containerStatuses"][0]["state"] == {
        "running": {"startedAt": "2026-01-01T00:00:00Z"}
    }


def test_comparable_ignores_only_transition_times() -> None:
    first = pod_status(pod(), run_of(running()))
    again = pod_status(pod(), run_of(running()))
    for condition in again["conditions"]:
        condition["lastTransitionTime"] = "later"
    assert comparable(first) == comparable(again)
    assert comparable(first) != comparable(pod_status(pod(), run_of(exited(0))))
