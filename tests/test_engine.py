"""Unit tests of the agent loop with the in-process scripted gateway and a real SQLite store."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from bot.agent.engine import INTERRUPTED_RESULT, Engine, RetryPolicy, TurnRequest
from bot.agent.events import TextDelta, ToolFinished, ToolStarted, TurnEvent, TurnFinish
from bot.app import call_pipeline
from bot.config import RoleConfig
from bot.pipeline.decision import CallScope
from bot.pipeline.flow import AbortStage, PermissionStage, RoleGateStage
from bot.pipeline.harness import ToolHarness, ToolRegistry
from bot.store.db import Database
from bot.store.repositories import MessageRepository, SessionRepository, ToolAuditRepository
from bot.toolsets.spec import Tool, ToolContext, ToolKind, ToolResult, ToolScope
from bot.values import Message, Role, SessionInfo, ToolOutcome, ToolStatus, WriteOutcome
from tests import scripted_gateway as script


class NoApprovals:
    """An approval port on which nobody ever approves: every write is rejected."""

    async def request(self, call, plan) -> ToolOutcome:
        return ToolOutcome(ToolStatus.DENIED, "Not executed: rejected by <@U0SRE>.", "rejected")

    async def executing(self, approval) -> None:
        raise AssertionError("nobody approves here")

    async def execute(self, approval) -> WriteOutcome:
        raise AssertionError("nobody approves here")


class Recorder:
    def __init__(self) -> None:
        self.events: list[TurnEvent] = []

    async def __call__(self, event: TurnEvent) -> None:
        self.events.append(event)


def make_tool(
    name: str,
    kind: ToolKind = ToolKind.READ,
    *,
    block: asyncio.Event | None = None,
    calls: list[dict[str, Any]] | None = None,
) -> Tool:
    async def handler(args: dict[str, Any], context: ToolContext) -> ToolResult:
        if calls is not None:
            calls.append(args)
        if block is not None:
            await block.wait()
        return ToolResult(text=f"{name} result for {args}", summary=f"{name} ok")

    return Tool(
        name=name,
        kind=kind,
        description=f"test tool {name}",
        parameters={"type": "object", "properties": {"namespace": {"type": "string"}}},
        handler=handler,
        scope=ToolScope.NAMESPACED,
    )


@pytest.fixture
async def store(tmp_path):
    db = Database(f"sqlite:///{tmp_path}/k.db")
    await db.upgrade()
    yield db
    await db.close()


async def new_session(db: Database) -> SessionInfo:
    return await SessionRepository(db).get_or_create(
        SessionInfo(0, "T:C:1.0", "T", "C", "1.0", False, "viewer", "prod", "shop", "U1")
    )


def build(
    db: Database,
    gateway: script.ScriptedGateway,
    tools: list[Tool],
    role: RoleConfig | None = None,
    retry: RetryPolicy | None = None,
    sleep: Any = asyncio.sleep,
    **options: Any,
):
    registry = ToolRegistry(tools)
    audit = ToolAuditRepository(db)
    pipeline = call_pipeline(
        [AbortStage(), RoleGateStage(), PermissionStage()],
        timeout_s=5,
        approvals=NoApprovals(),
        writes=NoApprovals(),
        post_hooks=[],
        audit=audit,
    )
    harness = ToolHarness(registry, pipeline, audit)
    engine = Engine(
        gateway,
        harness,
        MessageRepository(db),
        retry or RetryPolicy(2, 0.0),
        sleep=sleep,
        **options,
    )
    role = role or RoleConfig(tools=["read/*"], namespaces=["*"])

    def request(session: SessionInfo, abort: asyncio.Event | None = None) -> TurnRequest:
        scope = CallScope(
            session_id=session.id,
            session_key=session.session_key,
            channel_id="C",
            slack_user="U1",
            role_name="viewer",
            role=role,
            tool_context=ToolContext("prod", "shop"),
            offered=frozenset(t.name for t in tools),
            abort=abort or asyncio.Event(),
        )
        return TurnRequest(
            session, "turn1", "system", [], Message(Role.USER, "why?"), tools, scope, max_rounds=3
        )

    return engine, request


async def test_tool_round_then_answer_persists_everything(store):
    session = await new_session(store)
    gateway = script.ScriptedGateway(
        script.calls(("list_pods", {"namespace": "shop"})), script.text("All pods are fine.")
    )
    engine, request = build(store, gateway, [make_tool("list_pods")])
    recorder = Recorder()
    finished = await engine.run_turn(request(session), recorder)
    assert finished.finish is TurnFinish.STOP
    assert finished.answer == "All pods are fine."
    assert finished.stats.rounds == 2 and finished.stats.tool_calls == 1
    started = [e for e in recorder.events if isinstance(e, ToolStarted)]
    ended = [e for e in recorder.events if isinstance(e, ToolFinished)]
    assert [e.args_summary for e in started] == ["ns=shop"]
    assert ended[0].status is ToolStatus.OK
    assert "".join(e.text for e in recorder.events if isinstance(e, TextDelta)) == (
        "All pods are fine."
    )
    # The second request carried the tool call and its result.
    second = gateway.requests[1].messages
    assert second[-2]["tool_calls"][0]["function"]["name"] == "list_pods"
    assert second[-1]["role"] == "tool" and "list_pods result" in second[-1]["content"]
    stored = await MessageRepository(store).all_for_session(session.id)
    assert [m.role for m in stored] == [Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]
    gateway.assert_consumed()


async def test_other_work_runs_while_an_answer_already_buffered_is_streamed(store):
    # The scripted model hands its deltas over without ever suspending, as a stream whose
    # chunks have all arrived does; the engine still gives the loop back (here after every
    # delta), so an acknowledgement due meanwhile is not held up for the whole answer.
    session = await new_session(store)
    gateway = script.ScriptedGateway(script.text("All pods are fine. " * 20))
    engine, request = build(store, gateway, [], loop_slice_s=0.0)
    ticks = 0

    async def other_work() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    seen: list[int] = []

    async def emit(event: TurnEvent) -> None:
        if isinstance(event, TextDelta):
            seen.append(ticks)

    other = asyncio.create_task(other_work())
    try:
        finished = await engine.run_turn(request(session), emit)
    finally:
        other.cancel()
    assert finished.answer == "All pods are fine. " * 20
    assert len(seen) > 20 and seen == sorted(seen) and len(set(seen)) == len(seen)


async def test_retries_then_answer(store):
    session = await new_session(store)
    gateway = script.ScriptedGateway(script.error(), script.error(), script.text("ok"))
    engine, request = build(store, gateway, [])
    finished = await engine.run_turn(request(session), Recorder())
    assert finished.finish is TurnFinish.STOP and finished.answer == "ok"
    assert len(gateway.requests) == 3


async def test_default_retry_schedule_is_two_retries_one_then_two_seconds(store):
    from bot.config import AgentConfig

    session = await new_session(store)
    slept: list[float] = []

    async def record_sleep(seconds: float) -> None:
        slept.append(seconds)

    gateway = script.ScriptedGateway(script.error(), script.error(), script.error())
    defaults = AgentConfig()
    policy = RetryPolicy(retries=defaults.llm_retries, delay_s=defaults.llm_retry_delay_s)
    engine, request = build(store, gateway, [], retry=policy, sleep=record_sleep)
    finished = await engine.run_turn(request(session), Recorder())
    assert finished.finish is TurnFinish.ERROR
    assert slept == [1.0, 2.0] and len(gateway.requests) == 3


async def test_retries_exhausted_gives_one_sentence(store):
    session = await new_session(store)
    gateway = script.ScriptedGateway(script.error(), script.error(), script.error())
    engine, request = build(store, gateway, [])
    finished = await engine.run_turn(request(session), Recorder())
    assert finished.finish is TurnFinish.ERROR
    assert finished.error == "The model server did not answer (HTTP 500)."
    assert len(gateway.requests) == 3


async def test_non_retryable_error_is_not_retried(store):
    session = await new_session(store)
    gateway = script.ScriptedGateway(script.error("Bad key.", retryable=False))
    engine, request = build(store, gateway, [])
    finished = await engine.run_turn(request(session), Recorder())
    assert finished.finish is TurnFinish.ERROR and len(gateway.requests) == 1


async def test_round_budget_ends_with_a_no_tools_answer(store):
    session = await new_session(store)
    gateway = script.ScriptedGateway(
        *(script.calls(("list_pods", {"namespace": f"ns{i}"})) for i in range(3)),
        script.text("Best effort answer."),
    )
    engine, request = build(store, gateway, [make_tool("list_pods")])
    finished = await engine.run_turn(request(session), Recorder())
    assert finished.finish is TurnFinish.MAX_ITERATIONS
    assert finished.answer == "Best effort answer."
    assert gateway.requests[-1].tools == []
    gateway.assert_consumed()


async def test_denied_call_is_not_run_and_model_told(store):
    session = await new_session(store)
    ran: list[dict[str, Any]] = []
    gateway = script.ScriptedGateway(
        script.calls(("delete_pod", {"namespace": "shop"})), script.text("I may not.")
    )
    # The model calls a write tool that exists but was not offered to this role.
    engine, request = build(store, gateway, [make_tool("delete_pod", ToolKind.WRITE, calls=ran)])
    recorder = Recorder()
    await engine.run_turn(request(session), recorder)
    assert ran == []
    result = gateway.requests[1].messages[-1]["content"]
    assert "channel role viewer may not run write/delete_pod" in result
    assert [e.status for e in recorder.events if isinstance(e, ToolFinished)] == [ToolStatus.DENIED]
    audit = await ToolAuditRepository(store).for_session(session.id)
    assert [(row.stage, row.decision) for row in audit] == [
        ("abort", "allow"),
        ("channel role", "deny"),
    ]
    assert audit[-1].tool == "write/delete_pod" and audit[-1].slack_user == "U1"


async def test_allowed_call_is_audited_with_masked_arguments(store):
    session = await new_session(store)
    gateway = script.ScriptedGateway(
        script.calls(("list_pods", {"namespace": "shop", "note": "password=hunter2"})),
        script.text("done"),
    )
    engine, request = build(store, gateway, [make_tool("list_pods")])
    await engine.run_turn(request(session), Recorder())
    audit = await ToolAuditRepository(store).for_session(session.id)
    assert [(row.stage, row.decision) for row in audit] == [
        ("abort", "allow"),
        ("channel role", "allow"),
        ("permission", "allow"),
        ("execute", "ok"),
    ]
    assert "hunter2" not in audit[0].arguments_json and "[MASKED]" in audit[0].arguments_json


async def test_bad_arguments_come_back_as_a_tool_error(store):
    session = await new_session(store)
    gateway = script.ScriptedGateway(script.calls(("list_pods", "{not json")), script.text("ok"))
    engine, request = build(store, gateway, [make_tool("list_pods")])
    await engine.run_turn(request(session), Recorder())
    assert "not valid JSON" in gateway.requests[1].messages[-1]["content"]
    # Not run, and still audited: every call leaves a decision behind.
    audit = await ToolAuditRepository(store).for_session(session.id)
    assert [(row.stage, row.decision, row.tool) for row in audit] == [
        ("validate", "failed", "list_pods")
    ]
    assert "{not json" in audit[0].arguments_json


async def test_interrupt_repairs_unanswered_calls(store):
    session = await new_session(store)
    block = asyncio.Event()
    abort = asyncio.Event()
    gateway = script.ScriptedGateway(script.calls(("list_pods", {"namespace": "shop"})))
    engine, request = build(store, gateway, [make_tool("list_pods", block=block)])
    recorder = Recorder()
    task = asyncio.create_task(engine.run_turn(request(session, abort), recorder))
    while not any(isinstance(e, ToolStarted) for e in recorder.events):
        await asyncio.sleep(0.01)
    # A person interrupts: the abort is set, then the turn's task is cancelled.
    abort.set()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    stored = await MessageRepository(store).all_for_session(session.id)
    assert stored[-1].role is Role.TOOL and stored[-1].content == INTERRUPTED_RESULT
    calls = stored[-2].tool_calls
    assert calls and calls[0].id == stored[-1].tool_call_id
