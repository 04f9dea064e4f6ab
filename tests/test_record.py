"""Incident records (#32 item 3): `/kelpie record [thread link]` and the Record button on
an answer post a Markdown file in the thread: the timeline (questions, tools and their
evidence, the approval card with who decided and when, the write before → after), the root
cause as the thread concluded it, and follow-ups. `kelpie audit export` exports the rows."""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import UTC, datetime
from typing import Any

from bot.slack.record import RECORD_ACTION, record_markdown
from bot.store.record import ThreadRows
from bot.store.tables import MessageRow, SessionRow
from tests.test_approvals import click, wait_card, wait_said
from tests.test_operator_cli import kelpie, write_config
from tests.world import ALICE, BOB, CAROL, DAVE, OPS_CHANNEL, SHOP_CHANNEL, World

CONCLUSION = (
    "Root cause: checkout-api ran out of capacity under the traffic spike; "
    "it now runs 5 replicas.\n\n"
    "Follow-ups:\n"
    "- Add a HorizontalPodAutoscaler for checkout-api\n"
    "- Review the load test"
)


async def _incident(world: World) -> dict[str, Any]:
    """ALICE asks; kelpie reads the pods and proposes a scale; CAROL approves; the thread
    concludes."""
    world.model.reply_tool_calls([("list_pods", {"namespace": "shop"})])
    world.model.reply_tool_calls(
        [
            (
                "scale_deployment",
                {"namespace": "shop", "name": "checkout-api", "replicas": 5, "reason": "spike"},
            )
        ]
    )
    world.model.reply_text(CONCLUSION)
    mention = await world.mention(OPS_CHANNEL, ALICE, "checkout is slow, scale checkout-api to 5")
    card = await wait_card(world, mention["ts"])
    await click(world, CAROL, card)
    await wait_said(world, mention["ts"], "Review the load test")
    await world.drain()
    return mention


async def kelpie_command(world: World, user: str, text: str, channel: str = OPS_CHANNEL) -> str:
    command = world.slack.slash_command("/kelpie", text, user, channel)
    await world.slack.deliver("slash_commands", command)
    replies = await world.slack.wait_for(lambda s: s.responses_to(command["response_url"]))
    return str(replies[-1].body.get("text"))


async def record_file(world: World, thread_ts: str, count: int = 1) -> Any:
    def posted(server: Any) -> Any:
        files = [
            f
            for f in server.files.values()
            if f.completed and f.thread_ts == thread_ts and f.filename.startswith("kelpie-record")
        ]
        return files[count - 1] if len(files) >= count else None

    return await world.slack.wait_for(posted, timeout=20)


async def test_kelpie_record_posts_the_threads_record_as_a_markdown_file(world: World):
    await world.start_bot()
    mention = await _incident(world)

    reply = await kelpie_command(world, ALICE, "record")
    assert reply.startswith("Posted the incident record as a file in the thread")
    record = await record_file(world, mention["ts"])
    assert record.channel == OPS_CHANNEL and record.title == "Incident record"
    text = record.text
    assert text.startswith("# Incident record: checkout is slow, scale checkout-api to 5")
    timeline = text.split("## Timeline")[1].split("## Root cause")[0]
    lines = [line for line in timeline.splitlines() if line.startswith("- ")]
    kinds = [line.split("**")[1] for line in lines]
    # In the order it happened: the question, the read, the proposal, the decision, the
    # write (intent, then its outcome), the answer.
    assert kinds[:3] == ["Question", "Tool", "Tool"]
    assert "Approval card" in kinds and "Approved" in kinds and "Write" in kinds
    assert kinds.index("Approval card") < kinds.index("Approved") < kinds.index("Write")
    last_answer = len(kinds) - 1 - kinds[::-1].index("Answer")
    assert kinds.index("Write") < kinds.index("Write done") < last_answer
    assert f"**Question** (@{ALICE}): checkout is slow" in timeline
    assert '**Tool** `list_pods` `{"namespace": "shop"}` → evidence [E1]' in timeline
    assert "**Tool** `scale_deployment`" in timeline and "→ proposed (an approval card)" in timeline
    assert "**Verification**: Recovered: Scale deployment shop/checkout-api" in timeline
    assert "[context]" not in text
    assert f"**Approved** by @{CAROL}" in timeline
    assert "spec.replicas 3 → 5" in timeline and f"approved by @{CAROL}" in timeline
    root = text.split("## Root cause (as the thread concluded it)")[1].split("## Follow-ups")[0]
    assert "ran out of capacity under the traffic spike; it now runs 5 replicas." in root
    follow = text.split("## Follow-ups")[1]
    assert "- Add a HorizontalPodAutoscaler for checkout-api" in follow
    assert "- Review the load test" in follow


