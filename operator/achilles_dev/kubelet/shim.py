"""The per-container supervisor: what containerd-shim is to a container, for a host process.

The stand-in starts one shim per container run, in a session of its own. The shim runs
the pod's command as its child and, when the child exits, writes the exit code to a
file. That file, not the stand-in's memory, is the record of how the container ended,
so a restarted stand-in can adopt a running shim (it is not our child any more and we
cannot wait() on it) and still learn the exit code.

Signals follow the container runtime: SIGTERM to the shim is forwarded to the command
(the container's PID 1); SIGKILL goes to the whole process group. When the command
exits, everything else left in its group is killed, as a runtime tears down a
container's cgroup.

The termination-message file is made private to the run: in a mount namespace of its
own, a per-run file is bind-mounted over the pod's `terminationMessagePath`, so the
program writes where the pod spec says and concurrent pods do not share a file.

Only the standard library is used here: the shim starts for every container run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

# A shell that bind-mounts the run's file over the requested path, then becomes the command.
_MOUNT_THEN_EXEC = 'mount --bind "$1" "$2" && shift 2 && exec "$@"'


def _private_termination_log(file: Path, path: Path, command: list[str]) -> list[str]:
    """Wrap `command` so that writes to `path` land in `file`; unchanged if impossible here."""
    unshare = shutil.which("unshare")
    if os.geteuid() != 0 or unshare is None or not path.parent.is_dir():
        return command
    if not path.exists():
        # The bind mount needs a target; an empty placeholder is never written to, since
        # every run sees its own file mounted over it.
        try:
            path.touch()
        except OSError:
            return command
    return [
        unshare,
        "--mount",
        "--propagation",
        "private",
        "--",
        "sh",
        "-c",
        _MOUNT_THEN_EXEC,
        "achilles-shim",
        str(file),
        str(path),
        *command,
    ]


def _exit_code(returncode: int) -> int:
    # A signal death is reported as 128+N, like every container runtime does.
    return 128 - returncode if returncode < 0 else returncode


def _write_exit(exit_file: Path, code: int) -> None:
    tmp = exit_file.with_name(f".{exit_file.name}.tmp")
    finished = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    tmp.write_text(json.dumps({"exit_code": code, "finished_at": finished}))
    tmp.replace(exit_file)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="achilles-shim")
    parser.add_argument("--exit-file", type=Path, required=True)
    parser.add_argument("--log", type=Path, required=True)
    parser.add_argument("--termination-file", type=Path)
    parser.add_argument("--termination-path", type=Path)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("a command to run is required after --")
    if args.termination_file is not None and args.termination_path is not None:
        args.termination_file.touch()
        command = _private_termination_log(args.termination_file, args.termination_path, command)

    with args.log.open("ab") as log:
        try:
            child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        except OSError as error:
            log.write(f"achilles-shim: cannot start {command[0]!r}: {error}\n".encode())
            _write_exit(args.exit_file, 127 if isinstance(error, FileNotFoundError) else 126)
            return

    def forward(signum: int, _frame: FrameType | None) -> None:
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    returncode = child.wait()
    _write_exit(args.exit_file, _exit_code(returncode))
    # The command is gone: take down whatever it left behind in our group, then us.
    sys.stdout.flush()
    os.killpg(os.getpgrp(), signal.SIGKILL)


if __name__ == "__main__":
    main()
