"""Feedback on answers, end to end through the fake Slack: the answer carries Slack's
feedback buttons (a `context_actions` block the fake checks as Slack does), a 👎 is stored
once per person per answer and answered with an ephemeral whose button opens a modal, and
what the person types there is stored masked on their row."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.errors import ExportError
from bot.feedback.links import parse_thread_link
from bot.slack.feedback import (
    REASON_ACTION_ID,
    REASON_CALLBACK_ID,
    TELL_ACTION_ID,
    reason_modal,
)
from bot.slack.feedback_buttons import feedback_block, parse_rating
from bot.store.feedback import FeedbackRepository
from bot.store.tables import FeedbackFixtureRow, FeedbackRow
from tests.world import ALICE, BOB, CAROL, SHOP_CHANNEL, World, running_world

pytestmark = pytest.mark.asyncio(loop_scope="module")

AWS_KEY = "AKIAIOSFODNN7EXAMPL3"
CONFIG_VALUE = "cm-value-hunter2"
SECRET_VALUE = "secret-value-correct-horse"
ROOT = Path(__file__).resolve().parents[1]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    async with running_world(tmp_path_factory.mktemp("feedback")) as world:
        await world.start_bot()
        yield world


def crashing_pod(world: World) -> str:
    for pod in world.kube.objects("Pod"):
        statuses = pod["status"].get("containerStatuses") or []
        if any("waiting" in (s.get("state") or {}) for s in statuses):
            return str(pod["metadata"]["name"])
    raise AssertionError("the demo has no crash-looping pod")


def feedback_buttons(message: Any) -> dict[str, Any] | None:
    for block in message.blocks or []:
        if block.get("type") == "context_actions":
            return dict(block)
    return None


async def ask(world: World, calls: list[tuple[str, dict[str, Any]]], answer: str) -> Any:
    """One turn in #shop-oncall, a call per round; the bot's answer (with feedback buttons)."""
    for call in calls:
        world.model.reply_tool_calls([call])
    world.model.reply_text(answer)
    mention = await world.mention(SHOP_CHANNEL, ALICE, "why does checkout keep restarting?")

    def answered(server: Any) -> Any:
        for message in server.thread(SHOP_CHANNEL, mention["ts"]):
            if message.is_bot and feedback_buttons(message) is not None:
                return message
        return None

    return await world.slack.wait_for(answered, timeout=20)


async def click(world: World, user: str, answer: Any, *, positive: bool) -> None:
    payload = world.slack.feedback_click(user, SHOP_CHANNEL, answer.ts, positive=positive)
    await world.slack.wait_ack(await world.slack.deliver("interactive", payload))


async def ephemeral(world: World, user: str, text: str) -> Any:
    def said(server: Any) -> Any:
        found = [e for e in server.ephemerals(SHOP_CHANNEL, user) if text in e.text]
        return found[-1] if found else None

    return await world.slack.wait_for(said, timeout=10)


def store(world: World) -> FeedbackRepository:
    return FeedbackRepository(world.bots[0].core.db)


async def captured(world: World, thread_ts: str) -> FeedbackFixtureRow:
    """The reads a 👎 in the thread had captured, once they are stored (polled)."""
    async with asyncio.timeout(30):
        while True:
            record = await store(world).thread(SHOP_CHANNEL, thread_ts)
            if record is not None and record.fixtures:
                return record.fixtures[0]
            await asyncio.sleep(0.02)


async def rows(world: World, thread_ts: str) -> list[FeedbackRow]:
    record = await store(world).thread(SHOP_CHANNEL, thread_ts)
    assert record is not None
    return record.feedback


async def test_a_thumbs_down_is_stored_once_asked_why_and_its_reason_stored_masked(world: World):
    pod = crashing_pod(world)
    answer = await ask(
        world, [("describe_pod", {"namespace": "shop", "name": pod})], "It is OOMKilled [E1]."
    )
    block = feedback_buttons(answer)
    assert block is not None
    [element] = block["elements"]
    assert element["type"] == "feedback_buttons"
    rating = parse_rating(element["negative_button"]["value"])
    assert rating is not None and rating.evidence == ("E1",)

    await click(world, BOB, answer, positive=False)
    asked = await ephemeral(world, BOB, "What was wrong")
    assert asked.thread_ts == answer.thread_ts
    [row] = await rows(world, answer.thread_ts)
    assert (row.slack_user, row.value, row.turn_id) == (BOB, "negative", rating.turn_id)
    assert (row.message_ts, json.loads(row.evidence_json)) == (answer.ts, ["E1"])

    # A second click, either button, stores nothing more and says so.
    await click(world, BOB, answer, positive=False)
    await click(world, BOB, answer, positive=True)
    await world.slack.wait_for(
        lambda s: len([e for e in s.ephemerals(SHOP_CHANNEL, BOB) if "already" in e.text]) == 2
    )
    assert len(await rows(world, answer.thread_ts)) == 1

    # The ephemeral's button opens a modal; what is typed there is stored, masked.
    tell = world.slack.ephemeral_click(asked, TELL_ACTION_ID)
    await world.slack.wait_ack(await world.slack.deliver("interactive", tell))
    opened = await world.slack.wait_for(lambda s: s.views[-1] if s.views else None)
    assert (opened.user, opened.view["callback_id"]) == (BOB, REASON_CALLBACK_ID)
    typed = f"It looked at the wrong pod. Also it printed AWS_ACCESS_KEY_ID: {AWS_KEY}"
    submit = world.slack.view_submission(opened, {REASON_ACTION_ID: typed})
    await world.slack.wait_ack(await world.slack.deliver("interactive", submit))

    await ephemeral(world, BOB, "what you wrote is stored")
    stored = await store(world).find(rating.turn_id, BOB)
    assert stored is not None and stored.reason is not None
    assert stored.reason.startswith("It looked at the wrong pod.")
    assert AWS_KEY not in stored.reason and "AWS_ACCESS_KEY_ID" in stored.reason

    # Someone else's 👍 is theirs: stored beside it, thanked.
    await click(world, CAROL, answer, positive=True)
    await ephemeral(world, CAROL, "👍")
    assert [(r.slack_user, r.value) for r in await rows(world, answer.thread_ts)] == [
        (BOB, "negative"),
        (CAROL, "positive"),
    ]