async def test_a_threads_link_and_the_record_button_post_it_too_and_mistakes_get_a_sentence(
    world: World,
):
    await world.start_bot()
    mention = await _incident(world)
    digits = mention["ts"].replace(".", "")
    link = f"https://kelpie-test.slack.com/archives/{OPS_CHANNEL}/p{digits}"

    # DAVE never wrote in the thread: with its link, the record is his to ask for.
    assert (await kelpie_command(world, DAVE, f"record <{link}>")).startswith("Posted")
    assert f"made for <@{DAVE}>" in ((await record_file(world, mention["ts"])).initial_comment)
    assert "That is not a Slack thread link" in await kelpie_command(world, DAVE, "record nonsense")
    assert "another channel" in await kelpie_command(world, DAVE, f"record {link}", SHOP_CHANNEL)
    assert "no thread with kelpie" in await kelpie_command(world, BOB, "record")

    # The Record button on the answer.
    answer = next(
        m
        for m in world.slack.thread(OPS_CHANNEL, mention["ts"])
        if m.is_bot and RECORD_ACTION in json.dumps(m.blocks or [])
    )
    value = f"T0TEST:{OPS_CHANNEL}:{mention['ts']}"
    payload = world.slack.block_action(BOB, OPS_CHANNEL, answer.ts, RECORD_ACTION, value)
    await world.slack.deliver("interactive", payload)
    record = await record_file(world, mention["ts"], count=2)
    assert f"made for <@{BOB}>" in record.initial_comment
    assert "Root cause: checkout-api ran out of capacity" in record.text


async def test_kelpie_audit_export_gives_the_threads_rows_as_jsonl_and_csv(world: World):
    await world.start_bot()
    mention = await _incident(world)
    config = str(write_config(world))
    digits = mention["ts"].replace(".", "")
    link = f"https://x.slack.com/archives/{OPS_CHANNEL}/p{digits}"

    ran = await kelpie("audit", "export", "--config", config, "--thread", link)
    assert ran.code == 0, ran.err
    rows = [json.loads(line) for line in ran.out.splitlines()]
    assert {row["thread_ts"] for row in rows} == {mention["ts"]}
    writes = [row for row in rows if row["kind"] == "write"]
    assert [w["phase"] for w in writes] == ["intent", "outcome"]
    assert writes[0]["approved_by"] == CAROL and "3 → 5" in writes[0]["preview"]
    seqs = [row["chain_seq"] for row in rows]
    assert seqs == sorted(seqs)

    ran = await kelpie("audit", "export", "--config", config, "--since", "1h", "--format", "csv")
    assert ran.code == 0, ran.err
    table = list(csv.DictReader(io.StringIO(ran.out)))
    assert len(table) == len(rows) and table[0]["channel"] == OPS_CHANNEL
    ran = await kelpie("audit", "export", "--config", config, "--since", "2999-01-01")
    assert ran.code == 0 and ran.out == ""
    ran = await kelpie("audit", "export", "--config", config, "--since", "last week")
    assert ran.code == 2 and "--since: 'last week' is neither a date" in ran.err


def test_the_records_markdown_shows_untrusted_words_as_written_never_as_markup():
    start = datetime(2026, 12, 5, 9, 0, tzinfo=UTC)
    thread = SessionRow(
        id=1,
        session_key=f"T0TEST:{OPS_CHANNEL}:1.1",
        team_id="T0TEST",
        channel_id=OPS_CHANNEL,
        thread_ts="1.1",
        role="operator",
        cluster="prod",
        started_by=ALICE,
        created_at=start,
    )
    question = "why? ![x](https://evil.example/p.png) <img src=x> [ok](https://evil.example)"
    call = {"id": "c1", "function": {"name": "list_pods", "arguments": '{"label": "a`b"}'}}
    answer = "Root cause: the _cache_ died\n## Follow-ups\n- [fix](https://evil.example) it"
    messages = (
        MessageRow(session_id=1, turn_id="t", role="user", slack_user=ALICE, content=question),
        MessageRow(session_id=1, turn_id="t", role="assistant", tool_calls_json=json.dumps([call])),
        MessageRow(session_id=1, turn_id="t", role="assistant", content=answer),
    )
    rows = ThreadRows(thread, messages, (), (), (), ())
    text = record_markdown(rows, BOB, now=start)
    assert text.startswith(
        r"# Incident record: why? !\[x\](https://evil.example/p.png) \<img src=x\> \[ok\]"
    )
    # No link, image or tag is left unescaped anywhere in the file.
    assert re.search(r"(?<!\\)\]\(|(?<!\\)<", text) is None
    assert '**Tool** `list_pods` ``{"label": "a`b"}`` → no result' in text
    root = text.split("## Root cause (as the thread concluded it)")[1]
    assert root.count("\n## ") == 1  # only the record's own Follow-ups heading
    assert r"Root cause: the \_cache\_ died" in root and r"\#\# Follow-ups" in root
    assert text.count("## Follow-ups") == 1
