"""Reading an Agent's status (the CLI follows a run through it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from achilles.errors import ClusterUnavailable, NotFound
from achilles.k8s.client import api_client
from achilles.k8s.resources.common import API_GROUP, API_VERSION_NAME
from achilles.k8s.resources.kinds import AGENT


def read_agent_status(
    namespace: str, name: str, *, kubeconfig: Path | None = None
) -> dict[str, Any]:
    with api_client(kubeconfig) as api:
        try:
            body = client.CustomObjectsApi(api).get_namespaced_custom_object(
                API_GROUP, API_VERSION_NAME, namespace, AGENT.plural, name
            )
        except ApiException as exc:
            if exc.status == 404:
                raise NotFound(f"Agent {namespace}/{name} does not exist in the cluster") from exc
            raise ClusterUnavailable(
                f"cannot read Agent {namespace}/{name}: {exc.status} {exc.reason}"
            ) from exc
        except (HTTPError, OSError) as exc:
            raise ClusterUnavailable(f"the Kubernetes API server is unreachable: {exc}") from exc
    status: dict[str, Any] = cast(dict[str, Any], body).get("status") or {}
    return status
