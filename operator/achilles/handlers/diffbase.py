"""kopf's diff base, which this operator does not keep.

Every handler here is a `kopf.on.event` handler (or an activity: startup, cleanup,
probe). kopf compares an object with its last handled state only for changing and
spawning handlers (on.create/update/delete/resume/field, daemons, timers), yet its own
storages build that state for every event: a deep copy of the body. While 10,000
listed Agents are handled at a restart that copy was a tenth of kopf's event loop
(a py-spy profile of `achilles bench intake`), for a value nothing reads.

A changing or spawning handler needs a real storage back (kopf's
`AnnotationsDiffBaseStorage`): tests/unit/test_kopf_handlers.py fails if one is
registered while this storage is set.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import kopf


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
