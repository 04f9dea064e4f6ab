"""Markdown → Slack mrkdwn, and splitting long text where Slack's limits require it."""

from __future__ import annotations

import pytest

from bot.slack.markdown import (
    SECTION_LIMIT,
    THREAD_THRESHOLD,
    cut,
    section_blocks,
    split_text,
    to_mrkdwn,
    to_mrkdwn_async,
)
from bot.slack.progress import answer_messages


@pytest.mark.parametrize(
    ("markdown", "mrkdwn"),
    [
        ("**bold** and __also bold__", "*bold* and *also bold*"),
        ("*italic* and _italic_", "_italic_ and _italic_"),
        ("~~gone~~", "~gone~"),
        ("***both***", "*_both_*"),
        ("# Title", "*Title*"),
        ("### A **bold** heading ###", "*A bold heading*"),
        ("see [the docs](https://k8s.io/docs)", "see the docs (<https://k8s.io/docs>)"),
        ("[**bold** link](https://x.io)", "*bold* link (<https://x.io>)"),
        ("<https://x.io/a>", "<https://x.io/a>"),
        ("![graph](https://x.io/g.png)", "graph (<https://x.io/g.png>)"),
        ("[q](https://x.io/?a=1&b=2)", "q (<https://x.io/?a=1&amp;b=2>)"),
        (
            "[Pod](https://en.wikipedia.org/wiki/Pod_(k8s)).",
            "Pod (<https://en.wikipedia.org/wiki/Pod_(k8s)>).",
        ),
        ("![g](https://x.io/a_(b).png)", "g (<https://x.io/a_(b).png>)"),
        ("- one\n- two\n  * nested\n+ three", "• one\n• two\n  • nested\n• three"),
        ("- [ ] todo\n- [x] done", "☐ todo\n☑ done"),
        ("1. first\n2. second", "1. first\n2. second"),
        ("> **quoted**\n> - item", "> *quoted*\n> • item"),
        ("---", "──────────"),
        ("a < b && c > d", "a &lt; b &amp;&amp; c &gt; d"),
        ("already &amp; escaped", "already &amp; escaped"),
        (
            "hi <@U0ALICE> in <#C0SHOP|shop> <!here>",
            "hi &lt;@U0ALICE&gt; in &lt;#C0SHOP|shop&gt; &lt;!here&gt;",
        ),
        ("2*3*4 and snake_case_name", "2*3*4 and snake_case_name"),
    ],
)
def test_inline_and_line_rules(markdown: str, mrkdwn: str):
    assert to_mrkdwn(markdown) == mrkdwn


def test_code_stays_literal_but_escaped():
    assert to_mrkdwn("run `kubectl get **pods** <ns>`") == "run `kubectl get **pods** &lt;ns&gt;`"
    fenced = "```yaml\nspec:\n  replicas: 3 # **not bold**\n\n  x: <y>\n```\nafter **b**"
    assert to_mrkdwn(fenced) == (
        "```\nspec:\n  replicas: 3 # **not bold**\n\n  x: &lt;y&gt;\n```\nafter *b*"
    )


def test_an_unclosed_fence_is_closed():
    assert to_mrkdwn("```\nlog line\nmore") == "```\nlog line\nmore\n```"


def test_tables_become_aligned_code_blocks():
    table = (
        "| pod | status | restarts |\n"
        "|:----|:------:|---:|\n"
        "| **api-1** | Running | 0 |\n"
        "| api-2 | CrashLoopBackOff | 7 |\n"
        "\n"
        "Only api-2 is unhealthy."
    )
    assert to_mrkdwn(table) == (
        "```\n"
        "pod   | status           | restarts\n"
        "------+------------------+---------\n"
        "api-1 | Running          | 0\n"
        "api-2 | CrashLoopBackOff | 7\n"
        "```\n"
        "\n"
        "Only api-2 is unhealthy."
    )


