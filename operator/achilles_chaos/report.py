"""What a scenario reports: one row (injected, measured figure, pass/fail) and its details."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Result:
    scenario: str
    node: str  # which node ran the pods: "containerd" (the real node, the only one now)
    injected: str = ""
    figure: str = ""
    passed: bool = False
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)

    def check(self, ok: bool, failure: str) -> bool:
        """Record `failure` unless `ok`; the scenario passes only with no failure recorded."""
        if not ok:
            self.failures.append(failure)
        return ok

    def note(self, line: str) -> None:
        self.details.append(line)


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank percentile (q in 0..100) of `values`; nan when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def table(results: Sequence[Result]) -> str:
    header = ["scenario", "node", "injected", "measured", "result", "time"]
    rows = [
        [
            r.scenario,
            r.node,
            r.injected,
            r.figure,
            "PASS" if r.passed else "FAIL",
            f"{r.seconds:.0f}s",
        ]
        for r in results
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "/") for cell in row) + " |" for row in rows]
    for r in results:
        for failure in r.failures:
            lines.append(f"  FAIL {r.scenario}: {failure}")
    return "\n".join(lines)


def invariants_line(results: Sequence[Result]) -> str:
    """The invariant monitor over the whole run (its violations are listed as failures)."""
    watched = [r.figures["invariants"] for r in results if "invariants" in r.figures]
    samples = sum(int(w["samples"]) for w in watched)
    broken = sum(len(w["violations"]) for w in watched)
    return (
        f"invariants: {samples} samples over {len(watched)} scenario(s),"
        f" {broken or 'no'} violation{'' if broken == 1 else 's'}"
    )


def write_json(path: Path, results: Sequence[Result], meta: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {**meta, "scenarios": [asdict(r) for r in results]}
    path.write_text(json.dumps(document, indent=2, default=str) + "\n")
