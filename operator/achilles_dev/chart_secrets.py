"""The Secrets a local stack gives the chart: each component's database URL, one Secret per
login under the chart's default names, and the API's web client and session secrets.

`helm install` on a real cluster expects them made beforehand; `achilles dev up` makes
them here, and the fault suite and the cluster tests use the same names.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from achilles.errors import LocalStackError

# Names of the Secrets (the chart's defaults) that carry database URLs, one per login
# (values.yaml `database:`); not secrets.
DATABASE_SECRET = "achilles-database"  # noqa: S105 - the operator's
MIGRATIONS_DATABASE_SECRET = "achilles-migrations-database"  # noqa: S105
RUNNER_DATABASE_SECRET = "achilles-runner-database"  # noqa: S105
API_DATABASE_SECRET = "achilles-api-database"  # noqa: S105
DATABASE_SECRET_KEY = "url"  # noqa: S105
# The API's web client and session secrets, which the stack creates (dev values only).
API_WEB_CLIENT_SECRET = "achilles-api-web-client"  # noqa: S105 - a Secret's name
API_WEB_CLIENT_SECRET_KEY = "client-secret"  # noqa: S105 - a key's name
API_SESSION_SECRET = "achilles-api-session"  # noqa: S105 - a Secret's name
API_SESSION_SECRET_KEY = "session-secret"  # noqa: S105 - a key's name


def ensure_namespace(kubeconfig: Path, name: str) -> None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from achilles.k8s.client import api_client

    with api_client(kubeconfig) as api:
        try:
            client.CoreV1Api(api).create_namespace(
                client.V1Namespace(metadata=client.V1ObjectMeta(name=name))
            )
        except ApiException as error:
            if error.status != 409:
                raise LocalStackError(f"cannot create namespace {name}: {error.reason}") from error


def ensure_secret(kubeconfig: Path, namespace: str, name: str, url: str) -> None:
    """Create or update the Secret holding a database URL (key `url`)."""
    ensure_secret_data(kubeconfig, namespace, name, {DATABASE_SECRET_KEY: url})


def ensure_api_secrets(kubeconfig: Path, namespace: str) -> None:
    """The web client's secret (the one the stack's provider was given) and a session
    secret, made once and kept: signed-in browsers stay signed in across `dev up`."""
    import secrets

    from achilles_dev import oidc

    ensure_secret_data(
        kubeconfig,
        namespace,
        API_WEB_CLIENT_SECRET,
        {API_WEB_CLIENT_SECRET_KEY: oidc.WEB_CLIENT_SECRET},
    )
    ensure_secret_data(
        kubeconfig,
        namespace,
        API_SESSION_SECRET,
        {API_SESSION_SECRET_KEY: secrets.token_urlsafe(48)},
        replace=False,
    )


def ensure_secret_data(
    kubeconfig: Path, namespace: str, name: str, data: Mapping[str, str], *, replace: bool = True
) -> None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from achilles.k8s.client import api_client

    secret = client.V1Secret(
        metadata=client.V1ObjectMeta(name=name, namespace=namespace), string_data=dict(data)
    )
    with api_client(kubeconfig) as api:
        core = client.CoreV1Api(api)
        try:
            core.create_namespaced_secret(namespace, secret)
        except ApiException as error:
            if error.status != 409:
                raise LocalStackError(
                    f"cannot create Secret {namespace}/{name}: {error.reason}"
                ) from error
            if replace:
                core.replace_namespaced_secret(name, namespace, secret)
