"""The secrets corpus pushed through every exit: the model request, Slack messages and
uploads, hook stdin and environment, the log and the database. None survives.

The corpus is planted where an attacker or an accident would put it: in a pod's logs and
environment, in the person's question, and in what the model writes back."""

from __future__ import annotations

import io
import json
import logging
import sys
from pathlib import Path

import pytest
from sqlmodel import SQLModel, select

from bot.model.outbound import MaskingLogFilter, install_log_masking
from bot.pipeline.hooks import HOOK_ENVIRONMENT
from bot.store.tables import MessageRow, PayloadRow, ToolAuditRow
from tests.secrets_corpus import ALL_SECRETS, ALL_TEXT, SECRETS, leaked
from tests.world import ALICE, CAROL, SHOP_CHANNEL, World

HOOK = """
import json, os, sys
from pathlib import Path
out = Path(sys.argv[1])
document = sys.stdin.read()
with (out / "stdin.jsonl").open("a") as f:
    f.write(document + "\\n")
(out / "env.json").write_text(json.dumps(dict(os.environ)))
"""
# What the model "echoes" into its answer: a handful of corpus secrets as prose.
ECHOED = [SECRETS[0][1], SECRETS[9][1], SECRETS[14][1], SECRETS[27][1]]


@pytest.fixture
def captured_log():
    """The root logger's output through the same masking kelpie's `run` installs."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    install_log_masking(root)
    try:
        yield stream
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


async def rows(world: World, table: type[SQLModel]) -> str:
    async with world.bots[-1].db.sessions() as session:
        return json.dumps(
            [row.model_dump(mode="json") for row in (await session.exec(select(table))).all()]
        )


async def test_the_corpus_leaves_through_no_exit(
    world: World, tmp_path: Path, captured_log: io.StringIO, monkeypatch: pytest.MonkeyPatch
):
    # A variable named innocently, holding a token: an allow-list keeps it from hooks.
    monkeypatch.setenv("SHOP_DEPLOY_NOTE", SECRETS[9][2])
    script = tmp_path / "hook.py"
    script.write_text(HOOK)
    pod = world.kube.add_pod("shop", "leaky-0", logs=ALL_TEXT + "\n")
    pod["spec"]["containers"][0]["env"] += [
        {"name": f"VAR_{i}", "value": text} for i, (_, text, _) in enumerate(SECRETS)
    ]
    world.kube.put("Pod", pod)
    for call in (
        ("pod_logs", {"namespace": "shop", "name": "leaky-0"}),
        ("describe_pod", {"namespace": "shop", "name": "leaky-0"}),
        ("show_logs", {"namespace": "shop", "pod": "leaky-0", "continue_analysis": True}),
    ):
        world.model.reply_tool_calls([call])
    world.model.reply_text("Found these in the logs:\n" + "\n".join(ECHOED), usage=False)
    hooks = {
        "post_tool_use": [{"match": "*", "command": [sys.executable, str(script), str(tmp_path)]}]
    }
    approver = {"roles": {"viewer": {"approval": {"approvers": {"users": [CAROL]}}}}}
    bot = await world.start_bot({"hooks": hooks, **approver})
    question = f"why does leaky-0 fail? {SECRETS[25][1]} and {SECRETS[31][1]}"
    mention = await world.mention(SHOP_CHANNEL, ALICE, question)
    await world.wait_bot_replies(SHOP_CHANNEL, mention["ts"], 2)
    await world.drain()
    for hook_runner in bot.core.background:
        await hook_runner.drain()
    command = world.slack.slash_command("/kelpie", "payload", CAROL, SHOP_CHANNEL)
    await world.slack.deliver("slash_commands", command)
    await world.slack.wait_for(lambda s: len(s.responses_to(command["response_url"])) >= 2)

    # The model saw the logs (masked): the tool result is there, the secrets are not.
    model_sent = json.dumps(world.model.requests)
    assert "[MASKED]" in model_sent and leaked(model_sent) == []
    # Slack: every Web API call, every upload, every response_url post.
    uploads = [f for f in world.slack.files.values() if f.thread_ts == mention["ts"]]
    assert uploads and "[MASKED]" in uploads[0].content.decode()
    slack_saw = json.dumps([c.params for c in world.slack.calls], default=str)
    slack_saw += "".join(f.content.decode(errors="replace") for f in world.slack.files.values())
    slack_saw += json.dumps([p.body for p in world.slack.response_posts])
    assert leaked(slack_saw) == []
    answer = [m for m in world.slack.thread(SHOP_CHANNEL, mention["ts"]) if m.is_bot][-1]
    assert "Found these in the logs" in answer.text and "[MASKED]" in answer.text
    # Hooks: what they read on stdin, and their whole environment.
    hook_stdin = (tmp_path / "stdin.jsonl").read_text()
    assert "leaky-0" in hook_stdin and leaked(hook_stdin) == []
    env = json.loads((tmp_path / "env.json").read_text())
    assert set(env) <= set(HOOK_ENVIRONMENT) | {"PWD", "SHLVL", "_", "LC_CTYPE"}
    assert leaked(json.dumps(env)) == []
    # The database: messages, the tool audit, the payload log.
    stored = "".join([await rows(world, t) for t in (MessageRow, ToolAuditRow, PayloadRow)])
    assert "leaky-0" in stored and leaked(stored) == []
    # The log, at DEBUG, through the masking filter.
    assert leaked(captured_log.getvalue()) == []


def test_the_log_filter_masks_messages_arguments_and_tracebacks():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(MaskingLogFilter())
    logger = logging.getLogger("tests.exits.filter")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        logger.info("connecting with %s", SECRETS[27][1])
        try:
            raise RuntimeError(ALL_TEXT)
        except RuntimeError:
            logger.exception(
                "tool crashed: %r", {"token": "ghp_16C7e42F292c6912E7710c838347Ae178B4a"}
            )
    finally:
        logger.removeHandler(handler)
    output = stream.getvalue()
    assert "connecting with" in output and "RuntimeError" in output
    assert leaked(output) == [] and "ghp_16C7e42F292c6912E7710c838347Ae178B4a" not in output
    assert ALL_SECRETS  # the corpus is not empty
