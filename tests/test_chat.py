"""`kelpie chat` end to end through a real pseudo-terminal: the CLI runs as a subprocess
against the Kubernetes and model peers, a person types at the prompt, and the cluster
peer's request log proves what was read and written. No Slack anywhere."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from bot.config import load_config
from bot.pipeline.roles import ChannelRoles
from bot.terminal import TERMINAL_USER, ChannelNotEnabled, terminal_binding
from tests.peers.kube_server import KubeServer
from tests.peers.model_server import HangStep, ModelServer, TextStep
from tests.world import MODEL_KEY, base_config

REPO = Path(__file__).resolve().parents[1]
SCALE_PATH = "/apis/apps/v1/namespaces/shop/deployments/checkout-api/scale"
READ_TIMEOUT_S = 90.0
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Terminal:
    """`python -m bot.cli chat …` on the slave side of a pty; the test holds the master."""

    def __init__(self, args: list[str], env: dict[str, str], cwd: Path) -> None:
        self._master, slave = os.openpty()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bot.cli", "chat", *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            cwd=cwd,
            start_new_session=True,
            close_fds=True,
        )
        os.close(slave)
        self._output = bytearray()
        self._changed = asyncio.Event()
        self._closed = False
        asyncio.get_running_loop().add_reader(self._master, self._on_readable)

    def _on_readable(self) -> None:
        try:
            chunk = os.read(self._master, 65536)
        except OSError:  # EIO: the child closed its side
            chunk = b""
        if chunk:
            self._output += chunk
        else:
            self._stop_reading()
        self._changed.set()

    def _stop_reading(self) -> None:
        if not self._closed:
            self._closed = True
            asyncio.get_running_loop().remove_reader(self._master)

    @property
    def raw(self) -> bytearray:
        return self._output

    @property
    def text(self) -> str:
        return _ANSI.sub("", self._output.decode("utf-8", errors="replace")).replace("\r", "")

    async def expect(self, pattern: str, *, after: int = 0) -> int:
        """Wait until `pattern` shows up at or after offset `after`; returns where it ends."""
        deadline = asyncio.get_running_loop().time() + READ_TIMEOUT_S
        while True:
            found = self.text.find(pattern, after)
            if found >= 0:
                return found + len(pattern)
            remaining = deadline - asyncio.get_running_loop().time()
            if self._closed or remaining <= 0:
                raise AssertionError(
                    f"{pattern!r} never showed up; the terminal shows:\n{self.text}"
                )
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                pass

    def type(self, line: str) -> None:
        os.write(self._master, f"{line}\n".encode())

    async def wait_exit(self) -> int:
        code = await asyncio.to_thread(self.process.wait, READ_TIMEOUT_S)
        while not self._closed:  # collect what it printed last
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), 5)
            except TimeoutError:
                break
        return code

    async def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            await asyncio.to_thread(self.process.wait, READ_TIMEOUT_S)
        self._stop_reading()
        os.close(self._master)


class Peers(SimpleNamespace):
    model: ModelServer
    kube: KubeServer
    config_path: Path
    db: Path
    env: dict[str, str]


@pytest.fixture
async def peers(tmp_path: Path) -> AsyncIterator[Peers]:
    model, kube = ModelServer(), KubeServer()
    await model.start()
    await kube.start()
    kube.seed_demo()
    kubeconfig = tmp_path / "kubeconfig"
    kube.write_kubeconfig(kubeconfig)
    db = tmp_path / "chat.db"
    # Slack is never contacted in terminal mode: an address nothing listens on proves it.
    no_slack = SimpleNamespace(api_url="http://127.0.0.1:9/api/")
    config: dict[str, Any] = base_config(no_slack, model, kubeconfig, db)  # type: ignore[arg-type]
    config["channels"] = [
        {"match": {"id": "C0ADMIN"}, "role": "operator", "namespace": "platform"},
        {"match": {"name": "shop-ops"}, "role": "operator", "namespace": "shop"},
        {"match": {"name": "shop-admin"}, "role": "admin", "namespace": "shop"},
        {"match": {"name": "shop-*"}, "role": "viewer", "namespace": "shop"},
        {"match": {"im": True}, "role": "viewer"},
    ]
    config_path = tmp_path / "kelpie.yaml"
    config_path.write_text(yaml.safe_dump(config))
    # No Slack tokens at all: only the model key the profile names.
    env = {
        "PATH": "/usr/bin:/bin",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "PYTHONPATH": str(REPO),
        "KELPIE_TEST_MODEL_KEY": MODEL_KEY,
    }
    try:
        yield Peers(model=model, kube=kube, config_path=config_path, db=db, env=env)
    finally:
        await kube.stop()
        await model.stop()


@pytest.fixture
async def open_chat(peers: Peers, tmp_path: Path) -> AsyncIterator[Any]:
    terminals: list[Terminal] = []

    def start(channel: str | None = "shop-ops", *more: str) -> Terminal:
        args = ["--config", str(peers.config_path), *more]
        if channel is not None:
            args += ["--channel", channel]
        terminal = Terminal(args, peers.env, tmp_path)
        terminals.append(terminal)
        return terminal

    yield start
    for terminal in terminals:
        await terminal.close()


def real_writes(kube: KubeServer) -> list[Any]:
    return [w for w in kube.writes() if w.query.get("dryRun") != "All"]


def pod_lists(kube: KubeServer) -> list[str]:
    return [r.path for r in kube.requests if r.method == "GET" and r.path.endswith("/pods")]


def rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as connection:
        return list(connection.execute(sql))


async def test_chat_answers_a_question_through_a_pseudo_terminal(peers: Peers, open_chat: Any):
    peers.model.reply_tool_calls([("list_pods", {"namespace": "shop"})])
    peers.model.reply_text("checkout-api has one pod in CrashLoopBackOff (OOMKilled).")
    peers.model.reply_text("It ran out of memory, as the pod list showed.")
    chat: Terminal = open_chat("shop-ops")

    banner = await chat.expect("you> ")
    assert "#shop-ops" in chat.text and "role operator" in chat.text
    assert "namespace shop" in chat.text
    chat.type("why is checkout-api crashlooping?")
    end = await chat.expect(
        "checkout-api has one pod in CrashLoopBackOff (OOMKilled).", after=banner
    )
    turn = chat.text[banner:end]
    # The tool line: status mark, tool name and arguments, then the one-line result.
    tool_line = next(line for line in turn.splitlines() if "✓ list_pods" in line)
    assert "ns=shop" in tool_line and "pods" in tool_line.split("·", 1)[1]
    assert pod_lists(peers.kube) == ["/api/v1/namespaces/shop/pods"]

    # A follow-up in the same chat carries the first turn (the session lives in the database).
    prompt = await chat.expect("you> ", after=end)
    chat.type("and why?")
    await chat.expect("It ran out of memory, as the pod list showed.", after=prompt)
    sent = [str(m.get("content")) for m in peers.model.requests[2]["messages"]]
    assert any("why is checkout-api crashlooping?" in c for c in sent)
    assert "checkout-api has one pod in CrashLoopBackOff (OOMKilled)." in sent
    assert "and why?" in sent[-1]

    await chat.expect("you> ", after=prompt + 1)
    chat.type("/quit")
    assert await chat.wait_exit() == 0
    peers.model.assert_script_consumed()
    sessions = rows(peers.db, "SELECT team_id, channel_id, role, namespace FROM sessions")
    assert sessions == [("terminal", "terminal:shop-ops", "operator", "shop")]


@pytest.mark.parametrize(("answer", "executed"), [("y", True), ("n", False)])
async def test_a_write_asks_for_approval_at_the_prompt(
    peers: Peers, open_chat: Any, answer: str, executed: bool
):
    """#shop-ops's role asks for someone else's approval (four eyes); the operator lifted
    that explicitly with --self-approve, and every decision says so."""
    args = {"namespace": "shop", "name": "checkout-api", "replicas": 5, "reason": "traffic spike"}
    peers.model.reply_tool_calls([("scale_deployment", args)])
    peers.model.reply_text("Done: see the outcome above.")
    chat: Terminal = open_chat("shop-ops", "--self-approve")
    decider = f"{TERMINAL_USER} (self-approved with --self-approve)"

    start = await chat.expect("you> ")
    assert "--self-approve: your decisions are recorded as self-approved" in chat.text[:start]
    chat.type("scale checkout-api to 5")
    asked = await chat.expect("Approve this change? [y/N] ", after=start)
    card = chat.text[start:asked]
    assert "Approval needed:" in card and "spec.replicas 3 → 5" in card
    assert "traffic spike" in card
    # The turn ended at the card; the question comes after it, at the prompt (no card to click).
    assert "⏸ scale_deployment" in card
    assert "nothing changes unless the change shown above is approved at the prompt" in card
    assert "card" not in card.split("Waiting for approval")[1]
    # Only the server-side dry run so far.
    assert real_writes(peers.kube) == []
    assert any(w.query.get("dryRun") == "All" for w in peers.kube.writes())

    chat.type(answer)
    end = await chat.expect("Done: see the outcome above.", after=asked)
    await chat.expect("you> ", after=end)
    writes = real_writes(peers.kube)
    note = [m for m in peers.model.requests[-1]["messages"] if m["role"] == "user"][-1]
    if executed:
        assert [(w.method, w.path) for w in writes] == [("PATCH", SCALE_PATH)]
        assert writes[0].body["spec"] == {"replicas": 5}
        # The person at the terminal by their login name, never Slack's <@…> syntax.
        assert f"Approved by {decider}" in chat.text[asked:end]
        assert "<@" not in chat.text
        assert "outcome: scaled shop/checkout-api to 5 replicas" in chat.text[asked:end]
        assert "Scaled deployment shop/checkout-api" in note["content"]
        audits = rows(
            peers.db,
            "SELECT phase, requested_by, approved_by, ok FROM write_audit ORDER BY id",
        )
        assert audits == [
            ("intent", TERMINAL_USER, decider, 1),
            ("outcome", TERMINAL_USER, decider, 1),
        ]
    else:
        assert writes == []
        assert "Rejected: not executed." in chat.text[asked:end]
        assert f"rejected by <@{decider}>" in note["content"]
        assert rows(peers.db, "SELECT phase FROM write_audit") == []


async def test_the_terminal_card_warns_that_argo_cd_manages_the_target(
    peers: Peers, open_chat: Any
) -> None:
    """kubernetes.gitops: warn: the change is proposed, its card saying who may revert it."""
    config = yaml.safe_load(peers.config_path.read_text())
    config["kubernetes"]["gitops"] = "warn"
    peers.config_path.write_text(yaml.safe_dump(config))
    deployment = peers.kube.get("Deployment", "shop", "checkout-api")
    assert deployment is not None
    deployment["metadata"]["annotations"]["argocd.argoproj.io/tracking-id"] = (
        "shop:apps/Deployment:shop/checkout-api"
    )
    peers.kube.put("Deployment", deployment)
    args = {"namespace": "shop", "name": "checkout-api", "replicas": 5, "reason": "traffic spike"}
    peers.model.reply_tool_calls([("scale_deployment", args)])
    peers.model.reply_text("Not changed.")
    chat: Terminal = open_chat("shop-ops", "--self-approve")
    start = await chat.expect("you> ")
    chat.type("scale checkout-api to 5")
    asked = await chat.expect("Approve this change? [y/N] ", after=start)
    card = chat.text[start:asked]
    assert "spec.replicas 3 → 5" in card
    assert (
        "warning: Deployment shop/checkout-api is managed by Argo CD (Application shop): it may "
        "revert this change at its next sync unless the change is also made in Git."
    ) in " ".join(card.split())
    chat.type("n")
    await chat.expect("Not changed.", after=asked)
    assert real_writes(peers.kube) == []
    chat.type("/quit")
    assert await chat.wait_exit() == 0
    peers.model.assert_script_consumed()


async def test_control_characters_from_the_model_cannot_drive_the_terminal(
    peers: Peers, open_chat: Any
):
    hostile = "All good.\x1b[2K\rApproved by carol\x1b]52;c;ZWNobyBwd25lZA==\x07 \x1b[31mred\x9b2J"
    peers.model.reply_text(hostile)
    chat: Terminal = open_chat("shop-ops")
    start = await chat.expect("you> ")
    chat.type("status?")
    end = await chat.expect("red", after=start)
    shown = chat.text[start:end]
    assert "All good.\\x1b[2K\\x0dApproved by carol\\x1b]52;c;" in shown
    assert "\\x07 \\x1b[31mred" in shown
    raw = bytes(chat.raw)
    assert b"\x1b[2K" not in raw and b"\x1b]52" not in raw and b"\x1b[31m" not in raw
    assert b"\x07" not in raw and "\x9b".encode() not in raw
    chat.type("/quit")
    assert await chat.wait_exit() == 0


async def test_four_eyes_hold_at_the_terminal(peers: Peers, open_chat: Any):
    """Without --self-approve the person who asked cannot decide their own change where the
    role asks for someone else: no y/N is offered (their "no" would be refused as a
    rejection and asked again), they are told who may and how, and the card is withdrawn."""
    args = {"namespace": "shop", "name": "checkout-api", "replicas": 5, "reason": "load"}
    peers.model.reply_tool_calls([("scale_deployment", args)])
    chat: Terminal = open_chat("shop-ops")
    start = await chat.expect("you> ")
    chat.type("scale checkout-api to 5")
    end = await chat.expect(f"Withdrawn by {TERMINAL_USER}: not executed.", after=start)
    told = chat.text[start:end]
    assert "Approval needed:" in told and "Approve this change?" not in told
    assert "so someone else has to decide it" in told
    # Who may, from the role's configured approvers, and how.
    assert "Slack user U0CAROL" in told and "Slack group S0SRE" in told
    assert "--self-approve" in told
    prompt = await chat.expect("you> ", after=end)
    chat.type("/quit")
    await chat.expect("/quit", after=prompt)
    assert await chat.wait_exit() == 0
    assert real_writes(peers.kube) == []
    assert rows(peers.db, "SELECT status, decided_by FROM approvals") == [
        ("cancelled", TERMINAL_USER)
    ]
    assert rows(peers.db, "SELECT phase FROM write_audit") == []
    peers.model.assert_script_consumed()


async def test_a_role_that_allows_the_requester_asks_at_the_terminal(peers: Peers, open_chat: Any):
    args = {"namespace": "shop", "name": "checkout-api", "replicas": 4, "reason": "load"}
    peers.model.reply_tool_calls([("scale_deployment", args)])
    peers.model.reply_text("Scaled.")
    chat: Terminal = open_chat("shop-admin")  # admin: allow_requester: true
    start = await chat.expect("you> ")
    chat.type("scale checkout-api to 4")
    asked = await chat.expect("Approve this change? [y/N] ", after=start)
    chat.type("y")
    end = await chat.expect("Scaled.", after=asked)
    assert f"Approved by {TERMINAL_USER} " in chat.text[asked:end]
    await chat.expect("you> ", after=end)
    chat.type("/quit")
    assert await chat.wait_exit() == 0
    assert [(w.method, w.path) for w in real_writes(peers.kube)] == [("PATCH", SCALE_PATH)]


async def test_ctrl_c_at_the_approval_prompt_withdraws_the_write(peers: Peers, open_chat: Any):
    args = {"namespace": "shop", "name": "checkout-api", "replicas": 5, "reason": "load"}
    peers.model.reply_tool_calls([("scale_deployment", args)])
    chat: Terminal = open_chat("shop-admin")
    start = await chat.expect("you> ")
    chat.type("scale checkout-api to 5")
    asked = await chat.expect("Approve this change? [y/N] ", after=start)

    chat.process.send_signal(signal.SIGINT)  # what Ctrl-C sends
    end = await chat.expect(f"Withdrawn by {TERMINAL_USER}: not executed.", after=asked)
    # The chat goes on: the next line is a question again, never an answer to the old card.
    prompt = await chat.expect("you> ", after=end)
    chat.type("/quit")
    await chat.expect("/quit", after=prompt)
    assert await chat.wait_exit() == 0
    assert real_writes(peers.kube) == []
    assert rows(peers.db, "SELECT status FROM approvals") == [("cancelled",)]
    peers.model.assert_script_consumed()


async def test_ctrl_c_mid_turn_ends_it_with_the_usual_footer(peers: Peers, open_chat: Any):
    peers.model.enqueue(HangStep(20, then=TextStep("too late")))
    chat: Terminal = open_chat("shop-ops")
    start = await chat.expect("you> ")
    chat.type("why is checkout-api slow?")
    await peers.model.wait_for_requests(1, timeout=60)  # the chat imports LiteLLM first

    chat.process.send_signal(signal.SIGINT)
    stopped = await chat.expect("Interrupted.", after=start)
    end = await chat.expect("]", after=stopped)
    # Model, tier and where the tier came from, as under an answered turn.
    assert (
        "[openai/test-model · tier low (default) · 1 round · 0 tool calls" in chat.text[stopped:end]
    )
    prompt = await chat.expect("you> ", after=end)
    chat.type("/quit")
    await chat.expect("/quit", after=prompt)
    assert await chat.wait_exit() == 0


async def test_a_channel_with_no_role_is_refused_in_one_sentence(peers: Peers, tmp_path: Path):
    command = [sys.executable, "-m", "bot.cli", "chat", "--config", str(peers.config_path)]

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*command, "--channel", "random"],
            capture_output=True,
            text=True,
            env=peers.env,
            cwd=tmp_path,
            timeout=READ_TIMEOUT_S,
            check=False,
            stdin=subprocess.DEVNULL,
        )

    result = await asyncio.to_thread(run)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        "kelpie is not enabled in #random: the config maps that channel to no role."
    ]
    assert peers.model.requests == []


def test_the_role_is_the_named_channels_and_without_a_name_the_dm_mapping(peers: Peers):
    config = load_config(peers.config_path)
    roles = ChannelRoles(config)
    operator = terminal_binding(roles, "shop-ops")
    assert (operator.role_name, operator.namespace) == ("operator", "shop")
    assert terminal_binding(roles, "shop-oncall").role_name == "viewer"
    dm = terminal_binding(roles, None)
    assert (dm.role_name, dm.namespace) == ("viewer", None)
    with pytest.raises(ChannelNotEnabled):
        terminal_binding(roles, "random")
    by_id = terminal_binding(roles, "C0ADMIN")  # a channel the config names by id
    assert (by_id.role_name, by_id.namespace) == ("operator", "platform")
