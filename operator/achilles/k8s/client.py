"""The one way the product makes a Kubernetes API client.

The cluster is the kubeconfig's when one is named or found (KUBECONFIG, ~/.kube/config),
else the in-cluster service account (the operator's pod, a run's pod). Every API call of
the product goes through a client made here, so configuration errors read the same
everywhere (`ClusterUnavailable`, with what to do).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException

from achilles.errors import ClusterUnavailable

# Connections a client keeps open to the API server. The kubernetes client's default is
# five per CPU (10 on two cores), and the operator's one client is shared by six watches,
# each holding a connection for its whole stream, the dispatcher's create threads and the
# workqueues' threads: past the pool, each request opened a connection (a TLS handshake
# on both sides) and closed it after, while a burst's Jobs were made.
CONNECTIONS = 48


def load_configuration(kubeconfig: Path | None = None) -> client.Configuration:
    """Connection settings from `kubeconfig`, the default kubeconfig, or the pod's account."""
    configuration = client.Configuration()
    configuration.connection_pool_maxsize = CONNECTIONS
    try:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig) if kubeconfig else None,
            client_configuration=configuration,
        )
        return configuration
    except (ConfigException, OSError, TypeError) as from_file:
        if kubeconfig is not None:
            raise ClusterUnavailable(f"kubeconfig {kubeconfig}: {from_file}") from from_file
    try:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except ConfigException as in_cluster:
        raise ClusterUnavailable(
            "no Kubernetes cluster is configured (no kubeconfig: set KUBECONFIG;"
            " not running in a pod)"
        ) from in_cluster
    return configuration


def api_client(kubeconfig: Path | None = None) -> client.ApiClient:
    """A client with its own connection pool; use it as a context manager to close it."""
    return client.ApiClient(load_configuration(kubeconfig))


def json_body(response: Any) -> Any:
    """The decoded body of a call made with `_preload_content=False`."""
    return json.loads(response.data)


def to_dict(api: client.ApiClient, obj: Any) -> dict[str, Any]:
    """A model as the API's JSON (camelCase keys)."""
    result: dict[str, Any] = api.sanitize_for_serialization(obj)  # type: ignore[no-untyped-call]
    return result
