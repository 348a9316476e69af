"""The local base image: a Debian (`versions.toml`) bootstrapped with `debootstrap
--variant=minbase` and imported with `podman import`, tagged as the `python:3.11-slim` the
Dockerfiles start from.

It is the only image that carries this machine's CA bundle (outbound TLS may be
intercepted here, and the Dockerfiles' builds fetch packages); nothing the project ships
is built with it except locally.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from achilles.errors import LocalStackError
from achilles_dev.podman_store import (
    KEY_LABEL,
    Report,
    image_key,
    images_root,
    labelled_key,
    podman,
    podman_argv,
    podman_env,
    stream_output,
)
from achilles_dev.versions import Versions

BASE_IMAGE = "localhost/achilles/debian-python"
_BASE_PACKAGES = ("python3", "python3-pip", "python-is-python3", "ca-certificates")
_HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
_DEFAULT_MIRROR = "http://deb.debian.org/debian"
_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def debian_mirror(sources: Iterable[Path] | None = None) -> str:
    """The Debian mirror apt uses on this machine (the first main archive it lists)."""
    if sources is None:
        apt = Path("/etc/apt")
        sources = [apt / "sources.list", *sorted((apt / "sources.list.d").glob("*"))]
    for path in sources:
        try:
            text = path.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            words = line.split()
            if len(words) >= 2 and words[0] == "URIs:" and "security" not in words[1]:
                return words[1]
            if len(words) >= 3 and words[0] == "deb" and "security" not in words[1]:
                url = words[2] if words[1].startswith("[") else words[1]
                if url.startswith("http"):
                    return url
    return _DEFAULT_MIRROR


def _python_base_tags(dockerfile: Path) -> list[str]:
    """The `FROM` images of the Dockerfile that are not built here (python:3.11-slim)."""
    tags = set()
    for match in re.finditer(r"^FROM\s+(\S*python\S*)", dockerfile.read_text(), re.M):
        tags.add(match.group(1))
    if not tags:
        raise LocalStackError(f"no python base image named in {dockerfile}")
    return sorted(tags | {_qualified(tag) for tag in tags})


def _qualified(name: str) -> str:
    """`python:3.11-slim` -> `docker.io/library/python:3.11-slim`, as Docker resolves it."""
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return name
    return f"docker.io/{name}" if rest else f"docker.io/library/{name}"


def ensure_base_image(versions: Versions, dockerfile: Path, report: Report) -> str:
    """The base image, tagged also as every python image `dockerfile` starts `FROM`."""
    mirror = debian_mirror()
    ca = _HOST_CA_BUNDLE.read_bytes() if _HOST_CA_BUNDLE.exists() else b""
    key = image_key("base", versions.debian, mirror, ",".join(_BASE_PACKAGES), ca)
    tag = f"{BASE_IMAGE}:{versions.debian}"
    aliases = _python_base_tags(dockerfile)
    if labelled_key(tag) == key and all(labelled_key(alias) == key for alias in aliases):
        return tag
    if labelled_key(tag) != key:
        debootstrap = shutil.which("debootstrap") or "/usr/sbin/debootstrap"
        if not Path(debootstrap).exists():
            raise LocalStackError(
                "debootstrap is needed for the local base image: apt-get install debootstrap"
            )
        report(f"base image: debootstrap {versions.debian} from {mirror} (about 2 minutes, once)")
        started = time.monotonic()
        work = images_root() / "work"
        work.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=work, prefix="rootfs-") as rootfs_name:
            rootfs = Path(rootfs_name)
            stream_output(
                [
                    debootstrap,
                    "--variant=minbase",
                    f"--include={','.join(_BASE_PACKAGES)}",
                    versions.debian,
                    str(rootfs),
                    mirror,
                ],
                env=os.environ,
                what="debootstrap",
                report=report,
                show=lambda line: (
                    line.startswith("I: ")
                    and not line.startswith(
                        (
                            "I: Retrieving",
                            "I: Validating",
                            "I: Unpacking",
                            "I: Configuring",
                            "I: Extracting",
                        )
                    )
                ),
            )
            _tailor_rootfs(rootfs, ca)
            tar = subprocess.Popen(
                ["tar", "--numeric-owner", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE
            )
            try:
                stream_output(
                    podman_argv(
                        "import",
                        "--change",
                        f"ENV PATH={_PATH}",
                        "--change",
                        "ENV LANG=C.UTF-8",
                        # Only this local substitute trusts the machine's CA bundle.
                        "--change",
                        "ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
                        "--change",
                        f"LABEL {KEY_LABEL}={key}",
                        "--change",
                        'CMD ["python3"]',
                        "-",
                        tag,
                    ),
                    env=podman_env(),
                    what="base image",
                    report=report,
                    show=lambda _line: False,
                    stdin=tar.stdout.fileno() if tar.stdout else None,
                )
            finally:
                if tar.stdout:
                    tar.stdout.close()
                tar.wait()
        report(f"base image: {tag} in {time.monotonic() - started:.0f}s")
    for alias in aliases:
        podman("tag", tag, alias)
        report(f"base image: tagged {alias} (local stand-in, never pushed)")
    return tag


def _tailor_rootfs(rootfs: Path, ca: bytes) -> None:
    """Make the Debian tree behave like python:3.11-slim for a Dockerfile."""
    # `pip install` into the system interpreter, as on the official image.
    for marker in rootfs.glob("usr/lib/python3*/EXTERNALLY-MANAGED"):
        marker.unlink()
    if ca:
        (rootfs / "etc/ssl/certs/ca-certificates.crt").write_bytes(ca)
    for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for entry in (rootfs / junk).glob("*"):
            if entry.is_file():
                entry.unlink()
