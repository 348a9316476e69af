"""The Kubernetes side as the suite drives it: the four kinds, run requests, run Jobs/pods."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from achilles.k8s.annotations import RUN_REQUESTED_AT, format_run_request
from achilles.k8s.resources import KINDS
from achilles.k8s.resources.common import API_GROUP, API_VERSION, API_VERSION_NAME
from achilles.k8s.resources.kinds import Scope
from achilles.k8s.run_metadata import RUN_ID_LABEL, RUN_SELECTOR

PLURALS = {kind.kind: kind.plural for kind in KINDS}
NAMESPACED = {kind.kind for kind in KINDS if kind.scope is Scope.NAMESPACED}
RUNS_NAMESPACE = "achilles-runs"
MERGE_PATCH = "application/merge-patch+json"


def manifest(kind: str, name: str, spec: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": {"name": name, **metadata},
        "spec": spec,
    }


def refusal(error: ApiException) -> str:
    """The API server's message of a refused request."""
    try:
        return str(json.loads(error.body or "{}").get("message") or error.reason)
    except ValueError:
        return str(error.body or error.reason)


class Kube:
    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.batch = client.BatchV1Api(api)

    # --- the achilles.io kinds --------------------------------------------------------

    def _call(self, verb: str, kind: str, namespace: str | None, **kwargs: Any) -> Any:
        where: dict[str, Any] = {"group": API_GROUP, "version": API_VERSION_NAME}
        where["plural"] = PLURALS[kind]
        if kind in NAMESPACED:
            if namespace is None:
                raise ValueError(f"{kind} is namespaced")
            where["namespace"] = namespace
            scope = "namespaced"
        else:
            scope = "cluster"
        return getattr(self.custom, f"{verb}_{scope}_custom_object")(**where, **kwargs)

    def create(
        self, body: dict[str, Any], namespace: str | None = None, *, dry_run: bool = False
    ) -> dict[str, Any]:
        extra = {"dry_run": "All"} if dry_run else {}
        created: dict[str, Any] = self._call(
            "create", body["kind"], namespace, body=body, field_validation="Strict", **extra
        )
        return created

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = self._call("get", kind, namespace, name=name)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return found

    def patch(
        self, kind: str, name: str, patch: dict[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        patched: dict[str, Any] = self._call(
            "patch", kind, namespace, name=name, body=patch, field_validation="Strict"
        )
        return patched

    def delete(self, kind: str, name: str, namespace: str | None = None) -> None:
        try:
            self._call("delete", kind, namespace, name=name)
        except ApiException as error:
            if error.status != 404:
                raise

    def list_objects(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self._call("list", kind, namespace)["items"]
        return items

    def status(self, name: str, namespace: str) -> dict[str, Any]:
        agent = self.get("Agent", name, namespace) or {}
        status: dict[str, Any] = agent.get("status") or {}
        return status

    def request_run(self, namespace: str, name: str, value: str | None = None) -> str:
        """A manual run request, as the portal and `achilles run-now` write it."""
        value = value or format_run_request(datetime.now(UTC))
        self.patch(
            "Agent", name, {"metadata": {"annotations": {RUN_REQUESTED_AT: value}}}, namespace
        )
        return value

    # --- namespaces ---------------------------------------------------------------------

    def create_namespace(self, name: str) -> None:
        try:
            self.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        except ApiException as error:
            if error.status != 409:
                raise

    def namespace_exists(self, name: str) -> bool:
        try:
            self.core.read_namespace(name)
        except ApiException as error:
            if error.status == 404:
                return False
            raise
        return True

    def delete_namespace(self, name: str) -> None:
        try:
            self.core.delete_namespace(name)
        except ApiException as error:
            if error.status != 404:
                raise

    # --- run Jobs and pods --------------------------------------------------------------

    def run_jobs(self) -> list[Any]:
        return list(
            self.batch.list_namespaced_job(RUNS_NAMESPACE, label_selector=RUN_SELECTOR).items
        )

    def run_pods(self) -> list[Any]:
        return list(
            self.core.list_namespaced_pod(RUNS_NAMESPACE, label_selector=RUN_SELECTOR).items
        )

    def job_run_ids(self) -> list[int]:
        """The run id of every run Job that exists (a run id twice would be two Jobs)."""
        ids = []
        for job in self.run_jobs():
            value = (job.metadata.labels or {}).get(RUN_ID_LABEL)
            if value is not None and str(value).isdigit():
                ids.append(int(value))
        return ids

    def run_secret_ids(self) -> set[int]:
        """The run id of every run Secret that exists (each is made right after its Job)."""
        secrets = self.core.list_namespaced_secret(RUNS_NAMESPACE, label_selector=RUN_SELECTOR)
        ids = set()
        for secret in secrets.items:
            labels = secret.metadata.labels if secret.metadata is not None else None
            value = (labels or {}).get(RUN_ID_LABEL)
            if value is not None and str(value).isdigit():
                ids.add(int(value))
        return ids

    def pods_per_run(self) -> dict[int, int]:
        counts: dict[int, int] = {}
        for pod in self.run_pods():
            value = (pod.metadata.labels or {}).get(RUN_ID_LABEL)
            if value is not None and str(value).isdigit():
                counts[int(value)] = counts.get(int(value), 0) + 1
        return counts

    def delete_run_jobs(self) -> None:
        self.batch.delete_collection_namespaced_job(
            RUNS_NAMESPACE, label_selector=RUN_SELECTOR, propagation_policy="Background"
        )

    def live_run_pods(self) -> list[Any]:
        """Run pods not yet finished (Pending/Running, or still being torn down)."""
        return [
            pod
            for pod in self.run_pods()
            if pod.status.phase in ("Pending", "Running") or pod.metadata.deletion_timestamp
        ]
