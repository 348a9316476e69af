"""Helpers for cluster tests: manifests as dicts, Job and pod state, process checks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client

from achilles.k8s.client import to_dict
from achilles_dev.processes import reference
from tests.waiting import wait_for

T = TypeVar("T")

PYTHON = "python"  # the runner image's python (on its PATH)


def present(value: T | None, what: str) -> T:
    """`value`, which the API server must have filled in by now; fails the test naming `what`.

    The client's models type every field as optional; this is where a test states that a
    field is there, with a clearer failure than an AttributeError on None.
    """
    if value is None:
        raise AssertionError(f"the API server left {what} unset")
    return value


def python_command(code: str) -> list[str]:
    return [PYTHON, "-c", code]


def gated_program(pid_file: Path | None, gate: Path, exit_code: int = 0) -> list[str]:
    """A program that records its pid, runs until `gate` exists, then exits with `exit_code`.

    Tests hold a pod in Running for as long as they need by not creating the gate.
    """
    record = f"pathlib.Path({str(pid_file)!r}).write_text(str(os.getpid()))\n" if pid_file else ""
    return python_command(
        "import os, pathlib, sys, time\n" + record + f"gate = pathlib.Path({str(gate)!r})\n"
        "while not gate.exists():\n"
        "    time.sleep(0.05)\n"
        f"sys.exit({exit_code})\n"
    )


def job_manifest(name: str, command: list[str], **job_spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "main",
        "image": "ignored.local/runner",
        "command": command,
    }
    container.update(job_spec.pop("container", {}))
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            **job_spec,
            "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
        },
    }


def create_job(batch: client.BatchV1Api, namespace: str, manifest: dict[str, Any]) -> None:
    batch.create_namespaced_job(namespace, client.V1Job.model_validate(manifest))


def create_pod(core: client.CoreV1Api, namespace: str, manifest: dict[str, Any]) -> None:
    core.create_namespaced_pod(namespace, client.V1Pod.model_validate(manifest))


def job_condition(batch: client.BatchV1Api, namespace: str, name: str, kind: str) -> Any:
    """The Job's condition of type `kind` if it is True, else None."""
    job = batch.read_namespaced_job(name, namespace)
    for condition in (job.status.conditions if job.status else None) or []:
        if condition.type == kind and condition.status == "True":
            return condition
    return None


def job_pods(core: client.CoreV1Api, namespace: str, job: str) -> list[Any]:
    return list(core.list_namespaced_pod(namespace, label_selector=f"job-name={job}").items)


def only_pod(core: client.CoreV1Api, namespace: str, job: str) -> Any:
    pods = job_pods(core, namespace, job)
    return pods[0] if len(pods) == 1 else None


def terminated(pod: Any) -> dict[str, Any] | None:
    """The first container's terminated state as API JSON, or None while it has not ended."""
    statuses = (pod.status.container_statuses if pod and pod.status else None) or []
    if not statuses or statuses[0].state is None or statuses[0].state.terminated is None:
        return None
    return to_dict(client.ApiClient(), statuses[0].state.terminated)


def final_state(pod: Any) -> dict[str, Any]:
    """The first container's terminated state as API JSON; fails the test if it has not ended."""
    return present(terminated(pod), "the first container's terminated state")


def pod_phase(core: client.CoreV1Api, namespace: str, name: str) -> str | None:
    try:
        pod = core.read_namespaced_pod(name, namespace)
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise
    return str(pod.status.phase) if pod.status else None


def pid_from(path: Path) -> int | None:
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return None


def process_is_gone(pid: int) -> bool:
    return reference(pid) is None


def termination_json(pod: Any) -> Any:
    state = terminated(pod)
    return json.loads(state["message"]) if state and state.get("message") else None


def failed_job_state(
    batch: client.BatchV1Api, core: client.CoreV1Api, namespace: str, job: str, timeout: float
) -> dict[str, Any]:
    """Wait for the Job to fail, then return its only pod's final container state."""
    wait_for(lambda: job_condition(batch, namespace, job, "Failed"), timeout, what="Failed")
    return final_state(only_pod(core, namespace, job))
