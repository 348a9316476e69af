"""Who owns the platform settings: the Helm release by default, kubectl after a handover.

The README's `kubectl apply -f examples/` used to apply the chart's own
AgentPlatform/default, and the next `helm upgrade` failed on the field conflict. Now the
examples leave that object alone, the release's policy refuses kubectl's changes to it
with a message saying what to do, and `platform.create=false` hands it over to kubectl
(the object stays) and back.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
import yaml

from achilles_dev.chart import CHART_DIR, RELEASE, RELEASE_NAMESPACE
from achilles_dev.versions import bin_dir
from tests.cluster.conftest import Cluster
from tests.cluster.install.api import Achilles
from tests.cluster.install.conftest import Release, wait_until_platform_owner_enforces
from tests.crd_cases import EXAMPLES_DIR
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

OWNED = "AgentPlatform/default belongs to the Helm release achilles-system/achilles"
HANDOVER_EXAMPLE = EXAMPLES_DIR / "platform" / "agentplatform.yaml"


def kubectl(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(bin_dir() / "kubectl"), "--kubeconfig", str(cluster.kubeconfig), *args],
        capture_output=True,
        text=True,
        check=False,
    )


def upgrade(release: Release, *settings: str) -> str:
    """`helm upgrade` of the session's release with its values, plus `settings`."""
    args = ["upgrade", RELEASE, str(CHART_DIR), "--namespace", RELEASE_NAMESPACE]
    args += ["--values", str(release.values_file), "--timeout", "3m", *settings]
    return release.helm(*args)


def release_status(release: Release) -> str:
    history = yaml.safe_load(
        release.helm("history", RELEASE, "-n", RELEASE_NAMESPACE, "-o", "yaml")
    )
    return str(history[-1]["status"])


@pytest.fixture
def examples_applied(cluster: Cluster, achilles_release: Release) -> Iterator[None]:
    """`kubectl apply -f examples/`, exactly as the README says (namespace default)."""
    applied = kubectl(cluster, "apply", "-f", str(EXAMPLES_DIR))
    assert applied.returncode == 0, applied.stderr
    yield
    kubectl(cluster, "delete", "-f", str(EXAMPLES_DIR), "--ignore-not-found")


def test_the_readmes_kubectl_apply_leaves_the_next_helm_upgrade_working(
    examples_applied: None, achilles_release: Release, admin_api: Achilles
) -> None:
    upgrade(achilles_release)
    assert release_status(achilles_release) == "deployed"
    assert admin_api.get("AgentPlatform", "default")["spec"]["timezone"] == "UTC"


@pytest.mark.parametrize(
    "change",
    [
        ("patch", "agentplatform", "default", "--type=merge", "-p", '{"spec":{"maxIterations":3}}'),
        ("apply", "-f", str(HANDOVER_EXAMPLE)),
        ("apply", "--server-side", "--force-conflicts", "-f", str(HANDOVER_EXAMPLE)),
        ("delete", "agentplatform", "default"),
    ],
    ids=["patch", "apply", "server-side-apply", "delete"],
)
def test_kubectl_cannot_change_the_releases_platform_and_is_told_what_to_do(
    cluster: Cluster, achilles_release: Release, admin_api: Achilles, change: tuple[str, ...]
) -> None:
    before = admin_api.get("AgentPlatform", "default")
    refused = kubectl(cluster, *change)
    assert refused.returncode != 0
    assert OWNED in refused.stderr
    assert "helm upgrade" in refused.stderr
    assert "platform.create=false" in refused.stderr
    after = admin_api.get("AgentPlatform", "default")
    assert (after["metadata"]["uid"], after["spec"]) == (before["metadata"]["uid"], before["spec"])


def test_metadata_and_status_stay_writable(
    cluster: Cluster, achilles_release: Release, admin_api: Achilles
) -> None:
    """The operator writes status; people may label and annotate."""
    annotated = kubectl(cluster, "annotate", "agentplatform", "default", "example.org/note=hi")
    assert annotated.returncode == 0, annotated.stderr
    kubectl(cluster, "annotate", "agentplatform", "default", "example.org/note-")
    admin_api.patch_status("AgentPlatform", "default", {"observedGeneration": 1})


def test_handover_to_kubectl_and_back(
    cluster: Cluster, achilles_release: Release, admin_api: Achilles
) -> None:
    uid = admin_api.get("AgentPlatform", "default")["metadata"]["uid"]
    try:
        upgrade(achilles_release, "--set", "platform.create=false")
        kept = admin_api.get("AgentPlatform", "default")
        assert kept["metadata"]["uid"] == uid  # the object stayed, with its settings
        assert kept["spec"]["timezone"] == "UTC"

        # The API server stops enforcing the removed policy within seconds.
        def handed_over() -> bool:
            probe = kubectl(cluster, "apply", "--dry-run=server", "-f", str(HANDOVER_EXAMPLE))
            return probe.returncode == 0

        wait_for(handed_over, timeout=30, what="the platform-owner policy to be gone")
        applied = kubectl(cluster, "apply", "-f", str(HANDOVER_EXAMPLE))
        assert applied.returncode == 0, applied.stderr
        upgrade(achilles_release, "--set", "platform.create=false")  # Helm leaves it alone
        assert release_status(achilles_release) == "deployed"
        assert admin_api.get("AgentPlatform", "default")["spec"]["timezone"] == "Europe/Berlin"
    finally:
        upgrade(achilles_release, "--set", "platform.create=true", "--force-conflicts")
    back = admin_api.get("AgentPlatform", "default")
    assert back["metadata"]["uid"] == uid
    assert back["spec"]["timezone"] == "UTC"
    wait_until_platform_owner_enforces(cluster.kubeconfig)  # the policy is back
