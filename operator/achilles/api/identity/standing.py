"""Whether a recognised caller may still act: `services/access.py` behind a short cache.

Asked on every `/v1` request after identity (`caller.current_caller`) and by each open
event stream every `RECHECK_SECONDS`. An answer is kept `CACHE_SECONDS` per owner (and
per web session), so a busy person costs the database one indexed read every few seconds
and a request whose answer is cached stays on the event loop. So an owner deactivated, or
a session signed out on another replica, is refused within `CACHE_SECONDS`; the replica
that signs a session out forgets its answer at once.
"""

from __future__ import annotations

import hashlib

from achilles.api.identity.cache import TtlCache
from achilles.db.database import Database
from achilles.services import access

CACHE_SECONDS = 5.0
# How often an open event stream asks again (through the cache).
RECHECK_SECONDS = 5.0


def _session_key(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


class Standing:
    def __init__(self, database: Database, seconds: float = CACHE_SECONDS) -> None:
        self.database = database
        self._owners: TtlCache[str, bool] = TtlCache(seconds)
        self._sessions: TtlCache[str, access.SessionStanding] = TtlCache(seconds)

    def cached_owner_active(self, user_key: str) -> bool | None:
        return self._owners.get(user_key)

    def owner_active(self, user_key: str) -> bool:
        """Reads the database (call from a thread) unless the answer is cached."""
        active = self._owners.get(user_key)
        if active is None:
            active = access.is_owner_active(self.database, user_key)
            self._owners.put(user_key, active)
        return active

    def cached_session(self, session_id: str) -> access.SessionStanding | None:
        return self._sessions.get(_session_key(session_id))

    def session(self, session_id: str) -> access.SessionStanding:
        """Reads the database (call from a thread) unless the answer is cached."""
        key = _session_key(session_id)
        standing = self._sessions.get(key)
        if standing is None:
            standing = access.web_session_standing(self.database, session_id)
            self._sessions.put(key, standing)
            if standing.user_key is not None:
                self._owners.put(standing.user_key, standing.owner_active)
        return standing

    def forget_session(self, session_id: str) -> None:
        self._sessions.put(
            _session_key(session_id),
            access.SessionStanding(user_key=None, live=False, owner_active=True),
        )
