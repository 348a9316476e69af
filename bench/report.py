"""What every benchmark reports: sampled latencies, single figures against goals, the
machine, the commit; written as JSON (`bench/results/<name>.json`) and a markdown table.

A benchmark builds a `Report`, adds `Figure`s as it measures (a figure is one number
with its unit and, when the issue sets one, its goal), attaches whatever explains the
numbers (query plans, notes), and `write`s it. `Series` turns raw samples into
min/median/p99/max; the samples themselves stay in the JSON so a reader can re-derive
any statistic.
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

from achilles_dev.invariants import Verdict

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO_ROOT / "bench" / "results"

# How a figure compares with its goal: lower is better (latency, memory) or higher
# (throughput, ratios).
Better = Literal["lower", "higher"]


def percentile(sorted_values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of already sorted values (p99 of 100 samples = the 99th)."""
    if not sorted_values:
        raise ValueError("no samples")
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[rank - 1]


@dataclass(frozen=True)
class Series:
    """Summary of latency samples (in the unit they were taken in)."""

    count: int
    min: float
    median: float
    p99: float
    max: float
    mean: float

    @classmethod
    def of(cls, samples: Iterable[float]) -> Series:
        values = sorted(samples)
        if not values:
            raise ValueError("no samples")
        return cls(
            count=len(values),
            min=values[0],
            median=percentile(values, 0.5),
            p99=percentile(values, 0.99),
            max=values[-1],
            mean=sum(values) / len(values),
        )

    def scaled(self, factor: float) -> Series:
        return Series(
            count=self.count,
            min=self.min * factor,
            median=self.median * factor,
            p99=self.p99 * factor,
            max=self.max * factor,
            mean=self.mean * factor,
        )


@dataclass(frozen=True)
class Goal:
    value: float
    better: Better
    text: str  # as the issue states it, e.g. "<= 10 ms"

    def met_by(self, value: float) -> bool:
        return value <= self.value if self.better == "lower" else value >= self.value


def at_most(value: float, unit: str) -> Goal:
    return Goal(value, "lower", f"<= {value:g} {unit}".rstrip())


def at_least(value: float, unit: str) -> Goal:
    return Goal(value, "higher", f">= {value:g} {unit}".rstrip())


@dataclass
class Figure:
    """One reported number: `value` (for a series, the statistic its goal is about)."""

    name: str
    unit: str
    value: float
    goal: Goal | None = None
    series: Series | None = None
    samples: list[float] | None = None
    note: str = ""

    @property
    def met(self) -> bool | None:
        return None if self.goal is None else self.goal.met_by(self.value)

    def as_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "name": self.name,
            "unit": self.unit,
            "value": _round(self.value),
            "goal": None if self.goal is None else asdict(self.goal),
            "met": self.met,
            "note": self.note,
        }
        if self.series is not None:
            data["series"] = {k: _round(v) for k, v in asdict(self.series).items()}
        if self.samples is not None:
            data["samples"] = [_round(v) for v in self.samples]
        return data


def _round(value: float) -> float:
    return float(f"{value:.6g}")


def _fmt(value: float) -> str:
    if value == 0 or 0.01 <= abs(value) < 100_000:
        return f"{value:.3g}" if abs(value) < 100 else f"{value:,.0f}"
    return f"{value:.3g}"


