"""What docs/architecture.md, docs/operator.md, docs/tools.md and the README say of the
code, read against the code (issue 40 item 4): the intervals they quote, the layers they
list, who opens transactions, which kopf errors are raised.

Each `Claim` names a phrase of a page (a regular expression over the page with its
whitespace folded, so rewrapping a paragraph changes nothing; each group one figure) and,
per group, the constant(s) it quotes by their public name (`module:NAME`). A constant
changed without its page, or a page changed without its constant, fails here with both
figures; a phrase reworded fails naming the phrase: reword the row with the page.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "operator" / "achilles"

# A constant by its public name, or a figure computed from several.
Source = str | Callable[[], float]

SWEEPER = "achilles.handlers.controllers.sweeper"
SCHEDULER = "achilles.handlers.controllers.scheduler"
DISPATCHER = "achilles.handlers.controllers.dispatcher"
STATUS_WRITER = "achilles.handlers.controllers.status_writer"
RETENTION = "achilles.handlers.controllers.retention"


def value(source: Source) -> float:
    if callable(source):
        return source()
    module, _, name = source.partition(":")
    found = getattr(importlib.import_module(module), name)
    if isinstance(found, timedelta):
        return found.total_seconds()
    assert isinstance(found, int | float), f"{source} is {found!r}, not a number"
    return float(found)


WORDS = {"half": 2, "third": 3, "three": 3, "quarter": 4}
UNITS = {"s": 1, "second": 1, "seconds": 1, "min": 60, "minute": 60, "minutes": 60}


def figure(text: str) -> float:
    """`30 s`, `10 min`, `5 minutes`, `500`, `third` as a number (of seconds, for times)."""
    if text in WORDS:
        return WORDS[text]
    number, _, unit = text.partition(" ")
    return float(number) * (UNITS[unit] if unit else 1)


@dataclass(frozen=True)
class Claim:
    page: str
    phrase: str
    # Per group of `phrase`: the constant it quotes, or several that must all be it.
    quotes: tuple[Source | tuple[Source, ...], ...]


def _stale_pass() -> float:
    """The sweeper's reap pass: a third of the stale threshold, at least its tick."""
    return max(value(f"{SWEEPER}:SWEEP_TICK"), value("achilles.domain.runs:STALE_AFTER") / 3)


def _missed_beats() -> float:
    runs = "achilles.domain.runs"
    return value(f"{runs}:STALE_AFTER") / value(f"{runs}:HEARTBEAT_INTERVAL")


def _retry_delay(attempt: int) -> Callable[[], float]:
    def delay() -> float:
        from achilles.domain.notifications import retry_delay

        return retry_delay(attempt).total_seconds()

    return delay


def _until_dead_minutes() -> float:
    """`about N minutes`: the retries' delays until the last attempt, to 10 minutes."""
    from achilles.domain.notifications import MAX_ATTEMPTS, retry_delay

    total = sum(retry_delay(n).total_seconds() for n in range(1, MAX_ATTEMPTS))
    return round(total / 600) * 10


def _start_deadline_judged() -> float:
    return value("achilles.domain.pod_outcome:START_DEADLINE") + value(
        f"{SWEEPER}:PENDING_PODS_EVERY"
    )


ARCH = "docs/architecture.md"
OPS = "docs/operator.md"
TOOLS = "docs/tools.md"
T = r"(\d+(?:\.\d+)? (?:s|min|minutes?))"  # a time as the pages write it

