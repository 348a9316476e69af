"""The process "container runtime": start a container run under a shim, signal it, learn its end.

A run is watched with a pidfd, which works for a shim we started and for one a previous
stand-in started (not our child, so wait() is impossible). How the run ended is read
from the shim's exit file; a shim that vanished without writing one was either killed
by us (SIGKILL: exit 137) or lost while nobody watched.
"""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from achilles_dev.kubelet.runs import ContainerRun, PodRun
from achilles_dev.kubelet.status import now
from achilles_dev.processes import ProcessRef, is_alive, reference, signal_group

log = logging.getLogger(__name__)

_MESSAGE_LIMIT = 4096  # the API's cap on a termination message
_FALLBACK_LINES, _FALLBACK_BYTES = 80, 2048  # what the kubelet takes from the log tail
_HOST_VARIABLES = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR")
LOST_MESSAGE = "The container could not be located when the pod was terminated"


def base_environment(pod_name: str) -> dict[str, str]:
    """What a container gets before its pod spec's env: the host essentials, our venv first.

    The project's console scripts live next to this interpreter, so pods can name them.
    """
    env = {name: os.environ[name] for name in _HOST_VARIABLES if name in os.environ}
    path = env.get("PATH", "/usr/local/bin:/usr/bin:/bin")
    env["PATH"] = f"{Path(sys.executable).parent}:{path}"
    env["HOSTNAME"] = pod_name
    return env


def mark_lost(container: ContainerRun) -> None:
    """The run's process is gone and nobody saw how it ended: the kubelet's verdict on that."""
    container.exit_code, container.finished_at = 137, now()
    container.reason, container.message = "ContainerStatusUnknown", LOST_MESSAGE


class ProcessRuntime:
    def __init__(self, on_exit: Callable[[str], None]) -> None:
        self._on_exit = on_exit

    def start(
        self,
        run: PodRun,
        container: ContainerRun,
        command: list[str],
        env: Mapping[str, str],
        working_dir: str | None,
        termination_path: str | None,
    ) -> None:
        run.directory.mkdir(parents=True, exist_ok=True)
        cwd = run.directory
        log_file = run.log(container.name)
        with log_file.open("ab") as output:
            if working_dir and Path(working_dir).is_dir():
                cwd = Path(working_dir)
            elif working_dir:
                output.write(
                    f"achilles-kubelet: workingDir {working_dir} does not exist on this host; "
                    f"running in {cwd}\n".encode()
                )
            argv = [sys.executable, "-I", "-m", "achilles_dev.kubelet.shim"]
            argv += ["--exit-file", str(run.exit_file(container)), "--log", str(log_file)]
            if termination_path:
                argv += ["--termination-file", str(run.termination_file(container))]
                argv += ["--termination-path", termination_path]
            process = subprocess.Popen(
                [*argv, "--", *command],
                env=dict(env),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=output,
                start_new_session=True,
            )
        shim = reference(process.pid) or ProcessRef(process.pid, -1)
        container.shim = shim
        container.started_at = now()
        container.exit_code = container.finished_at = container.reason = container.message = None
        container.sigkilled = False
        run.save()
        log.info(
            "started %s/%s container %s: %s (shim pid %d)",
            run.namespace,
            run.name,
            container.name,
            command,
            shim.pid,
        )
        self.watch(run.uid, shim)

    def watch(self, uid: str, shim: ProcessRef) -> None:
        """Call back with `uid` once `shim` has exited."""
        threading.Thread(target=self._await_exit, args=(uid, shim), daemon=True).start()

    def _await_exit(self, uid: str, shim: ProcessRef) -> None:
        try:
            descriptor = os.pidfd_open(shim.pid)
        except ProcessLookupError:
            self._on_exit(uid)
            return
        try:
            if is_alive(shim):  # the pid still names our shim, not a successor
                select.select([descriptor], [], [])
        finally:
            os.close(descriptor)
        is_alive(shim)  # reaps it if it is our child
        self._on_exit(uid)

    def terminate(self, container: ContainerRun) -> None:
        """SIGTERM to the shim, which hands it to the command (the container's PID 1)."""
        if container.shim and is_alive(container.shim):
            os.kill(container.shim.pid, signal.SIGTERM)

    def kill(self, container: ContainerRun) -> None:
        """SIGKILL to the whole process group of the run."""
        if container.shim and signal_group(container.shim, signal.SIGKILL):
            container.sigkilled = True

    def collect(self, run: PodRun, container: ContainerRun, spec: Mapping[str, Any]) -> bool:
        """Fill in how the current run ended; False while it still runs."""
        if container.shim is None or container.exit_code is not None:
            return container.exit_code is not None
        exit_file = run.exit_file(container)
        if exit_file.exists():
            ended = json.loads(exit_file.read_text())
            container.exit_code = int(ended["exit_code"])
            container.finished_at = str(ended["finished_at"])
        elif is_alive(container.shim):
            return False
        elif container.sigkilled:  # our SIGKILL took the shim before it could write the file
            container.exit_code, container.finished_at = 137, now()
        else:
            mark_lost(container)
        if container.message is None:
            container.message = termination_message(run, container, spec)
        log.info(
            "%s/%s container %s exited with %d",
            run.namespace,
            run.name,
            container.name,
            container.exit_code,
        )
        return True


def termination_message(
    run: PodRun, container: ContainerRun, spec: Mapping[str, Any]
) -> str | None:
    """The termination-message file's text, else (FallbackToLogsOnError, failed) the log tail."""
    try:
        with run.termination_file(container).open("rb") as handle:
            text = handle.read(_MESSAGE_LIMIT).decode("utf-8", errors="replace")
    except OSError:
        text = ""
    if text.strip():
        return text
    if spec.get("terminationMessagePolicy") == "FallbackToLogsOnError" and container.exit_code:
        try:
            tail = run.log(container.name).read_bytes()[-64 * 1024 :]
        except OSError:
            return None
        lines = tail.decode("utf-8", errors="replace").splitlines()[-_FALLBACK_LINES:]
        message = "\n".join(lines)
        return message.encode()[-_FALLBACK_BYTES:].decode("utf-8", errors="ignore") or None
    return None
