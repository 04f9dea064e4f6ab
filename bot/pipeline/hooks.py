"""Configured hook commands: PreToolUse (a pipeline stage), PostToolUse and session hooks.

A hook is an argv list run without a shell; it gets one JSON document on stdin. This
module owns running it (timeout, killing its process group, reading stdout/stderr),
reading a PreToolUse answer fail-closed, and the fire-and-forget bookkeeping of the other
hooks. It does not decide which hooks exist (that is `HooksConfig`) and it never logs the
arguments of a call, only the tool's name.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shlex
import signal
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from bot.config import HookConfig
from bot.model.outbound import mask_value, mask_value_async
from bot.pipeline.decision import ToolInvocation
from bot.values import Decision, ToolOutcome, Verdict

log = logging.getLogger(__name__)

# Exit code a PreToolUse hook uses to deny without printing JSON.
DENY_EXIT_CODE = 2
# How much of a tool result a PostToolUse hook receives.
POST_CONTENT_LIMIT = 4000
_REASON_LIMIT = 300
# After a kill, how long to wait for the process to be reaped before giving up on it.
_REAP_S = 5.0


@dataclass(frozen=True)
class HookResult:
    """What one run of a hook produced. `failure` is set when it did not run to the end
    (could not start, timed out); then `exit_code` is None."""

    exit_code: int | None
    stdout: str
    stderr: str
    failure: str | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None and self.exit_code == 0


# The only environment variables a hook gets: an allow-list, because a deny-list by name is
# sidestepped by naming a secret something innocent. Values are masked too.
HOOK_ENVIRONMENT = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "KUBECONFIG",
)


def hook_environment() -> dict[str, str]:
    """The allowed part of the bot's environment: hooks are admin-written commands, but a hook
    that logs its environment must not leak the Slack token or the model key."""
    allowed = {name: os.environ[name] for name in HOOK_ENVIRONMENT if name in os.environ}
    masked, _ = mask_value(allowed)
    return dict(masked)


class HookRunner:
    """Runs one configured command with a JSON document on stdin, within its timeout."""

    def __init__(self, config: HookConfig) -> None:
        self.config = config
        joined = shlex.join(config.command)
        self.name = joined if len(joined) <= 80 else joined[:79] + "…"

    def matches(self, pattern_name: str) -> bool:
        return fnmatchcase(pattern_name, self.config.match)

    async def run(self, document: dict[str, Any]) -> HookResult:
        # What a hook reads is outside kelpie: the same masking as any other exit.
        masked, _ = await mask_value_async(document)
        data = json.dumps(masked, default=str).encode()
        try:
            process = await asyncio.create_subprocess_exec(
                *self.config.command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                # Its own process group, so a timeout kills whatever the hook started too.
                start_new_session=True,
                env=hook_environment(),
            )
        except OSError as error:
            reason = error.strerror or type(error).__name__
            return HookResult(None, "", "", f"could not be started ({reason})")
        try:
            stdout, stderr = await asyncio.wait_for(
                process.communicate(data), self.config.timeout_s
            )
        except TimeoutError:
            await _kill(process)
            return HookResult(None, "", "", f"timed out after {self.config.timeout_s:g} s")
        except asyncio.CancelledError:
            await _kill(process)
            raise
        return HookResult(
            process.returncode,
            stdout.decode(errors="replace"),
            stderr.decode(errors="replace"),
        )


async def _kill(process: asyncio.subprocess.Process) -> None:
    # The whole group: a hook that already exited may have left children holding its pipes.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(process.wait(), _REAP_S)


def _call_document(event: str, call: ToolInvocation) -> dict[str, Any]:
    scope = call.scope
    return {
        "event": event,
        "session": scope.session_key,
        "channel": scope.channel_id,
        "user": scope.slack_user,
        "role": scope.role_name,
        "cluster": scope.tool_context.cluster,
        "namespace": call.namespace,
        "tool": call.tool.name,
        "kind": str(call.tool.kind),
        "args": call.args,
        "tool_call_id": call.tool_call_id,
    }


def _one_line(text: str) -> str:
    lines = text.strip().splitlines()
    line = lines[0].strip() if lines else ""
    return line if len(line) <= _REASON_LIMIT else line[: _REASON_LIMIT - 1] + "…"


def _pre_decision(runner: HookRunner, result: HookResult) -> tuple[Decision, bool]:
    """Read a PreToolUse answer; anything not clearly allow or deny denies (fail closed).

    The flag says whether the hook failed (rather than answered), for the log.
    """
    hook = f"hook {runner.name}"
    if result.failure is not None:
        return Decision.deny(f"{hook} {result.failure}"), True
    answer: Any = None
    stdout = result.stdout.strip()
    if stdout:
        try:
            answer = json.loads(stdout)
        except json.JSONDecodeError:
            answer = None
    if result.exit_code == DENY_EXIT_CODE:
        reason = _one_line(result.stderr)
        if not reason and isinstance(answer, dict) and isinstance(answer.get("reason"), str):
            reason = _one_line(answer["reason"])
        return Decision.deny(reason or f"{hook} denied the call"), False
    if result.exit_code != 0:
        return Decision.deny(f"{hook} failed (exit code {result.exit_code})"), True
    if not stdout:
        return Decision.allow(), False
    if not isinstance(answer, dict):
        return Decision.deny(f"{hook} printed something that is not a JSON object"), True
    behavior = answer.get("behavior")
    given = answer.get("reason")
    reason = _one_line(given) if isinstance(given, str) else ""
    if behavior == "allow":
        return Decision.allow(reason), False
    if behavior == "deny":
        return Decision.deny(reason or f"{hook} denied the call"), False
    return Decision.deny(f"{hook} answered an unknown behavior {str(behavior)[:40]!r}"), True


class PreToolUseStage:
    """Each hook whose `match` fits the tool's `<kind>/<name>` runs, in config order; the
    first one that does not allow stops the call."""

    name = "pre-tool-use hook"

    def __init__(self, hooks: Sequence[HookConfig]) -> None:
        self._runners = [HookRunner(hook) for hook in hooks]

    async def check(self, call: ToolInvocation) -> Decision:
        for runner in self._runners:
            if not runner.matches(call.tool.pattern_name):
                continue
            result = await runner.run(_call_document("pre_tool_use", call))
            decision, failed = _pre_decision(runner, result)
            if failed:
                log.warning("pre_tool_use for tool %s: %s", call.tool.name, decision.reason)
            if decision.verdict is not Verdict.ALLOW:
                return decision
        return Decision.allow()


class _Background:
    """Fire-and-forget hook runs: keeps each task referenced until it ends, logs failures."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)


