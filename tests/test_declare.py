"""One declaration per tool: the schema a model sees and the validation come from one typed
model; a denial is a value, rendered into words in one place."""

from __future__ import annotations

from typing import Any

import pytest

from bot.app import buildable_tools
from bot.config import FirewallConfig, RoleConfig
from bot.pipeline.decision import CallScope, ToolInvocation
from bot.pipeline.firewall import FirewallStage
from bot.pipeline.flow import AbortStage, Pipeline, RoleGateStage
from bot.toolsets.declare import parse_args, schema_of
from bot.toolsets.kube.pods import PodLogs
from bot.toolsets.kube.write import ResourcesArgs, scale_args
from bot.toolsets.spec import Tool, ToolArgumentError, ToolContext, ToolKind
from bot.values import Refusal, ToolStatus

TOOLS = {tool.name: tool for tool in buildable_tools()}


def _keys(node: Any) -> set[str]:
    if isinstance(node, dict):
        return set(node) | {key for value in node.values() for key in _keys(value)}
    if isinstance(node, list):
        return {key for value in node for key in _keys(value)}
    return set()


SELF_EXPLANATORY = {
    "name",
    "pod",
    "kind",
    "tail_lines",
    "limit_bytes",
    "max_findings",
    "sort_by",
    "warnings_only",
    "question",
    "query",
    "continue_analysis",
}


@pytest.mark.parametrize("name", sorted(TOOLS))
def test_every_schema_is_compact_and_closed(name: str) -> None:
    schema = TOOLS[name].openai_schema()["function"]["parameters"]
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    # What pydantic adds and a model does not need, or reads worse, never reaches it.
    assert _keys(schema).isdisjoint({"title", "anyOf", "$ref", "$defs"})
    for key, prop in schema["properties"].items():
        described = prop.get("properties", {key: prop}).items()
        # Every schema is paid for in every request: a description only where the
        # argument's name, type, bounds or enum do not already say what it is.
        assert all(p.get("description") or k in SELF_EXPLANATORY for k, p in described), (
            f"{name}: say what each is"
        )
    if TOOLS[name].kind is ToolKind.WRITE:
        assert schema["required"][-1] == "reason"


@pytest.mark.parametrize(
    ("model", "args", "sentence"),
    [
        (PodLogs, [], "arguments must be a JSON object."),
        (PodLogs, {"name": "web", "tail": 5}, "unknown argument(s) tail; known: container, "),
        (PodLogs, {"tail_lines": 10}, "name is required."),
        (PodLogs, {"name": "Web"}, "name 'Web' is not a valid Kubernetes object name."),
        (PodLogs, {"name": "web", "namespace": "a b"}, "namespace 'a b' is not a valid "),
        (PodLogs, {"name": "web", "tail_lines": 0}, "tail_lines must be between 1 and 5000, got 0"),
        (PodLogs, {"name": "web", "tail_lines": "9"}, "tail_lines must be an integer between 1"),
        (PodLogs, {"name": "web", "previous": "yes"}, "previous must be true or false."),
        (scale_args(7), {"name": "api", "replicas": 8}, "replicas must be between 0 and 7, got 8"),
        (
            ResourcesArgs,
            {"name": "api", "container": "app", "limits": {"gpu": "1"}},
            "limits may only set cpu and memory, not gpu.",
        ),
        (
            ResourcesArgs,
            {"name": "api", "container": "app", "requests": {"memory": "5m"}},
            "requests.memory '5m' means 5 thousandths of a byte",
        ),
    ],
)
def test_bad_arguments_get_one_sentence(model: Any, args: Any, sentence: str) -> None:
    with pytest.raises(ToolArgumentError) as raised:
        parse_args(model, args)
    assert str(raised.value).startswith(sentence)


def test_the_validated_model_is_what_the_handler_gets() -> None:
    args = parse_args(ResourcesArgs, {"name": "api", "container": "app", "limits": {"cpu": 2}})
    assert args.limits is not None and args.limits.values() == {"cpu": "2"}
    assert args.requests is None and args.namespace is None
    assert schema_of(scale_args(7))["properties"]["replicas"]["maximum"] == 7


async def test_a_denial_is_a_refusal_value_rendered_once() -> None:
    scope = CallScope(
        session_id=1,
        session_key="k",
        channel_id="C1",
        slack_user="U1",
        role_name="viewer",
        role=RoleConfig(tools=["read/*"], namespaces=["*"]),
        tool_context=ToolContext("prod", "shop"),
        offered=frozenset(TOOLS),
    )
    pipeline = Pipeline(
        [AbortStage(), RoleGateStage(), FirewallStage(FirewallConfig(deny_namespaces=["shop"]))]
    )

    async def run(tool: Tool, args: dict[str, Any]) -> Any:
        return (await pipeline.run(ToolInvocation("c1", tool, args, scope))).outcome

    walled = await run(TOOLS["list_pods"], {})
    assert walled.status is ToolStatus.DENIED
    assert walled.refusal is not None and walled.refusal.stage == "firewall"
    assert walled.content == f"Denied by firewall: {walled.refusal.reason}. The call was not run."

    write = await run(TOOLS["delete_pod"], {"name": "web-1", "reason": "stuck"})
    assert write.refusal == Refusal(
        "channel role", "channel role viewer may not run write/delete_pod"
    )
    assert (
        write.summary == "denied by channel role: channel role viewer may not run write/delete_pod"
    )


def test_the_readme_lists_every_tool_in_its_tools_table() -> None:
    # A person choosing a role's patterns reads the README: a tool missing there is unknown.
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    table = readme.split("## Tools", 1)[1].split("\n## ", 1)[0]
    missing = [t.pattern_name for t in TOOLS.values() if f"`{t.pattern_name}`" not in table]
    assert missing == []
