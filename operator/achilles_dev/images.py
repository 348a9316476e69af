"""Build the real node's images here, without Docker and without a registry.

Four images, built with podman into a store of our own under `~/.cache/achilles/images`
(`achilles_dev.podman_store`):

* the **local base** (`achilles_dev.base_image`): a Debian (`versions.toml`) bootstrapped
  with `debootstrap --variant=minbase` and imported with `podman import`, tagged as the
  `python:3.11-slim` the Dockerfiles start from. It is the only image that carries this
  machine's CA bundle (outbound TLS may be intercepted here, and the Dockerfiles' builds
  fetch packages); nothing the project ships is built with it except locally.
* the **uv image** the engine's Dockerfile copies `uv` from, made from the same uv
  release's binary (this machine's, or the wheel from PyPI).
* the **pause image**: `build/pause/linux/pause.c` of the pinned Kubernetes release,
  compiled statically, the pod sandbox's only process.
* the **engine and runner images**: the project's own `Dockerfile` and
  `runner_image/Dockerfile`, built with `podman build --pull=never` and podman's layer
  cache, so an edit of the sources rebuilds only the layers below the `COPY` of them.

Each image is labelled with a key of what it was made from; a warm build finds the keys
current and only re-runs `podman build`, whose cached layers make it take seconds.
Loading the images into a node's containerd is `achilles_dev.node.images`' job.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from achilles.errors import LocalStackError
from achilles_dev.base_image import ensure_base_image
from achilles_dev.podman_store import (
    KEY_LABEL,
    Report,
    build_image,
    image_key,
    images_lock,
    labelled_key,
)
from achilles_dev.versions import Versions, load_versions

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]
LOCAL_TAG = "dev"
ENGINE_IMAGE = f"localhost/achilles/achilles-agent-engine:{LOCAL_TAG}"
RUNNER_IMAGE = f"localhost/achilles/achilles-runner:{LOCAL_TAG}"
PAUSE_REPOSITORY = "localhost/achilles/pause"


def _print(line: str) -> None:
    print(line, flush=True)


@dataclass(frozen=True)
class LocalImages:
    """The names the node and the chart use for what `ensure_images` built."""

    engine: str
    runner: str
    pause: str

    def all(self) -> tuple[str, ...]:
        return (self.pause, self.engine, self.runner)


# --- uv and pause --------------------------------------------------------------------------


def _uv_tag() -> str:
    text = (REPOSITORY_ROOT / "Dockerfile").read_text()
    match = re.search(r"--from=(\S*astral-sh/uv:(\S+))", text)
    if match is None:
        raise LocalStackError("the Dockerfile copies uv from no `ghcr.io/astral-sh/uv:X` image")
    return match.group(1)


def _uv_binary(version: str, directory: Path) -> Path:
    """uv `version`'s binary: this machine's if it is that release, else the wheel's."""
    host = shutil.which("uv")
    if host:
        shown = subprocess.run([host, "--version"], capture_output=True, text=True, check=False)
        if shown.stdout.split()[1:2] == [version]:
            return Path(host)
    wheels = directory / "wheel"
    subprocess.run(
        [
            "python3",
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            "-d",
            str(wheels),
            f"uv=={version}",
        ],
        check=True,
    )
    import zipfile

    for wheel in wheels.glob("uv-*.whl"):
        with zipfile.ZipFile(wheel) as archive:
            member = next(n for n in archive.namelist() if n.endswith("/scripts/uv"))
            target = directory / "uv"
            target.write_bytes(archive.read(member))
            target.chmod(0o755)
            return target
    raise LocalStackError(f"no uv {version} wheel downloaded into {wheels}")


