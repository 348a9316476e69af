"""The CRDs are generated from the pydantic models: stable, structural, committed as generated.

What the API server does with them is the cluster tier's business
(tests/cluster/install/); here the generator and its output are held to the rules the
API server and the people reading the YAML rely on.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest
import yaml
from click.testing import CliRunner
from pydantic import BaseModel, ConfigDict, Field

from achilles.cli.main import cli
from achilles.errors import CrdGenerationError
from achilles.k8s.crd import generate as crdgen
from achilles.k8s.crd.openapi import structural_schema
from achilles.k8s.resources import KINDS
from achilles.k8s.resources.cel import VALIDATIONS_KEY

REPO = Path(__file__).resolve().parents[2]


def crd_schemas() -> list[tuple[str, dict[str, Any]]]:
    return [
        (kind.kind, crdgen.build_crd(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
        for kind in KINDS
    ]


def walk(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every schema node with its JSON path (`spec.schedule.time`, `spec.tools[*]`)."""
    nodes = [(path, schema)]
    for name, child in schema.get("properties", {}).items():
        nodes += walk(child, f"{path}.{name}" if path else name)
    if "items" in schema:
        nodes += walk(schema["items"], f"{path}[*]")
    return nodes


def resolve(schema: dict[str, Any], path: str) -> dict[str, Any] | None:
    """The schema of a printer column's path; `[*]` and a filter such as
    `[?(@.type=="Ready")]` step into a list's items (whose filter field must exist)."""
    node: dict[str, Any] | None = schema
    filtered = re.compile(r'^(\w+)\[\?\(@\.(\w+)=="[^"]*"\)\]$')
    for part in re.split(r"\.(?![^\[]*\])", path):
        match = filtered.match(part)
        step = match.group(1) if match else part.removesuffix("[*]")
        node = (node or {}).get("properties", {}).get(step)
        if node is None:
            return None
        if match:
            node = node.get("items", {})
            if match.group(2) not in node.get("properties", {}):
                return None
    return node


# --- the committed files ---


def test_committed_crds_are_what_the_models_generate() -> None:
    assert crdgen.find_drift(REPO) == [], "run `achilles crds generate` and commit"


def test_chart_ships_the_same_crd_files() -> None:
    names = sorted(path.name for path in (REPO / "crds").glob("*.yaml"))
    assert names == sorted(crdgen.file_name(kind) for kind in KINDS)
    for name in names:
        assert (REPO / "charts/achilles/crds" / name).read_bytes() == (
            REPO / "crds" / name
        ).read_bytes()


def test_generation_is_deterministic() -> None:
    assert crdgen.render() == crdgen.render()


def test_check_reports_each_kind_of_drift_and_generate_repairs_it(tmp_path: Path) -> None:
    for directory in crdgen.OUTPUT_DIRS:
        shutil.copytree(REPO / directory, tmp_path / directory)
    template = tmp_path / crdgen.TIMEZONES_TEMPLATE
    template.parent.mkdir(parents=True)
    shutil.copy(REPO / crdgen.TIMEZONES_TEMPLATE, template)
    agents = tmp_path / "crds" / "achilles.io_agents.yaml"
    agents.write_text(agents.read_text().replace("maxLength: 253", "maxLength: 254", 1))
    (tmp_path / "charts/achilles/crds/achilles.io_agenttools.yaml").unlink()
    (tmp_path / "crds" / "achilles.io_leftovers.yaml").write_text(
        "kind: CustomResourceDefinition\n"
    )

    drift = {
        (item.path.relative_to(tmp_path).as_posix(), item.problem)
        for item in crdgen.find_drift(tmp_path)
    }
    assert drift == {
        ("crds/achilles.io_agents.yaml", "differs"),
        ("charts/achilles/crds/achilles.io_agenttools.yaml", "missing"),
        ("crds/achilles.io_leftovers.yaml", "not generated"),
    }

    runner = CliRunner()
    check = runner.invoke(cli, ["crds", "generate", "--check", "--root", str(tmp_path)])
    assert check.exit_code == 1
    assert "3 generated CRD file(s) out of date" in check.output
    assert "crds/achilles.io_agents.yaml: differs" in check.output

    generate = runner.invoke(cli, ["crds", "generate", "--root", str(tmp_path)])
    assert generate.exit_code == 0, generate.output
    assert crdgen.find_drift(tmp_path) == []
    again = runner.invoke(cli, ["crds", "generate", "--check", "--root", str(tmp_path)])
    assert again.exit_code == 0
    assert "up to date" in again.output


def test_generated_files_say_how_they_were_made() -> None:
    for text in crdgen.render().values():
        assert text.startswith(crdgen.HEADER)
        assert yaml.safe_load(text)["kind"] == "CustomResourceDefinition"


# --- structural schemas with limits ---