CLAIMS = [
    # docs/architecture.md: the loops' picture
    Claim(ARCH, rf"every {T} ──> sweeper", (f"{SWEEPER}:SWEEP_TICK",)),
    Claim(ARCH, r"reaper \(a (third) of the stale threshold\)", (f"{SWEEPER}:REAP_FRACTION",)),
    Claim(ARCH, rf"pending pods \({T}\)", (f"{SWEEPER}:PENDING_PODS_EVERY",)),
    Claim(
        ARCH,
        rf"owners, reply wakes, run metrics, memory \({T}\)",
        (
            (
                f"{SWEEPER}:OWNERS_EVERY",
                f"{SWEEPER}:REPLY_WAKES_EVERY",
                "achilles.handlers.controllers.run_metrics:RUN_METRICS_EVERY",
                "achilles.runtime.memory:TRIM_EVERY",
            ),
        ),
    ),
    Claim(
        ARCH,
        rf"budget warnings \({T}\)",
        ("achilles.handlers.controllers.budget_warnings:BUDGET_WARNINGS_EVERY",),
    ),
    Claim(ARCH, rf"orphans \(at start, {T}\)", (f"{SWEEPER}:ORPHANS_EVERY",)),
    Claim(ARCH, rf"MCP listings \(at start, {T}", ("achilles.handlers.config:MCP_RELIST_EVERY",)),
    Claim(
        ARCH,
        rf"retention \({T}; {T} while it has more to delete\)",
        (f"{RETENTION}:RETENTION_EVERY", f"{RETENTION}:RETENTION_BUSY_EVERY"),
    ),
    # docs/architecture.md: the loops' table
    Claim(
        ARCH,
        rf"its nearest slot, a schedule NOTIFY \({T} after its last pass at the soonest\), {T} at"
        r" most",
        (f"{SCHEDULER}:SCHEDULER_PACE", f"{SCHEDULER}:SCHEDULER_MAX_SLEEP"),
    ),
    Claim(ARCH, rf"a runs NOTIFY, {T}; backs off while refused", (f"{DISPATCHER}:DISPATCH_TICK",)),
    Claim(
        ARCH,
        rf"`mark_dirty`, {T}; waits \({T} at most\)",
        (f"{STATUS_WRITER}:TICK", f"{STATUS_WRITER}:DEFER_FOR_JOBS"),
    ),
    Claim(
        ARCH,
        rf"the listener reconnecting, {T} \|",
        ("achilles.handlers.controllers.notifier:NOTIFIER_TICK",),
    ),
    # docs/architecture.md: state, the run, handlers
    Claim(ARCH, rf"dropped after {T}", ("achilles.services.agent_intake:SNAPSHOT_SECONDS",)),
    Claim(ARCH, rf"heartbeats every {T}", ("achilles.domain.runs:HEARTBEAT_INTERVAL",)),
    Claim(
        ARCH,
        rf"`STALE_AFTER` \({T}, (three) missed beats",
        ("achilles.domain.runs:STALE_AFTER", _missed_beats),
    ),
    Claim(
        ARCH,
        rf"with backoff \(`runtime/backoff\.py`: {T} doubling to {T}",
        ("achilles.runtime.backoff:FIRST_DELAY", "achilles.runtime.backoff:MOST_DELAY"),
    ),
    # docs/operator.md
    Claim(
        OPS, rf"found by the orphan sweep \(at start and every {T}\)", (f"{SWEEPER}:ORPHANS_EVERY",)
    ),
    Claim(
        OPS,
        rf"When the operator starts, and every {T} after, it lists the Agents",
        (f"{SWEEPER}:ORPHANS_EVERY",),
    ),
    Claim(
        OPS,
        rf"owners pass of the sweeper \(every {T}, and at the next tick",
        (f"{SWEEPER}:OWNERS_EVERY",),
    ),
    Claim(
        OPS,
        rf"owners pass at its next tick \(within {T}\); the pass also runs every {T}",
        (f"{SWEEPER}:SWEEP_TICK", f"{SWEEPER}:OWNERS_EVERY"),
    ),
    Claim(
        OPS,
        rf"at most (\d+) Agents every {T}",
        (
            "achilles.handlers.context:SIBLING_BATCH",
            "achilles.handlers.context:SIBLING_REFRESH_SECONDS",
        ),
    ),
    Claim(
        OPS,
        rf"noticed on the dispatcher's next pass, within {T}",
        (f"{DISPATCHER}:DISPATCH_TICK",),
    ),
    Claim(OPS, rf"within {T} should the NOTIFY be lost", (f"{DISPATCHER}:DISPATCH_TICK",)),
    Claim(OPS, rf"at the sweeper's next pass \(within {T}; the same pass", (_stale_pass,)),
    Claim(
        OPS,
        rf"when the listener reconnects, and every {T}\. A pass claims up to (\d+) due rows",
        (
            "achilles.handlers.controllers.notifier:NOTIFIER_TICK",
            "achilles.services.notifications:BATCH",
        ),
    ),
    Claim(
        OPS,
        rf"no answer within {T} \(connect {T};",
        (
            "achilles.webhook.sender:DEFAULT_TIMEOUT_SECONDS",
            "achilles.webhook.sender:CONNECT_TIMEOUT_SECONDS",
        ),
    ),
    Claim(
        OPS,
        rf"retried after {T}, {T}, {T}, \.\.\. capped at {T}; after (\d+) attempts"
        r" \(about (\d+) minutes\)",
        (
            _retry_delay(1),
            _retry_delay(2),
            _retry_delay(3),
            "achilles.domain.notifications:MAX_RETRY",
            "achilles.domain.notifications:MAX_ATTEMPTS",
            _until_dead_minutes,
        ),
    ),
    Claim(
        OPS,
        rf"within {T}, after a run's NOTIFY on `achilles_runs`; every {T} in any case",
        (
            f"{SWEEPER}:SWEEP_TICK",
            "achilles.handlers.controllers.budget_warnings:BUDGET_WARNINGS_EVERY",
        ),
    ),
    Claim(
        OPS,
        rf"\({T} back, for transactions that committed late",
        ("achilles.services.budget_warnings:LOOKBACK",),
    ),
    Claim(
        OPS,
        rf"in batches of (\d+) rows per statement.*? at most (\d+) batches per pass, every {T},"
        rf" or every {T} while a backlog is left",
        (
            "achilles.services.retention:RETENTION_BATCH",
            "achilles.services.retention:MAX_BATCHES",
            f"{RETENTION}:RETENTION_EVERY",
            f"{RETENTION}:RETENTION_BUSY_EVERY",
        ),
    ),
    Claim(
        OPS,
        rf"at most every {T} \(it reads every agent\)",
        (f"{SCHEDULER}:SCHEDULE_REPAIR_EVERY",),
    ),
    Claim(
        OPS,
        rf"Sleeps until the nearest slot \(at most {T}\); a slot moved \(a `next_run_at` NOTIFY\)"
        rf" wakes it, {T} after its last pass at the soonest, .*? a pass every {T}",
        (
            f"{SCHEDULER}:SCHEDULER_MAX_SLEEP",
            f"{SCHEDULER}:SCHEDULER_PACE",
            f"{SCHEDULER}:SCHEDULER_PACE",
        ),
    ),
    Claim(OPS, rf"backs off \(\d+ s → {T}\)", (f"{DISPATCHER}:MAX_BACKOFF",)),
    Claim(
        OPS,
        rf"in pages of (\d+) read as JSON, .*?a watch that ends \(every {T}\)",
        (
            "achilles.k8s.watching:PAGE_SIZE",
            "achilles.services.run_objects:WATCH_TIMEOUT_SECONDS",
        ),
    ),
    Claim(
        OPS,
        rf"past `STALE_AFTER`, {T}, counted only while PostgreSQL is up",
        ("achilles.domain.runs:STALE_AFTER",),
    ),
    Claim(
        OPS,
        rf"are switched off \(every {T}, and at the next tick after an `achilles_owners`",
        (f"{SWEEPER}:OWNERS_EVERY",),
    ),
    Claim(
        OPS,
        rf"at start and every {T}, rows of Agents, AgentModels and AgentTools deleted",
        (f"{SWEEPER}:ORPHANS_EVERY",),
    ),
    Claim(
        OPS,
        rf"every {T} the journal's run figures",
        ("achilles.handlers.controllers.run_metrics:RUN_METRICS_EVERY",),
    ),
    Claim(
        OPS,
        rf"the budget warnings every {T} and at the next tick",
        ("achilles.handlers.controllers.budget_warnings:BUDGET_WARNINGS_EVERY",),
    ),
    Claim(OPS, rf"every {T} the retention", (f"{RETENTION}:RETENTION_EVERY",)),
    Claim(
        OPS,
        r"the Jobs are made (\d+) at a time, and the next (\d+) runs are chosen while the "
        r"last (\d+) creates of a batch run",
        (
            "achilles.services.dispatch:PARALLEL_CREATES",
            "achilles.services.dispatch:BATCH",
            "achilles.services.dispatch:REFILL_AT",
        ),
    ),
    Claim(
        OPS,
        rf"waits up to {T} while the dispatcher is making Jobs",
        (f"{STATUS_WRITER}:DEFER_FOR_JOBS",),
    ),
    Claim(
        OPS,
        rf"cannot be scheduled for more than {T} \(then its Job",
        ("achilles.domain.pod_outcome:START_DEADLINE",),
    ),
    Claim(
        OPS,
        rf"pass \(every {T}, over the Pending run pods",
        (f"{SWEEPER}:PENDING_PODS_EVERY",),
    ),
    Claim(OPS, rf"its run fails within about {T}", (_start_deadline_judged,)),
    Claim(
        OPS,
        rf"does not answer yet is retried every {T}",
        ("achilles.cli.operator:LOGIN_CHECK_RETRY_SECONDS",),
    ),
    Claim(
        OPS,
        rf"dead after (\d+) attempts .*?the listener reconnecting, every {T} \|",
        (
            "achilles.domain.notifications:MAX_ATTEMPTS",
            "achilles.handlers.controllers.notifier:NOTIFIER_TICK",
        ),
    ),
    Claim(
        OPS,
        rf"`RUN_SECRET_GRACE` \({T}\) ago and is still unclaimed",
        ("achilles.domain.pod_outcome:RUN_SECRET_GRACE",),
    ),
    # docs/tools.md: an MCP source's listings
    Claim(
        TOOLS,
        rf"the operator lists it again {T} later, then 2 s, 4 s, \.\.\. {T} at most",
        ("achilles.runtime.backoff:FIRST_DELAY", "achilles.runtime.backoff:MOST_DELAY"),
    ),
    Claim(
        TOOLS,
        rf"at the operator's start, then every {T} \(`ACHILLES_MCP_RELIST_SECONDS`",
        ("achilles.handlers.config:MCP_RELIST_EVERY",),
    ),
]


