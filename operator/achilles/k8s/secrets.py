"""Reading one key of a Secret the operator may read by name (the chart's
`operator.rbac.secretNames`)."""

from __future__ import annotations

import base64
import binascii

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from achilles.k8s.rest import CoreApi


class SecretUnavailable(Exception):
    """The Secret or its key cannot be read; the message says which and why."""


def read_secret_key(core: CoreApi, namespace: str, name: str, key: str) -> bytes:
    try:
        secret = core.read_namespaced_secret(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            raise SecretUnavailable(f"Secret {namespace}/{name} does not exist") from exc
        if exc.status == 403:
            raise SecretUnavailable(
                f"the operator may not read Secret {namespace}/{name}: list it in the chart's"
                " operator.rbac.secretNames"
            ) from exc
        raise SecretUnavailable(
            f"cannot read Secret {namespace}/{name}: {exc.status} {exc.reason}"
        ) from exc
    except (HTTPError, OSError) as exc:
        raise SecretUnavailable(f"the Kubernetes API server is unreachable: {exc}") from exc
    data = secret.get("data") or {}
    if key not in data:
        raise SecretUnavailable(f"Secret {namespace}/{name} has no key {key!r}")
    try:
        value = base64.b64decode(data[key], validate=True)
    except (binascii.Error, ValueError) as exc:
        raise SecretUnavailable(f"Secret {namespace}/{name} key {key!r} is not base64") from exc
    if not value:
        raise SecretUnavailable(f"Secret {namespace}/{name} key {key!r} is empty")
    return value
