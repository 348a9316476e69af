"""Read a manifest (a dict from YAML or the API) into its typed custom resource.

One entry point for every kind, with one-line errors that name the field the way the
API server does (`spec.schedule.everyHours: required`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from achilles.domain.validation import describe_validation_error
from achilles.errors import InvalidInputError
from achilles.k8s.resources.common import API_VERSION, CustomResource
from achilles.k8s.resources.kinds import KINDS

_MODELS: dict[str, type[CustomResource]] = {kind.kind: kind.model for kind in KINDS}


def parse_manifest(data: Mapping[str, Any]) -> CustomResource:
    """The typed resource for `data`; InvalidInputError naming every bad field otherwise."""
    kind = data.get("kind")
    model = _MODELS.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise InvalidInputError(
            f"kind: must be one of {', '.join(sorted(_MODELS))} of {API_VERSION} (got {kind!r})"
        )
    try:
        return model.model_validate(dict(data))
    except ValidationError as exc:
        raise InvalidInputError(describe_validation_error(exc, "", dict(data))) from exc