def _ensure_uv(report: Report) -> str:
    tag = _uv_tag()
    version = tag.rsplit(":", 1)[1]
    key = image_key("uv", version)
    if labelled_key(tag) == key:
        return tag
    with tempfile.TemporaryDirectory(prefix="uv-image-") as work:
        context = Path(work)
        shutil.copy2(_uv_binary(version, context), context / "uv-binary")
        (context / "Containerfile").write_text("FROM scratch\nCOPY uv-binary /uv\n")
        build_image(context, tag, what="uv image", report=report, labels={KEY_LABEL: key})
    report(f"uv image: {tag}")
    return tag


def kubernetes_source(versions: Versions) -> Path:
    """The pinned k8s.io/kubernetes module's source tree (Go's module cache)."""
    from achilles_dev.build import module_source

    return module_source("k8s.io/kubernetes", versions.kubernetes)


def _pause_version(source: Path) -> str:
    match = re.search(r"^TAG \?= (\S+)", (source / "build/pause/Makefile").read_text(), re.M)
    if match is None:
        raise LocalStackError(f"no TAG in {source / 'build/pause/Makefile'}")
    return match.group(1)


def _ensure_pause(versions: Versions, report: Report) -> str:
    source = kubernetes_source(versions)
    version = _pause_version(source)
    tag = f"{PAUSE_REPOSITORY}:{version}"
    pause_c = (source / "build/pause/linux/pause.c").read_bytes()
    key = image_key("pause", version, pause_c)
    if labelled_key(tag) == key:
        return tag
    gcc = shutil.which("gcc")
    if gcc is None:
        raise LocalStackError("gcc is needed to compile the pause container: apt-get install gcc")
    with tempfile.TemporaryDirectory(prefix="pause-image-") as work:
        context = Path(work)
        (context / "pause.c").write_bytes(pause_c)
        subprocess.run(
            [
                gcc,
                "-Os",
                "-Wall",
                "-Werror",
                "-static",
                f"-DVERSION=v{version}-achilles",
                "-o",
                str(context / "pause"),
                str(context / "pause.c"),
            ],
            check=True,
        )
        (context / "Containerfile").write_text(
            'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n'
        )
        build_image(context, tag, what="pause image", report=report, labels={KEY_LABEL: key})
    report(f"pause image: {tag} (from Kubernetes {versions.kubernetes}'s pause.c)")
    return tag


def local_images(versions: Versions | None = None) -> LocalImages:
    """The names of the images `ensure_images` builds (without building anything)."""
    versions = versions or load_versions()
    return LocalImages(
        engine=ENGINE_IMAGE,
        runner=RUNNER_IMAGE,
        pause=f"{PAUSE_REPOSITORY}:{_pause_version(kubernetes_source(versions))}",
    )


def ensure_images(versions: Versions | None = None, *, report: Report = _print) -> LocalImages:
    """Build (or confirm from podman's cache) the base, uv, pause, engine and runner images."""
    versions = versions or load_versions()
    if os.geteuid() != 0:
        raise LocalStackError("building the node's images needs root (podman's own store, mounts)")
    with images_lock():
        return _ensure_images(versions, report)


def _ensure_images(versions: Versions, report: Report) -> LocalImages:
    started = time.monotonic()
    ensure_base_image(versions, REPOSITORY_ROOT / "Dockerfile", report)
    _ensure_uv(report)
    pause = _ensure_pause(versions, report)
    report("engine image: podman build (cached layers are reused)")
    build_image(
        REPOSITORY_ROOT,
        ENGINE_IMAGE,
        what="engine image",
        report=report,
        containerfile=REPOSITORY_ROOT / "Dockerfile",
    )
    build_image(
        REPOSITORY_ROOT,
        RUNNER_IMAGE,
        what="runner image",
        report=report,
        containerfile=REPOSITORY_ROOT / "runner_image" / "Dockerfile",
        build_args={"ENGINE_IMAGE": ENGINE_IMAGE},
    )
    elapsed = time.monotonic() - started
    report(f"images ready in {elapsed:.0f}s: {ENGINE_IMAGE}, {RUNNER_IMAGE}, {pause}")
    return LocalImages(engine=ENGINE_IMAGE, runner=RUNNER_IMAGE, pause=pause)
