"""kopf's per-object state, which this operator does not keep: the diff base and the
memory of each object.

Every handler here is a `kopf.on.event` handler (or an activity: startup, cleanup,
probe). kopf compares an object with its last handled state only for changing and
spawning handlers (on.create/update/delete/resume/field, daemons, timers), yet its own
storages build that state for every event: a deep copy of the body. While 10,000
listed Agents are handled at a restart that copy was a tenth of kopf's event loop
(a py-spy profile of `achilles bench intake`), for a value nothing reads.

kopf also remembers every object it has seen until the object is deleted (a
`ResourceMemory`: a copy of the memo, an error throttler, the state of daemons, timers and
indexes, whether a resumed object was handled once). Nothing here reads any of it again:
no daemon, timer or index, no patch through kopf. It was about 1 KiB an object, about 100
MiB of the operator's 300 after a restart under 100,000 Agents (docs/performance.md).
`ForgetfulMemories` gives each event a memory of its own, dropped with it (kopf's own
`ephemeral` recall, made for its admission webhooks). What changes: kopf's backoff for
errors outside the handlers starts afresh at each event of an object; nothing of it
retries without an event anyway.

A changing or spawning handler needs both back (kopf's `AnnotationsDiffBaseStorage`, its
`ResourceMemories`): tests/unit/test_kopf_handlers.py fails if one is registered while
these are set.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import kopf

# kopf has no public name for its memories' container; `kopf.operator(memories=...)`
# takes one (kopf is pinned in uv.lock; test_kopf_handlers.py runs this through kopf).
from kopf._cogs.structs import bodies, ephemera
from kopf._core.reactor.inventory import ResourceMemories, ResourceMemory


class NoDiffBase(kopf.DiffBaseStorage):
    """No essence built, none read, none stored: every event is a watching event."""

    def build(
        self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None
    ) -> kopf.BodyEssence:
        return cast(kopf.BodyEssence, {})

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


class ForgetfulMemories(ResourceMemories):
    """A memory for each event, never kept: every handler here is a watching one."""

    async def recall(
        self,
        raw_body: bodies.RawBody,
        *,
        memobase: ephemera.AnyMemo | None = None,
        noticed_by_listing: bool = False,
        ephemeral: bool = False,
    ) -> ResourceMemory:
        return await super().recall(
            raw_body, memobase=memobase, noticed_by_listing=noticed_by_listing, ephemeral=True
        )
