"""A kind node image built here, without a registry, and how kind runs it with podman.

kind's node image (`kindest/node`) normally comes from a registry. Here it is built from
what the local stack already builds, into the same podman store (`achilles_dev.podman_store`):

* the **control-plane images** kubeadm names (`kubeadm config images list`):
  `registry.k8s.io/kube-apiserver`, `-controller-manager`, `-scheduler` (`FROM scratch`
  with the static binaries), `kube-proxy` (the local Debian base with iptables and
  conntrack), `etcd` (the pinned etcd, its tag `3.6.X-0` given to kubeadm by the cluster
  config), `coredns/coredns` and `pause` (the local stack's pause image, retagged);
* the **node base**: kind's own base recipe (`kind_node/Containerfile.base`) with kind's
  files from the pinned kind module, containerd, ctr, crictl, kubelet, kubectl and
  kubeadm from the local builds, runc and the CNI plugins from Debian;
* the **node image**: the base with those images imported into its containerd (`ctr
  images import --no-unpack`, as `kind build node-image` does), committed and labelled
  with a key of everything it was made from, so a warm build only checks the key.

kind drives podman itself (`KIND_EXPERIMENTAL_PROVIDER=podman`); `kind_environment()`
points that podman at our store and gives its containers explicit rlimits, since root on
this kind of VM lacks CAP_SYS_RESOURCE and podman's default rlimits fail ("error setting
rlimit type 7").
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from achilles.errors import LocalStackError
from achilles_dev.base_image import BASE_IMAGE
from achilles_dev.build import ensure_built, module_source
from achilles_dev.images import ensure_images
from achilles_dev.kind_build import KIND_NODE_DIR, KindBinaries, ensure_kind_binaries
from achilles_dev.podman_store import (
    KEY_LABEL,
    build_image,
    build_ulimits,
    image_id,
    image_key,
    images_lock,
    images_root,
    labelled_key,
    podman,
    podman_argv,
    podman_env,
)
from achilles_dev.versions import Versions, bin_dir, coredns_version, kind_version, load_versions

Report = Callable[[str], None]

NODE_REPOSITORY = "localhost/achilles/kind-node"
_NODE_BASE_REPOSITORY = "localhost/achilles/kind-node-base"
_REGISTRY = "registry.k8s.io"
_STATIC_COMPONENTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")


def _print(line: str) -> None:
    print(line, flush=True)


def node_image(versions: Versions | None = None) -> str:
    versions = versions or load_versions()
    return f"{NODE_REPOSITORY}:{versions.kubernetes}"


def etcd_image_tag(versions: Versions) -> str:
    """The tag of our etcd image, as kubeadm spells etcd's (`3.6.16-0`)."""
    return f"{versions.etcd.lstrip('v')}-0"


# --- podman as kind runs it ---------------------------------------------------------------


def _kind_podman_files() -> tuple[Path, Path]:
    """containers.conf and storage.conf for the podman kind runs: our store, our rlimits."""
    root = images_root()
    root.mkdir(parents=True, exist_ok=True)
    nofile, nproc = (build_ulimits()[i].split("=", 1)[1] for i in (1, 3))
    containers = root / "kind-containers.conf"
    containers_text = (
        '[engine]\nruntime = "runc"\ncgroup_manager = "cgroupfs"\nevents_logger = "file"\n'
        f'[containers]\ndefault_ulimits = ["nofile={nofile}", "nproc={nproc}"]\n'
    )
    storage = root / "kind-storage.conf"
    storage_text = (
        f'[storage]\ndriver = "overlay"\ngraphroot = "{root / "storage"}"\n'
        f'runroot = "{root / "run"}"\n'
    )
    for path, text in ((containers, containers_text), (storage, storage_text)):
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    return containers, storage


def kind_environment() -> dict[str, str]:
    """The variables under which `kind` uses podman on our image store."""
    containers, storage = _kind_podman_files()
    return {
        "KIND_EXPERIMENTAL_PROVIDER": "podman",
        "CONTAINERS_CONF": str(containers),
        "CONTAINERS_STORAGE_CONF": str(storage),
    }


def write_cluster_config(path: Path, versions: Versions | None = None) -> Path:
    """kind's cluster config for our node image (`kind_node/cluster.yaml`)."""
    versions = versions or load_versions()
    template = (KIND_NODE_DIR / "cluster.yaml").read_text()
    path.write_text(template.replace("{etcd_tag}", etcd_image_tag(versions)))
    return path


