"""Why the operator runs kopf standalone, checked against the kopf it runs on.

`handlers/operator.py` turns peering off and says why: a frozen kopf (another replica
with a higher priority) stops its own watch-streams and daemons/timers, never the
threads our startup handler starts, so peering could not make one replica the only
actor; the database decides instead. These tests hold the comment to the kopf we pin:
the pause toggle must reach the watch-streams and the daemon killer and must not reach
the startup activities; and the comment must cite what says so (kopf's docs/peering.rst
and nolar/kopf#675), not an issue about something else (#1266 is a daemon-spawning
glitch of 3+ pods).
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from pathlib import Path

from kopf._core.reactor import running

import achilles.handlers.operator as operator_handlers


def _calls_in_spawn_tasks() -> dict[str, set[str]]:
    """Each function `spawn_tasks` calls, with the keyword arguments it passes."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(running.spawn_tasks)))
    calls: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            calls.setdefault(name, set()).update(k.arg for k in node.keywords if k.arg)
    return calls


def test_kopf_pauses_its_watch_streams_and_daemons_but_not_the_startup_activities() -> None:
    calls = _calls_in_spawn_tasks()
    # The resource watch-streams (the orchestrator) and the daemon/timer killer get the
    # pause toggle...
    assert "operator_paused" in calls["orchestrator"]
    assert "operator_paused" in calls["daemon_killer"]
    # ...the startup activities, which start our loops (handlers/loops.py), do not.
    assert "operator_paused" not in calls["startup_cleanup_activities"]


def test_the_standalone_comment_cites_what_the_code_relies_on() -> None:
    source = Path(inspect.getfile(operator_handlers)).read_text()
    assert "settings.peering.standalone = True" in source
    assert "nolar/kopf#1266" not in source
    assert "nolar/kopf#675" in source
    assert "docs/peering.rst" in source
