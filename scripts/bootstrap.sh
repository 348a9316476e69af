#!/usr/bin/env bash
# Brings a fresh machine to the point where `uv run achilles ...` works:
# uv, the locked Python environment, and the PostgreSQL server binaries.
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

uv sync --frozen --quiet