def ensure_host_ready() -> None:
    """kind mounts the host's /lib/modules into its nodes; a VM without modules has none."""
    Path("/lib/modules").mkdir(parents=True, exist_ok=True)


# --- the images --------------------------------------------------------------------------


def _component_images(
    versions: Versions, binaries: KindBinaries, pause: str, report: Report
) -> list[str]:
    """The images kubeadm runs, built (podman's cache makes a warm build seconds)."""
    k8s_bin = bin_dir(versions)
    tags: list[str] = []
    with tempfile.TemporaryDirectory(prefix="kind-components-", dir=images_root()) as work:
        for name, binary, tag in (
            *(
                (n, k8s_bin / n, f"{_REGISTRY}/{n}:{versions.kubernetes}")
                for n in _STATIC_COMPONENTS
            ),
            ("etcd", k8s_bin / "etcd", f"{_REGISTRY}/etcd:{etcd_image_tag(versions)}"),
        ):
            context = Path(work) / name
            context.mkdir()
            shutil.copy2(binary, context / name)
            (context / "Containerfile").write_text(
                f"FROM scratch\nCOPY --chmod=0755 {name} /usr/local/bin/{name}\n"
                "ENV PATH=/usr/local/bin:/usr/bin:/bin\n"
            )
            build_image(context, tag, what=f"{name} image", report=report)
            tags.append(tag)
        context = Path(work) / "coredns"
        context.mkdir()
        shutil.copy2(binaries.coredns, context / "coredns")
        (context / "Containerfile").write_text(
            "FROM scratch\nCOPY --chmod=0755 coredns /coredns\nEXPOSE 53 53/udp\n"
            'ENTRYPOINT ["/coredns"]\n'
        )
        tag = f"{_REGISTRY}/coredns/coredns:{coredns_version()}"
        build_image(context, tag, what="coredns image", report=report)
        tags.append(tag)
        context = Path(work) / "kube-proxy"
        context.mkdir()
        shutil.copy2(k8s_bin / "kube-proxy", context / "kube-proxy")
        (context / "Containerfile").write_text(
            f"FROM {BASE_IMAGE}:{versions.debian}\n"
            "RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y "
            "--no-install-recommends iptables nftables conntrack ipset kmod "
            "&& apt-get clean && rm -rf /var/lib/apt/lists/*\n"
            "COPY --chmod=0755 kube-proxy /usr/local/bin/kube-proxy\n"
        )
        tag = f"{_REGISTRY}/kube-proxy:{versions.kubernetes}"
        build_image(context, tag, what="kube-proxy image", report=report)
        tags.append(tag)
    pause_tag = f"{_REGISTRY}/pause:{pause.rsplit(':', 1)[1]}"
    podman("tag", pause, pause_tag)
    tags.append(pause_tag)
    return tags


def _kind_module_dir() -> Path:
    """The pinned kind module's source (Go's module cache): its node base `files/`."""
    return module_source("sigs.k8s.io/kind", kind_version())


def _node_base(versions: Versions, binaries: KindBinaries, pause_tag: str, report: Report) -> str:
    tag = f"{_NODE_BASE_REPOSITORY}:{versions.kubernetes}"
    k8s_bin = bin_dir(versions)
    with tempfile.TemporaryDirectory(prefix="kind-node-base-", dir=images_root()) as work:
        context = Path(work)
        shutil.copytree(_kind_module_dir() / "images" / "base" / "files", context / "files")
        (context / "bin").mkdir()
        for name in (
            "containerd",
            "containerd-shim-runc-v2",
            "ctr",
            "crictl",
            "kubelet",
            "kubectl",
        ):
            shutil.copy2(k8s_bin / name, context / "bin" / name)
        shutil.copy2(binaries.kubeadm, context / "bin" / "kubeadm")
        for name in (
            "Containerfile.base",
            "10-achilles-ptp.conflist",
            "12-achilles-cgroup-v1.conf",
        ):
            shutil.copy2(KIND_NODE_DIR / name, context / name)
        build_image(
            context,
            tag,
            what="kind node base",
            report=report,
            containerfile=context / "Containerfile.base",
            build_args={
                "BASE_IMAGE": f"{BASE_IMAGE}:{versions.debian}",
                "KUBERNETES_VERSION": versions.kubernetes,
                "PAUSE_IMAGE": pause_tag,
            },
        )
    return tag


