"""Request a run of an agent the Kubernetes way: a new `achilles.io/run-requested-at` value.

DESIGN.md §2: each new value of the annotation on the Agent resource is one
manual run request; honouring it is the operator's job. Writing it is a merge
patch of the annotation alone, so nothing else on the resource is touched.
The cluster is the current kubeconfig's (KUBECONFIG or ~/.kube/config), or the
in-cluster service account when running in a pod.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from urllib3.exceptions import HTTPError

from achilles.domain.timestamps import iso_utc
from achilles.errors import ClusterUnavailable, NotFound
from achilles.k8s.resources.common import API_GROUP, API_VERSION_NAME
from achilles.k8s.resources.kinds import AGENT

RUN_REQUESTED_AT = f"{API_GROUP}/run-requested-at"


def rfc3339(at: datetime) -> str:
    """Second precision in UTC, e.g. `2026-11-30T09:00:00Z`."""
    if at.tzinfo is None:
        raise ValueError("a run request time must be timezone-aware")
    return iso_utc(at.replace(microsecond=0))


def _api_client(kubeconfig: Path | None) -> client.ApiClient:
    try:
        made: client.ApiClient = config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig) if kubeconfig else None
        )
        return made
    except (ConfigException, OSError) as from_file:
        if kubeconfig is not None:
            raise ClusterUnavailable(f"kubeconfig {kubeconfig}: {from_file}") from from_file
        configuration = client.Configuration()
        try:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except ConfigException as in_cluster:
            raise ClusterUnavailable(
                "no Kubernetes cluster is configured (no kubeconfig: set KUBECONFIG;"
                " not running in a pod)"
            ) from in_cluster
        return client.ApiClient(configuration)


def request_run(namespace: str, name: str, at: datetime, *, kubeconfig: Path | None = None) -> str:
    """Annotate Agent `namespace/name` with a run request at `at`; return the value written.

    Raises `NotFound` when the Agent does not exist and `ClusterUnavailable`
    when no cluster is configured, reachable, or willing.
    """
    value = rfc3339(at)
    body = {"metadata": {"annotations": {RUN_REQUESTED_AT: value}}}
    with _api_client(kubeconfig) as api:
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
