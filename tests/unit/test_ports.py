"""The local stacks' listening ports: outside the kernel's ephemeral range (where a stopped
component's port could go to some client's connection), and never chosen twice on one
machine while the process that chose it lives (achilles_dev.ports)."""

from __future__ import annotations

import socket
import subprocess
import sys
from dataclasses import astuple

import pytest

from achilles.errors import LocalStackError
from achilles_dev import ports
from achilles_dev.config import Ports


def test_a_throw_away_stacks_ports_lie_outside_the_ephemeral_and_node_port_ranges() -> None:
    ephemeral = ports.ephemeral_range()
    chosen = astuple(Ports.free())
    assert len(set(chosen)) == len(chosen)
    for port in chosen:
        assert port not in ephemeral, f"{port} is in the ephemeral range {ephemeral}"
        assert port not in ports.NODE_PORT_RANGE
        assert port >= ports.POOL_START


def test_the_developer_stacks_fixed_ports_lie_outside_the_ephemeral_range_and_the_pool() -> None:
    ephemeral = ports.ephemeral_range()
    pool = set(ports.port_pool())
    for port in astuple(Ports()):
        assert port not in ephemeral
        assert port not in pool, f"a throw-away stack could take the dev stack's {port}"


def test_the_pool_follows_the_kernels_range() -> None:
    pool = ports.port_pool(range(20000, 61000))
    assert pool[0] == 61000
    assert pool[-1] == ports.PORT_MAX
    assert ports.port_pool(range(1024, 65536)) == []


def test_a_port_something_listens_on_is_never_chosen() -> None:
    first, second = ports.free_ports(2)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", first))
        listener.listen()
        ports.release([first, second])  # only the bind probe can refuse `first` now
        assert ports.free_ports(1, pool=[first, second])[0] == second


def test_a_port_leased_by_another_live_process_is_never_chosen_and_freed_when_it_ends() -> None:
    wanted, spare = ports.free_ports(2)
    ports.release([wanted, spare])
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from achilles_dev import ports;"
            f" assert ports.free_port(pool=[{wanted}]) == {wanted};"
            " print('leased', flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "leased"
        with pytest.raises(LocalStackError, match="no 1 free listening port"):
            ports.free_ports(1, pool=[wanted])
        assert ports.free_ports(1, pool=[wanted, spare]) == [spare]
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
    assert holder.returncode == 0
    assert ports.free_ports(1, pool=[wanted]) == [wanted]  # its holder ended: taken over


def test_one_process_never_gets_a_port_twice() -> None:
    chosen = ports.free_ports(50)
    assert len(set(chosen)) == 50
    with pytest.raises(LocalStackError):
        ports.free_ports(1, pool=chosen)
    ports.release(chosen)
    assert ports.free_ports(1, pool=chosen[:1]) == chosen[:1]


def test_a_port_another_process_leased_is_never_bound_even_for_a_probe(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stack's component down for a restart (`achilles chaos apiserver-restart`) must
    find its port free: another process choosing ports never binds a leased one, not even
    for the instant of a probe (a probe on 0.0.0.0 refuses the restart's bind)."""
    leased, spare = ports.free_ports(2)
    ports.release([leased, spare])
    probe = (
        "import sys; from achilles_dev import ports;"
        f" assert ports.free_port(pool=[{leased}]) == {leased};"
        " print('leased', flush=True); sys.stdin.read()"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", probe], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    # Nothing listens on the leased port (its component is down), so only the lease
    # keeps the chooser from binding it: a bind from this process would be a probe.
    probed: list[int] = []
    real_bindable = ports._bindable

    def bindable(host: str, port: int) -> bool:
        probed.append(port)
        return real_bindable(host, port)

    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "leased"
        monkeypatch.setattr(ports, "_bindable", bindable)
        assert ports.free_ports(1, pool=[leased, spare]) == [spare]
    finally:
        ports.release([spare])
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
    assert probed == [spare]
