"""The search path every function of the schema runs with (issue 37).

PostgreSQL searches a session's temporary schema for tables and types *before* every
schema of a function's `search_path` unless the path names `pg_temp` itself
(PostgreSQL's "Writing SECURITY DEFINER Functions Safely"). A function that reads
`agent_runs` under `pg_catalog, <schema>` therefore reads a caller's temporary
`agent_runs` if it made one: a SECURITY DEFINER function does so as the schema's owner,
an invoker function in a policy or a trigger's WHEN lets the caller decide what the
rule sees. So each function pins `pg_catalog, <schema>, pg_temp`, the trusted schemas
first and the temporary one last, and `tests/db/test_pg_temp_attack.py` reads `pg_proc`
to keep it so. A migration that makes a function writes `pinned_search_path(schema)`
into its definition.
"""

from __future__ import annotations


def search_path_value(schema: str) -> str:
    """`pg_catalog, "<schema>", pg_temp`: the value of the setting."""
    quoted = '"' + schema.replace('"', '""') + '"'
    return f"pg_catalog, {quoted}, pg_temp"


def pinned_search_path(schema: str) -> str:
    """The `SET search_path = ...` clause of a function's definition."""
    return f"SET search_path = {search_path_value(schema)}"
