"""`achilles schedule next`: output shapes, exit codes and one-line errors."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from achilles.cli.main import cli

BERLIN_DAILY_0230 = '{"type":"calendar","cadence":"daily","time":"02:30"}'


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, ["schedule", "next", *args])


def test_json_output_on_a_spring_gap() -> None:
    result = run(
        "--schedule", BERLIN_DAILY_0230,
        "--timezone", "Europe/Berlin",
        "--after", "2026-03-28T12:00:00Z",
        "--count", "3",
        "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == [
        {"utc": "2026-03-29T01:00:00Z", "local": "2026-03-29T03:00:00+02:00"},
        {"utc": "2026-03-30T00:30:00Z", "local": "2026-03-30T02:30:00+02:00"},
        {"utc": "2026-03-31T00:30:00Z", "local": "2026-03-31T02:30:00+02:00"},
    ]


def test_cr_spelling_and_half_hour_zone() -> None:
    result = run(
        "--schedule", '{"type":"interval","everyHours":12}',
        "--timezone", "Asia/Kolkata",
        "--after", "2026-01-01T00:00:00+05:30",
        "--count", "2",
        "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == [
        {"utc": "2026-01-01T06:30:00Z", "local": "2026-01-01T12:00:00+05:30"},
        {"utc": "2026-01-01T18:30:00Z", "local": "2026-01-02T00:00:00+05:30"},
    ]


def test_interval_anchor_option_places_the_grid() -> None:
    result = run(
        "--schedule", '{"type":"interval","every_hours":6}',
        "--after", "2026-01-01T13:00:00Z",
        "--anchor", "2026-01-01T00:00:00Z",
        "--count", "2",
        "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert [row["utc"] for row in json.loads(result.stdout)] == [
        "2026-01-01T18:00:00Z",
        "2026-01-02T00:00:00Z",
    ]


def test_naive_after_is_a_wall_time_in_the_given_zone() -> None:
    result = run(
        "--schedule", '{"type":"calendar","cadence":"weekly","weekday":0,"time":"09:00"}',
        "--timezone", "America/New_York",
        "--after", "2026-03-02T09:00",  # Monday 09:00 EST itself: strictly after it
        "--count", "1",
        "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == [
        {"utc": "2026-03-09T13:00:00Z", "local": "2026-03-09T09:00:00-04:00"}
    ]


def test_default_after_is_now_and_count_defaults_to_five() -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    result = run("--schedule", '{"type":"interval","every_hours":1}', "--json")
    after = datetime.now(UTC)
    assert result.exit_code == 0, result.stderr
    slots = [datetime.fromisoformat(row["utc"]) for row in json.loads(result.stdout)]
    assert len(slots) == 5
    assert before + timedelta(hours=1) <= slots[0] <= after + timedelta(hours=1)


def test_table_output_shows_local_and_utc_and_explains_a_shift() -> None:
    result = run(
        "--schedule", BERLIN_DAILY_0230,
        "--timezone", "Europe/Berlin",
        "--after", "2026-03-28T12:00:00Z",
        "--count", "2",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    header, shifted, regular = result.stdout.splitlines()
    assert header.split() == ["#", "LOCAL", "UTC", "NOTE"]
    assert "2026-03-29T03:00:00+02:00 Sun" in shifted
    assert "2026-03-29T01:00:00Z" in shifted
    assert "02:30 does not exist that day" in shifted
    assert "2026-03-30T02:30:00+02:00 Mon" in regular
    assert "does not exist" not in regular


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--schedule", '{"type":"calendar","cadence":"daily","time":"24:00"}'],
            "error: schedule.time: must be HH:MM within 00:00-23:59 (got '24:00')",
        ),
        (
            ["--schedule", '{"type":"interval","every_hours":0}'],
            "error: schedule.every_hours: must be greater than or equal to 1 (got 0)",
        ),
        (
            ["--schedule", '{"type":"hourly"}'],
            "error: schedule.type: must be one of 'interval', 'calendar' (got 'hourly')",
        ),
        (
            ["--schedule", '{"type":"interval","every_hours":1'],
            "error: --schedule: invalid JSON: Expecting ',' delimiter: line 1 column 35 (char 34)",
        ),
        (
            ["--schedule", '{"type":"interval","every_hours":1}', "--timezone", "Europe/Berln"],
            "error: --timezone: unknown time zone 'Europe/Berln' "
            "(expected an IANA name like 'Europe/Berlin')",
        ),
        (
            ["--schedule", '{"type":"interval","every_hours":1}', "--after", "tomorrow"],
            "error: --after: not an ISO 8601 date-time (got 'tomorrow'; e.g. 2026-03-29T01:00:00Z)",
        ),
        (
            ["--schedule", '{"type":"interval","every_hours":1}', "--anchor", "2026-13-01"],
            "error: --anchor: not an ISO 8601 date-time "
            "(got '2026-13-01'; e.g. 2026-03-29T01:00:00Z)",
        ),
        (
            ["--schedule", '{"type":"interval","every_hours":1}', "--count", "0"],
            "error: --count: must be between 1 and 1000 (got 0)",
        ),
        (
            ["--schedule", '{"type":"interval","every_hours":1}', "--count", "1001"],
            "error: --count: must be between 1 and 1000 (got 1001)",
        ),
        (["--count", "2"], "error: --schedule: required"),
        (
            [
                "--schedule", '{"type":"interval","every_hours":720}',
                "--after", "9999-12-01T00:00:00Z",
                "--count", "3",
            ],
            "error: --after: 3 slots after 9999-12-01T00:00:00+00:00 fall outside years 1-9999",
        ),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_with_exit_code_2(args: list[str], message: str) -> None:
    result = run(*args)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == message + "\n"


def test_console_script_end_to_end() -> None:
    """The installed entry point, as an operator types it: stdout JSON, stderr errors."""
    achilles = [str(Path(sys.executable).with_name("achilles"))]
    ok = subprocess.run(
        [*achilles, "schedule", "next",
         "--schedule", '{"type":"calendar","cadence":"daily","time":"02:15"}',
         "--timezone", "Australia/Lord_Howe", "--after", "2026-10-03T12:00:00+10:30",
         "--count", "1", "--json"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout) == [
        {"utc": "2026-10-03T15:30:00Z", "local": "2026-10-04T02:30:00+11:00"}
    ]
    bad = subprocess.run(
        [*achilles, "schedule", "next", "--schedule", '{"type":"interval","everyHours":721}'],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert bad.returncode == 2
    assert bad.stderr.splitlines() == [
        "error: schedule.everyHours: must be less than or equal to 720 (got 721)"
    ]


def _console_examples(markdown: str) -> list[tuple[str, str]]:
    """(command, expected output) pairs from the ```console blocks of a document."""
    examples: list[tuple[str, str]] = []
    for block in re.findall(r"```console\n(.*?)```", markdown, flags=re.DOTALL):
        for chunk in re.split(r"^\$ ", block, flags=re.MULTILINE)[1:]:
            command, _, output = chunk.replace("\\\n", " ").partition("\n")
            examples.append((command, output.strip("\n") + "\n"))
    return examples


DOCS_SCHEDULE = Path(__file__).parents[2] / "docs" / "schedule.md"


@pytest.mark.parametrize(
    ("command", "expected"), _console_examples(DOCS_SCHEDULE.read_text(encoding="utf-8"))
)
def test_docs_examples_print_what_the_docs_show(command: str, expected: str) -> None:
    program, group, *args = shlex.split(command)
    assert (program, group) == ("achilles", "schedule")
    result = CliRunner().invoke(cli, [group, *args])
    assert result.exit_code == 0, result.stderr
    assert result.stdout == expected
