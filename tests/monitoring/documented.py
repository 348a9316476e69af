"""The metrics docs/observability.md documents: its table, read as the tests' contract
(the unit check against the code, the cluster tier's scrape of a running operator)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "observability.md"
_ROW = re.compile(r"^\| `(achilles_[a-z_]+)` \| (counter|gauge|histogram) \|([^|]*)\|")


@dataclass(frozen=True)
class DocumentedMetric:
    name: str
    kind: str
    labels: frozenset[str]


def documented_metrics() -> dict[str, DocumentedMetric]:
    """The "## Metrics" table: name -> type and label names."""
    section = DOC.read_text().split("## Metrics", 1)[1].split("\n## ", 1)[0]
    found: dict[str, DocumentedMetric] = {}
    for line in section.splitlines():
        match = _ROW.match(line)
        if match:
            name, kind, labels = match.groups()
            found[name] = DocumentedMetric(
                name, kind, frozenset(re.findall(r"`([a-z_]+)`", labels))
            )
    return found


def base_name(sample: str) -> str:
    """The metric a series belongs to: a histogram's `_bucket`/`_sum`/`_count` dropped."""
    return re.sub(r"_(bucket|sum|count)$", "", sample)


def metric_names(promql: str) -> set[str]:
    """The achilles_* metrics a PromQL expression reads."""
    return {base_name(name) for name in re.findall(r"\bachilles_[a-z_]+", promql)}