def _git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def commit_info() -> dict[str, Any]:
    """The commit measured, and whether the checkout's code differed from it."""
    changed = _git("status", "--porcelain", "--untracked-files=no", "--", "operator", "bench")
    return {
        "commit": _git("rev-parse", "HEAD") or "unknown",
        "subject": _git("log", "-1", "--format=%s"),
        "modified_files": changed.splitlines() if changed else [],
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_total_mib() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    except OSError:
        pass
    return 0


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "absent"


def machine_info() -> dict[str, Any]:
    load = os.getloadavg()
    return {
        "cores": os.cpu_count(),
        "cpu": _cpu_model(),
        "memory_mib": _mem_total_mib(),
        "kernel": platform.release(),
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "load_average_at_start": [round(x, 2) for x in load],
        "packages": {
            name: _version(name)
            for name in ("achilles-agent-engine", "kopf", "kubernetes", "sqlalchemy", "psycopg")
        },
    }


@dataclass
class Report:
    benchmark: str
    size: int
    parameters: dict[str, Any] = field(default_factory=dict)
    figures: list[Figure] = field(default_factory=list)
    # Anything else that explains the figures: query plans, versions of the servers used.
    details: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    machine: dict[str, Any] = field(default_factory=machine_info)
    commit: dict[str, Any] = field(default_factory=commit_info)
    started_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    command: str = field(default_factory=lambda: " ".join(["achilles", *sys.argv[1:]]))
    _t0: float = field(default_factory=time.monotonic, repr=False)

    def add(self, figure: Figure) -> Figure:
        self.figures.append(figure)
        return figure

    def add_value(
        self, name: str, value: float, unit: str, *, goal: Goal | None = None, note: str = ""
    ) -> Figure:
        return self.add(Figure(name=name, unit=unit, value=value, goal=goal, note=note))

    def latency(
        self,
        name: str,
        samples_s: list[float],
        *,
        unit: str = "ms",
        goal: Goal | None = None,
        on: Literal["median", "p99", "max"] = "p99",
        note: str = "",
        keep_samples: bool = False,
    ) -> Figure:
        """A latency series taken in seconds, reported in `unit` (ms or s); its value
        (the one the goal is checked on) is the `on` statistic."""
        factor = {"ms": 1000.0, "s": 1.0}[unit]
        series = Series.of(samples_s).scaled(factor)
        return self.add(
            Figure(
                name=name,
                unit=unit,
                value=getattr(series, on),
                goal=goal,
                series=series,
                samples=[s * factor for s in samples_s] if keep_samples else None,
                note=note,
            )
        )

    def failures(self) -> list[str]:
        """What fails the benchmark whatever its figures: the seed's invariants broken
        while it ran (`record_invariants`)."""
        watched = self.details.get("invariants") or {}
        return [f"invariant broken: {v}" for v in watched.get("violations", [])]

    def as_json(self) -> dict[str, Any]:
        return {
            "benchmark": self.benchmark,
            "size": self.size,
            "command": self.command,
            "started_at": self.started_at,
            "duration_s": round(time.monotonic() - self._t0, 1),
            "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
            "parameters": self.parameters,
            "machine": self.machine,
            "commit": self.commit,
            "figures": [f.as_json() for f in self.figures],
            "details": self.details,
            "notes": self.notes,
        }

    def markdown(self) -> str:
        return markdown_table(self.as_json())

    def write(self, json_path: Path | None = None) -> Path:
        """JSON at `json_path` (default bench/results/<benchmark>.json), markdown beside it."""
        path = json_path or RESULTS_DIR / f"{self.benchmark}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        data = self.as_json()
        path.write_text(json.dumps(data, indent=2) + "\n")
        path.with_suffix(".md").write_text(markdown_table(data))
        return path


INVARIANTS_FIGURE = "seed invariants broken (the invariant monitor)"


def record_invariants(report: Report, verdict: Verdict) -> None:
    """The invariant monitor's verdict as a row of the report (0 violations is its goal);
    its samples and their cost in a note and the details, each violation a note."""
    report.details["invariants"] = asdict(verdict)
    report.add_value(
        INVARIANTS_FIGURE,
        len(verdict.violations),
        "",
        goal=at_most(0, ""),
        note=verdict.line(),
    )
    report.notes.append(verdict.line())
    report.notes.extend(f"invariant broken: {violation}" for violation in verdict.violations)


def markdown_table(data: dict[str, Any]) -> str:
    """One benchmark's figures as a markdown table, with the machine and the commit."""
    machine = data["machine"]
    commit = data["commit"]
    dirty = " (with local modifications)" if commit.get("modified_files") else ""
    lines = [
        f"### {data['benchmark']} (size {data['size']:,})",
        "",
        f"`{data['command']}` — {data['started_at']}, {data['duration_s']} s; "
        f"commit `{commit['commit'][:12]}`{dirty}; {machine['cores']} cores "
        f"({machine['cpu']}), {machine['memory_mib']:,} MiB, Python {machine['python']}; "
        f"load average {machine['load_average_at_start'][0]} at start, "
        f"{data.get('load_average_at_end', ['?'])[0]} at end",
        "",
        "| figure | value | min | median | p99 | max | n | goal | met |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for fig in data["figures"]:
        series = fig.get("series")
        stats = (
            [_fmt(series[k]) for k in ("min", "median", "p99", "max")] + [f"{series['count']:.0f}"]
            if series
            else [""] * 5
        )
        goal = fig["goal"]["text"] if fig["goal"] else ""
        met = {True: "yes", False: "**no**", None: ""}[fig["met"]]
        lines.append(
            f"| {fig['name']} | {_fmt(fig['value'])} {fig['unit']} | "
            + " | ".join(stats)
            + f" | {goal} | {met} |"
        )
    if data["notes"]:
        lines += ["", *[f"- {note}" for note in data["notes"]]]
    return "\n".join(lines) + "\n"


def summary_markdown(paths: Iterable[Path]) -> str:
    """The results of several benchmarks, one section each (bench/results/README.md)."""
    sections = [markdown_table(json.loads(p.read_text())) for p in paths if p.exists()]
    return "# Benchmark results\n\nWritten by `achilles bench`; see docs/performance.md.\n\n" + (
        "\n".join(sections)
    )


class Progress:
    """Progress lines on stderr, stamped with the seconds since the benchmark began."""

    def __init__(self, benchmark: str) -> None:
        self.benchmark = benchmark
        self.t0 = time.monotonic()

    def __call__(self, message: str) -> None:
        print(
            f"[{self.benchmark} {time.monotonic() - self.t0:7.1f}s] {message}",
            file=sys.stderr,
            flush=True,
        )
