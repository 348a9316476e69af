"""The control-plane build's bookkeeping: pinned versions, staging replaces, the warm path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from achilles.errors import LocalStackError
from achilles_dev import build
from achilles_dev.versions import (
    BINARIES,
    CONTROL_PLANE_BINARIES,
    NODE_BINARIES,
    Versions,
    bin_dir,
    load_versions,
)

PINNED = Versions(
    kubernetes="v1.37.2",
    etcd="v3.6.16",
    helm="v4.3.2",
    containerd="v2.3.7",
    cri_tools="v1.37.0",
    debian="bookworm",
)


def test_versions_file_pins_every_component() -> None:
    versions = load_versions()
    assert versions.kubernetes.startswith("v1.")
    assert versions.etcd.startswith(("v3.5.", "v3.6."))
    assert versions.helm.startswith(("v3.", "v4."))
    assert versions.containerd.startswith("v2.")  # kubelet >= 1.36 needs containerd 2.x
    assert versions.cri_tools.startswith("v1.")


def test_staging_modules_follow_the_kubernetes_minor() -> None:
    assert PINNED.kubernetes_staging == "v0.37.2"
    with pytest.raises(LocalStackError, match=r"v1\.X\.Y"):
        _ = Versions(
            kubernetes="2.0", etcd="", helm="", containerd="", cri_tools="", debian=""
        ).kubernetes_staging


def test_staging_replaces_are_read_from_the_kubernetes_go_mod(tmp_path: Path) -> None:
    go_mod = tmp_path / "go.mod"
    go_mod.write_text(
        "module k8s.io/kubernetes\n\nreplace (\n"
        "\tk8s.io/api => ./staging/src/k8s.io/api\n"
        "\tk8s.io/client-go => ./staging/src/k8s.io/client-go\n"
        "\tgithub.com/other/thing => github.com/fork/thing v1.0.0\n)\n"
    )
    assert build._staging_modules(go_mod) == ["k8s.io/api", "k8s.io/client-go"]


def test_warm_cache_builds_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACHILLES_CACHE_DIR", str(tmp_path))
    target = bin_dir(PINNED)
    assert sorted(build.missing_binaries(PINNED)) == sorted(BINARIES)
    target.mkdir(parents=True)
    for name in BINARIES:
        (target / name).write_text("binary")
    pinned = (
        {"etcd": "v3.6.16", "helm": "v4.3.2", "crictl": "v1.37.0"}
        | dict.fromkeys(
            ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"), "v1.37.2"
        )
        | dict.fromkeys(("kubelet", "kube-proxy"), "v1.37.2")
        | dict.fromkeys(("containerd", "containerd-shim-runc-v2", "ctr"), "v2.3.7")
    )
    assert set(pinned) == set(BINARIES)
    (target / ".built.json").write_text(json.dumps(pinned))
    monkeypatch.setattr(build, "go_binary", lambda: pytest.fail("a warm run must not call go"))

    lines: list[str] = []
    assert build.ensure_built(PINNED, report=lines.append) == target
    assert lines == [
        f"already built: {target} (kubernetes v1.37.2, etcd v3.6.16, helm v4.3.2, "
        "containerd v2.3.7, crictl v1.37.0)"
    ]


def test_a_stack_without_a_node_needs_only_the_control_plane(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACHILLES_CACHE_DIR", str(tmp_path))
    target = bin_dir(PINNED)
    target.mkdir(parents=True)
    for name in CONTROL_PLANE_BINARIES:
        (target / name).write_text("binary")
    versions = {b.name: b.version for b in build.components(PINNED, "")}
    (target / ".built.json").write_text(
        json.dumps({name: versions[name] for name in CONTROL_PLANE_BINARIES})
    )
    assert build.missing_binaries(PINNED, node=False) == []
    assert sorted(build.missing_binaries(PINNED)) == sorted(NODE_BINARIES)


def test_a_bumped_version_is_missing_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACHILLES_CACHE_DIR", str(tmp_path))
    target = bin_dir(PINNED)
    target.mkdir(parents=True)
    for name in BINARIES:
        (target / name).write_text("binary")
    (target / ".built.json").write_text(json.dumps(dict.fromkeys(BINARIES, "old")))
    assert sorted(build.missing_binaries(PINNED)) == sorted(BINARIES)


def test_lint_needs_helm_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`achilles dev build --only helm` builds helm and nothing else, without even looking
    up the Kubernetes release (that downloads the whole k8s.io/kubernetes module)."""
    monkeypatch.setenv("ACHILLES_CACHE_DIR", str(tmp_path))
    assert build.missing_binaries(PINNED, only={"helm"}) == ["helm"]
    built: list[str] = []

    def module_info(module: str, version: str, cwd: Path) -> dict[str, str]:
        pytest.fail(f"looked up {module}")

    def compile_(binary: build.GoBinary, src: Path, target: Path, report: build.Report) -> None:
        built.append(binary.name)
        target.write_text("binary")

    monkeypatch.setattr(build, "_module_info", module_info)
    monkeypatch.setattr(build, "_prepare_module", lambda binary, versions, src: None)
    monkeypatch.setattr(build, "_compile", compile_)
    monkeypatch.setattr(build, "_version_output", lambda binary, path: binary.version)

    build.ensure_built(PINNED, only={"helm"}, report=lambda line: None)
    assert built == ["helm"]
    assert build.missing_binaries(PINNED, only={"helm"}) == []
    lines: list[str] = []
    build.ensure_built(PINNED, only={"helm"}, report=lines.append)
    assert lines == [f"already built: helm in {bin_dir(PINNED)}"]
    with pytest.raises(LocalStackError, match="no such binary to build: hlem"):
        build.ensure_built(PINNED, only={"hlem"})
