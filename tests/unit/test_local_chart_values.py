"""`achilles dev up` re-applies the chart with the stack's values over the user's: a
setting made with `helm upgrade --reuse-values --set ...` (or the kubectl handover,
`platform.create=false`) must survive it (issue 14, defect 2)."""

from __future__ import annotations

from achilles_dev.chart import merged_values
from achilles_dev.chart_values import LocalApi, local_values


def test_the_stacks_values_replace_only_their_own_keys() -> None:
    user = {
        "platform": {"timezone": "Europe/Paris", "create": False},
        "operator": {"enabled": True, "replicas": 2},
        "maxConcurrency": 7,
    }
    merged = merged_values(user, local_values(with_database=False))
    assert merged == {
        "platform": {"timezone": "Europe/Paris", "create": False},
        "operator": {"enabled": False, "replicas": 2},
        "api": {"enabled": False},
        "migrations": {"enabled": False},
        "maxConcurrency": 7,
    }
    assert user["operator"] == {"enabled": True, "replicas": 2}  # the inputs stay as they were


def test_a_value_that_is_no_longer_a_mapping_is_replaced_whole() -> None:
    assert merged_values({"image": {"tag": "x"}}, {"image": "plain"}) == {"image": "plain"}
    assert merged_values({"image": "plain"}, {"image": {"tag": "y"}}) == {"image": {"tag": "y"}}


def test_the_api_runs_on_a_real_node_with_the_stacks_provider() -> None:
    api = LocalApi(
        oidc_issuer="http://10.213.3.1:18410", public_url="http://10.213.3.2:30080", node_port=30080
    )
    image = "localhost/achilles/achilles-agent-engine:dev"
    values = local_values(with_database=True, image=image, api=api)["api"]
    assert values["enabled"] is True
    assert values["service"] == {"type": "NodePort", "nodePort": 30080}
    assert values["oidc"]["issuer"] == "http://10.213.3.1:18410"
    assert values["web"]["enabled"] is True
    assert values["web"]["publicURL"] == "http://10.213.3.2:30080"
    # A stack without a node (no image) or without PostgreSQL runs no API.
    assert local_values(with_database=True, api=api)["api"] == {"enabled": False}
    assert local_values(with_database=False, image=image, api=api)["api"] == {"enabled": False}
