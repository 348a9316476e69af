"""Request a run of an agent the Kubernetes way: a new `achilles.io/run-requested-at` value.

Writing it is a merge patch of the annotation alone, so nothing else on the resource
is touched. Honouring it is the operator's (`achilles.services.runs`); writers go through
`achilles.services.run_requests.RunRequester`.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from achilles.errors import ClusterUnavailable, NotFound
from achilles.k8s.annotations import RUN_REQUESTED_AT, format_run_request
from achilles.k8s.client import api_client
from achilles.k8s.resources.common import API_GROUP, API_VERSION_NAME
from achilles.k8s.resources.kinds import AGENT

__all__ = ["RUN_REQUESTED_AT", "request_run"]


def request_run(namespace: str, name: str, at: datetime, *, kubeconfig: Path | None = None) -> str:
    """Annotate Agent `namespace/name` with a run request at `at`; return the value written.

    Raises `NotFound` when the Agent does not exist and `ClusterUnavailable`
    when no cluster is configured, reachable, or willing.
    """
    value = format_run_request(at)
    body = {"metadata": {"annotations": {RUN_REQUESTED_AT: value}}}
    with api_client(kubeconfig) as api:
        try:
            client.CustomObjectsApi(api).patch_namespaced_custom_object(
                API_GROUP, API_VERSION_NAME, namespace, AGENT.plural, name, body
            )
        except ApiException as exc:
            if exc.status == 404:
                raise NotFound(f"Agent {namespace}/{name} does not exist in the cluster") from exc
            raise ClusterUnavailable(
                f"the API server refused to annotate Agent {namespace}/{name}:"
                f" {exc.status} {exc.reason}"
            ) from exc
        except (HTTPError, OSError) as exc:
            raise ClusterUnavailable(f"the Kubernetes API server is unreachable: {exc}") from exc
    return value
