"""The reference MCP servers' cache (achilles_dev/mcp_servers.py): installed once, whoever
asks at once. The CI run on an empty cache lost a server: two test workers ran `npm
install` into one prefix, and the second moved the first one's `node_modules` aside just
after the first returned."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from achilles_dev.mcp_servers import INSTALLED_STAMP, install_once
from achilles_dev.waiting import wait_until


def _waiting_on(lock: Path) -> bool:
    """Whether some flock on `lock` is waiting (the kernel's /proc/locks, `->` lines)."""
    inode = os.stat(lock).st_ino
    return any(
        line.split()[1] == "->" and line.split()[6].endswith(f":{inode}")
        for line in Path("/proc/locks").read_text().splitlines()
        if len(line.split()) > 6
    )


def test_a_second_caller_waits_for_the_first_install_and_does_not_install_again(
    tmp_path: Path,
) -> None:
    home = tmp_path / "server-1.0"
    installs: list[str] = []
    first_running = threading.Event()
    let_first_finish = threading.Event()

    def first_install() -> None:
        home.mkdir()
        installs.append("first")
        first_running.set()
        assert let_first_finish.wait(30)
        (home / "bin").write_text("installed")

    def second_install() -> None:
        installs.append("second")

    first = threading.Thread(target=install_once, args=(home, first_install))
    first.start()
    assert first_running.wait(30)
    second = threading.Thread(target=install_once, args=(home, second_install))
    second.start()
    lock = tmp_path / ".server-1.0.lock"
    wait_until(lambda: _waiting_on(lock), timeout=30, what="the second caller on the lock")
    let_first_finish.set()
    first.join(30)
    second.join(30)

    assert installs == ["first"]
    assert (home / "bin").read_text() == "installed"
    assert (home / INSTALLED_STAMP).exists()


def test_an_install_killed_half_way_is_done_again_from_nothing(tmp_path: Path) -> None:
    home = tmp_path / "server-1.0"
    home.mkdir()
    (home / "bin").write_text("half")  # the binary's link, but no stamp: cut short

    def install() -> None:
        home.mkdir()  # an empty directory, as npm and uv are given
        (home / "bin").write_text("whole")

    install_once(home, install)
    assert (home / "bin").read_text() == "whole"
    install_once(home, lambda: pytest.fail("installed twice"))


def test_a_failed_install_leaves_no_stamp_and_the_next_call_tries_again(tmp_path: Path) -> None:
    home = tmp_path / "server-1.0"

    def failing() -> None:
        home.mkdir()
        raise OSError("the registry did not answer")

    with pytest.raises(OSError, match="registry"):
        install_once(home, failing)
    assert not (home / INSTALLED_STAMP).exists()
    install_once(home, home.mkdir)
    assert (home / INSTALLED_STAMP).exists()