@cache
def page(name: str) -> str:
    """The page with its whitespace folded: a phrase matches however it is wrapped."""
    return " ".join((ROOT / name).read_text().split())


@pytest.mark.parametrize(
    "claim", CLAIMS, ids=[f"{c.page.split('/')[-1]}: {c.phrase[:48]}" for c in CLAIMS]
)
def test_each_figure_a_page_quotes_is_the_codes(claim: Claim) -> None:
    found = re.search(claim.phrase, page(claim.page))
    assert found is not None, (
        f"{claim.page} no longer says {claim.phrase!r}: reword this claim"
        " (tests/unit/test_docs_claims.py) with the page"
    )
    assert len(found.groups()) == len(claim.quotes), "one quoted constant per group"
    for text, quotes in zip(found.groups(), claim.quotes, strict=True):
        for source in quotes if isinstance(quotes, tuple) else (quotes,):
            name = source if isinstance(source, str) else source.__name__
            assert figure(text) == value(source), (
                f"{claim.page} says {text!r} where the code's {name} is {value(source):g}"
                f" (in {found.group(0)!r})"
            )


def _sources(*packages: str) -> list[Path]:
    return sorted(path for name in packages for path in (PACKAGE / name).rglob("*.py"))


def test_no_entry_point_opens_a_transaction() -> None:
    """docs/architecture.md: transactions belong to the services (and a run's stateful
    tools); the CLI, the handlers, the API, the runner and the runtime open none."""
    opening = re.compile(r"\.(transaction|reads|sessions)\(\)")
    found = [
        f"{path.relative_to(PACKAGE)}:{number}"
        for path in _sources("cli", "handlers", "api", "runner", "runtime")
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if opening.search(line) and not line.lstrip().startswith("#")
    ]
    assert found == []
    assert "no entry point opens one (cli, handlers, api, runner" in page(ARCH)