def _assemble(base: str, images: list[str], target: str, key: str, report: Report) -> None:
    """Import `images` into the base's containerd (unpacked on first use, as kind does) and
    commit the result as `target`."""
    name = f"achilles-kind-node-build-{uuid.uuid4().hex[:8]}"
    podman(
        "run", "--detach", "--init", "--privileged", *build_ulimits(), "--name", name,
        "--entrypoint", "sleep", base, "infinity",
    )  # fmt: skip
    try:
        podman(
            "exec", name, "bash", "-c",
            "nohup containerd >/var/log/containerd-build.log 2>&1 & "
            "for _ in $(seq 300); do ctr version >/dev/null 2>&1 && exit 0; sleep 0.1; done; "
            "cat /var/log/containerd-build.log; exit 1",
        )  # fmt: skip
        save = subprocess.Popen(
            podman_argv("save", "--format", "docker-archive", "--multi-image-archive", *images),
            env=podman_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert save.stdout is not None
        imported = subprocess.run(
            podman_argv(
                "exec", "-i", name, "ctr", "--namespace=k8s.io", "images", "import",
                "--all-platforms", "--no-unpack", "--digests", "--snapshotter=overlayfs", "-",
            ),
            env=podman_env(),
            stdin=save.stdout,
            capture_output=True,
            check=False,
        )  # fmt: skip
        save.stdout.close()
        save_error = save.stderr.read().decode(errors="replace") if save.stderr else ""
        if save.wait() != 0 or imported.returncode != 0:
            raise LocalStackError(
                "cannot import the control-plane images into the kind node: "
                f"{save_error.strip() or imported.stderr.decode(errors='replace').strip()}"
            )
        listed = set(
            podman("exec", name, "ctr", "--namespace=k8s.io", "images", "ls", "-q").split()
        )
        if missing := set(images) - listed:
            raise LocalStackError(f"the kind node's containerd lacks {', '.join(sorted(missing))}")
        # Stop containerd cleanly (its metadata database is committed with the image).
        podman(
            "exec", name, "bash", "-c",
            "pkill -x containerd; for _ in $(seq 300); do pgrep -x containerd >/dev/null || "
            "{ rm -rf /run/containerd /run/nri /var/log/containerd-build.log; exit 0; }; "
            "sleep 0.1; done; exit 1",
        )  # fmt: skip
        podman(
            "commit", "--quiet",
            "--change", 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]',
            "--change", "CMD []",
            "--change", f"LABEL {KEY_LABEL}={key}",
            name, target,
        )  # fmt: skip
    finally:
        podman("rm", "--force", "--time", "0", name)


def ensure_node_image(*, report: Report = _print) -> str:
    """The kind node image for the pinned versions, built first where anything changed."""
    if os.geteuid() != 0:
        raise LocalStackError("building the kind node image needs root (podman's own store)")
    started = time.monotonic()
    versions = load_versions()
    ensure_built(versions, report=report)
    binaries = ensure_kind_binaries(report=report)
    local = ensure_images(versions, report=report)
    target = node_image(versions)
    with images_lock():
        components = _component_images(versions, binaries, local.pause, report)
        pause_tag = next(tag for tag in components if "/pause:" in tag)
        base = _node_base(versions, binaries, pause_tag, report)
        ids = [image_id(tag) or "" for tag in (base, *components)]
        key = image_key("kind-node", kind_version(), *components, *ids)
        if labelled_key(target) == key:
            report(f"kind node image: {target} is current")
            return target
        report(f"kind node image: importing {len(components)} images into {target}")
        _assemble(base, components, target, key, report)
    report(f"kind node image {target} ready in {time.monotonic() - started:.0f}s")
    return target


@contextmanager
def kind_variables() -> Iterator[dict[str, str]]:
    """This process's environment with `kind_environment()` set, restored afterwards (kind
    is run by libraries that inherit the environment, such as pytest-kind)."""
    wanted = kind_environment()
    saved = {name: os.environ.get(name) for name in wanted}
    os.environ.update(wanted)
    try:
        yield wanted
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def load_images(kind: Path, cluster: str, images: list[str]) -> None:
    """`kind load image-archive` of our images (kind's `docker-image` needs Docker)."""
    with tempfile.TemporaryDirectory(prefix="kind-load-", dir=images_root()) as work:
        archive = Path(work) / "images.tar"
        podman(
            "save",
            "--format",
            "docker-archive",
            "--multi-image-archive",
            "-o",
            str(archive),
            *images,
        )
        done = subprocess.run(
            [str(kind), "load", "image-archive", "--name", cluster, str(archive)],
            env={**os.environ, **kind_environment()},
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise LocalStackError(
                f"kind load image-archive into {cluster} failed: {done.stderr.strip()}"
            )