@pytest.mark.parametrize(("kind", "schema"), crd_schemas(), ids=[k.kind for k in KINDS])
def test_schema_is_structural(kind: str, schema: dict[str, Any]) -> None:
    for path, node in walk(schema):
        assert "type" in node, f"{kind} {path}: no type"
        for keyword in ("$ref", "anyOf", "oneOf", "allOf", "not", "nullable", "uniqueItems"):
            assert keyword not in node, f"{kind} {path}: {keyword}"
        if node.get("properties"):
            assert "additionalProperties" not in node, f"{kind} {path}"


@pytest.mark.parametrize(("kind", "schema"), crd_schemas(), ids=[k.kind for k in KINDS])
def test_every_string_and_list_is_bounded(kind: str, schema: dict[str, Any]) -> None:
    for path, node in walk(schema):
        if path in ("apiVersion", "kind"):
            continue  # the API server owns these
        if node["type"] == "string":
            bounded = "maxLength" in node or "enum" in node or node.get("format") == "date-time"
            assert bounded, f"{kind} {path}: string without maxLength"
        if node["type"] == "array":
            assert "maxItems" in node, f"{kind} {path}: list without maxItems"


def test_only_kopf_state_preserves_unknown_fields() -> None:
    preserved = [
        (kind, path)
        for kind, schema in crd_schemas()
        for path, node in walk(schema)
        if node.get("x-kubernetes-preserve-unknown-fields")
    ]
    assert preserved == [(kind.kind, "status.kopf") for kind in KINDS]


_FIELD_PATH = re.compile(r"\b(?:spec|status|metadata)(?:\.[A-Za-z_]+)+")


@pytest.mark.parametrize(("kind", "schema"), crd_schemas(), ids=[k.kind for k in KINDS])
def test_every_cel_rule_has_a_message_naming_an_existing_field(
    kind: str, schema: dict[str, Any]
) -> None:
    rules = [(path, rule) for path, node in walk(schema) for rule in node.get(VALIDATIONS_KEY, [])]
    for path, rule in rules:
        named = _FIELD_PATH.findall(rule["message"])
        assert named, f"{kind} {path}: message {rule['message']!r} names no field"
        for field in named:
            assert field == "metadata.name" or resolve(schema, field) is not None, (
                f"{kind} {path}: message names {field}, which the schema does not have"
            )
        if "fieldPath" in rule:
            target = f"{path}{rule['fieldPath']}"
            assert resolve(schema, target) is not None, f"{kind}: fieldPath {target}"
            assert target in named, f"{kind}: the message should name its fieldPath {target}"


def test_agent_rules_cover_the_schedule_union_and_owner() -> None:
    schema = dict(crd_schemas())["Agent"]
    owner = resolve(schema, "spec.owner")
    assert owner is not None
    assert owner[VALIDATIONS_KEY] == [
        {"rule": "self == oldSelf", "message": "spec.owner is immutable; "
         "create a new Agent for another owner"}
    ]  # fmt: skip
    union = resolve(schema, "spec.schedule")
    assert union is not None
    assert union["required"] == ["type"]
    assert union["properties"]["type"]["enum"] == ["interval", "calendar"]
    messages = {rule["message"] for rule in union[VALIDATIONS_KEY]}
    assert messages == {
        "spec.schedule.everyHours is required when type is interval",
        "spec.schedule.cadence is not allowed when type is interval",
        "spec.schedule.weekday is not allowed when type is interval",
        "spec.schedule.time is not allowed when type is interval",
        "spec.schedule.everyHours is not allowed when type is calendar",
        "spec.schedule.cadence is required when type is calendar",
        "spec.schedule.time is required when type is calendar",
        "spec.schedule.weekday is required when cadence is weekly (0=Monday .. 6=Sunday)",
    }
    # Bounds from the domain model's constants, the time format from its pattern.
    assert union["properties"]["everyHours"]["minimum"] == 1
    assert union["properties"]["everyHours"]["maximum"] == 720
    assert union["properties"]["weekday"] | {} == {
        "type": "integer",
        "description": "0=Monday .. 6=Sunday; required for weekly, ignored for daily",
        "minimum": 0,
        "maximum": 6,
    }
    assert union["properties"]["time"]["maxLength"] == 5


def test_platform_is_a_named_singleton() -> None:
    schema = dict(crd_schemas())["AgentPlatform"]
    assert schema[VALIDATIONS_KEY] == [
        {
            "rule": "self.metadata.name == 'default'",
            "message": "metadata.name must be 'default': there is one AgentPlatform per cluster",
        }
    ]


def test_platform_timezone_is_checked_against_the_engines_list_with_a_readable_message() -> None:
    """A runtime error in a rule (the API server's own zone lookup) shows as raw CEL text;
    the engine's list makes the rule false instead, and the message shows the value."""
    from achilles.domain.timezones import iana_timezones

    timezone = resolve(dict(crd_schemas())["AgentPlatform"], "spec.timezone")
    assert timezone is not None
    (rule,) = timezone[VALIDATIONS_KEY]
    assert rule["rule"] == f"self in [{', '.join(repr(n) for n in sorted(iana_timezones()))}]"
    assert rule["messageExpression"] == (
        '"unknown time zone \'" + self + "\' (expected an IANA name like Europe/Berlin)"'
    )
    assert "getHours" not in rule["rule"]
    template = (REPO / crdgen.TIMEZONES_TEMPLATE).read_text()
    assert sorted(iana_timezones()) == template.splitlines()[2].split()


