"""The invariant monitor's reads of the journal (`achilles_dev/invariants.py`): its own
SQL, read-only, one statement each, so the oracle does not share the product's queries
(a mistake in those shows here).
"""

# Agents whose durable lock is closed, as the claim reads it (0017 `achilles_claim_run`).
CLOSED = b"""
    SELECT a.id FROM agents a LEFT JOIN users u ON u.id = a.user_id
    WHERE NOT (a.enabled AND NOT a.admin_paused AND a.model_id IS NOT NULL
               AND coalesce(u.active, false))
"""
# The runs of agents closed at both samples that were made or started between them.
RUNS_SINCE = b"""
    SELECT id, agent_id, state, reason, created_at, started_at
    FROM agent_runs
    WHERE agent_id = ANY(%(agents)s) AND (created_at > %(since)s OR started_at > %(since)s)
"""
# Each owner's tokens of the week, as `db/journal/usage.py` sums them; the week's start
# as the claim computes it (0017). One pass over the week's finished runs, whatever the
# number of owners and agents.
TOKENS = b"""
    WITH week AS (
        SELECT ((d - (extract(isodow FROM d)::int % 7))::timestamp AT TIME ZONE s.timezone)
               AS start
        FROM platform_settings s,
             LATERAL (SELECT (now() AT TIME ZONE s.timezone)::date AS d) local
        WHERE s.id = 1
    ), spent AS (
        SELECT a.user_id AS owner, r.tokens_used AS tokens
        FROM agent_runs r JOIN agents a ON a.id = r.agent_id, week
        WHERE r.finished_at >= week.start
        UNION ALL
        SELECT d.user_id, d.tokens_used FROM deleted_agent_tokens d, week
        WHERE d.finished_at >= week.start
    )
    SELECT u.id AS owner, week.start, coalesce(s.tokens, 0) AS tokens
    FROM users u CROSS JOIN week
    LEFT JOIN (SELECT owner, sum(tokens) AS tokens FROM spent GROUP BY owner) s
           ON s.owner = u.id
"""
WAKE_RUNS = b"""
    SELECT i.id AS item, i.reply_serial, i.handled_at, r.id AS run, r.request_key
    FROM agent_inbox_items i
    JOIN agent_runs r ON r.agent_id = i.agent_id AND r.request_key IS NOT NULL
                     AND r.created_at >= i.handled_at
    WHERE i.handled_at IS NOT NULL
      AND NOT (r.state = 'skipped' AND r.reason = 'already_running')
      AND NOT (r.state = 'failed' AND r.reason = 'cancelled' AND r.started_at IS NULL)
"""
# The oracle's own reading of seed 003 (not the product's query, `db/inbox/wakes.py`, so a
# mistake there shows here): an answered reply nobody took, to a blocked item, the owner's
# consent on, every durable lock open, no run of the agent active, and no run that
# answered this reply (the trigger's record, `inbox_reply_wakes`).
OWED_WAKES = b"""
    SELECT i.id AS item, i.reply_serial
    FROM agent_inbox_items i
    JOIN agents a ON a.id = i.agent_id
    JOIN users u ON u.id = a.user_id
    LEFT JOIN inbox_reply_wakes w ON w.item_id = i.id AND w.reply_serial = i.reply_serial
    WHERE i.handled_at IS NOT NULL AND i.outcome IS NULL AND i.reply_seen_at IS NULL
      AND i.state = 'blocked'
      AND (a.meta -> 'inbox' ->> 'wake_on_reply')::boolean IS TRUE
      AND a.enabled AND NOT a.admin_paused AND a.model_id IS NOT NULL AND u.active
      AND w.answered_at IS NULL
      AND NOT EXISTS (SELECT FROM agent_runs r WHERE r.agent_id = a.id
                      AND r.state IN ('queued', 'dispatched', 'running'))
"""
# Is an operator of this journal live: one of its logins (a member of its group role, not
# a superuser, who is a member of every role) ended a transaction lately.
OPERATOR_LIVE = b"""
    SELECT coalesce(bool_or(s.state_change >= now() - make_interval(secs => %(within)s)), false)
    FROM pg_stat_activity s JOIN pg_roles r ON r.rolname = s.usename
    WHERE s.datname = current_database() AND s.pid <> pg_backend_pid()
      AND NOT r.rolsuper AND pg_has_role(s.usename, %(role)s, 'MEMBER')
"""
