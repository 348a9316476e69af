"""`achilles operator` as the suite runs it: a real process per replica, killed and restarted
at will, its settings per scenario (the reaper's threshold, the runner's image, command,
resources and environment)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from achilles_chaos.cluster import ChaosCluster
from achilles_chaos.kube import RUNS_NAMESPACE
from achilles_dev.images import RUNNER_IMAGE
from achilles_dev.ports import free_port

# The runs' heartbeat and the reaper's threshold in the suite: production's ratio (30 s
# beats, 90 s threshold: three missed beats), scaled down so scenarios take seconds.
HEARTBEAT_SECONDS = 5
STALE_AFTER_SECONDS = 15


def runner_env(**extra: str) -> dict[str, str]:
    return {
        "ACHILLES_HEARTBEAT_INTERVAL": str(HEARTBEAT_SECONDS),
        # The runs' own deadline (runTimeoutSeconds) bounds a held reply, not the client.
        "ACHILLES_MODEL_TIMEOUT": "3600",
        "ACHILLES_MODEL_MAX_RETRIES": "0",
        **extra,
    }


@dataclass
class OperatorProcess:
    cluster: ChaosCluster
    name: str
    env_overrides: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None
    metrics_port: int = 0
    health_port: int = 0
    starts: int = 0

    @property
    def log_path(self) -> Path:
        return self.cluster.workdir / f"operator-{self.name}.log"

    def environment(self) -> dict[str, str]:
        return {
            **os.environ,
            "KUBECONFIG": str(self.cluster.kubeconfig),
            "ACHILLES_DATABASE_URL": self.cluster.operator_database_url,
            "ACHILLES_RUNS_NAMESPACE": RUNS_NAMESPACE,
            "ACHILLES_RUNNER_IMAGE": RUNNER_IMAGE,
            "ACHILLES_METRICS_PORT": str(self.metrics_port),
            "ACHILLES_STALE_AFTER_SECONDS": str(STALE_AFTER_SECONDS),
            "ACHILLES_RUNNER_ENV": json.dumps(runner_env()),
            "ACHILLES_RUNNER_RESOURCES": json.dumps(
                {"requests": {"cpu": "50m", "memory": "128Mi"}}
            ),
            **self.env_overrides,
        }

    def start(self) -> None:
        self.metrics_port, self.health_port = free_port(), free_port()
        log = self.log_path.open("ab")
        log.write(f"--- start {self.starts + 1} ---\n".encode())
        log.flush()
        self.process = subprocess.Popen(
            [
                sys.executable, "-m", "achilles", "operator",
                "--liveness", f"http://127.0.0.1:{self.health_port}/healthz",
            ],
            env=self.environment(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.starts += 1

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def exit_code(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def kill(self) -> None:
        """SIGKILL: no shutdown handler runs, whatever it was doing is cut."""
        if self.alive():
            assert self.process is not None
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.alive():
            assert self.process is not None
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()

    def _get(self, port: int, path: str) -> str | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as reply:
                return str(reply.read().decode())
        except (urllib.error.URLError, OSError):
            return None

    def metrics(self) -> dict[str, float]:
        """The Prometheus samples (`name{labels}` -> value) of this replica."""
        text = self._get(self.metrics_port, "/metrics") or ""
        samples: dict[str, float] = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                try:
                    samples[key] = float(value)
                except ValueError:
                    continue
        return samples

    def metric(self, prefix: str) -> float:
        return sum(v for k, v in self.metrics().items() if k.startswith(prefix))

    def health(self) -> dict[str, Any] | None:
        """kopf's liveness document (our `loops` probe: seconds since each loop's last pass)."""
        body = self._get(self.health_port, "/healthz")
        if body is None:
            return None
        try:
            document: dict[str, Any] = json.loads(body)
        except ValueError:
            return None
        return document

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""