def _undescribed(node: dict[str, Any], path: str) -> list[str]:
    found = []
    for name, child in (node.get("properties") or {}).items():
        if "description" not in child:
            found.append(f"{path}.{name}")
        found += _undescribed(child, f"{path}.{name}")
        found += _undescribed(child.get("items") or {}, f"{path}.{name}[]")
    return found


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_kubectl_explain_describes_every_field(kind: Any) -> None:
    """`kubectl explain agent.spec.schedule` showed <no description> for cadence and
    everyHours: every field of every kind says what it is."""
    schema = crdgen.build_crd(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    # The API server owns metadata (and refuses a description of it there).
    assert _undescribed(schema, kind.kind) == [f"{kind.kind}.metadata"]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_printer_columns_point_at_fields(kind: Any) -> None:
    crd = crdgen.build_crd(kind)
    version = crd["spec"]["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    assert version["subresources"] == {"status": {}}
    for column in version["additionalPrinterColumns"]:
        path = column["jsonPath"].lstrip(".")
        if path != "metadata.creationTimestamp":
            node = resolve(schema, path)
            assert node is not None, f"{kind.kind} column {column['name']}: {path}"
            expected = {"date": "string", "boolean": "boolean", "integer": "integer"}
            assert node["type"] == expected.get(column["type"], "string")
    assert crd["spec"]["names"]["shortNames"] == list(kind.short_names)


def test_agent_columns_are_the_at_a_glance_set() -> None:
    version = crdgen.build_crd(KINDS[0])["spec"]["versions"][0]
    shown = [c["name"] for c in version["additionalPrinterColumns"] if not c.get("priority")]
    assert shown == [
        "Owner", "Enabled", "Admin-Paused", "Model", "Schedule", "Next-Run", "Last-State",
        "Phase", "Age",
    ]  # fmt: skip


def test_chart_values_schema_bounds_the_platform_as_the_crd_does() -> None:
    """values.schema.json copies AgentPlatform's bounds by hand; hold it to the model."""
    values = json.loads((REPO / "charts/achilles/values.schema.json").read_text())["properties"]
    from_values = {
        **{k: v for k, v in values["platform"]["properties"].items() if k != "create"},
        "maxConcurrency": values["maxConcurrency"],
    }
    spec = resolve(dict(crd_schemas())["AgentPlatform"], "spec")
    assert spec is not None
    assert set(from_values) == set(spec["properties"])
    bounds = ("type", "minimum", "maximum", "minLength", "maxLength", "pattern")
    for name, schema in from_values.items():
        crd = spec["properties"][name]
        assert {k: schema.get(k) for k in bounds} == {k: crd.get(k) for k in bounds}, name


# --- the converter refuses what it cannot carry over ---


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _UnboundedString(_Strict):
    name: str


class _UnboundedList(_Strict):
    names: list[Annotated[str, Field(max_length=3)]]


class _UnicodePattern(_Strict):
    code: str = Field(max_length=3, pattern=r"^\d+$")


class _ExclusiveBound(_Strict):
    count: int = Field(gt=0)


class _A(_Strict):
    type: Literal["a"]
    size: int = 3


class _B(_Strict):
    type: Literal["b"]


class _VariantDefault(_Strict):
    choice: Annotated[_A | _B, Field(discriminator="type")]


class _PlainUnion(_Strict):
    value: int | str


class _Tree(_Strict):
    children: list[_Tree] = Field(max_length=2)


REFUSED: list[tuple[type[BaseModel], str]] = [
    (_UnboundedString, "name: a string needs a max_length"),
    (_UnboundedList, "names: a list needs a max_length"),
    (_UnicodePattern, "code: pattern '^\\\\d+$' uses a shorthand class"),
    (_ExclusiveBound, "count: use ge/le bounds"),
    (_VariantDefault, "choice.size: a union variant's field cannot have a default"),
    (_PlainUnion, "value: only `X | None`"),
    (_Tree, "children[*]: recursive model _Tree"),
]


@pytest.mark.parametrize(("model", "message"), REFUSED, ids=[m.__name__ for m, _ in REFUSED])
def test_converter_refuses_what_the_api_server_would_read_differently(
    model: type[BaseModel], message: str
) -> None:
    with pytest.raises(CrdGenerationError) as raised:
        structural_schema(model, overrides={})
    assert message in str(raised.value)


def test_bounded_pattern_gives_the_max_length() -> None:
    class Clock(_Strict):
        time: str = Field(pattern=r"^([01][0-9]|2[0-3]):[0-5][0-9]$")

    assert structural_schema(Clock, overrides={})["properties"]["time"]["maxLength"] == 5
