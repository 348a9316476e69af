"""Model replies no provider should send, from the scripted model server and the broken
endpoint: each run ends with a clear state, no absurd token count recorded."""

from __future__ import annotations

from achilles_chaos import models
from achilles_chaos.scenario import Context
from achilles_chaos.scenarios.bad_input.common import LOOSE_OWNER, OWNER, START_TIMEOUT

# Behaviours of the scripted model server: (behaviour, expected state, text the error names).
SCRIPTED: list[tuple[models.Behaviour, str, str]] = [
    (models.UNKNOWN_TOOL, "succeeded", ""),
    (models.BAD_ARGUMENTS, "succeeded", ""),
    (models.HUGE, "succeeded", ""),
    (models.EMPTY, "failed", "without an answer"),
    (models.SERVER_ERROR, "failed", "500"),
    (models.LOOPS, "failed", "iterations"),
    (models.NO_USAGE, "succeeded", ""),
]
# Modes of the broken endpoint: expected state ("failed" with a non-empty error, unless said).
BROKEN: list[tuple[str, str]] = [
    ("not-json", "failed"),
    ("truncated", "failed"),
    ("wrong-shape", "failed"),
    ("no-choices", "failed"),
    ("html-502", "failed"),
    ("hang-up", "failed"),
    ("negative-tokens", "failed"),
    ("absurd-tokens", "any"),
]
SANE_TOKENS = 10**9  # more than any real run spends; a claim above it is a provider's bug


def model_replies(ctx: Context, good_model: str) -> tuple[int, list[str]]:
    problems: list[str] = []
    names: dict[str, tuple[str, str]] = {}
    for behaviour, state, says in SCRIPTED:
        name = f"reply-{behaviour.marker}"
        ctx.agent(name, behaviour.prompt(), good_model, owner=OWNER)
        names[name] = (state, says)
    for mode, state in BROKEN:
        model = ctx.model(f"broken-{mode}", ctx.cluster.broken.base_url(mode))
        owner = LOOSE_OWNER if mode == "absurd-tokens" else OWNER
        ctx.agent(f"broken-{mode}", models.QUICK.prompt(), model, owner=owner)
        names[f"broken-{mode}"] = (state, "")
    ids = ctx.agent_ids(names)
    before = ctx.last_run_id()
    for name in names:
        ctx.request(name)
    runs = ctx.new_runs(ids.values(), before, 120)
    ended = ctx.wait_ended(runs.values(), START_TIMEOUT, "every run of a bad reply to end")
    for name, (state, says) in names.items():
        row = ended[runs[ids[name]]]
        summary = f"{row['state']}/{row['reason']} tokens {row['tokens_used']}"
        detail = (row["error"] or f"output {len(row['output'] or '')} chars")[:160]
        ctx.result.note(f"{name}: {summary}: {detail}")
        if state != "any" and (row["state"] != state or says not in (row["error"] or "")):
            problems.append(f"{name}: expected {state} naming {says!r}, got {summary}: {detail}")
        if row["state"] == "failed" and not (row["error"] or "").strip():
            problems.append(f"{name}: failed without an error")
        if row["tokens_used"] > SANE_TOKENS:
            problems.append(f"{name}: the journal recorded {row['tokens_used']} tokens for one run")
    return len(names) - len(problems), problems
