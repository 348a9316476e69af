"""The CR models read manifests the way the API server does (the shared case table).

The cluster tier runs the same table against the real API server and checks that both
sides agree; here the pydantic side alone, fast.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from achilles.db.journal.models import PlatformSettings
from achilles.errors import InvalidInputError
from achilles.k8s.resources import (
    KINDS,
    AgentPlatformResource,
    AgentResource,
    AgentStatus,
    parse_manifest,
)
from achilles.k8s.resources.common import Condition
from tests.crd_cases import ALL_EXAMPLES, EXAMPLES, INVALID, VALID, Case, agent


@pytest.mark.parametrize("case", VALID, ids=lambda case: case.id)
def test_valid_manifest_is_accepted(case: Case) -> None:
    resource = parse_manifest(case.manifest)
    assert type(resource).__name__ == f"{case.kind}Resource"


@pytest.mark.parametrize("case", INVALID, ids=lambda case: case.id)
def test_invalid_manifest_is_rejected_naming_the_field(case: Case) -> None:
    with pytest.raises(InvalidInputError) as raised:
        parse_manifest(case.manifest)
    assert case.field is not None
    assert case.field in str(raised.value)


def test_the_table_covers_every_kind() -> None:
    kinds = {kind.kind for kind in KINDS}
    assert {case.kind for case in VALID} == kinds
    assert {case.kind for case in INVALID} == kinds
    assert len(INVALID) >= 20


@pytest.mark.parametrize("path", ALL_EXAMPLES, ids=lambda path: path.name)
def test_examples_are_valid(path: Path) -> None:
    parse_manifest(yaml.safe_load(path.read_text()))


def test_examples_cover_every_kind() -> None:
    kinds = {yaml.safe_load(path.read_text())["kind"] for path in ALL_EXAMPLES}
    assert kinds == {kind.kind for kind in KINDS}


def test_kubectl_apply_of_examples_leaves_the_charts_object_alone() -> None:
    """`kubectl apply -f examples/` (the README) applies what users own; AgentPlatform/default
    belongs to the chart's release, so its example lives in examples/platform/."""
    kinds = {yaml.safe_load(path.read_text())["kind"] for path in EXAMPLES}
    assert "AgentPlatform" not in kinds


def test_null_means_absent_and_defaults_apply() -> None:
    resource = parse_manifest(agent(enabled=None, adminPaused=None, schedule=None))
    assert isinstance(resource, AgentResource)
    assert resource.spec.enabled is True
    assert resource.spec.admin_paused is False
    assert resource.spec.schedule is None


def test_schedule_reads_the_cr_spelling_into_the_domain_model() -> None:
    resource = parse_manifest(agent(schedule={"type": "interval", "everyHours": 6}))
    assert isinstance(resource, AgentResource)
    assert resource.spec.schedule is not None
    assert resource.spec.schedule.model_dump(by_alias=True) == {"type": "interval", "everyHours": 6}


def test_platform_defaults_match_the_database_defaults() -> None:
    resource = parse_manifest(
        {"apiVersion": "achilles.io/v1alpha1", "kind": "AgentPlatform",
         "metadata": {"name": "default"}, "spec": {}}
    )  # fmt: skip
    assert isinstance(resource, AgentPlatformResource)
    columns = PlatformSettings.__table__.c
    database_defaults = {
        "timezone": columns.timezone,
        "weekly_token_budget": columns.agent_weekly_token_budget,
        "max_iterations": columns.agent_max_iterations,
        "max_concurrency": columns.agent_max_concurrency,
        "run_timeout_seconds": columns.agent_run_timeout_seconds,
        "platform_prompt": columns.agent_platform_prompt,
    }
    for field, column in database_defaults.items():
        default = str(column.server_default.arg.text).strip("'")
        assert str(getattr(resource.spec, field)) == default, field


def test_unknown_kind_is_named() -> None:
    with pytest.raises(InvalidInputError, match="kind: must be one of Agent, AgentModel"):
        parse_manifest({"apiVersion": "achilles.io/v1alpha1", "kind": "Agnet"})


def test_status_serialises_in_the_crd_spelling() -> None:
    status = AgentStatus(
        database_id=7,
        phase="Ready",
        conditions=[
            Condition(
                type="Ready",
                status="True",
                reason="AllLocksOpen",
                message="",
                last_transition_time=datetime(2026, 1, 5, 9, 0, tzinfo=UTC),
            )
        ],
        next_run_at=datetime(2026, 1, 12, 8, 0, tzinfo=UTC),
    )
    dumped = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert dumped["databaseId"] == 7
    assert dumped["conditions"][0]["lastTransitionTime"] == "2026-01-05T09:00:00Z"
    assert AgentStatus.model_validate(dumped) == status


def test_duplicate_condition_types_are_refused() -> None:
    condition = {
        "type": "Ready", "status": "True", "reason": "Ok",
        "lastTransitionTime": "2026-01-05T09:00:00Z",
    }  # fmt: skip
    with pytest.raises(ValueError, match="duplicate condition type"):
        AgentStatus.model_validate({"conditions": [condition, condition]})
