"""The masker: every corpus format masked, ordinary text untouched, hostile text handled."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.model.outbound import (
    MASK,
    MAX_SCAN_CHARS,
    mask_text,
    mask_text_async,
    mask_value,
    mask_value_async,
)
from bot.model.secret_rules import ANY_RULE, RULES
from tests.secrets_corpus import ALL_TEXT, HARMLESS, SECRETS, leaked


@pytest.mark.parametrize(("name", "text", "secret"), SECRETS, ids=[s[0] for s in SECRETS])
def test_every_format_in_the_corpus_is_masked(name: str, text: str, secret: str):
    masked, findings = mask_text(text, "where")
    assert secret not in masked
    assert MASK in masked
    assert findings and all(f.where == "where" for f in findings)


def test_the_whole_corpus_in_one_text_leaks_nothing():
    masked, findings = mask_text(ALL_TEXT)
    assert leaked(masked) == []
    assert len(findings) >= len(SECRETS)


@pytest.mark.parametrize("text", HARMLESS)
def test_ordinary_cluster_text_is_left_alone(text: str):
    assert mask_text(text) == (text, [])


def test_keys_stay_visible_and_quoted_values_with_spaces_are_masked_whole():
    masked, _ = mask_text("password=\"a b c\" and api_key: 'x y' and token=abc123")
    assert masked == f"password=\"{MASK}\" and api_key: '{MASK}' and token={MASK}"


# Pieces of secrets and of ordinary text, cut anywhere and glued with odd characters: texts
# on both sides of every rule's edge.
_PIECES = [text for _, text, _ in SECRETS] + list(HARMLESS)
_FRAGMENT = st.builds(
    lambda text, start, length: text[start : start + length],
    st.sampled_from(_PIECES),
    st.integers(0, 60),
    st.integers(1, 200),
)
_GLUE = st.text(alphabet=" \n\t=:\"'-_./@;AaZz09", max_size=4)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_FRAGMENT, _GLUE), max_size=6).map("".join))
def test_the_one_pass_check_finds_whatever_any_rule_finds(text: str):
    # The masker skips its per-rule passes when this check finds nothing: a rule it missed
    # would pass that secret on unmasked.
    any_rule = any(pattern.search(text) is not None for _, pattern in RULES)
    assert (ANY_RULE.search(text) is not None) == any_rule


def test_every_corpus_secret_a_rule_finds_is_seen_by_the_one_pass_check():
    for kind, pattern in RULES:
        for name, text, _ in SECRETS:
            if pattern.search(text) is not None:
                assert ANY_RULE.search(text) is not None, (kind, name)


def test_masking_twice_changes_nothing_more():
    once, _ = mask_text(ALL_TEXT)
    twice, findings = mask_text(once)
    assert twice == once and findings == []


def test_a_lone_surrogate_does_not_break_masking():
    masked, _ = mask_text("bad \ud800 char password=hunter2hunter2")
    assert "hunter2hunter2" not in masked and "\ufffd" in masked
    masked.encode()  # valid Unicode from here on


def test_text_over_the_scan_cap_is_cut_not_passed_on_unscanned():
    text = "a" * MAX_SCAN_CHARS + " password=beyondthecap"
    masked, _ = mask_text(text)
    assert "beyondthecap" not in masked
    assert masked.endswith("characters not scanned]")


def test_adversarial_text_that_stalled_the_old_pattern_is_masked():
    # ~51 s of backtracking on the previous `re` pattern; linear with RE2.
    crafted = "a." * 4000 + "password" * 1000 + "db.password= " * 1000
    masked, findings = mask_text(crafted)
    assert len(masked) >= len(crafted) // 2 and findings


async def test_large_values_are_masked_the_same_in_a_worker_thread():
    big = ("x" * 1000 + "\n") * 50 + ALL_TEXT
    assert await mask_text_async(big) == mask_text(big)
    value = {"items": [big, {"note": "password=hunter2hunter2"}], "n": 3}
    masked, _ = await mask_value_async(value)
    assert masked == mask_value(value)[0]
    assert leaked(str(masked)) == [] and masked["n"] == 3


async def test_masking_a_large_text_leaves_the_event_loop_free():
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    before = ticks
    await mask_text_async("db.password= " * 60_000)
    task.cancel()
    assert ticks > before + 1  # the loop kept running while the text was masked
