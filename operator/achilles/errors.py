"""The engine's error vocabulary: one place, so layers map errors instead of inventing them."""

from __future__ import annotations


class AchillesError(Exception):
    """Base of every error the engine raises on purpose."""


class LocalStackError(AchillesError):
    """The local development stack (Postgres, control plane, kubelet stand-in) failed."""


class InvalidInputError(AchillesError, ValueError):
    """Input from a person or a manifest is malformed; the message names the field."""


class StartRefused(AchillesError):
    """A durable lock is closed: the run is refused and no journal row is written.

    `reasons` holds the machine codes of every closed lock (see `achilles.domain.gates`).
    """

    def __init__(self, agent_id: int, reasons: tuple[str, ...]) -> None:
        self.agent_id = agent_id
        self.reasons = reasons
        super().__init__(f"agent {agent_id} cannot start: {', '.join(reasons)}")


class NotFound(AchillesError):
    """A named object does not exist."""


class StaleTransition(AchillesError):
    """A guarded state transition found the row no longer in the expected state."""


class ConfigurationError(AchillesError):
    """The engine is configured wrongly (missing or malformed setting)."""


class DatabaseUnavailable(AchillesError):
    """The database cannot be reached."""


class InvalidScheduleError(InvalidInputError):
    """A schedule (database or Agent CR spelling) failed validation; the message names the field."""


class UnknownTimezoneError(InvalidInputError):
    """A time zone name is not in the IANA time zone database."""
