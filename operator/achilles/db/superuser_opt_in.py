"""ACHILLES_ALLOW_SUPERUSER: the opt-in to run a component as a login that is more than
it needs (a first try with one superuser URL; `achilles.services.db_roles` refuses such a
login otherwise).

Standard library only: the runner reads it before its claim, when SQLAlchemy is not
imported yet (`achilles.runner.main`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

ALLOW_SUPERUSER_ENV = "ACHILLES_ALLOW_SUPERUSER"


def allow_superuser(environ: Mapping[str, str] | None = None) -> bool:
    value = (environ if environ is not None else os.environ).get(ALLOW_SUPERUSER_ENV, "")
    return value.strip().lower() in {"1", "true", "yes"}
