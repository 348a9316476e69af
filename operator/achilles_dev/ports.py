"""Listening ports for the local stacks, from outside the kernel's ephemeral range.

The kernel gives the source ports of outgoing connections from its ephemeral range
(`ip_local_port_range`, 32768-60999 by default), and so does a bind to port 0. A
component that listens on such a port and is restarted (the fault suite kills the API
server and PostgreSQL and starts them again on the same address) can find it taken by any
client's connection while it was down: `bind: address already in use`. A port below (or
above) that range is never handed to a connection, so a restart always gets it back.

Two stacks of one machine (the test session's two workers, the fault suite beside a
test run) must not choose the same port either: each port handed out is leased, in a
file of a directory every process of the machine shares, to the process that chose it,
until that process ends.
"""

from __future__ import annotations

import errno
import fcntl
import os
import random
import socket
import tempfile
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

from achilles.errors import LocalStackError

EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
# The pool's lower end: above the developer stack's fixed ports (achilles_dev.config.Ports)
# and the ports services commonly own. The pool skips the ephemeral range and Kubernetes'
# NodePort range (30000-32767), which a node's kube-proxy may open on the host.
POOL_START = 20000
NODE_PORT_RANGE = range(30000, 32768)
PORT_MAX = 65535
# A probe's bind on every address fails if anything listens on the port on any one of them
# (the socket is closed at once; nothing is served there).
ANY_ADDRESS = "0.0.0.0"  # noqa: S104
LEASE_DIR = Path(tempfile.gettempdir()) / "achilles-ports"

_lock = threading.RLock()  # free_ports releases under it
_handed_out: set[int] = set()


def ephemeral_range(path: Path = EPHEMERAL_RANGE_FILE) -> range:
    """The kernel's range of ports for outgoing connections (inclusive bounds as read)."""
    low, high = (int(part) for part in path.read_text().split())
    return range(low, high + 1)


def port_pool(
    ephemeral: range | None = None, exclude: Iterable[int] = (), start: int = POOL_START
) -> list[int]:
    """Ports a stack may listen on: outside the ephemeral range and the NodePort range,
    and not one of `exclude` (the developer stack's fixed ports)."""
    ephemeral = ephemeral if ephemeral is not None else ephemeral_range()
    excluded = set(exclude)
    return [
        port
        for port in range(start, PORT_MAX + 1)
        if port not in ephemeral and port not in NODE_PORT_RANGE and port not in excluded
    ]


def free_port(host: str = ANY_ADDRESS, *, pool: Sequence[int] | None = None) -> int:
    """One port from the pool that nothing listens on now and no live process leased."""
    return free_ports(1, host, pool=pool)[0]


def free_ports(
    count: int, host: str = ANY_ADDRESS, *, pool: Sequence[int] | None = None
) -> list[int]:
    """`count` distinct ports, each free now on `host` (0.0.0.0: on every address) and
    leased to this process, so no other process of the machine chooses them."""
    candidates = list(pool if pool is not None else port_pool())
    random.shuffle(candidates)
    chosen: list[int] = []
    with _lock:
        for port in candidates:
            # The lease first: a port another process leased (a stack's, its component
            # down for a restart) is never bound here, not even for a probe.
            if port in _handed_out or not lease(port):
                continue
            if not _bindable(host, port):
                release([port])
                continue
            _handed_out.add(port)
            chosen.append(port)
            if len(chosen) == count:
                return chosen
    raise LocalStackError(
        f"no {count} free listening port(s) outside the kernel's ephemeral range "
        f"({EPHEMERAL_RANGE_FILE}) among {len(candidates)}: widen the pool by lowering the "
        "range's start, or stop what holds them"
    )


def lease(port: int, *, lease_dir: Path = LEASE_DIR) -> bool:
    """Lease `port` to this process: False when a live process other than this one holds it.

    A lease outlives nothing: the lease of a process that ended is taken over. The check and
    the write happen under an exclusive lock of the lease's file, so two processes asking
    for one port at once cannot both get it."""
    lease_dir.mkdir(mode=0o1777, parents=True, exist_ok=True)
    fd = os.open(lease_dir / str(port), os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        holder = _read_pid(fd)
        if holder is not None and holder != os.getpid() and _alive(holder):
            return False
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        return True
    finally:
        os.close(fd)  # releases the lock


def lease_all(ports: Iterable[int]) -> None:
    """Lease ports chosen earlier (a kept stack's, read back from its state): while this
    process runs, no other stack chooses them even while a component is down."""
    with _lock:
        for port in ports:
            if lease(port):
                _handed_out.add(port)


def release(ports: Iterable[int], *, lease_dir: Path = LEASE_DIR) -> None:
    """Give back ports this process chose (a stack torn down): other processes, and this
    one, may choose them again."""
    with _lock:
        for port in ports:
            _handed_out.discard(port)
            path = lease_dir / str(port)
            try:
                fd = os.open(path, os.O_RDWR)
            except FileNotFoundError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                if _read_pid(fd) == os.getpid():
                    os.ftruncate(fd, 0)
            finally:
                os.close(fd)


def _bindable(host: str, port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError as error:
            if error.errno in (errno.EADDRINUSE, errno.EACCES, errno.EADDRNOTAVAIL):
                return False
            raise
    return True


def _read_pid(fd: int) -> int | None:
    text = os.pread(fd, 32, 0).decode(errors="replace").strip()
    return int(text) if text.isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True
