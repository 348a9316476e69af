"""Long-running local processes we start, track by pid file, and stop as a group.

A pid alone is not an identity: after a reboot or pid wrap-around another process may
hold it. We record the pid together with the kernel's start time of the process
(`/proc/<pid>/stat` field 22) and only ever signal a process whose both values match,
so `achilles dev down` can never kill something it did not start.

Every process is started in a session (and so a process group) of its own: stopping
it signals the whole group, which takes any children it spawned along.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from achilles_dev.waiting import poll, wait_until


@dataclass(frozen=True)
class ProcessRef:
    pid: int
    start_ticks: int


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    return raw[raw.rindex(")") + 2 :].split()


def reference(pid: int) -> ProcessRef | None:
    """The identity of a live process, or None when it is gone or a zombie."""
    fields = _stat_fields(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return None
    return ProcessRef(pid=pid, start_ticks=int(fields[19]))


def is_alive(ref: ProcessRef) -> bool:
    """Running, or still exiting: a SIGKILLed multi-threaded process (kube-apiserver, Go)
    shows its leader as a zombie while its other threads still exit and still hold its
    files, a listening socket among them, so a restart on its port fails with "address
    already in use" (`achilles chaos apiserver-restart`, issue 41)."""
    _reap(ref.pid)
    return reference(ref.pid) == ref or _threads_exiting(ref)


def _threads_exiting(ref: ProcessRef) -> bool:
    fields = _stat_fields(ref.pid)
    if fields is None or fields[0] != "Z" or int(fields[19]) != ref.start_ticks:
        return False
    try:
        tasks = os.listdir(f"/proc/{ref.pid}/task")
    except OSError:
        return False
    return tasks != [str(ref.pid)]


def _reap(pid: int) -> None:
    """Collect our own exited child so it does not linger as a zombie."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def write_pidfile(path: Path, ref: ProcessRef) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(asdict(ref)))
    tmp.replace(path)


def read_pidfile(path: Path) -> ProcessRef | None:
    try:
        data = json.loads(path.read_text())
        return ProcessRef(pid=int(data["pid"]), start_ticks=int(data["start_ticks"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def running_from_pidfile(path: Path) -> ProcessRef | None:
    ref = read_pidfile(path)
    return ref if ref is not None and is_alive(ref) else None


def spawn(
    argv: Sequence[str],
    *,
    log: Path,
    pidfile: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> ProcessRef:
    """Start `argv` detached in its own session, output appended to `log`; record its pid."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as output:
        process = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
        )
    ref = reference(process.pid)
    if ref is None:  # exited at once; keep the pid so the caller's health check reports it
        ref = ProcessRef(pid=process.pid, start_ticks=-1)
    write_pidfile(pidfile, ref)
    return ref


def signal_group(ref: ProcessRef, signum: int) -> bool:
    """Signal the process group led by `ref`, if `ref` is still that process."""
    if not is_alive(ref):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.killpg(ref.pid, signum)
    return True


def stop_group(ref: ProcessRef, *, grace: float = 10.0, what: str = "process") -> None:
    """SIGTERM the group, SIGKILL it after `grace` seconds, and wait until the leader is gone."""
    if not signal_group(ref, signal.SIGTERM):
        return
    if not poll(lambda: not is_alive(ref), timeout=grace, interval=0.1):
        signal_group(ref, signal.SIGKILL)  # did not exit in time: escalate
        wait_until(lambda: not is_alive(ref), timeout=10.0, what=f"{what} to die on SIGKILL")
    # The leader is gone; take down any stragglers left in its group.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(ref.pid, signal.SIGKILL)
