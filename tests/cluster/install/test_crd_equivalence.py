"""Generated Agent specs: the API server and pydantic accept and reject exactly the same.

The hand-written table (tests/crd_cases.py) shows the messages; this property test
shows that the generated CRD and the models agree beyond the table, on many
combinations of schedule fields and values near every bound.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.cluster.install.api import Achilles, verdict
from tests.cluster.install.conftest import Release
from tests.crd_cases import agent, pydantic_verdict

pytestmark = pytest.mark.cluster

ABSENT = object()

# Values around every bound and of every wrong type the API could be sent.
SCHEDULE_FIELDS: dict[str, list[Any]] = {
    "type": ["interval", "calendar", "cron", "", None, 1],
    "everyHours": [0, 1, 6, 720, 721, -5, "6", 6.5, 6.0, True, None],
    "every_hours": [6],
    "cadence": ["daily", "weekly", "monthly", "Daily", None, 0],
    "weekday": [-1, 0, 3, 6, 7, "1", None, False],
    "time": ["00:00", "09:00", "23:59", "24:00", "9:00", "12:60", "09:00:00", "", None, 900],
}
SPEC_FIELDS: dict[str, list[Any]] = {
    "enabled": [True, False, None, "true", 1],
    "model": ["gpt-small", "GPT", "", None, "a" * 253, "a" * 254],
    "tools": [[], ["inbox"], ["inbox", "inbox"], ["Inbox"], None, "inbox"],
}


def optional_fields(fields: dict[str, list[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """Dicts where each field is absent or one of its listed values."""
    return st.fixed_dictionaries(
        {name: st.sampled_from([ABSENT, *values]) for name, values in fields.items()}
    ).map(lambda chosen: {k: v for k, v in chosen.items() if v is not ABSENT})


@st.composite
def agent_specs(draw: st.DrawFn) -> dict[str, Any]:
    spec = draw(optional_fields(SPEC_FIELDS))
    if draw(st.booleans()):
        spec["schedule"] = draw(optional_fields(SCHEDULE_FIELDS))
    return spec


@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,  # the same examples every run: a failure reproduces
    suppress_health_check=[HealthCheck.too_slow],
)
@given(spec=agent_specs())
def test_api_server_and_pydantic_agree(
    spec: dict[str, Any], admin_api: Achilles, achilles_release: Release
) -> None:
    manifest = agent(f"prop-{uuid.uuid4().hex[:8]}", **spec)
    server = verdict(lambda: admin_api.create(manifest, "default", dry_run=True))
    local = pydantic_verdict(manifest) is None
    assert (server is None) == local, (
        f"API server {'accepts' if server is None else 'rejects: ' + server}; "
        f"pydantic {'accepts' if local else 'rejects'}: {spec}"
    )