async def _run_logged(runner: HookRunner, document: dict[str, Any], about: str) -> None:
    event = document.get("event", "hook")
    try:
        result = await runner.run(document)
    except Exception:
        log.exception("%s hook %s%s crashed", event, runner.name, about)
        return
    if result.failure is not None:
        log.warning("%s hook %s%s %s", event, runner.name, about, result.failure)
    elif result.exit_code != 0:
        log.warning(
            "%s hook %s%s failed (exit code %s)", event, runner.name, about, result.exit_code
        )


class PostToolUseHooks:
    """Implements the pipeline's PostHook: `fire()` schedules the matching hooks and
    returns at once; they never delay or change the result."""

    def __init__(self, hooks: Sequence[HookConfig], content_limit: int = POST_CONTENT_LIMIT):
        self._runners = [HookRunner(hook) for hook in hooks]
        self._content_limit = content_limit
        self._background = _Background()

    async def fire(self, call: ToolInvocation, outcome: ToolOutcome) -> None:
        matching = [r for r in self._runners if r.matches(call.tool.pattern_name)]
        if not matching:
            return
        document = _call_document("post_tool_use", call)
        content = outcome.content
        document["result"] = {
            "status": str(outcome.status),
            "summary": outcome.summary,
            "content": content[: self._content_limit],
            "truncated": len(content) > self._content_limit,
        }
        for runner in matching:
            self._background.spawn(_run_logged(runner, document, f" for tool {call.tool.name}"))

    async def drain(self) -> None:
        await self._background.drain()


class SessionHooks:
    """`session_start` hooks run when a session starts, `session_end` ones when a turn
    ends; both fire and forget, with `info` (session key, channel, user…) as the document."""

    def __init__(self, start: Sequence[HookConfig], end: Sequence[HookConfig]) -> None:
        self._start = [HookRunner(hook) for hook in start]
        self._end = [HookRunner(hook) for hook in end]
        self._background = _Background()

    async def session_start(self, info: dict[str, Any]) -> None:
        self._fire("session_start", self._start, info)

    async def session_end(self, info: dict[str, Any]) -> None:
        self._fire("session_end", self._end, info)

    def _fire(self, event: str, runners: list[HookRunner], info: dict[str, Any]) -> None:
        document = {**info, "event": event}
        for runner in runners:
            self._background.spawn(_run_logged(runner, document, ""))

    async def drain(self) -> None:
        await self._background.drain()
