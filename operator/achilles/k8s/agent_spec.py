"""Write fields of an Agent's spec from outside the operator (the CLI, for its owner).

A merge patch of the named spec fields alone, so nothing else on the resource is
touched. The operator mirrors the spec into the agent's row at its next event.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from achilles.errors import ClusterUnavailable, NotFound
from achilles.k8s.client import api_client
from achilles.k8s.resources.common import API_GROUP, API_VERSION_NAME
from achilles.k8s.resources.kinds import AGENT


def patch_spec(
    namespace: str, name: str, fields: dict[str, Any], *, kubeconfig: Path | None = None
) -> None:
    """Merge `fields` (CR spelling) into Agent `namespace/name`'s spec.

    Raises `NotFound` when the Agent does not exist and `ClusterUnavailable` when no
    cluster is configured, reachable, or willing (RBAC, admission)."""
    merge_patch_agent(namespace, name, {"spec": fields}, doing="patch", kubeconfig=kubeconfig)


def merge_patch_agent(
    namespace: str, name: str, body: dict[str, Any], *, doing: str, kubeconfig: Path | None
) -> None:
    """A merge patch of Agent `namespace/name` from outside the operator (`doing` names
    it in the refusal: "patch", "annotate"), with the errors every such writer reports."""
    with api_client(kubeconfig) as api:
        try:
            client.CustomObjectsApi(api).patch_namespaced_custom_object(
                API_GROUP, API_VERSION_NAME, namespace, AGENT.plural, name, body
            )
        except ApiException as exc:
            if exc.status == 404:
                raise NotFound(f"Agent {namespace}/{name} does not exist in the cluster") from exc
            raise ClusterUnavailable(
                f"the API server refused to {doing} Agent {namespace}/{name}:"
                f" {exc.status} {exc.reason}"
            ) from exc
        except (HTTPError, OSError) as exc:
            raise ClusterUnavailable(f"the Kubernetes API server is unreachable: {exc}") from exc
