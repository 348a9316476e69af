"""What a real node leaves on the host, found and removed: cgroups, mounts, shims, files.

The kubelet puts pods under a cgroup subtree of the stack's own (`/achilles-<id>` in
every hierarchy); containerd and the kubelet mount only under `<state dir>/node`; the
runc shims are recognised by the containerd socket on their command line. So `down`
can remove exactly one stack's node, and check that it did, without touching another
stack's or anything else on the machine.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

from achilles_dev.processes import ProcessRef, reference
from achilles_dev.waiting import poll

_CGROUP_ROOT = Path("/sys/fs/cgroup")
_CONTAINER_LOGS = Path("/var/log/containers")  # where the kubelet links container logs
_CNI_CACHE = Path("/var/lib/cni/results")  # libcni's cache, outside containerd's config
_SHIM_SOCKETS = Path("/run/containerd/s")
# The one path the kubelet hardcodes whatever its root dir: every kubelet on the host
# listens there (for device plugins, which the local node has none of).
_DEVICE_PLUGIN_SOCKET = Path("/var/lib/kubelet/device-plugins/kubelet.sock")


# --- cgroups -------------------------------------------------------------------------------


def cgroup_name(stack_id: str) -> str:
    return f"achilles-{stack_id}"


def _mountinfo() -> list[tuple[Path, str]]:
    """(mount point, filesystem type) of every mount this process sees."""
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        before, _, after = line.partition(" - ")
        point = before.split()[4]
        fstype = after.split()[0]
        # Mount points escape space, tab, newline and backslash as octal.
        decoded = point.encode().decode("unicode_escape").encode("latin-1").decode()
        mounts.append((Path(decoded), fstype))
    return mounts


def cgroup_hierarchies() -> list[Path]:
    return sorted(
        point
        for point, fstype in _mountinfo()
        if fstype in ("cgroup", "cgroup2") and point.is_relative_to(_CGROUP_ROOT)
    )


def ensure_cgroup_root(name: str) -> None:
    """`/<name>` in every hierarchy, for the kubelet's `cgroupRoot` (it must exist)."""
    for hierarchy in cgroup_hierarchies():
        directory = hierarchy / name
        directory.mkdir(exist_ok=True)
        for setting in ("cpuset.cpus", "cpuset.mems"):  # v1 cpuset: empty until copied
            own = directory / setting
            if own.exists() and not own.read_text().strip():
                own.write_text((hierarchy / setting).read_text())


def _subtree(name: str) -> list[Path]:
    """Every cgroup directory of the subtree, deepest first."""
    found: list[Path] = []
    for hierarchy in cgroup_hierarchies():
        top = hierarchy / name
        if top.is_dir():
            found += [Path(d) for d, _, _ in os.walk(top)]
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def cgroup_processes(name: str) -> set[int]:
    pids: set[int] = set()
    for directory in _subtree(name):
        with contextlib.suppress(OSError):
            pids |= {int(p) for p in (directory / "cgroup.procs").read_text().split()}
    return pids


def remove_cgroups(name: str) -> None:
    """Kill whatever still runs in the subtree, then remove its directories."""
    for _ in range(3):
        pids = cgroup_processes(name)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        poll(lambda: not cgroup_processes(name), timeout=10.0, interval=0.1)
    for directory in _subtree(name):
        with contextlib.suppress(FileNotFoundError):
            poll(lambda d=directory: _rmdir(d), timeout=5.0, interval=0.1)  # type: ignore[misc]


def _rmdir(directory: Path) -> bool:
    try:
        directory.rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def cgroup_leftovers(name: str) -> list[str]:
    return [f"cgroup {d}" for d in _subtree(name)]


# --- mounts --------------------------------------------------------------------------------


def mounts_under(root: Path) -> list[Path]:
    root = root.resolve()
    return sorted(
        (point for point, _ in _mountinfo() if point == root or point.is_relative_to(root)),
        key=lambda p: len(p.parts),
        reverse=True,
    )


def unmount_all(root: Path) -> None:
    """Unmount everything at or below `root`, deepest first (lazily when busy)."""
    for _ in range(3):
        points = mounts_under(root)
        if not points:
            return
        for point in points:
            done = subprocess.run(["umount", str(point)], capture_output=True, check=False)
            if done.returncode != 0:
                subprocess.run(["umount", "-l", str(point)], capture_output=True, check=False)


# --- shims and stray files -----------------------------------------------------------------


def shims_of(socket: Path) -> list[ProcessRef]:
    """The runc shims serving the containerd at `socket` (they outlive containerd)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            argv
            and argv[0].endswith(b"containerd-shim-runc-v2")
            and b"-address" in argv
            and str(socket).encode() in argv
        ):
            ref = reference(int(entry.name))
            if ref is not None:
                found.append(ref)
    return found


def remove_stray_files(pod_logs: Path, cni_network: str) -> None:
    """The kubelet's log links into our pod logs and libcni's cache entries of our network."""
    if _CONTAINER_LOGS.is_dir():
        for link in _CONTAINER_LOGS.iterdir():
            with contextlib.suppress(OSError):
                if link.is_symlink() and Path(os.readlink(link)).is_relative_to(pod_logs):
                    link.unlink()
    if _CNI_CACHE.is_dir():
        for entry in _CNI_CACHE.glob(f"{cni_network}-*"):
            with contextlib.suppress(OSError):
                entry.unlink()
    if not _kubelets_running():  # the last node down takes the shared paths along
        _DEVICE_PLUGIN_SOCKET.unlink(missing_ok=True)
    shared_dirs = (
        _SHIM_SOCKETS,
        _SHIM_SOCKETS.parent,
        _CNI_CACHE,
        _CNI_CACHE.parent,
        _DEVICE_PLUGIN_SOCKET.parent,
        _DEVICE_PLUGIN_SOCKET.parent.parent,
        _CONTAINER_LOGS,
    )
    for directory in shared_dirs:  # rmdir: only when empty, so never another node's
        with contextlib.suppress(OSError):
            directory.rmdir()


def _kubelets_running() -> bool:
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if entry.name.isdigit() and (entry / "comm").read_text().strip() == "kubelet":
                return True
    return False


def stray_files(pod_logs: Path, cni_network: str) -> list[str]:
    found = []
    if _CONTAINER_LOGS.is_dir():
        for link in _CONTAINER_LOGS.iterdir():
            with contextlib.suppress(OSError):
                if link.is_symlink() and Path(os.readlink(link)).is_relative_to(pod_logs):
                    found.append(f"log link {link}")
    if _CNI_CACHE.is_dir():
        found += [f"CNI cache {e}" for e in _CNI_CACHE.glob(f"{cni_network}-*")]
    if _DEVICE_PLUGIN_SOCKET.exists() and not _kubelets_running():
        found.append(f"kubelet socket {_DEVICE_PLUGIN_SOCKET}")
    return found
