"""The chart's ServiceMonitor, PrometheusRule and Grafana dashboard: off by default,
rendered by `helm template` only when enabled, validated by the values schema; the
alerts checked and unit-tested by the real promtool; every dashboard query parsed by
promtool too; and everything they read is a documented metric (docs/observability.md)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from achilles_dev.chart import CHART_DIR, RELEASE, RELEASE_NAMESPACE
from tests.monitoring.documented import documented_metrics, metric_names

HERE = Path(__file__).parent
DASHBOARD = CHART_DIR / "dashboards" / "achilles-operator.json"
ALERTS = {
    "AchillesQueueStuck",
    "AchillesRunsReaped",
    "AchillesSlotsLate",
    "AchillesBudgetRefusalsSpiking",
    "AchillesLoopFailing",
}
MONITORING_KINDS = ("ServiceMonitor", "PrometheusRule")


def _helm_template(helm: Path, *settings: str) -> subprocess.CompletedProcess[str]:
    args = [str(helm), "template", RELEASE, str(CHART_DIR), "--namespace", RELEASE_NAMESPACE]
    for setting in settings:
        args += ["--set", setting]
    return subprocess.run(args, capture_output=True, text=True, check=False)


def render(helm: Path, *settings: str) -> list[dict[str, Any]]:
    result = _helm_template(helm, *settings)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def _of_kind(documents: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in documents if d["kind"] == kind]


def _dashboard_configmaps(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        d for d in _of_kind(documents, "ConfigMap") if d["metadata"]["name"].endswith("-dashboard")
    ]


def _rules(helm: Path, *settings: str) -> dict[str, Any]:
    documents = render(helm, "metrics.prometheusRule.enabled=true", *settings)
    (rule,) = _of_kind(documents, "PrometheusRule")
    spec: dict[str, Any] = rule["spec"]
    return spec


def _promtool(promtool: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(promtool), *args], capture_output=True, text=True, check=False, cwd=cwd, timeout=120
    )


def test_monitoring_objects_are_off_by_default(helm: Path) -> None:
    documents = render(helm)
    for kind in MONITORING_KINDS:
        assert _of_kind(documents, kind) == []
    assert _dashboard_configmaps(documents) == []


def test_the_service_monitor_scrapes_the_operators_metrics_service(helm: Path) -> None:
    documents = render(
        helm, "metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.labels.release=kps"
    )
    (monitor,) = _of_kind(documents, "ServiceMonitor")
    (service,) = [
        d for d in _of_kind(documents, "Service") if d["metadata"]["name"].endswith("-metrics")
    ]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "kps"
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [RELEASE_NAMESPACE]}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {port["name"] for port in service["spec"]["ports"]}
    assert (endpoint["path"], endpoint["interval"], endpoint["scrapeTimeout"]) == (
        "/metrics",
        "30s",
        "10s",
    )
    # No operator, nothing to scrape: no ServiceMonitor either.
    off = render(helm, "metrics.serviceMonitor.enabled=true", "operator.enabled=false")
    assert _of_kind(off, "ServiceMonitor") == []


def test_a_service_monitor_without_the_metrics_service_is_refused(helm: Path) -> None:
    result = _helm_template(
        helm, "metrics.serviceMonitor.enabled=true", "metrics.service.enabled=false"
    )
    assert result.returncode != 0
    assert "metrics.serviceMonitor.enabled needs metrics.service.enabled" in result.stderr


@pytest.mark.parametrize(
    ("setting", "field"),
    [
        ("metrics.serviceMonitor.interval=soon", "interval"),
        ("metrics.prometheusRule.queueStuckMinutes=0", "queueStuckMinutes"),
        ("metrics.prometheusRule.slotLateSeconds=3600", "slotLateSeconds"),
        ("metrics.dashboard.folder=x", "folder"),
    ],
)
def test_the_schema_refuses_bad_monitoring_values(helm: Path, setting: str, field: str) -> None:
    result = _helm_template(helm, setting)
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr
    assert field in result.stderr


def test_the_dashboard_configmap_carries_the_dashboard(helm: Path) -> None:
    documents = render(
        helm, "metrics.dashboard.enabled=true", "metrics.dashboard.annotations.grafana_folder=A"
    )
    (configmap,) = _dashboard_configmaps(documents)
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert configmap["metadata"]["annotations"] == {"grafana_folder": "A"}
    assert json.loads(configmap["data"]["achilles-operator.json"]) == json.loads(
        DASHBOARD.read_text()
    )


def test_the_rendered_rules_pass_promtool_check_rules(
    helm: Path, promtool: Path, tmp_path: Path
) -> None:
    spec = _rules(helm, "metrics.prometheusRule.queueStuckMinutes=15")
    assert {rule["alert"] for group in spec["groups"] for rule in group["rules"]} == ALERTS
    assert "> 900" in spec["groups"][0]["rules"][0]["expr"]  # 15 minutes, from the values
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(spec))
    result = _promtool(promtool, "check", "rules", "rules.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in result.stdout + result.stderr


def test_the_alerts_fire_when_and_only_when_documented(
    helm: Path, promtool: Path, tmp_path: Path
) -> None:
    """promtool's rule unit tests (alerts_test.yaml) on the chart's default thresholds."""
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(_rules(helm)))
    shutil.copy(HERE / "alerts_test.yaml", tmp_path / "alerts_test.yaml")
    result = _promtool(promtool, "test", "rules", "alerts_test.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr
    # Each alert is seen both firing and silent.
    cases = [
        case
        for test in yaml.safe_load((HERE / "alerts_test.yaml").read_text())["tests"]
        for case in test["alert_rule_test"]
    ]
    assert {case["alertname"] for case in cases if case.get("exp_alerts")} == ALERTS
    assert {case["alertname"] for case in cases if not case.get("exp_alerts")} == ALERTS


def _dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [
        target["expr"]
        for panel in dashboard["panels"]
        if panel["type"] != "row"
        for target in panel["targets"]
    ]


def test_every_dashboard_query_parses(promtool: Path, tmp_path: Path) -> None:
    """Each query, its Grafana interval made concrete, as a recording rule for promtool."""
    queries = _dashboard_queries()
    assert len(queries) >= 12
    rules = [
        {
            "record": f"achilles:dashboard_query_{index}",
            "expr": query.replace("$__rate_interval", "5m"),
        }
        for index, query in enumerate(queries)
    ]
    (tmp_path / "queries.yaml").write_text(
        yaml.safe_dump({"groups": [{"name": "q", "rules": rules}]})
    )
    result = _promtool(promtool, "check", "rules", "queries.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_rules_and_the_dashboard_read_only_documented_metrics(helm: Path) -> None:
    documented = set(documented_metrics())
    rules = _rules(helm)
    read = {
        name
        for group in rules["groups"]
        for rule in group["rules"]
        for name in metric_names(rule["expr"])
    }
    for query in _dashboard_queries():
        read |= metric_names(query)
    assert read - documented == set()
    # The dashboard shows every documented metric.
    assert documented - set().union(*(metric_names(q) for q in _dashboard_queries())) == set()
