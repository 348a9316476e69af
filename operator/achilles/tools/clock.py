"""Optional tool: the current date and time in the owner's timezone.

Models do not know what time it is; agents that plan ("what is due this week")
need it, and in the owner's zone, not the server's.
"""

from __future__ import annotations

from datetime import UTC
from typing import Any

from achilles.tools.base import NoArgs, ToolContext, tool


@tool("current_time", args=NoArgs)
def current_time(args: NoArgs, ctx: ToolContext) -> dict[str, Any]:
    """The current date and time in your owner's timezone."""
    now = ctx.now()
    local = now.astimezone(ctx.owner_timezone)
    return {
        "local_time": local.isoformat(timespec="seconds"),
        "timezone": ctx.owner_timezone.key,
        "weekday": local.strftime("%A"),
        "utc_time": now.astimezone(UTC).isoformat(timespec="seconds"),
    }
