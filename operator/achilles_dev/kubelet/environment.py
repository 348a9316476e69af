"""A container's environment and command line, resolved as the kubelet resolves them.

Order and precedence follow the kubelet: `envFrom` sources first, then `env` entries in
order (later wins); `$(NAME)` in a value refers to a variable defined earlier, `$$` is a
literal `$`, and unknown references stay as written. The same expansion applies to
`command` and `args`. A missing Secret, ConfigMap or key that is not `optional` is a
`ContainerConfigError`, which the stand-in reports as `CreateContainerConfigError` and
retries, as the kubelet does.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Mapping
from typing import Any

from achilles.errors import LocalStackError

Pod = dict[str, Any]
# (kind "secret" | "configmap", namespace, name) -> the object's data, or None if absent.
Lookup = Callable[[str, str, str], Mapping[str, str] | None]

_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.\-]*)\)")


class ContainerConfigError(LocalStackError):
    """The pod refers to configuration that does not exist (yet)."""


def expand(value: str, variables: Mapping[str, str]) -> str:
    """Kubernetes `$(VAR)` expansion: `$$` escapes, unknown references are left intact."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return variables.get(name, match.group(0))

    return _REFERENCE.sub(replace, value)


def _field_value(pod: Pod, path: str) -> str:
    metadata = pod.get("metadata", {})
    spec = pod.get("spec", {})
    status = pod.get("status", {})
    simple = {
        "metadata.name": metadata.get("name", ""),
        "metadata.namespace": metadata.get("namespace", ""),
        "metadata.uid": metadata.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.hostIP": status.get("hostIP", "127.0.0.1"),
        "status.podIP": status.get("podIP", "127.0.0.1"),
    }
    if path in simple:
        return str(simple[path])
    for prefix, source in (("metadata.labels", "labels"), ("metadata.annotations", "annotations")):
        if path.startswith(prefix + "['") and path.endswith("']"):
            return str(metadata.get(source, {}).get(path[len(prefix) + 2 : -2], ""))
    raise ContainerConfigError(f"fieldRef {path!r} is not supported by the kubelet stand-in")


def _key_value(kind: str, namespace: str, ref: Mapping[str, Any], lookup: Lookup) -> str | None:
    name, key, optional = ref.get("name", ""), ref.get("key", ""), bool(ref.get("optional"))
    data = lookup(kind, namespace, name)
    if data is None:
        if optional:
            return None
        raise ContainerConfigError(f'{kind} "{name}" not found')
    if key not in data:
        if optional:
            return None
        raise ContainerConfigError(f"couldn't find key {key} in {kind} {namespace}/{name}")
    return data[key]


def _value_from(pod: Pod, source: Mapping[str, Any], lookup: Lookup) -> str | None:
    namespace = pod["metadata"]["namespace"]
    if "secretKeyRef" in source:
        return _key_value("secret", namespace, source["secretKeyRef"], lookup)
    if "configMapKeyRef" in source:
        return _key_value("configmap", namespace, source["configMapKeyRef"], lookup)
    if "fieldRef" in source:
        return _field_value(pod, source["fieldRef"]["fieldPath"])
    raise ContainerConfigError(
        f"valueFrom {sorted(source)} is not supported by the kubelet stand-in"
    )


def _env_from(pod: Pod, container: Mapping[str, Any], lookup: Lookup) -> dict[str, str]:
    namespace = pod["metadata"]["namespace"]
    result: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        for field, kind in (("configMapRef", "configmap"), ("secretRef", "secret")):
            if field not in source:
                continue
            ref = source[field]
            data = lookup(kind, namespace, ref.get("name", ""))
            if data is None:
                if ref.get("optional"):
                    continue
                raise ContainerConfigError(f'{kind} "{ref.get("name", "")}" not found')
            result.update({prefix + key: value for key, value in data.items()})
    return result


def container_environment(
    pod: Pod, container: Mapping[str, Any], lookup: Lookup, base: Mapping[str, str]
) -> dict[str, str]:
    """The full environment of one container: `base` (host essentials), envFrom, env."""
    variables = dict(base)
    variables.update(_env_from(pod, container, lookup))
    for entry in container.get("env") or []:
        if "valueFrom" in entry:
            value = _value_from(pod, entry["valueFrom"], lookup)
            if value is None:
                continue
        else:
            value = expand(entry.get("value", ""), variables)
        variables[entry["name"]] = value
    return variables


def container_command(container: Mapping[str, Any], variables: Mapping[str, str]) -> list[str]:
    """`command` + `args` with `$(VAR)` expanded; images are ignored, so a command is required."""
    command = list(container.get("command") or [])
    if not command:
        raise ContainerConfigError(
            f"container {container.get('name')!r} has no command: the kubelet stand-in ignores "
            "images, so the pod must name a command runnable on this host"
        )
    return [expand(part, variables) for part in [*command, *(container.get("args") or [])]]


def decode_secret(data: Mapping[str, str] | None) -> dict[str, str]:
    """A Secret's `data` is base64; the environment wants the text."""
    return {
        key: base64.b64decode(value).decode("utf-8", errors="replace")
        for key, value in (data or {}).items()
    }
