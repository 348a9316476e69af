# ruff: noqa: E501 - one case per line reads best as a table
"""Manifests the CRDs must accept or reject, shared by the unit and the cluster tier.

The unit tests hold the pydantic models to this table; the cluster tests hold the real
API server to it and check that both agree, so the generated CRD and the models cannot
drift apart unnoticed. Each invalid case names the field its error message must name.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from achilles.errors import InvalidInputError
from achilles.k8s.resources import parse_manifest

API_VERSION = "achilles.io/v1alpha1"
EXAMPLES_DIR = Path(__file__).resolve().parents[1] / "examples"
# What `kubectl apply -f examples/` applies (the README's command): what users own.
EXAMPLES = sorted(EXAMPLES_DIR.glob("*.yaml"))
# Every example manifest, the chart-owned AgentPlatform's handover example included:
# both tiers hold them to the CRDs.
ALL_EXAMPLES = [*EXAMPLES, *sorted((EXAMPLES_DIR / "platform").glob("*.yaml"))]


@dataclass(frozen=True)
class Case:
    id: str
    manifest: dict[str, Any]
    # For an invalid case: text the error must contain (the field's path).
    field: str | None = None

    @property
    def kind(self) -> str:
        return str(self.manifest["kind"])

    @property
    def name(self) -> str:
        return str(self.manifest["metadata"]["name"])


def agent(name: str = "case", **spec: Any) -> dict[str, Any]:
    """An Agent (namespace set by whoever applies it); `spec` overrides a valid minimum."""
    base: dict[str, Any] = {"owner": "alice", "prompt": "Summarise my week."}
    return _manifest("Agent", name, _merge(base, spec))


def agent_model(name: str = "case-model", **spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"baseURL": "http://127.0.0.1:8000/v1", "model": "small"}
    return _manifest("AgentModel", name, _merge(base, spec))


def agent_tool(name: str = "case-tool", **spec: Any) -> dict[str, Any]:
    return _manifest("AgentTool", name, _merge({"implementation": "inbox"}, spec))


def agent_platform(name: str = "default", **spec: Any) -> dict[str, Any]:
    return _manifest("AgentPlatform", name, spec)


_DROP = object()  # a spec value meaning "leave this field out"


def _merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    merged = {**base, **overrides}
    return {key: value for key, value in merged.items() if value is not _DROP}


def _manifest(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": {"name": name}, "spec": spec}


def pydantic_verdict(manifest: dict[str, Any]) -> str | None:
    """None if the models accept `manifest`, else their one-line error."""
    try:
        parse_manifest(manifest)
    except InvalidInputError as error:
        return str(error)
    return None


def schedule(**fields: Any) -> dict[str, Any]:
    return dict(fields)


WEEKLY = schedule(type="calendar", cadence="weekly", weekday=0, time="09:00")

VALID: list[Case] = [
    Case("agent-minimal", agent()),
    Case("agent-every-field", agent(
        displayName="Weekly digest", description="for me", model="gpt-small",
        tools=["inbox", "web.search"], enabled=False, schedule=WEEKLY,
    )),
    Case("agent-interval-1h", agent(schedule=schedule(type="interval", everyHours=1))),
    Case("agent-interval-720h", agent(schedule=schedule(type="interval", everyHours=720))),
    Case("agent-daily-midnight", agent(schedule=schedule(type="calendar", cadence="daily", time="00:00"))),
    Case("agent-weekly-sunday-2359", agent(schedule=schedule(type="calendar", cadence="weekly", weekday=6, time="23:59"))),
    Case("agent-null-means-absent", agent(schedule=None, model=None, enabled=None, description=None)),
    Case("agent-null-weekday-on-daily", agent(schedule=schedule(type="calendar", cadence="daily", weekday=None, time="07:30"))),
    # Seed 000: the weekday "matters only for weekly"; a daily schedule's is ignored.
    Case("agent-weekday-on-daily-ignored", agent(schedule=schedule(type="calendar", cadence="daily", weekday=2, time="09:00"))),
    Case("agent-email-owner", agent(owner="alice.smith+agents@example.org")),
    Case("agent-32-tools", agent(tools=[f"tool-{i}" for i in range(32)])),
    Case("agent-owner-253", agent(owner="a" * 253)),
    # Run controls (issue 22): the bounds themselves, and 0 = never for the Agent's streak.
    Case("agent-run-controls-lowest", agent(maxRunTokens=1, suspendAfterFailures=0)),
    Case("agent-run-controls-highest", agent(maxRunTokens=10**12, suspendAfterFailures=1000)),
    Case("model-minimal", agent_model()),
    Case("model-with-key-default", agent_model(
        apiKeySecretRef={"name": "llm-key", "key": "api-key"}, default=True,
    )),
    Case("model-https", agent_model(baseURL="https://llm.example.org/v1", model="gpt-4o-mini")),
    Case("tool-minimal", agent_tool()),
    Case("tool-disabled", agent_tool(description="Ask a human", agentsAllowed=False)),
    # MCP sources (issue 38)
    Case("tool-mcp-minimal", agent_tool(implementation="mcp", mcp={"url": "http://mcp-time.tools:8000/mcp"})),
    Case("tool-mcp-every-field", agent_tool(implementation="mcp", mcp={
        "url": "https://mcp.example.org/mcp",
        "headers": [{"name": "Authorization", "secretKeyRef": {"name": "mcp-token", "key": "authorization"}}],
        "credentials": "platform", "allowedTools": ["get_current_time", "convert_time"],
        "approval": "always", "tools": [{"name": "get_current_time", "approval": "never"}],
        "timeoutSeconds": 300, "maxResultBytes": 1048576,
    })),
    Case("platform-defaults", agent_platform()),
    Case("platform-every-field", agent_platform(
        timezone="America/Argentina/Buenos_Aires", weeklyTokenBudget=0, maxIterations=1,
        maxConcurrency=1000, runTimeoutSeconds=86400, platformPrompt="Be brief.",
    )),
    Case("platform-etc-zone", agent_platform(timezone="Etc/GMT+3")),
    Case("platform-run-controls", agent_platform(maxRunTokens=1, suspendAfterFailures=1)),
    Case("platform-run-controls-highest", agent_platform(maxRunTokens=10**12, suspendAfterFailures=1000)),
    Case("platform-notifications-and-retention", agent_platform(
        notifications={"webhookUrl": "https://portal.example/hooks/achilles",
                       "secretRef": {"name": "achilles-webhook", "key": "hmac"}},
        runRetentionDays=365,
    )),
    Case("platform-webhook-default-key", agent_platform(
        notifications={"webhookUrl": "http://portal.portal.svc:8080/h", "secretRef": {"name": "hook"}},
    )),
]  # fmt: skip

INVALID: list[Case] = [
    # Agent: required fields and formats
    Case("agent-no-owner", agent(owner=_DROP), "spec.owner"),
    Case("agent-no-prompt", agent(prompt=_DROP), "spec.prompt"),
    Case("agent-empty-prompt", agent(prompt=""), "spec.prompt"),
    Case("agent-prompt-too-long", agent(prompt="x" * 65537), "spec.prompt"),
    Case("agent-owner-with-space", agent(owner="alice smith"), "spec.owner"),
    Case("agent-owner-too-long", agent(owner="a" * 254), "spec.owner"),
    Case("agent-display-name-too-long", agent(displayName="d" * 201), "spec.displayName"),
    Case("agent-empty-display-name", agent(displayName=""), "spec.displayName"),
    Case("agent-description-too-long", agent(description="d" * 2001), "spec.description"),
    Case("agent-model-not-a-name", agent(model="GPT Small"), "spec.model"),
    Case("agent-tool-not-a-name", agent(tools=["Inbox!"]), "spec.tools"),
    Case("agent-duplicate-tools", agent(tools=["inbox", "inbox"]), "spec.tools"),
    Case("agent-33-tools", agent(tools=[f"tool-{i}" for i in range(33)]), "spec.tools"),
    Case("agent-enabled-not-boolean", agent(enabled="yes"), "spec.enabled"),
    Case("agent-admin-paused-not-boolean", agent(adminPaused="false"), "spec.adminPaused"),
    Case("agent-unknown-field", agent(color="blue"), "spec.color"),
    Case("agent-zero-run-token-cap", agent(maxRunTokens=0), "spec.maxRunTokens"),
    Case("agent-run-token-cap-over-10-12", agent(maxRunTokens=10**12 + 1), "spec.maxRunTokens"),
    Case("agent-run-token-cap-as-text", agent(maxRunTokens="1000"), "spec.maxRunTokens"),
    Case("agent-negative-suspend-after", agent(suspendAfterFailures=-1), "spec.suspendAfterFailures"),
    Case("agent-suspend-after-1001", agent(suspendAfterFailures=1001), "spec.suspendAfterFailures"),
    # Agent: the schedule union
    Case("schedule-no-type", agent(schedule=schedule(everyHours=6)), "spec.schedule.type"),
    Case("schedule-unknown-type", agent(schedule=schedule(type="cron", everyHours=6)), "spec.schedule.type"),
    Case("interval-no-every-hours", agent(schedule=schedule(type="interval")), "spec.schedule.everyHours"),
    Case("interval-zero-hours", agent(schedule=schedule(type="interval", everyHours=0)), "spec.schedule.everyHours"),
    Case("interval-721-hours", agent(schedule=schedule(type="interval", everyHours=721)), "spec.schedule.everyHours"),
    Case("interval-hours-as-text", agent(schedule=schedule(type="interval", everyHours="6")), "spec.schedule.everyHours"),
    Case("interval-database-spelling", agent(schedule=schedule(type="interval", every_hours=6)), "spec.schedule.every_hours"),
    Case("interval-with-time", agent(schedule=schedule(type="interval", everyHours=6, time="09:00")), "spec.schedule.time"),
    Case("interval-with-cadence", agent(schedule=schedule(type="interval", everyHours=6, cadence="daily")), "spec.schedule.cadence"),
    Case("interval-with-weekday", agent(schedule=schedule(type="interval", everyHours=6, weekday=1)), "spec.schedule.weekday"),
    Case("calendar-no-cadence", agent(schedule=schedule(type="calendar", time="09:00")), "spec.schedule.cadence"),
    Case("calendar-no-time", agent(schedule=schedule(type="calendar", cadence="daily")), "spec.schedule.time"),
    Case("calendar-monthly", agent(schedule=schedule(type="calendar", cadence="monthly", time="09:00")), "spec.schedule.cadence"),
    Case("calendar-with-every-hours", agent(schedule={**WEEKLY, "everyHours": 6}), "spec.schedule.everyHours"),
    Case("weekly-without-weekday", agent(schedule=schedule(type="calendar", cadence="weekly", time="09:00")), "spec.schedule.weekday"),
    Case("weekly-weekday-7", agent(schedule={**WEEKLY, "weekday": 7}), "spec.schedule.weekday"),
    Case("weekly-weekday-negative", agent(schedule={**WEEKLY, "weekday": -1}), "spec.schedule.weekday"),
    Case("time-24-00", agent(schedule={**WEEKLY, "time": "24:00"}), "spec.schedule.time"),
    Case("time-9-00", agent(schedule={**WEEKLY, "time": "9:00"}), "spec.schedule.time"),
    Case("time-with-seconds", agent(schedule={**WEEKLY, "time": "09:00:00"}), "spec.schedule.time"),
    Case("time-minute-60", agent(schedule={**WEEKLY, "time": "09:60"}), "spec.schedule.time"),
    # AgentModel
    Case("model-no-base-url", agent_model(baseURL=_DROP), "spec.baseURL"),
    Case("model-base-url-not-http", agent_model(baseURL="ftp://llm.example.org"), "spec.baseURL"),
    Case("model-no-provider-model", agent_model(model=_DROP), "spec.model"),
    Case("model-secret-ref-without-key", agent_model(apiKeySecretRef={"name": "llm-key"}), "spec.apiKeySecretRef.key"),
    Case("model-secret-ref-bad-name", agent_model(apiKeySecretRef={"name": "LLM_KEY", "key": "k"}), "spec.apiKeySecretRef.name"),
    Case("model-default-not-boolean", agent_model(default="true"), "spec.default"),
    # AgentTool
    Case("tool-no-implementation", agent_tool(implementation=_DROP), "spec.implementation"),
    Case("tool-bad-implementation", agent_tool(implementation="Inbox Tool"), "spec.implementation"),
    Case("tool-description-too-long", agent_tool(description="d" * 2001), "spec.description"),
    Case("tool-mcp-without-source", agent_tool(implementation="mcp"), "spec.mcp"),
    Case("tool-source-without-mcp", agent_tool(mcp={"url": "http://mcp:8000/mcp"}), "spec.mcp"),
    Case("tool-mcp-no-url", agent_tool(implementation="mcp", mcp={}), "spec.mcp.url"),
    Case("tool-mcp-url-not-http", agent_tool(implementation="mcp", mcp={"url": "stdio://server"}), "spec.mcp.url"),
    Case("tool-mcp-bad-approval", agent_tool(implementation="mcp", mcp={"url": "http://m/mcp", "approval": "sometimes"}), "spec.mcp.approval"),
    Case("tool-mcp-bad-tool-approval", agent_tool(implementation="mcp", mcp={"url": "http://m/mcp", "tools": [{"name": "x", "approval": "maybe"}]}), "spec.mcp.tools[0].approval"),
    Case("tool-mcp-allowlist-bad-name", agent_tool(implementation="mcp", mcp={"url": "http://m/mcp", "allowedTools": ["rm -rf"]}), "spec.mcp.allowedTools[0]"),
    Case("tool-mcp-allowlist-duplicate", agent_tool(implementation="mcp", mcp={"url": "http://m/mcp", "allowedTools": ["a", "a"]}), "spec.mcp.allowedTools"),
    Case("tool-mcp-header-bad-name", agent_tool(implementation="mcp", mcp={"url": "http://m/mcp", "headers": [{"name": "X Token", "secretKeyRef": {"name": "s", "key": "k"}}]}), "spec.mcp.headers[0].name"),
    Case("tool-mcp-header-no-secret", agent_tool(implementation="mcp", mcp={"url": "http://m/mcp", "headers": [{"name": "Authorization"}]}), "spec.mcp.headers[0].secretKeyRef"),
    Case("tool-mcp-header-inline-value", agent_tool(implementation="mcp", mcp={"url": "http://m/mcp", "headers": [{"name": "Authorization", "value": "Bearer x", "secretKeyRef": {"name": "s", "key": "k"}}]}), "spec.mcp.headers[0].value"),
    Case("tool-mcp-owner-credentials", agent_tool(implementation="mcp", mcp={"url": "http://m/mcp", "credentials": "owner"}), "spec.mcp.credentials"),
    Case("tool-mcp-zero-timeout", agent_tool(implementation="mcp", mcp={"url": "http://m/mcp", "timeoutSeconds": 0}), "spec.mcp.timeoutSeconds"),
    Case("tool-mcp-tiny-result-cap", agent_tool(implementation="mcp", mcp={"url": "http://m/mcp", "maxResultBytes": 10}), "spec.mcp.maxResultBytes"),
    # AgentPlatform
    Case("platform-not-named-default", agent_platform(name="acme"), "metadata.name"),
    Case("platform-unknown-zone", agent_platform(timezone="Europe/Moskow"), "spec.timezone"),
    Case("platform-zone-local", agent_platform(timezone="Local"), "spec.timezone"),
    Case("platform-zone-offset", agent_platform(timezone="+03:00"), "spec.timezone"),
    Case("platform-negative-budget", agent_platform(weeklyTokenBudget=-1), "spec.weeklyTokenBudget"),
    Case("platform-zero-iterations", agent_platform(maxIterations=0), "spec.maxIterations"),
    Case("platform-zero-concurrency", agent_platform(maxConcurrency=0), "spec.maxConcurrency"),
    Case("platform-timeout-over-a-day", agent_platform(runTimeoutSeconds=86401), "spec.runTimeoutSeconds"),
    Case("platform-webhook-not-http", agent_platform(notifications={"webhookUrl": "ftp://portal/h", "secretRef": {"name": "hook"}}), "spec.notifications.webhookUrl"),
    Case("platform-webhook-without-secret", agent_platform(notifications={"webhookUrl": "https://portal/h"}), "spec.notifications.secretRef"),
    Case("platform-webhook-secret-bad-name", agent_platform(notifications={"webhookUrl": "https://portal/h", "secretRef": {"name": "Hook_1"}}), "spec.notifications.secretRef.name"),
    Case("platform-zero-retention", agent_platform(runRetentionDays=0), "spec.runRetentionDays"),
    Case("platform-retention-over-100-years", agent_platform(runRetentionDays=36501), "spec.runRetentionDays"),
    Case("platform-zero-run-token-cap", agent_platform(maxRunTokens=0), "spec.maxRunTokens"),
    # 0 is the Agent's "never"; the platform says never by leaving the field out.
    Case("platform-zero-suspend-after", agent_platform(suspendAfterFailures=0), "spec.suspendAfterFailures"),
    Case("platform-suspend-after-1001", agent_platform(suspendAfterFailures=1001), "spec.suspendAfterFailures"),
]  # fmt: skip
