"""How the kubelet stand-in resolves a container's environment and command line."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from achilles_dev.kubelet.environment import (
    ContainerConfigError,
    container_command,
    container_environment,
    decode_secret,
    expand,
)

POD: dict[str, Any] = {
    "metadata": {"name": "run-7", "namespace": "agents", "uid": "u-1", "labels": {"agent": "a1"}},
    "spec": {"nodeName": "achilles-local", "serviceAccountName": "runner"},
    "status": {},
}
OBJECTS: dict[tuple[str, str], Mapping[str, str]] = {
    ("secret", "llm"): {"token": "s3cret"},
    ("configmap", "settings"): {"model": "tiny", "level": "debug"},
}


def lookup(kind: str, namespace: str, name: str) -> Mapping[str, str] | None:
    assert namespace == "agents"
    return OBJECTS.get((kind, name))


def resolve(container: dict[str, Any]) -> dict[str, str]:
    return container_environment(POD, {"name": "main", **container}, lookup, {"PATH": "/bin"})


@pytest.mark.parametrize(
    ("value", "variables", "expected"),
    [
        ("plain", {}, "plain"),
        ("$(A)-$(B)", {"A": "x", "B": "y"}, "x-y"),
        ("$(MISSING) stays", {}, "$(MISSING) stays"),
        ("$$(A) is escaped", {"A": "x"}, "$(A) is escaped"),
        ("cost $$5", {}, "cost $5"),
        ("$A is not a reference", {"A": "x"}, "$A is not a reference"),
    ],
)
def test_expand_follows_kubernetes_rules(
    value: str, variables: dict[str, str], expected: str
) -> None:
    assert expand(value, variables) == expected


def test_values_refs_and_fields_resolve_in_order() -> None:
    env = resolve(
        {
            "env": [
                {"name": "WHO", "value": "agents"},
                {"name": "HELLO", "value": "hi $(WHO)"},
                {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "llm", "key": "token"}}},
                {
                    "name": "MODEL",
                    "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "model"}},
                },
                {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {
                    "name": "AGENT",
                    "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['agent']"}},
                },
            ]
        }
    )
    assert env == {
        "PATH": "/bin",
        "WHO": "agents",
        "HELLO": "hi agents",
        "TOKEN": "s3cret",
        "MODEL": "tiny",
        "POD": "run-7",
        "NS": "agents",
        "AGENT": "a1",
    }


def test_env_from_comes_first_and_env_overrides_it() -> None:
    env = resolve(
        {
            "envFrom": [{"configMapRef": {"name": "settings"}, "prefix": "CFG_"}],
            "env": [{"name": "CFG_model", "value": "override"}],
        }
    )
    assert (env["CFG_model"], env["CFG_level"]) == ("override", "debug")


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"secretKeyRef": {"name": "absent", "key": "k"}}, 'secret "absent" not found'),
        (
            {"secretKeyRef": {"name": "llm", "key": "nope"}},
            "couldn't find key nope in secret agents/llm",
        ),
        ({"configMapKeyRef": {"name": "absent", "key": "k"}}, 'configmap "absent" not found'),
        ({"fieldRef": {"fieldPath": "status.podIPs"}}, "fieldRef 'status.podIPs' is not supported"),
    ],
)
def test_missing_configuration_is_a_config_error(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(ContainerConfigError, match=message.replace("(", r"\(")):
        resolve({"env": [{"name": "X", "valueFrom": entry}]})


def test_optional_references_may_be_absent() -> None:
    env = resolve(
        {
            "env": [
                {
                    "name": "X",
                    "valueFrom": {"secretKeyRef": {"name": "absent", "key": "k", "optional": True}},
                }
            ],
            "envFrom": [{"secretRef": {"name": "absent", "optional": True}}],
        }
    )
    assert "X" not in env


def test_command_and_args_are_expanded() -> None:
    container = {"name": "main", "command": ["achilles", "runner"], "args": ["--run", "$(RUN_ID)"]}
    assert container_command(container, {"RUN_ID": "42"}) == ["achilles", "runner", "--run", "42"]


def test_a_container_without_command_is_refused_clearly() -> None:
    with pytest.raises(ContainerConfigError, match="ignores images"):
        container_command({"name": "main", "image": "runner:1"}, {})


def test_secret_data_is_decoded() -> None:
    assert decode_secret({"token": "czNjcmV0"}) == {"token": "s3cret"}
