"""The operator's Prometheus endpoint, scraped from a running operator on the real control
plane and PostgreSQL after a run went through and a request was refused: every metric
docs/observability.md documents is served, of its type, with exactly its labels, and the
figures say what happened (the run ended, its Job was made, its runner claimed it, the
refusal has its reason, the loops passed, the status writer patched)."""

from __future__ import annotations

import json
import urllib.request
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from sqlalchemy import Engine

from achilles.k8s.annotations import RUN_REQUESTED_AT, format_run_request
from achilles_dev.ports import free_port
from tests.cluster.conftest import Cluster
from tests.cluster.install.api import Achilles
from tests.cluster.install.conftest import Release
from tests.cluster.install.operator_support import (
    agent_status,
    journal_rows,
    new_owner,
    running_operator,
    slow_runner_command,
)
from tests.crd_cases import agent, agent_model
from tests.monitoring.documented import documented_metrics
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

# The histograms' extra series and their label.
_HISTOGRAM_SUFFIXES = {"_bucket": {"le"}, "_sum": set(), "_count": set()}


def _scrape(port: int) -> tuple[dict[str, str], list[Sample]]:
    """The endpoint's families (name -> type) and all their samples."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        families = list(text_string_to_metric_families(response.read().decode()))
    types = {family.name: family.type for family in families}
    return types, [sample for family in families for sample in family.samples]


def _value(samples: list[Sample], name: str, **labels: str) -> float:
    """The sum of `name`'s samples whose labels include `labels`."""
    return sum(s.value for s in samples if s.name == name and labels.items() <= s.labels.items())


def _request(admin_api: Achilles, name: str, namespace: str) -> None:
    value = format_run_request(datetime.now(UTC))
    admin_api.patch(
        "Agent", name, {"metadata": {"annotations": {RUN_REQUESTED_AT: value}}}, namespace
    )


def _wait_reconciled(admin_api: Achilles, name: str, namespace: str) -> None:
    wait_for(
        lambda: agent_status(admin_api, name, namespace).get("databaseId"),
        180,  # also the operator's start-up
        what=f"{name} reconciled",
    )


def test_every_documented_metric_is_served_with_its_labels_after_a_run(
    cluster: Cluster,
    achilles_release: Release,
    admin_api: Achilles,
    journal: Engine,
    namespace: str,
    tmp_path: Path,
) -> None:
    model = f"m-{uuid.uuid4().hex[:6]}"
    admin_api.create(agent_model(model))
    owner = new_owner(journal)
    port = free_port()
    env = {
        "ACHILLES_METRICS_PORT": str(port),
        "ACHILLES_RUNNER_COMMAND": slow_runner_command(),
        "ACHILLES_RUNNER_ENV": json.dumps({"ACHILLES_TEST_HOLD_SECONDS": "1"}),
    }
    try:
        with running_operator(cluster, achilles_release, tmp_path / "op.log", **env) as operator:
            admin_api.create(agent("metered", owner=owner, model=model), namespace)
            admin_api.create(agent("off", owner=owner, model=model, enabled=False), namespace)
            for name in ("metered", "off"):
                _wait_reconciled(admin_api, name, namespace)
            _request(admin_api, "metered", namespace)
            _request(admin_api, "off", namespace)
            agent_id = agent_status(admin_api, "metered", namespace)["databaseId"]
            wait_for(
                lambda: journal_rows(
                    journal,
                    "SELECT 1 FROM agent_runs WHERE agent_id = :a AND state = 'succeeded'",
                    a=agent_id,
                ),
                120,
                what=f"metered's run succeeded\n{operator.log()}",
            )

            def ended_and_claimed() -> tuple[dict[str, str], list[Sample]] | None:
                # The run-metrics pass counts a run once its window closed (30 s passes,
                # 10 s behind the database's clock).
                scraped = _scrape(port)
                samples = scraped[1]
                ended = _value(
                    samples,
                    "achilles_runs_ended_total",
                    trigger="manual",
                    state="succeeded",
                    reason="",
                )
                claimed = _value(samples, "achilles_job_to_heartbeat_seconds_count")
                return scraped if ended >= 1 and claimed >= 1 else None

            families, samples = wait_for(
                ended_and_claimed, 150, what="the run in the journal's figures"
            )
    finally:
        admin_api.delete("AgentModel", model)

    # Every documented metric is there, of its type, with exactly its labels.
    documented = documented_metrics()
    assert len(documented) >= 15
    for metric in documented.values():
        family = metric.name.removesuffix("_total") if metric.kind == "counter" else metric.name
        assert families.get(family) == metric.kind, f"{metric.name}: {families.get(family)}"
        series = [s for s in samples if s.name == metric.name]
        if metric.kind == "histogram":
            series = [
                s
                for s in samples
                for suffix, extra in _HISTOGRAM_SUFFIXES.items()
                if s.name == metric.name + suffix and set(s.labels) == metric.labels | extra
            ]
            assert series, metric.name
            continue
        assert series, f"{metric.name} has no series"
        for sample in series:
            assert set(sample.labels) == metric.labels, (metric.name, sample.labels)

    # And they say what happened.
    assert _value(samples, "achilles_jobs_created_total") >= 1
    assert _value(samples, "achilles_runs_enqueued_total", trigger="manual", state="queued") >= 1
    assert _value(samples, "achilles_run_requests_total", outcome="refused") >= 1
    assert _value(samples, "achilles_runs_refused_total", trigger="manual", reason="disabled") >= 1
    assert (
        _value(samples, "achilles_status_patches_total", source="journal", outcome="patched") >= 1
    )
    assert (
        _value(samples, "achilles_status_patches_total", source="reconcile", outcome="patched") >= 1
    )
    settings = journal_rows(journal, "SELECT agent_max_concurrency FROM platform_settings")
    assert _value(samples, "achilles_max_concurrency") == settings[0][0]
    phases = {s.labels["phase"] for s in samples if s.name == "achilles_runs_active"}
    assert phases == {"waiting", "starting", "running"}
    for loop in ("scheduler", "dispatcher", "status", "sweeper", "run-metrics"):
        assert _value(samples, "achilles_loop_seconds_count", loop=loop) >= 1, loop
        assert any(
            s.name == "achilles_loop_errors_total" and s.labels == {"loop": loop} for s in samples
        ), loop