def test_a_line_with_a_pipe_is_not_a_table():
    assert to_mrkdwn("a | b\nplain") == "a | b\nplain"


def test_split_text_keeps_paragraphs_whole_and_within_the_limit():
    paragraphs = [f"Paragraph {i}. " + "word " * 100 for i in range(30)]
    text = "\n\n".join(paragraphs)
    pieces = split_text(text, SECTION_LIMIT)
    assert len(pieces) > 1 and all(len(p) <= SECTION_LIMIT for p in pieces)
    assert "\n\n".join(pieces) == text
    # Every cut falls between paragraphs.
    assert all(piece.startswith("Paragraph ") for piece in pieces)


def test_split_text_cuts_an_oversized_paragraph_at_lines_then_words():
    lines = "\n".join(f"line {i} " + "x" * 50 for i in range(200))
    long_word_line = "y" * 7000
    pieces = split_text(f"{lines}\n\n{long_word_line}", 3000)
    assert all(len(p) <= 3000 for p in pieces)
    assert "".join(pieces).replace("\n", "") == (lines + long_word_line).replace("\n", "")


def test_split_text_fences_each_piece_of_a_long_code_block():
    code = (
        "```\n"
        + "\n".join(f"2026-12-02T10:00:{i:02d} GET /healthz 200" for i in range(300))
        + "\n```"
    )
    pieces = split_text(f"Logs:\n\n{code}\n\nThat is all.", 3000)
    assert len(pieces) >= 3 and all(len(p) <= 3000 for p in pieces)
    # Each piece renders on its own: its code fences are balanced.
    assert all(p.count("```") % 2 == 0 for p in pieces)
    assert pieces[0].startswith("Logs:\n\n```\n") and pieces[-1].endswith("That is all.")
    assert sum(p.count("GET /healthz") for p in pieces) == 300


def test_split_text_of_short_text_is_one_piece():
    assert split_text("short", 3000) == ["short"]
    assert split_text("", 3000) == [""]


def test_cut_joins_back_exactly():
    text = "".join(f"row {i}\n" for i in range(5000))
    pieces = cut(text, 12_000)
    assert len(pieces) > 1 and all(len(p) <= 12_000 for p in pieces)
    assert "".join(pieces) == text
    assert all(p.endswith("\n") for p in pieces)
    assert cut("x" * 25_000, 12_000) == ["x" * 12_000, "x" * 12_000, "x" * 1_000]


def test_section_blocks_respect_the_section_limit():
    blocks = section_blocks("\n\n".join("para " * 300 for _ in range(5)))
    assert len(blocks) >= 3
    assert all(b["type"] == "section" and b["text"]["type"] == "mrkdwn" for b in blocks)
    assert all(len(b["text"]["text"]) <= SECTION_LIMIT for b in blocks)


def test_answer_messages_split_into_messages_of_at_most_50_blocks():
    answer = "\n\n".join(f"Point {i}: " + "detail " * 20 for i in range(400))
    messages = answer_messages(answer)
    assert len(messages) > 1
    for text, blocks in messages:
        assert 1 <= len(blocks) <= 50
        assert all(len(b["text"]["text"]) <= SECTION_LIMIT for b in blocks)
        assert text == "\n\n".join(b["text"]["text"] for b in blocks)
    assert "\n\n".join(text for text, _ in messages) == answer


@pytest.mark.parametrize("size", [100, THREAD_THRESHOLD * 3])
async def test_a_long_answer_converts_the_same_off_the_event_loop(size: int) -> None:
    part = "## Pods\n- **api** is `Running` <@U123>, see [logs](https://x.io/l)\n"
    markdown = (part * (size // len(part) + 1))[:size]
    for keep in (False, True):
        converted = await to_mrkdwn_async(markdown, keep_slack_tokens=keep)
        assert converted == to_mrkdwn(markdown, keep_slack_tokens=keep)
    assert "*Pods*" in converted and "<@U123>" in converted
