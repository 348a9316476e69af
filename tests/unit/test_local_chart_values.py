"""`achilles dev up` re-applies the chart with the stack's values over the user's: a
setting made with `helm upgrade --reuse-values --set ...` (or the kubectl handover,
`platform.create=false`) must survive it (issue 14, defect 2)."""

from __future__ import annotations

from achilles_dev.chart import local_values, merged_values


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
        "migrations": {"enabled": False},
        "maxConcurrency": 7,
    }
    assert user["operator"] == {"enabled": True, "replicas": 2}  # the inputs stay as they were


def test_a_value_that_is_no_longer_a_mapping_is_replaced_whole() -> None:
    assert merged_values({"image": {"tag": "x"}}, {"image": "plain"}) == {"image": "plain"}
    assert merged_values({"image": "plain"}, {"image": {"tag": "y"}}) == {"image": {"tag": "y"}}
