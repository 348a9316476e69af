"""A local stack component that fails to start says why: its log's last lines, whether it
exited or runs without becoming ready (the fault suite's API server restart once timed
out with nothing but "last: False")."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from achilles.errors import LocalStackError
from achilles_dev.config import StackConfig
from achilles_dev.processes import running_from_pidfile, stop_group
from achilles_dev.stack_components import start_component


def _config(tmp_path: Path) -> StackConfig:
    config = StackConfig(state_dir=tmp_path, node="none")
    config.run_dir.mkdir(parents=True)
    return config


def _python(code: str) -> list[str]:
    return [sys.executable, "-u", "-c", code]


def test_a_component_that_exits_at_start_names_its_last_words(tmp_path: Path) -> None:
    config = _config(tmp_path)
    argv = _python("print('listen tcp 10.0.0.1:6443: bind: address already in use'); exit(1)")
    with pytest.raises(LocalStackError) as raised:
        start_component(config, "kube-apiserver", argv, lambda: False, report=print, timeout=30)
    message = str(raised.value)
    assert "kube-apiserver exited during start-up" in message
    assert "bind: address already in use" in message


def test_a_component_that_never_becomes_ready_names_its_last_words(tmp_path: Path) -> None:
    config = _config(tmp_path)
    argv = _python("import time; print('waiting for etcd at 127.0.0.1:2379'); time.sleep(600)")
    try:
        with pytest.raises(LocalStackError) as raised:
            start_component(
                config, "kube-apiserver", argv, lambda: False, report=print, timeout=0.5
            )
        message = str(raised.value)
        assert "waiting for kube-apiserver to become ready" in message
        assert "waiting for etcd at 127.0.0.1:2379" in message
    finally:
        process = running_from_pidfile(config.pidfile("kube-apiserver"))
        assert process is not None, "the component still runs: the timeout did not kill it"
        stop_group(process, grace=5)
