"""Models, tools and platform settings: cluster-scoped CRs mirrored into their tables."""

from __future__ import annotations

from dataclasses import dataclass

from achilles.db.database import Database
from achilles.db.journal import catalogue
from achilles.k8s.resources.agent_model import AgentModelSpec
from achilles.k8s.resources.agent_platform import AgentPlatformSpec
from achilles.k8s.resources.agent_tool import AgentToolSpec


@dataclass(frozen=True)
class ModelMirrored:
    model_id: int
    default_conflict: str | None  # the other default model, when two claim it


def mirror_model(database: Database, name: str, spec: AgentModelSpec) -> ModelMirrored:
    secret = spec.api_key_secret_ref
    with database.transaction() as session:
        model_id = catalogue.upsert_model(
            session,
            catalogue.ModelRow(
                name=name,
                base_url=spec.base_url,
                provider_model=spec.model,
                api_key_secret_name=secret.name if secret else None,
                api_key_secret_key=secret.key if secret else None,
                is_default=spec.is_default,
            ),
        )
        conflict = None
        if not catalogue.set_default_model(session, name, spec.is_default):
            conflict = catalogue.default_model_name(session)
    return ModelMirrored(model_id, conflict)


def withdraw_model(database: Database, name: str) -> list[catalogue.AgentRef]:
    """DESIGN §4: its agents stop (model_id NULL); re-adding the name revives nobody."""
    with database.transaction() as session:
        return catalogue.withdraw_model(session, name)


def mirror_tool(database: Database, name: str, spec: AgentToolSpec) -> int:
    with database.transaction() as session:
        return catalogue.upsert_tool(
            session, name, spec.description, spec.implementation, spec.agents_allowed
        )


def remove_tool(database: Database, name: str) -> bool:
    with database.transaction() as session:
        return catalogue.delete_tool(session, name)


def mirror_platform(database: Database, spec: AgentPlatformSpec) -> None:
    with database.transaction() as session:
        catalogue.write_platform_settings(
            session,
            catalogue.PlatformRow(
                timezone=spec.timezone,
                weekly_token_budget=spec.weekly_token_budget,
                max_iterations=spec.max_iterations,
                max_concurrency=spec.max_concurrency,
                run_timeout_seconds=spec.run_timeout_seconds,
                platform_prompt=spec.platform_prompt,
            ),
        )
