"""What the stand-in knows about the pods it runs, in memory and on disk.

Each pod gets a directory `<state>/pods/<namespace>_<name>_<uid>/` holding the
container logs, the per-run termination-message and exit files written by the shim,
and `record.json`: which shim runs which container. The record is what lets a
restarted stand-in adopt running processes instead of losing them.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from achilles_dev.processes import ProcessRef

RECORD = "record.json"


@dataclass
class ContainerRun:
    """One container of a pod; `attempt` counts restarts (restartCount)."""

    name: str
    attempt: int = 0
    shim: ProcessRef | None = None
    started_at: str | None = None
    # Set once the current attempt has ended.
    exit_code: int | None = None
    finished_at: str | None = None
    reason: str | None = None
    message: str | None = None
    # Set while the container cannot start (CreateContainerConfigError, CrashLoopBackOff).
    waiting_reason: str | None = None
    waiting_message: str | None = None
    restart_not_before: float | None = None  # monotonic time of the next restart
    last_terminated: dict[str, Any] | None = None
    sigkilled: bool = False

    @property
    def is_running(self) -> bool:
        return self.shim is not None and self.exit_code is None

    @property
    def has_exited(self) -> bool:
        return self.exit_code is not None


@dataclass
class PodRun:
    uid: str
    namespace: str
    name: str
    directory: Path
    containers: dict[str, ContainerRun] = field(default_factory=dict)
    started_at: str | None = None
    # Pod-level verdicts: set when the stand-in ends the pod itself.
    failure_reason: str | None = None
    failure_message: str | None = None
    kill_deadline: float | None = None  # monotonic time to escalate SIGTERM to SIGKILL
    last_reported: dict[str, Any] | None = None
    finalized: bool = False

    def log(self, container: str) -> Path:
        return self.directory / f"{container}.log"

    def exit_file(self, container: ContainerRun) -> Path:
        return self.directory / f"{container.name}.{container.attempt}.exit"

    def termination_file(self, container: ContainerRun) -> Path:
        return self.directory / f"{container.name}.{container.attempt}.termination-log"

    def save(self) -> None:
        record = {
            "uid": self.uid,
            "namespace": self.namespace,
            "name": self.name,
            "started_at": self.started_at,
            "containers": {
                name: {
                    "attempt": c.attempt,
                    "started_at": c.started_at,
                    "shim": asdict(c.shim) if c.shim else None,
                    "last_terminated": c.last_terminated,
                }
                for name, c in self.containers.items()
            },
        }
        tmp = self.directory / f".{RECORD}.tmp"
        tmp.write_text(json.dumps(record, indent=2))
        tmp.replace(self.directory / RECORD)

    def forget(self) -> None:
        """Drop the record (logs stay for a post-mortem; old ones are pruned at startup)."""
        (self.directory / RECORD).unlink(missing_ok=True)


def pod_directory(root: Path, namespace: str, name: str, uid: str) -> Path:
    return root / f"{namespace}_{name}_{uid}"


def load_records(root: Path) -> dict[str, PodRun]:
    """Every pod run recorded under `root`, keyed by pod uid (for adoption after a restart)."""
    runs: dict[str, PodRun] = {}
    for record_file in root.glob(f"*/{RECORD}"):
        try:
            data = json.loads(record_file.read_text())
            run = PodRun(
                uid=data["uid"],
                namespace=data["namespace"],
                name=data["name"],
                directory=record_file.parent,
                started_at=data.get("started_at"),
            )
            for name, c in data["containers"].items():
                shim = c.get("shim")
                run.containers[name] = ContainerRun(
                    name=name,
                    attempt=int(c["attempt"]),
                    started_at=c.get("started_at"),
                    shim=ProcessRef(int(shim["pid"]), int(shim["start_ticks"])) if shim else None,
                    last_terminated=c.get("last_terminated"),
                )
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a torn record: the pod is treated as orphaned
        runs[run.uid] = run
    return runs


def recorded_shims(root: Path) -> list[ProcessRef]:
    """Every shim any record names (for `achilles dev down`)."""
    return [
        c.shim for run in load_records(root).values() for c in run.containers.values() if c.shim
    ]


def prune_logs(root: Path, keep: int) -> None:
    """Remove the oldest directories of pods no longer running, keeping `keep` of them."""
    finished = [d for d in root.iterdir() if d.is_dir() and not (d / RECORD).exists()]
    finished.sort(key=lambda d: d.stat().st_mtime)
    for directory in finished[: max(0, len(finished) - keep)]:
        shutil.rmtree(directory, ignore_errors=True)
