"""The run Job builder (DESIGN.md §4), table-tested: every property a run's Job must have."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from achilles.k8s.jobs import JobTemplate, RunJobSpec, SecretKey, build_run_job
from achilles.k8s.run_metadata import (
    AGENT_ID_LABEL,
    RUN_ID_LABEL,
    RUN_SELECTOR,
    job_name,
    run_id_of,
)

TEMPLATE = JobTemplate(
    namespace="achilles-runs",
    image="registry.example/achilles-runner:1.0",
    database_secret=SecretKey("achilles-runner-database", "url"),
)


def _run(**overrides: Any) -> RunJobSpec:
    fields: dict[str, Any] = {
        "run_id": 42,
        "agent_id": 7,
        "agent_uid": "0b4c6c5e-5f0e-4a57-9b73-3d1b2c4d5e6f",
        "agent_namespace": "team-a",
        "agent_name": "digest",
        "trigger": "scheduled",
        "scheduled_for": datetime(2026, 12, 1, 9, 0, tzinfo=UTC),
        "run_timeout_seconds": 900,
        "model_secret": SecretKey("openai", "api-key"),
    }
    fields.update(overrides)
    return RunJobSpec(**fields)


def _get(document: Any, path: str) -> Any:
    for part in path.split("."):
        document = document[int(part)] if part.isdigit() else document[part]
    return document


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("metadata.name", "achilles-run-42"),
        ("metadata.namespace", "achilles-runs"),
        ("spec.backoffLimit", 0),
        ("spec.activeDeadlineSeconds", 900),
        ("spec.ttlSecondsAfterFinished", 3600),
        ("spec.template.spec.restartPolicy", "Never"),
        ("spec.template.spec.automountServiceAccountToken", False),
        ("spec.template.spec.securityContext.runAsNonRoot", True),
        ("spec.template.spec.securityContext.seccompProfile.type", "RuntimeDefault"),
        ("spec.template.spec.containers.0.image", "registry.example/achilles-runner:1.0"),
        ("spec.template.spec.containers.0.command", ["achilles", "runner"]),
        ("spec.template.spec.containers.0.args", ["--run-id", "42"]),
        ("spec.template.spec.containers.0.securityContext.runAsNonRoot", True),
        ("spec.template.spec.containers.0.securityContext.readOnlyRootFilesystem", True),
        ("spec.template.spec.containers.0.securityContext.allowPrivilegeEscalation", False),
        ("spec.template.spec.containers.0.securityContext.capabilities.drop", ["ALL"]),
        (f"metadata.labels.{RUN_ID_LABEL}", "42"),
        (f"metadata.labels.{AGENT_ID_LABEL}", "7"),
        ("metadata.annotations.achilles.io/agent", "team-a/digest"),
    ],
)
def test_run_job_has(path: str, expected: Any) -> None:
    job = build_run_job(_run(), TEMPLATE)
    if "achilles.io/" in path:  # label and annotation keys hold dots and slashes
        head, key = path.split(".achilles.io/")
        assert _get(job, head)[f"achilles.io/{key}"] == expected
    else:
        assert _get(job, path) == expected


def test_secrets_come_from_secret_refs_never_values() -> None:
    env = build_run_job(_run(), TEMPLATE)["spec"]["template"]["spec"]["containers"][0]["env"]
    by_name = {item["name"]: item for item in env}
    assert by_name["ACHILLES_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "achilles-runner-database",
        "key": "url",
    }
    assert by_name["ACHILLES_MODEL_API_KEY"]["valueFrom"]["secretKeyRef"] == {
        "name": "openai",
        "key": "api-key",
    }
    assert all("value" not in item for item in env)


def test_a_model_without_a_key_gets_no_key_variable() -> None:
    env = build_run_job(_run(model_secret=None), TEMPLATE)["spec"]["template"]["spec"][
        "containers"
    ][0]["env"]
    assert [item["name"] for item in env] == ["ACHILLES_DATABASE_URL"]


def test_pod_and_job_carry_the_selector_the_operator_watches() -> None:
    job = build_run_job(_run(), TEMPLATE)
    key, value = RUN_SELECTOR.split("=")
    assert job["metadata"]["labels"][key] == value
    assert job["spec"]["template"]["metadata"]["labels"][key] == value


@pytest.mark.parametrize(("run_id"), [1, 42, 10**12])
def test_the_job_name_is_the_run_id_and_back(run_id: int) -> None:
    assert run_id_of(job_name(run_id)) == run_id


@pytest.mark.parametrize("name", ["achilles-run-", "achilles-run-x1", "other-1", "achilles-run--1"])
def test_foreign_names_are_not_runs(name: str) -> None:
    assert run_id_of(name) is None


def test_mcp_credentials_are_optional_secret_refs_never_values() -> None:
    """Issue 38: an agent's MCP headers reach its run's pod by Secret reference only, and
    a missing Secret fails the tool's calls, not the pod's start."""
    run = _run(secret_env=(("ACHILLES_MCP_7_HEADER_0", SecretKey("mcp-token", "authorization")),))
    env = build_run_job(run, TEMPLATE)["spec"]["template"]["spec"]["containers"][0]["env"]
    by_name = {item["name"]: item for item in env}
    assert by_name["ACHILLES_MCP_7_HEADER_0"]["valueFrom"]["secretKeyRef"] == {
        "name": "mcp-token",
        "key": "authorization",
        "optional": True,
    }
    assert all("value" not in item for item in env)
