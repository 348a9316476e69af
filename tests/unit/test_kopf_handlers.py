"""What the operator registers with kopf, held to what its settings assume.

`handlers/diffbase.py` keeps no diff base (kopf's last-handled state), which is right
only while every resource handler is a watching one (`kopf.on.event`): a changing or
spawning handler (on.create/update/delete/resume/field, a daemon, a timer) would be
handed an empty `old` for every event. This fails first if one is added.
"""

from __future__ import annotations

import asyncio
from typing import cast

import kopf
from kopf._cogs.structs.ephemera import AnyMemo
from kopf._core.reactor.inventory import ResourceMemory

import achilles.handlers  # noqa: F401  (registers the handlers on kopf's default registry)
from achilles.handlers.agents import agent_event
from achilles.handlers.catalogue import model_event, platform_event, tool_event
from achilles.handlers.diffbase import ForgetfulMemories, NoDiffBase


def test_every_resource_handler_is_a_watching_one() -> None:
    registry = kopf.get_default_registry()
    # kopf has no public reader of its registries; these are the ones its processing
    # asks before it builds a diff (kopf/_core/reactor/processing.py, _detect_causes).
    assert list(registry._changing.get_all_handlers()) == []
    assert list(registry._spawning.get_all_handlers()) == []
    # ... and no index, whose state kopf keeps in the object's memory (ForgetfulMemories).
    assert list(registry._indexing.get_all_handlers()) == []
    watching = {handler.fn for handler in registry._watching.get_all_handlers()}
    assert watching == {agent_event, model_event, tool_event, platform_event}


def test_no_diff_base_is_built_read_or_stored() -> None:
    storage = NoDiffBase()
    body = kopf.Body({"metadata": {"name": "a", "annotations": {"x": "y"}}, "spec": {"p": 1}})
    assert storage.build(body=body) == {}
    assert storage.fetch(body=body) is None
    patch = kopf.Patch()
    storage.store(body=body, patch=patch, essence=storage.build(body=body))
    assert not patch  # nothing written onto the object


def test_no_object_is_remembered_between_its_events() -> None:
    """kopf kept a memory of every object it saw (about 1 KiB each: 100 MiB at 100,000
    Agents); each event gets its own now, with the operator's memo, and none is kept."""
    memories = ForgetfulMemories()
    memo = AnyMemo(kopf.Memo(context="the operator's"))
    raw = cast(kopf.RawBody, {"metadata": {"uid": "u-1", "name": "a", "namespace": "n"}})

    async def two_events() -> tuple[ResourceMemory, ResourceMemory]:
        listed = await memories.recall(raw, memobase=memo, noticed_by_listing=True)
        modified = await memories.recall(raw, memobase=memo)
        return listed, modified

    listed, modified = asyncio.run(two_events())
    assert listed is not modified
    assert listed.memo is not memo  # kopf's copy for the object, as before
    assert cast(kopf.Memo, listed.memo)["context"] == "the operator's"
    assert cast(kopf.Memo, modified.memo)["context"] == "the operator's"
    assert list(memories.iter_all_memories()) == []
