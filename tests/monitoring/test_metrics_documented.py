"""docs/observability.md's metrics table and the operator's metrics (handlers/metrics.py)
agree: every metric the operator registers is documented with its type and labels, and
the table names nothing the operator does not export."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from achilles.handlers import metrics
from tests.monitoring.documented import documented_metrics


def _exported() -> dict[str, tuple[str, frozenset[str]]]:
    found: dict[str, tuple[str, frozenset[str]]] = {}
    for value in vars(metrics).values():
        if isinstance(value, Counter | Gauge | Histogram):
            (family,) = value.describe()
            name = f"{family.name}_total" if family.type == "counter" else family.name
            found[name] = (family.type, frozenset(value._labelnames))
    return found


def test_every_exported_metric_is_documented_with_its_type_and_labels() -> None:
    documented = {m.name: (m.kind, m.labels) for m in documented_metrics().values()}
    exported = _exported()
    assert len(exported) >= 15  # the whole set, not an empty match
    assert documented == exported
