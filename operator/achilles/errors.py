"""The engine's error vocabulary: one place, so layers map errors instead of inventing them."""

from __future__ import annotations


class AchillesError(Exception):
    """Base of every error the engine raises on purpose."""


class LocalStackError(AchillesError):
    """The local development stack (Postgres, control plane, real node) failed."""


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


class ConfigurationError(AchillesError):
    """The engine is configured wrongly (missing or malformed setting)."""


class DatabaseUnavailable(AchillesError):
    """The database cannot be reached."""


class SchemaError(AchillesError):
    """The database schema is not what this release needs (never migrated, behind), or a
    migration step cannot be taken from where the schema is."""


class InvalidScheduleError(InvalidInputError):
    """A schedule (database or Agent CR spelling) failed validation; the message names the field."""


class UnknownTimezoneError(InvalidInputError):
    """A time zone name is not in the IANA time zone database."""


class InboxConflict(AchillesError):
    """`board_advance` lost its compare-and-swap: the item or the board moved since the
    caller read them. Re-read (the current versions are carried here) and decide again."""

    def __init__(
        self,
        item_id: int,
        *,
        expected_revision: int,
        current_revision: int,
        expected_board_version: int,
        current_board_version: int,
    ) -> None:
        self.item_id = item_id
        self.expected_revision = expected_revision
        self.current_revision = current_revision
        self.expected_board_version = expected_board_version
        self.current_board_version = current_board_version
        super().__init__(
            f"inbox item {item_id} changed since it was read: revision {expected_revision}"
            f" -> {current_revision}, board version {expected_board_version}"
            f" -> {current_board_version}; re-read and try again"
        )


class InvalidInboxTransition(AchillesError):
    """An inbox item cannot move between these two states (see `achilles.domain.inbox`)."""

    def __init__(self, item_id: int, current: str, target: str) -> None:
        self.item_id = item_id
        self.current = current
        self.target = target
        super().__init__(f"inbox item {item_id} cannot move from {current} to {target}")


class InboxReplyPending(AchillesError):
    """A blocked item has a human reply the agent has not acknowledged yet."""

    def __init__(self, item_id: int, reply_serial: int) -> None:
        self.item_id = item_id
        self.reply_serial = reply_serial
        super().__init__(
            f"inbox item {item_id} has an unprocessed human reply (serial {reply_serial});"
            " take and acknowledge it before leaving blocked"
        )


class InboxVersionRequired(AchillesError):
    """Re-asking would move an existing item's state, which only a versioned write may
    do (seed 003): the re-ask must carry the revision and board version it read."""

    def __init__(
        self, item_id: int, current: str, target: str, *, revision: int, board_version: int
    ) -> None:
        self.item_id = item_id
        self.current = current
        self.target = target
        self.revision = revision
        self.board_version = board_version
        super().__init__(
            f"inbox item {item_id} is {current}: re-asking it as {target} changes its state,"
            " which needs expected_revision and board_version (the compare-and-swap of"
            f" board_advance); it is at revision {revision}, board version {board_version}:"
            " pass them, or re-ask without a state to update only the question"
        )


class ClusterUnavailable(AchillesError):
    """No Kubernetes cluster is configured or reachable from here."""


class CrdGenerationError(AchillesError):
    """A pydantic model cannot be expressed as a structural CRD schema (names the field)."""


class ToolError(AchillesError):
    """A tool call failed in a way the model should be told about (e.g. "not found").

    The runner feeds the message back to the model as the tool's result; the run goes on.
    """


class ModelCallFailed(AchillesError):
    """The chat model API failed after the client's retries (HTTP error, timeout, refused)."""


class ModelScriptError(InvalidInputError):
    """A script for the offline model server is malformed; the message names the field."""
