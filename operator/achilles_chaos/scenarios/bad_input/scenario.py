"""The bad-input scenario: its four doors in turn, then the journal checked for corruption."""

from __future__ import annotations

from achilles_chaos.journal import malformed_rows
from achilles_chaos.scenario import Context
from achilles_chaos.scenarios.bad_input.cli import CLI_CASES, cli_calls
from achilles_chaos.scenarios.bad_input.common import LOOSE_OWNER, OWNER
from achilles_chaos.scenarios.bad_input.replies import BROKEN, SCRIPTED, model_replies
from achilles_chaos.scenarios.bad_input.resources import refusals
from achilles_chaos.scenarios.bad_input.unhonoured import accepted_but_wrong


def bad_input(ctx: Context) -> None:
    r = ctx.result
    op = ctx.operator()
    ctx.journal.users([OWNER, LOOSE_OWNER])
    good_model = ctx.model("good")
    refused, cr_problems = refusals(ctx)
    crs = refused + len(cr_problems)
    judge_wrong = accepted_but_wrong(ctx, good_model)
    cli_ok, cli_problems = cli_calls(ctx)
    replies_ok, reply_problems = model_replies(ctx, good_model)
    wrong_problems = judge_wrong()
    for problem in [*cr_problems, *wrong_problems, *cli_problems, *reply_problems]:
        r.check(False, problem)
    rows = ctx.journal.rows("SELECT * FROM agent_runs")
    corrupted = malformed_rows(rows)
    r.check(not corrupted, f"malformed rows anywhere in the journal: {corrupted[:5]}")
    r.check(op.alive() and op.starts == 1, f"the operator crashed: {op.log_tail()}")
    r.injected = (
        f"{crs} malformed CRs/patches, 7 CRs the operator cannot honour, {len(CLI_CASES)} bad CLI"
        f" calls, {len(SCRIPTED) + len(BROKEN)} bad model replies"
    )
    r.figures.update(
        crs_refused=refused, crs=crs, cli_ok=cli_ok, cli=len(CLI_CASES), replies_ok=replies_ok,
        replies=len(SCRIPTED) + len(BROKEN), loop_errors=op.metric("achilles_loop_errors_total"),
    )  # fmt: skip
    r.figure = (
        f"CRs refused clearly {refused}/{crs}; CLI {cli_ok}/{len(CLI_CASES)} clean exits; "
        f"replies handled {replies_ok}/{len(SCRIPTED) + len(BROKEN)}; operator up, 0 restarts"
    )
    ctx.check_journal(settled=False)
