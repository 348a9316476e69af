"""The achilles.io/v1alpha1 custom resources as pydantic models: the one source of truth.

The CRDs in `crds/` (and the chart) are generated from these models by
`achilles crds generate`; manifests are read through them (`parse_manifest`). Each kind
has its own module; `kinds` lists them with their CRD names and printer columns.
"""

from achilles.k8s.resources.agent import AgentResource, AgentSpec, AgentStatus
from achilles.k8s.resources.agent_model import AgentModelResource, AgentModelSpec
from achilles.k8s.resources.agent_platform import AgentPlatformResource, AgentPlatformSpec
from achilles.k8s.resources.agent_tool import AgentToolResource, AgentToolSpec
from achilles.k8s.resources.common import API_GROUP, API_VERSION, CustomResource
from achilles.k8s.resources.kinds import KINDS, CustomResourceKind
from achilles.k8s.resources.manifests import parse_manifest

__all__ = [
    "API_GROUP",
    "API_VERSION",
    "KINDS",
    "AgentModelResource",
    "AgentModelSpec",
    "AgentPlatformResource",
    "AgentPlatformSpec",
    "AgentResource",
    "AgentSpec",
    "AgentStatus",
    "AgentToolResource",
    "AgentToolSpec",
    "CustomResource",
    "CustomResourceKind",
    "parse_manifest",
]
