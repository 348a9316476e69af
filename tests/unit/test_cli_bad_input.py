"""Every command of `achilles` fails the way the README promises: one `error:` line on
stderr, exit 2 for malformed input, exit 1 for a request that could not be carried out
(an unreachable database or cluster), and never a traceback.

The commands are found by walking the CLI itself, so a new command is swept without
anyone listing it; `WORKING_ARGUMENTS` gives each command that reaches a database or a
cluster arguments that would work, and a new one fails here until it has an entry.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from achilles.cli.common import DatabaseUrl, HttpEndpoint, UserKey, WholeNumber
from achilles.cli.db import Revision
from achilles.cli.main import cli
from tests.dead_cluster import write_kubeconfig

REPO = Path(__file__).resolve().parents[2]
DEMO_BUNDLE = str(REPO / "examples" / "knowledge" / "demo.yaml")
UNREACHABLE_DATABASE = "postgresql://nobody@127.0.0.1:1/none"
MALFORMED_DATABASE_URLS = (
    "garbage",
    "postgresql://u:secret@localhost:notaport/x",
    "mysql://u@localhost/x",
    "postgresql://u@localhost/x?sslmod=require",
)

# Arguments with which each command would do its work (given a database or a cluster),
# so that only the database URL or the cluster is what fails.
WORKING_ARGUMENTS: dict[str, tuple[str, ...]] = {
    "budget show": ("--owner", "alice"),
    "db login": ("runner", "achilles_runner_login"),
    "db current": (),
    "db downgrade": ("base",),
    "db upgrade": (),
    "inbox agent ack": ("1", "--serial", "1", "--outcome", "done"),
    "inbox agent advance": ("1", "--revision", "1", "--board-version", "1", "--state", "done"),
    "inbox agent ask": ("helper", "--key", "k", "--question", "Ship it?"),
    "inbox agent take": ("1",),
    "inbox approval": ("1",),
    "inbox approve": ("1",),
    "inbox list": (),
    "inbox reject": ("1", "--note", "not now"),
    "inbox reply": ("1", "--text", "yes"),
    "inbox show": ("1",),
    "inbox wake-on-reply": ("helper",),
    "ks language": ("german",),
    "ks load": (DEMO_BUNDLE,),
    "ks read": ("1", "--as", "alice"),
    "ks search": ("deploy", "--as", "alice"),
    "notifications list": (),
    "notifications retry": (),
    "runner": ("--run-id", "1"),
    "runs cancel": ("1",),
    "runs enqueue": ("helper",),
    "runs list": (),
    "runs show": ("1",),
    "users upsert": ("alice",),
}
# Commands that talk to the cluster only: arguments that would work with one.
CLUSTER_COMMANDS: dict[str, tuple[str, ...]] = {"run-now": ("default/helper",)}
# Not run with working arguments here: long-running servers, the checkout-only groups
# (the local stack would start one; the benchmarks and the fault suite are scaffolding
# with their own harness).
NOT_RUN = (
    "db roles",  # takes no input at all: test_db_roles_prints_each_components_role
    "api",
    "operator",
    "model-server",
    "crds generate",
    "schedule next",
    "dev ",
    "bench ",
    "chaos ",
)


def leaf_commands(
    group: click.Group = cli, path: tuple[str, ...] = ()
) -> Iterator[tuple[str, click.Command]]:
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None, name
        if isinstance(command, click.Group):
            yield from leaf_commands(command, (*path, name))
        else:
            yield " ".join((*path, name)), command


COMMANDS = dict(leaf_commands())
DATABASE_COMMANDS = sorted(
    name
    for name, command in COMMANDS.items()
    if any(p.name == "database_url" for p in command.params)
    and not name.startswith(("dev ", "bench ", "chaos "))
)


# What else a command reads to do its work (from the environment, never an argument).
WORKING_ENVIRONMENT: dict[str, str | None] = {
    "ACHILLES_DB_LOGIN_PASSWORD": "a-password-long-enough",
}


def run(args: list[str], env: dict[str, str | None] | None = None) -> Result:
    environment: dict[str, str | None] = {
        "ACHILLES_DATABASE_URL": None,
        "KUBECONFIG": None,
        **WORKING_ENVIRONMENT,
    }
    return CliRunner().invoke(cli, args, env={**environment, **(env or {})})


def assert_one_error_line(result: Result, code: int, starts: str = "error: ") -> str:
    assert isinstance(result.exception, SystemExit), (
        f"an exception escaped: {result.exception!r}\n{result.output}"
    )
    assert "Traceback" not in result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(starts), lines[0]
    assert "internal error" not in lines[0], lines[0]
    assert result.exit_code == code, (result.exit_code, lines[0])
    return lines[0]


def hint(param: click.Parameter) -> str:
    """The field as the user spells it."""
    if isinstance(param, click.Option):
        return max(param.opts, key=len)
    return param.human_readable_name


def malformed_value(param: click.Parameter, tmp_path: Path) -> tuple[str, str] | None:
    """A value this parameter must refuse, and the start of the problem it must name."""
    kind = param.type
    if isinstance(kind, click.types.IntParamType):
        return "abc", "must be a whole number (got 'abc')"
    if isinstance(kind, click.types.FloatParamType):
        return "soon", "must be a number"
    if isinstance(kind, click.Choice):
        return "bogus", "'bogus' is not one of"
    if isinstance(kind, DatabaseUrl):
        return "garbage", "not a PostgreSQL URL"
    if isinstance(kind, Revision):
        return "bogus", "unknown revision 'bogus'"
    if isinstance(kind, UserKey):
        return "bad key", "a user key starts with a letter or digit"
    if isinstance(kind, HttpEndpoint):
        return "garbage", "must be an http://HOST:PORT/PATH URL"
    if isinstance(kind, click.Path) and kind.exists:
        return str(tmp_path / "missing"), "does not exist"
    return None


def argument_prefix(command: click.Command, param: click.Parameter) -> list[str]:
    """Values for the positional arguments before `param` (they come first)."""
    values = []
    for other in command.params:
        if other is param:
            break
        if isinstance(other, click.Argument):
            values.append("1" if isinstance(other.type, WholeNumber) else "x")
    return values


MALFORMED_CASES = [
    pytest.param(name, param.name, id=f"{name} {hint(param)}")
    for name, command in COMMANDS.items()
    for param in command.params
    if malformed_value(param, Path("/nonexistent")) is not None
]


@pytest.mark.parametrize(("name", "param_name"), MALFORMED_CASES)
def test_a_malformed_value_is_one_line_naming_the_field(
    name: str, param_name: str, tmp_path: Path
) -> None:
    command = COMMANDS[name]
    (param,) = [p for p in command.params if p.name == param_name]
    value, problem = malformed_value(param, tmp_path) or ("", "")
    given = (
        [*argument_prefix(command, param), value]
        if isinstance(param, click.Argument)
        else [
            *argument_prefix(command, param),
            hint(param),
            value,
        ]
    )
    if isinstance(param, click.Option) and param.is_flag:
        pytest.skip("a flag takes no value")
    line = assert_one_error_line(run([*name.split(), *given]), 2)
    assert line.startswith(f"error: {hint(param)}: "), line
    assert problem in line, line


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_an_unknown_option_is_one_line(name: str) -> None:
    line = assert_one_error_line(run([*name.split(), "--no-such-option"]), 2)
    assert line.startswith("error: --no-such-option: no such option"), line


REQUIRING = sorted(
    name
    for name, command in COMMANDS.items()
    if any(p.required and p.name != "database_url" for p in command.params)
)


@pytest.mark.parametrize("name", REQUIRING)
def test_a_missing_required_parameter_is_one_line(name: str) -> None:
    result = run(name.split(), env={"ACHILLES_DATABASE_URL": UNREACHABLE_DATABASE})
    line = assert_one_error_line(result, 2)
    assert line.endswith(": required"), line


def test_every_database_command_has_working_arguments() -> None:
    assert sorted(WORKING_ARGUMENTS) == DATABASE_COMMANDS


@pytest.mark.parametrize("name", DATABASE_COMMANDS)
@pytest.mark.parametrize("url", MALFORMED_DATABASE_URLS)
def test_a_malformed_database_url_is_one_line(name: str, url: str) -> None:
    args = [*name.split(), *WORKING_ARGUMENTS[name]]
    given = assert_one_error_line(run([*args, "--database-url", url]), 2)
    assert given.startswith("error: --database-url: "), given
    assert "secret" not in given  # a password is never echoed
    from_env = assert_one_error_line(run(args, env={"ACHILLES_DATABASE_URL": url}), 2)
    assert from_env.startswith("error: ACHILLES_DATABASE_URL: "), from_env


@pytest.mark.parametrize("name", DATABASE_COMMANDS)
def test_a_missing_database_url_says_how_to_give_one(name: str) -> None:
    line = assert_one_error_line(run([*name.split(), *WORKING_ARGUMENTS[name]]), 2)
    assert "ACHILLES_DATABASE_URL" in line
    assert "postgresql+psycopg://" in line  # the scheme the docs use


@pytest.mark.parametrize("name", DATABASE_COMMANDS)
def test_an_unreachable_database_is_one_line_exit_1(name: str) -> None:
    args = [*name.split(), *WORKING_ARGUMENTS[name], "--database-url", UNREACHABLE_DATABASE]
    line = assert_one_error_line(run(args), 1)
    assert line.startswith("error: database unreachable: "), line


@pytest.mark.parametrize("name", sorted(CLUSTER_COMMANDS))
def test_an_unreachable_cluster_is_one_line_exit_1(name: str, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
    )
    args = [*name.split(), *CLUSTER_COMMANDS[name], "--kubeconfig", str(kubeconfig)]
    assert_one_error_line(run(args), 1)
    missing = [*name.split(), *CLUSTER_COMMANDS[name], "--kubeconfig", str(tmp_path / "none")]
    assert_one_error_line(run(missing), 1)


def test_every_command_is_swept() -> None:
    """A command is either run with working arguments above or named as not run."""
    unswept = [
        name
        for name in COMMANDS
        if name not in WORKING_ARGUMENTS
        and name not in CLUSTER_COMMANDS
        and not any(name == n.strip() or name.startswith(n) for n in NOT_RUN)
    ]
    assert unswept == []


def test_a_busy_port_is_one_line_exit_1() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = assert_one_error_line(run(["model-server", "--port", str(port)]), 1)
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in line


def test_the_operator_refuses_bad_settings_in_one_line() -> None:
    missing = assert_one_error_line(run(["operator"]), 2)
    assert "ACHILLES_DATABASE_URL" in missing
    malformed = run(["operator"], env={"ACHILLES_DATABASE_URL": "garbage"})
    assert "ACHILLES_DATABASE_URL" in assert_one_error_line(malformed, 2)
    bad_json = run(
        ["operator"],
        env={"ACHILLES_DATABASE_URL": UNREACHABLE_DATABASE, "ACHILLES_RUNNER_ENV": "{oops"},
    )
    assert "ACHILLES_RUNNER_ENV" in assert_one_error_line(bad_json, 2)


@pytest.mark.parametrize(
    ("variable", "value", "problem"),
    [
        ("ACHILLES_RUNNER_ENV", "[1]", "must be a JSON object (got '[1]')"),
        ("ACHILLES_RUNNER_RESOURCES", '"1Gi"', "must be a JSON object (got '\"1Gi\"')"),
        ("ACHILLES_RUNNER_TTL_SECONDS", "abc", "must be a whole number (got 'abc')"),
        ("ACHILLES_RUNNER_TTL_SECONDS", "-1", "must be at least 0 (got -1)"),
        ("ACHILLES_METRICS_PORT", "99999", "must be between 0 and 65535 (got 99999)"),
        ("ACHILLES_STALE_AFTER_SECONDS", "0", "must be at least 1 (got 0)"),
        ("ACHILLES_START_DEADLINE_SECONDS", "soon", "must be a whole number (got 'soon')"),
    ],
)
def test_each_operator_setting_is_checked_before_start(
    variable: str, value: str, problem: str, tmp_path: Path
) -> None:
    env: dict[str, str | None] = {
        "ACHILLES_DATABASE_URL": UNREACHABLE_DATABASE,
        "KUBECONFIG": str(write_kubeconfig(tmp_path / "kubeconfig")),
        variable: value,
    }
    line = assert_one_error_line(run(["operator"], env=env), 2)
    assert line == f"error: {variable}: {problem}", line


def run_operator_process(env: dict[str, str]) -> str:
    """The real `achilles operator` process, which must stop at once with one line (exit 1).

    A process of its own because the kubernetes client reads KUBECONFIG when first
    imported, so an in-process run would see whatever an earlier test left there.
    """
    environment = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ACHILLES_", "KUBERNETES_")) and k != "KUBECONFIG"
    }
    done = subprocess.run(
        [str(Path(sys.executable).with_name("achilles")), "operator", "--liveness", ""],
        env={**environment, "ACHILLES_DATABASE_URL": UNREACHABLE_DATABASE, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "Traceback" not in done.stderr
    (line,) = done.stderr.splitlines()
    assert done.returncode == 1, line
    return line


def test_the_operator_without_a_cluster_is_one_line_exit_1(tmp_path: Path) -> None:
    """No kubeconfig and not in a pod: said once, not a start-up kopf retries every minute."""
    line = run_operator_process({"KUBECONFIG": str(tmp_path / "none")})
    assert line.startswith("error: no Kubernetes cluster is configured"), line


def test_the_operator_on_a_busy_metrics_port_is_one_line_exit_1(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))  # where the metrics server listens
        taken.listen()
        port = taken.getsockname()[1]
        line = run_operator_process(
            {
                "KUBECONFIG": str(write_kubeconfig(tmp_path / "kubeconfig")),
                "ACHILLES_METRICS_PORT": str(port),
            }
        )
    assert line.startswith(f"error: cannot serve metrics on port {port}: Address already in use")


def test_an_unexpected_error_is_one_line_saying_it_is_a_bug(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*_: object, **__: object) -> None:
        raise KeyError("boom")

    monkeypatch.setattr("achilles.services.journal_reads.runs_page", broken)
    result = run(["runs", "list", "--database-url", UNREACHABLE_DATABASE])
    assert isinstance(result.exception, SystemExit)
    assert result.exit_code == 1
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: internal error (KeyError: 'boom'); this is a bug"), line


@pytest.mark.parametrize(
    ("args", "env", "code", "needle"),
    [
        (["runs", "list"], {"ACHILLES_DATABASE_URL": "garbage"}, 2, "ACHILLES_DATABASE_URL: "),
        (["db", "upgrade", "bogus", "--database-url", UNREACHABLE_DATABASE], {}, 2, "REVISION: "),
        (["runs", "show", "abc"], {}, 2, "RUN_ID: must be a whole number (got 'abc')"),
    ],
)
def test_the_console_script_itself(
    args: list[str], env: dict[str, str], code: int, needle: str
) -> None:
    """The real process, as a user runs it (the sweep above runs the commands in-process)."""
    environment = {k: v for k, v in os.environ.items() if k != "ACHILLES_DATABASE_URL"}
    done = subprocess.run(
        [str(Path(sys.executable).with_name("achilles")), *args],
        env={**environment, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == code, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("error: "), line
    assert needle in line, line


def test_db_login_without_a_password_says_where_it_comes_from() -> None:
    args = ["db", "login", "runner", "achilles_runner_login", "--database-url"]
    result = run([*args, UNREACHABLE_DATABASE], env={"ACHILLES_DB_LOGIN_PASSWORD": None})
    line = assert_one_error_line(result, 2)
    assert "ACHILLES_DB_LOGIN_PASSWORD" in line, line


def test_db_roles_prints_each_components_role() -> None:
    result = run(["db", "roles"])
    assert result.exit_code == 0, result.output
    rows = result.output.splitlines()[1:]
    assert [row.split()[:2] for row in rows] == [
        ["operator", "achilles_operator"],
        ["runner", "achilles_runner"],
        ["api", "achilles_api"],
    ]