def test_no_kopf_error_is_raised() -> None:
    """docs/architecture.md: no failure reaches kopf (the runtime retries its own: a
    workqueue's re-add, a loop's backoff), and kopf hands over no object."""
    raised = {
        str(path.relative_to(PACKAGE)): set(re.findall(r"kopf\.(\w+Error)\b", path.read_text()))
        for path in _sources(".")
    }
    raised = {path: errors for path, errors in raised.items() if errors}
    assert raised == {}
    assert "no kopf error is raised" in page(ARCH)
    assert "PermanentError" not in page(ARCH)
    assert "TemporaryError" not in page(ARCH)


def _layer_block(name: str, start: str) -> str:
    text = (ROOT / name).read_text()
    begin = text.index(start)
    return text[begin : text.index("```", begin)]


def test_the_readme_and_architecture_name_every_layer() -> None:
    """Every package of `achilles` is in the README's layout and in the layers drawn in
    docs/architecture.md (a package added without them fails here)."""
    packages = sorted(
        path.parent.name for path in PACKAGE.glob("*/__init__.py") if path.parent.name
    )
    readme = _layer_block("README.md", "operator/achilles/ ")
    drawing = _layer_block(ARCH, "people: achilles CLI")
    for where, block in (("README.md's Layout", readme), (f"{ARCH}'s layers", drawing)):
        missing = [name for name in packages if not re.search(rf"\b{name}/", block)]
        assert missing == [], f"{where} does not name {missing}"