async def test_the_fake_slack_refuses_feedback_buttons_slack_would_refuse(world: World):
    client = AsyncWebClient(token=world.slack.bot_token, base_url=world.slack.api_url)
    good = feedback_block("t1", ["E1"])
    half = {**good, "elements": [{**good["elements"][0], "negative_button": None}]}
    loose = {"type": "actions", "elements": good["elements"]}
    for blocks in ([half], [loose]):
        with pytest.raises(SlackApiError) as refused:
            await client.chat_postMessage(channel=SHOP_CHANNEL, text="x", blocks=blocks)
        assert refused.value.response["error"] == "invalid_blocks"
    posted = await client.chat_postMessage(channel=SHOP_CHANNEL, text="x", blocks=[good])
    assert posted["ok"]


async def kelpie(world: World, *args: str) -> tuple[int, str, str]:
    """`kelpie ARGS` in a child process, as a person runs it; the peers keep serving."""
    config = world.tmp / "kelpie.yaml"
    config.write_text(yaml.safe_dump(world.config_data))
    env = {"PATH": os.environ.get("PATH", ""), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", *args, "--config", str(config),
        cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_export_writes_a_case_whose_fixture_holds_what_the_tools_read(world: World):
    pod = crashing_pod(world)
    world.kube.add_configmap("shop", "checkout-config", {"DB_PASSWORD": CONFIG_VALUE})
    world.kube.add_secret("shop", "checkout-db", {"password": SECRET_VALUE})
    world.kube.set_logs("shop", pod, f"boot\nAWS_ACCESS_KEY_ID: {AWS_KEY}\nOOM\n")
    calls = [
        ("describe_pod", {"namespace": "shop", "name": pod}),
        ("pod_logs", {"namespace": "shop", "name": pod}),
        ("get_resource", {"kind": "ConfigMap", "name": "checkout-config", "namespace": "shop"}),
        ("get_resource", {"kind": "Secret", "name": "checkout-db", "namespace": "shop"}),
    ]
    answer = await ask(world, calls, "The pod runs out of memory [E1].")
    await click(world, BOB, answer, positive=False)
    await ephemeral(world, BOB, "What was wrong")
    # The 👎 had what its turn read captured then: the export keeps that, not what the
    # cluster holds by the time it runs.
    snapshot = await captured(world, answer.thread_ts)
    assert AWS_KEY not in snapshot.logs_json and "OOM" in snapshot.logs_json
    world.kube.set_logs("shop", pod, "much later: all fine\n")
    stamp = answer.thread_ts.replace(".", "")
    link = f"https://kelpie-test.slack.com/archives/{SHOP_CHANNEL}/p{stamp}"
    out = world.tmp / "cases"

    code, said, err = await kelpie(world, "eval", "export", "--thread", link, "--out", str(out))
    assert code == 0, err
    [folder] = list(out.iterdir())
    assert str(folder) in said and "get_resource: read nothing" in said
    case = yaml.safe_load((folder / "case.yaml").read_text())
    assert case["id"] == folder.name and case["question"] == "why does checkout keep restarting?"
    assert case["channel"] == {"cluster": "prod", "namespace": "shop"}
    assert case["role"]["tools"] == ["present/*", "read/*", "diagnose/*"]
    assert case["expect"]["answer"] == [] and "TODO" in (folder / "case.yaml").read_text()
    assert "# The answer kelpie gave" in (folder / "case.yaml").read_text()
    assert "#   The pod runs out of memory [E1]." in (folder / "case.yaml").read_text()
    assert "re-read from cluster prod when its 👎 came" in (folder / "case.yaml").read_text()
    assert "RE-READ" not in (folder / "case.yaml").read_text()
    assert f"Feedback: negative by {BOB}" in (folder / "case.yaml").read_text()

    objects = yaml.safe_load((folder / "fixture" / "kube.yaml").read_text())
    named = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert {("Pod", pod), ("ConfigMap", "checkout-config")} <= named
    assert all({"apiVersion", "kind", "metadata"} <= o.keys() for o in objects)
    # Times are relative to when they were read, as the eval's loader resolves them.
    [pod_object] = [o for o in objects if o["kind"] == "Pod"]
    assert re.fullmatch(r"now-\d+s", pod_object["metadata"]["creationTimestamp"])
    assert not [o for o in objects if o["kind"] == "Secret"]
    [config_map] = [o for o in objects if o["kind"] == "ConfigMap"]
    assert config_map["data"] == {"DB_PASSWORD": "<masked>"}
    logs = yaml.safe_load((folder / "fixture" / "logs.yaml").read_text())["logs"]
    assert [(e["pod"], e["container"], e["previous"]) for e in logs] == [(pod, "app", False)]
    assert "OOM" in logs[0]["text"]
    everything = "\n".join(p.read_text() for p in folder.rglob("*") if p.is_file())
    for secret in (
        AWS_KEY,
        CONFIG_VALUE,
        SECRET_VALUE,
        base64.b64encode(SECRET_VALUE.encode()).decode(),
    ):
        assert secret not in everything
    # Exporting again does not overwrite what a person may have edited.
    code, _, err = await kelpie(world, "eval", "export", "--thread", link, "--out", str(out))
    assert code == 1 and "exists already" in err


async def test_export_re_reads_what_no_thumbs_down_captured_and_says_so(world: World):
    pod = crashing_pod(world)
    answer = await ask(world, [("describe_pod", {"namespace": "shop", "name": pod})], "OOM [E1].")
    stamp = answer.thread_ts.replace(".", "")
    link = f"https://kelpie-test.slack.com/archives/{SHOP_CHANNEL}/p{stamp}"
    out = world.tmp / "unrated"
    code, _, err = await kelpie(world, "eval", "export", "--thread", link, "--out", str(out))
    assert code == 0, err
    [folder] = list(out.iterdir())
    assert (
        "all reads were RE-READ from cluster prod at export time"
        in (folder / "case.yaml").read_text()
    )
    objects = yaml.safe_load((folder / "fixture" / "kube.yaml").read_text())
    assert ("Pod", pod) in {(o["kind"], o["metadata"]["name"]) for o in objects}


async def test_export_of_a_thread_kelpie_never_saw_says_so(world: World):
    link = f"https://kelpie-test.slack.com/archives/{SHOP_CHANNEL}/p1000000000000001"
    code, _, err = await kelpie(world, "eval", "export", "--thread", link)
    assert code == 1 and "kelpie has no conversation in thread 1000000000.000001" in err
    code, _, err = await kelpie(world, "eval", "export", "--thread", "not a link")
    assert code == 1 and "is not a Slack message link" in err


async def test_a_reply_link_names_its_thread_and_a_top_level_link_itself():
    top = parse_thread_link("https://acme.slack.com/archives/C0SHOP/p1733400000123456")
    assert (top.channel_id, top.thread_ts) == ("C0SHOP", "1733400000.123456")
    reply = parse_thread_link(
        "https://acme.slack.com/archives/C0SHOP/p1733400099000001"
        "?thread_ts=1733400000.123456&cid=C0SHOP"
    )
    assert (reply.channel_id, reply.thread_ts) == ("C0SHOP", "1733400000.123456")
    with pytest.raises(ExportError, match="not a Slack ts"):
        parse_thread_link("https://acme.slack.com/archives/C0SHOP/p1733400000123456?thread_ts=x")


async def test_the_fake_slack_opens_a_modal_once_per_trigger_and_checks_the_view(world: World):
    client = AsyncWebClient(token=world.slack.bot_token, base_url=world.slack.api_url)
    trigger = world.slack.block_action(BOB, SHOP_CHANNEL, "1.000001", "x", "v")["trigger_id"]
    long_title = {**reason_modal("{}"), "title": {"type": "plain_text", "text": "x" * 25}}
    for view, error in (
        (long_title, "invalid_arguments"),
        ({**reason_modal("{}"), "submit": None}, "invalid_arguments"),
    ):
        with pytest.raises(SlackApiError) as refused:
            await client.views_open(trigger_id=trigger, view=view)
        assert refused.value.response["error"] == error
    opened = await client.views_open(trigger_id=trigger, view=reason_modal("{}"))
    assert opened["view"]["id"] == world.slack.views[-1].id
    for used, error in ((trigger, "exchanged_trigger_id"), ("1.2.unknown", "invalid_trigger_id")):
        with pytest.raises(SlackApiError) as refused:
            await client.views_open(trigger_id=used, view=reason_modal("{}"))
        assert refused.value.response["error"] == error
