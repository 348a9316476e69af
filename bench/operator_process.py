"""`achilles operator` as a process under test: what the chart's Deployment runs,
authenticated as its own ServiceAccount (`bench.apiserver_counts`), its RSS and CPU
sampled from /proc."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from achilles_dev.ports import free_port
from bench.apiserver_counts import count_operator_requests, operator_kubeconfig
from bench.cluster import RUNS_NAMESPACE, BenchCluster, Progress

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Usage:
    """One /proc sample of a process: RSS and cumulative CPU seconds."""

    at: float
    rss_mib: float
    cpu_s: float


def proc_usage(pid: int) -> Usage | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rss_kib = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS"))
    fields = stat.rsplit(")", 1)[1].split()
    cpu_ticks = int(fields[11]) + int(fields[12])  # utime, stime
    return Usage(at=time.monotonic(), rss_mib=rss_kib / 1024, cpu_s=cpu_ticks / CLOCK_TICKS)


@dataclass
class OperatorUnderTest:
    cluster: BenchCluster
    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    samples: list[Usage] = field(default_factory=list)
    metrics_port: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _sampler: threading.Thread | None = None

    def start(self) -> None:
        self.metrics_port = free_port()
        log = self.log_path.open("ab")
        # From bytecode, as the image runs it (pip compiles at install): uv leaves the
        # virtualenv without, and PYTHONDONTWRITEBYTECODE (set on some hosts) made every
        # start compile each import from source, tens of seconds of a restart under load.
        inherited = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "achilles", "operator", "--liveness", ""],
            env={**inherited, **self.env, "ACHILLES_METRICS_PORT": str(self.metrics_port)},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _sample(self) -> None:
        while not self._stop.wait(1.0):
            if self.process is None or self.process.poll() is not None:
                return
            usage = proc_usage(self.process.pid)
            if usage is not None:
                self.samples.append(usage)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def check_alive(self) -> None:
        if not self.alive():
            raise RuntimeError(f"the operator exited; the end of its log:\n{self.log_tail()}")

    def usage(self) -> Usage:
        assert self.process is not None
        usage = proc_usage(self.process.pid)
        if usage is None:
            self.check_alive()
            raise RuntimeError("cannot read the operator's /proc entry")
        return usage

    def usage_over(self, seconds: float) -> tuple[float, float]:
        """(mean cores, peak RSS MiB) over the next `seconds`."""
        first = self.usage()
        peak = first.rss_mib
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
            peak = max(peak, self.usage().rss_mib)
        last = self.usage()
        return (last.cpu_s - first.cpu_s) / (last.at - first.at), peak

    def metrics(self) -> str:
        import urllib.request

        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10
        ) as response:
            text: str = response.read().decode()
        return text

    def log_tail(self, characters: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-characters:]

    def stop(self) -> None:
        self._stop.set()
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)


@contextmanager
def running_operator(
    cluster: BenchCluster,
    progress: Progress,
    *,
    runner_command: str | None,
    runner_image: str = "achilles-runner:bench",
    **env: str,
) -> Iterator[OperatorUnderTest]:
    """`achilles operator` against the bench cluster and database, as its own account.

    `runner_command` None keeps the run Jobs' own command (`achilles runner`, the image's);
    the stand-in ignores images and needs a command runnable on this host."""
    counted = (cluster.work_dir / "operator.kubeconfig").exists()
    kubeconfig = operator_kubeconfig(cluster)
    if not counted:
        count_operator_requests(cluster)
    command = {} if runner_command is None else {"ACHILLES_RUNNER_COMMAND": runner_command}
    operator = OperatorUnderTest(
        cluster=cluster,
        env={
            "KUBECONFIG": str(kubeconfig),
            "ACHILLES_DATABASE_URL": cluster.logins.operator,
            "ACHILLES_RUNS_NAMESPACE": RUNS_NAMESPACE,
            "ACHILLES_RUNNER_IMAGE": runner_image,
            **command,
            **env,
        },
        log_path=cluster.work_dir / "operator.log",
    )
    operator.start()
    progress(f"operator started (pid {operator.process.pid if operator.process else '?'})")
    try:
        yield operator
    except BaseException:
        # Keep the log of a failed benchmark: the work directory goes with the stack.
        operator.stop()
        kept = Path(tempfile.gettempdir()) / f"achilles-bench-operator-{os.getpid()}.log"
        shutil.copyfile(operator.log_path, kept)
        progress(f"operator stopped; its log: {kept}")
        raise
    operator.stop()
    progress("operator stopped")
