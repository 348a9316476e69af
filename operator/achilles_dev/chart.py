"""Install the Helm chart into a local control plane, as an operator of a real cluster would.

`achilles dev up` ends here, so the local stack has exactly what `helm install` gives a
real cluster: the CRDs, RBAC, admission policies, the runs namespace with its quota,
AgentPlatform/default, and the schema migrations, which run as the chart's pre-install
hook Job, the operator Deployment and the API's (`achilles api` and the web inbox, two
replicas behind a NodePort Service the host's curl and browser reach) under their
ServiceAccounts and RBAC — all from the engine image on the real node. A stack without a
node (a benchmark's) gets the chart without its image: its objects, no Deployment.

Helm installs `crds/` on first install only, so CRDs are applied server-side first,
every time: a developer who changed the models and ran `achilles crds generate` gets
the new schema on the next `dev up`. The same steps upgrade CRDs on a real cluster.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from achilles.errors import LocalStackError
from achilles_dev.admission import wait_until_policies_admit
from achilles_dev.chart_secrets import (
    API_DATABASE_SECRET,
    DATABASE_SECRET,
    MIGRATIONS_DATABASE_SECRET,
    RUNNER_DATABASE_SECRET,
    ensure_api_secrets,
    ensure_namespace,
    ensure_secret,
)
from achilles_dev.chart_values import LocalApi, local_values, stack_api

if TYPE_CHECKING:
    from achilles_dev.logins import ComponentLogins
    from achilles_dev.stack import LocalStack

# operator/achilles/local/chart.py -> the repository root (an editable checkout).
CHART_DIR = Path(__file__).resolve().parents[2] / "charts" / "achilles"
RELEASE = "achilles"
RELEASE_NAMESPACE = "achilles-system"
FIELD_MANAGER = "achilles-dev"
_HELM_TIMEOUT = "5m"

Report = Callable[[str], None]


@dataclass(frozen=True)
class ChartInstall:
    """One `helm upgrade --install` of the chart: where, with what."""

    kubeconfig: Path
    bin_dir: Path
    chart: Path = CHART_DIR
    release: str = RELEASE
    namespace: str = RELEASE_NAMESPACE
    values: Mapping[str, Any] = field(default_factory=dict)
    # Extra environment for helm, e.g. HELM_CACHE_HOME to keep a test's state private.
    helm_env: Mapping[str, str] = field(default_factory=dict)

    def helm(self, *args: str) -> str:
        argv = [str(self.bin_dir / "helm"), "--kubeconfig", str(self.kubeconfig), *args]
        return _run(argv, self.helm_env)

    def kubectl(self, *args: str) -> str:
        return _run([str(self.bin_dir / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args])

    def release_status(self) -> ReleaseStatus | None:
        return release_status(
            self.kubeconfig, self.bin_dir, self.release, self.namespace, helm_env=self.helm_env
        )


def apply_crds(install: ChartInstall) -> None:
    """Server-side apply of the chart's CRDs (Helm itself never upgrades `crds/`)."""
    install.kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        f"--field-manager={FIELD_MANAGER}",
        "-f",
        str(install.chart / "crds"),
    )
    install.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s", "-f", str(install.chart / "crds")
    )


def install_chart(install: ChartInstall, *, extra_args: tuple[str, ...] = ()) -> str:
    """`helm upgrade --install` with `install.values`; returns Helm's output once the
    release's admission policies judge (see `wait_until_policies_admit`)."""
    if not (install.chart / "Chart.yaml").is_file():
        raise LocalStackError(f"no Helm chart at {install.chart} (run from a source checkout)")
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix="achilles-values-") as values:
        yaml.safe_dump(dict(install.values), values)
        values.flush()
        output = install.helm(
            "upgrade",
            "--install",
            install.release,
            str(install.chart),
            "--namespace",
            install.namespace,
            "--create-namespace",
            "--values",
            values.name,
            "--timeout",
            _HELM_TIMEOUT,
            *extra_args,
        )
    wait_until_policies_admit(install.kubeconfig)
    return output


@dataclass(frozen=True)
class ReleaseStatus:
    """What Helm records of a release: `state` is deployed, failed, pending-install, ..."""

    name: str
    namespace: str
    revision: int
    state: str
    description: str
    manifest: str


def release_status(
    kubeconfig: Path,
    bin_dir: Path,
    release: str = RELEASE,
    namespace: str = RELEASE_NAMESPACE,
    *,
    helm_env: Mapping[str, str] | None = None,
) -> ReleaseStatus | None:
    """The release's last revision, or None when there is none."""
    argv = [str(bin_dir / "helm"), "--kubeconfig", str(kubeconfig)]
    argv += ["status", release, "--namespace", namespace, "--output", "json"]
    done = subprocess.run(
        argv, capture_output=True, text=True, check=False, env={**os.environ, **(helm_env or {})}
    )
    if done.returncode != 0:
        if "not found" in done.stderr:
            return None
        raise LocalStackError(f"`helm status {release}` failed: {done.stderr.strip()}")
    document = json.loads(done.stdout)
    info = document.get("info", {})
    return ReleaseStatus(
        name=release,
        namespace=namespace,
        revision=int(document.get("version", 0)),
        state=str(info.get("status", "unknown")),
        description=str(info.get("description", "")),
        manifest=str(document.get("manifest", "")),
    )


