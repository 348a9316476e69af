#!/usr/bin/env bash
# Brings a fresh machine to the point where `uv run achilles ...` works:
# uv, the locked Python environment, the PostgreSQL server binaries, and (as root on
# Debian) what the local stack's real node needs: runc, podman, the CNI plugins,
# debootstrap and iptables (docs/development.md).
# Idempotent and quiet when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

UV_VERSION="0.13.9"

if ! command -v uv >/dev/null 2>&1; then
    echo "bootstrap: installing uv ${UV_VERSION}"
    python3 -m pip install --quiet "uv==${UV_VERSION}"
fi

if ! compgen -G "/usr/lib/postgresql/*/bin/pg_ctl" >/dev/null && ! command -v pg_ctl >/dev/null; then
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
        echo "bootstrap: installing the PostgreSQL server (apt)"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    else
        echo "bootstrap: PostgreSQL server binaries not found; install them (Debian: apt-get install postgresql)" >&2
        exit 1
    fi
fi

# The real node: runc (crun refuses hybrid cgroup v1 hosts), podman for the images,
# the CNI plugins for pod networking, debootstrap for the local base image, iptables
# for kube-proxy. Without root there is no real node: `achilles dev up --node process`.
NODE_PACKAGES="runc podman buildah containernetworking-plugins debootstrap iptables conntrack"
# The web inbox's browser tests drive Debian's Chromium through Playwright (Playwright's
# own browser download is not reachable from every machine; Debian's package is).
NODE_PACKAGES="$NODE_PACKAGES chromium"
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
    missing=""
    for package in $NODE_PACKAGES; do
        dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
            || missing="$missing $package"
    done
    if [ -n "$missing" ]; then
        echo "bootstrap: installing the real node's packages (apt):$missing"
        apt-get update -qq
        # shellcheck disable=SC2086
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
    fi
fi

# Bytecode compiled once, as the images have it (pip compiles at install): uv leaves the
# virtualenv without, and where PYTHONDONTWRITEBYTECODE is set every `achilles` process
# the tests start (operators, runners, the CLI) would compile kopf, kubernetes and the
# rest from source again, seconds each. Up-to-date files are skipped on reruns.
uv sync --frozen --quiet --compile-bytecode
uv run --frozen --quiet python -m compileall -q -j 0 operator >/dev/null
