"""A real node's state directory too long for the kubelet's Unix sockets is refused with
the reason before anything starts (the kubelet itself only says `bind: invalid
argument`, found when xdist made the tests' temporary paths longer)."""

from __future__ import annotations

from pathlib import Path

import pytest

from achilles.errors import LocalStackError
from achilles_dev.node.configs import NodeLayout
from achilles_dev.node.node import require_short_root


def test_a_short_state_directory_is_accepted() -> None:
    require_short_root(NodeLayout(Path("/tmp/pytest-of-root/pytest-9/popen-gw0/down0/state/node")))


def test_a_state_directory_too_long_for_a_socket_is_refused_naming_the_path() -> None:
    root = Path(
        "/tmp/pytest-of-root/pytest-99/popen-gw0/test_down_leaves_nothing_behin0/state/node"
    )
    with pytest.raises(LocalStackError, match=r"too long .*115 > 107 bytes.*--state-dir"):
        require_short_root(NodeLayout(root))
