"""What an API process forgets on schedule: owner events past their retention,
idempotency keys past their expiry and web sessions past theirs (each replica does it;
deleting twice is harmless).

Started with the event hub (`achilles.api.routers.events`' lifespan). A failure (the
database is away) is logged and tried again at the next round.
"""

from __future__ import annotations

import asyncio
import logging

from achilles.db.database import Database
from achilles.services import access, idempotency, owner_events

log = logging.getLogger("achilles.api.housekeeping")

EVERY_SECONDS = 3600.0


async def forget_old_rows(database: Database, every: float = EVERY_SECONDS) -> None:
    while True:
        try:
            events = await asyncio.to_thread(owner_events.purge_old_events, database)
            keys = await asyncio.to_thread(idempotency.purge_expired, database)
            sessions = await asyncio.to_thread(access.purge_expired_sessions, database)
            if events or keys or sessions:
                log.info(
                    "forgot %d old owner events, %d expired idempotency keys, %d web sessions",
                    events,
                    keys,
                    sessions,
                )
        except Exception as exc:
            log.warning("housekeeping failed: %s", " ".join(str(exc).split()))
        await asyncio.sleep(every)
