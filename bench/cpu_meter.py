"""CPU of the local control plane's processes (and the operator's, or the benchmark's own)
over a stretch of a benchmark, as cores: what a burst of Job creates is bound by on 2 cores.
"""

from __future__ import annotations

import os
import time

from achilles_dev.processes import running_from_pidfile
from bench.cluster import BenchCluster
from bench.operator_process import proc_usage
from bench.report import Report

CONTROL_PLANE = ("kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler", "kubelet")


class CpuMeter:
    """CPU seconds of the control plane's processes (and the operator's, or this
    process's) from now until `report`, as cores: what a burst is bound by on 2 cores."""

    def __init__(
        self, cluster: BenchCluster, *, operator: int | None = None, bench: bool = False
    ) -> None:
        self.pids: dict[str, int] = {}
        for name in CONTROL_PLANE:
            ref = running_from_pidfile(cluster.stack.config.pidfile(name))
            if ref is not None:
                self.pids[name] = ref.pid
        if operator is not None:
            self.pids["operator"] = operator
        if bench:
            self.pids["bench (the creates and the watch)"] = os.getpid()
        self.started = time.monotonic()
        self.before = self._sample()

    def _sample(self) -> dict[str, float]:
        return {
            name: usage.cpu_s
            for name, pid in self.pids.items()
            if (usage := proc_usage(pid)) is not None
        }

    def report(self, report: Report, key: str) -> None:
        after = self._sample()
        wall = time.monotonic() - self.started
        cores = {
            name: round((after[name] - self.before[name]) / wall, 2)
            for name in after
            if name in self.before
        }
        report.details[key] = {"seconds": round(wall, 2), **cores}