def recover_release(install: ChartInstall, report: Report) -> None:
    """Make a release that an interrupted or failed `helm` left behind upgradable again.

    A failed release upgrades as it is. One left pending (helm killed mid-way) refuses
    every upgrade ("another operation is in progress") until it is rolled back, or, if it
    never got installed, removed: nothing else works on it in this stack.
    """
    status = install.release_status()
    if status is None or status.state in ("deployed", "failed", "superseded"):
        return
    where = f"{install.namespace}/{install.release}"
    if status.state in ("pending-upgrade", "pending-rollback") and status.revision > 1:
        report(f"chart: release {where} was left {status.state}; rolling back first")
        install.helm("rollback", install.release, "--namespace", install.namespace, "--wait")
    else:
        report(f"chart: release {where} was left {status.state}; removing it first")
        install.helm("uninstall", install.release, "--namespace", install.namespace, "--wait")


def _run(argv: list[str], env: Mapping[str, str] | None = None) -> str:
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, **(env or {})},
        )
    except OSError as error:
        raise LocalStackError(f"cannot run {argv[0]}: {error}") from error
    if done.returncode != 0:
        command = " ".join(Path(argv[0]).name if i == 0 else a for i, a in enumerate(argv))
        raise LocalStackError(
            f"`{command}` failed (exit {done.returncode}): {done.stderr.strip() or done.stdout}"
        )
    return done.stdout


def install_local_chart(
    kubeconfig: Path,
    bin_dir: Path,
    *,
    database: ComponentLogins | None,
    report: Report,
    image: str | None = None,
    api: LocalApi | None = None,
) -> None:
    """What `achilles dev up` installs: the chart (with the operator and API Deployments
    on a real node).

    With a database, each login's URL (as pods reach it) goes into its Secret: the
    migrations' (the hook Job migrates the schema), the operator's, the API's and, in
    the runs namespace, the runner's; without one, no hook. With `api`, the API's web
    client and session secrets too.
    """
    install = ChartInstall(kubeconfig=kubeconfig, bin_dir=bin_dir)
    apply_crds(install)
    if database is not None:
        ensure_namespace(kubeconfig, install.namespace)
        for name, url in (
            (MIGRATIONS_DATABASE_SECRET, database.migrations),
            (DATABASE_SECRET, database.operator),
            (API_DATABASE_SECRET, database.api),
        ):
            ensure_secret(kubeconfig, install.namespace, name, url)
    stack_values = local_values(with_database=database is not None, image=image, api=api)
    if stack_values["api"]["enabled"]:
        ensure_api_secrets(kubeconfig, install.namespace)
    recover_release(install, report)
    # Every `dev up` applies the chart, whatever the release's state: a failed or missing
    # release is installed again and a deleted object (AgentPlatform/default) recreated.
    # What the user set on the release (`helm upgrade --reuse-values --set platform.*`, or
    # the handover `platform.create=false`) stays: only the stack's own keys are replaced.
    install = replace(install, values=merged_values(user_values(install), stack_values))
    install_chart(install, extra_args=("--force-conflicts",))
    if database is not None:
        runs = _runs_namespace(install)
        ensure_secret(kubeconfig, runs, RUNNER_DATABASE_SECRET, database.runner)
    deployments = [name for name in ("operator", "api") if install.values[name]["enabled"]]
    report(
        f"chart: release {install.release} in namespace {install.namespace} "
        f"(CRDs, RBAC, admission policies, runs namespace, AgentPlatform/default"
        f"{', migrations' if database else ''}"
        f"{'; ' + ' and '.join(deployments) + ' Deployments' if deployments else ''})"
    )
    if api is not None and install.values["api"]["enabled"]:
        wait_until_api_answers(api.public_url)
        report(f"api: {api.public_url} (the web inbox at /, sign in as any user key)")


def user_values(install: ChartInstall) -> dict[str, Any]:
    """The values the release was given (`helm get values`: user-supplied only); {} when
    there is no release yet."""
    status = install.release_status()
    if status is None:
        return {}
    supplied = yaml.safe_load(
        install.helm("get", "values", "-o", "yaml", "-n", install.namespace, install.release)
    )
    return dict(supplied) if isinstance(supplied, dict) else {}


def merged_values(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """`override` over `base`, merging nested mappings key by key (as Helm merges values
    files), so that overriding `operator.enabled` keeps a user's other `operator.*`."""
    merged = dict(base)
    for key, value in override.items():
        below = merged.get(key)
        if isinstance(value, Mapping) and isinstance(below, Mapping):
            merged[key] = merged_values(below, value)
        else:
            merged[key] = value
    return merged


def _runs_namespace(install: ChartInstall) -> str:
    values = yaml.safe_load(
        install.helm(
            "get", "values", "--all", "-o", "yaml", "-n", install.namespace, install.release
        )
    )
    return str(values["runsNamespace"]["name"])


# A first start pulls nothing (the image is on the node) but waits for the migrations and
# two pods' probes; a machine busy building can take a while.
_API_START_TIMEOUT_S = 180.0


def wait_until_api_answers(url: str, *, timeout: float = _API_START_TIMEOUT_S) -> None:
    """Return once `url`/readyz answers 200 from here (the host): a pod is ready and the
    Service's node port forwards to it."""
    import httpx

    from achilles_dev.waiting import wait_until

    def ready() -> bool:
        try:
            return httpx.get(f"{url}/readyz", timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(ready, timeout=timeout, what=f"the API at {url}/readyz", interval=0.5)


def install_into_stack(stack: LocalStack) -> None:
    """`achilles dev up`'s last step: the chart into the running stack, each component
    with its own database login (`achilles_dev.logins`)."""
    from achilles_dev.images import ENGINE_IMAGE
    from achilles_dev.logins import stack_logins
    from achilles_dev.versions import bin_dir

    database = None
    if stack.with_postgres:
        database = stack_logins(stack.config).on_host(stack.config.apiserver_host)
    install_local_chart(
        stack.config.kubeconfig,
        bin_dir(),
        database=database,
        report=stack.report,
        image=ENGINE_IMAGE if stack.config.real_node else None,
        api=stack_api(stack),
    )
