"""Asking for a run of an agent, behind one small interface.

On a cluster a run is requested the Kubernetes way, by a new value of the Agent's
run-request annotation (`achilles.k8s.annotations`); the operator turns each value into
one manual run. Whoever asks — the CLI's wake-on-reply, later the operator itself — goes
through a `RunRequester`, so the asking code never knows about API clients and tests can
pass a fake.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Protocol


class RunRequester(Protocol):
    def request(self, namespace: str, name: str, at: datetime) -> str:
        """Request a run of Agent `namespace/name` made at `at`; return the request's value.

        Raises `NotFound` when the Agent does not exist and `ClusterUnavailable` when
        the request cannot be delivered.
        """
        ...


class KubernetesRunRequester:
    """Writes the run-request annotation through the kubeconfig's (or the pod's) cluster."""

    def __init__(self, kubeconfig: Path | None = None) -> None:
        self.kubeconfig = kubeconfig

    def request(self, namespace: str, name: str, at: datetime) -> str:
        # Imported here: the Kubernetes client is heavy, and most callers never request.
        from achilles.k8s.run_request import request_run

        return request_run(namespace, name, at, kubeconfig=self.kubeconfig)
