"""A scripted model for eval cases: the fake OpenAI-compatible server answers each request
from the script of the case whose question the request carries (rounds of tool calls,
then the answer), so a whole suite runs against one server."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from bot.eval.runner import JUDGE_PROMPT
from tests.peers.model_server import Step, TextStep, tool_calls_step

SCRIPTS = Path(__file__).parent / "scripts"


def load_script(case_id: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((SCRIPTS / f"{case_id}.yaml").read_text())
    return data


class ScriptBook:
    """Scripts by question; `decide` is the fake model's `DynamicStep` function."""

    def __init__(self) -> None:
        self._by_question: dict[str, dict[str, Any]] = {}
        # The LLM judge's request (its system prompt says it grades): the reply to give,
        # from the judge's user message (the answer and the numbered facts).
        self.judge: Callable[[str], str] = lambda request: "1: no"

    def set(self, question: str, script: dict[str, Any]) -> None:
        self._by_question[question] = script

    def decide(self, body: dict[str, Any]) -> Step:
        messages = body.get("messages") or []
        if messages and str(messages[0].get("content", "")).startswith(JUDGE_PROMPT[:40]):
            return TextStep(self.judge(str(messages[-1].get("content", ""))))
        script = None
        asked = 0
        for index, message in enumerate(messages):
            content = message.get("content")
            if message.get("role") == "user" and isinstance(content, str):
                # The longest question the message holds (a variant's question holds the
                # question it was made from).
                known = [q for q in self._by_question if q in content]
                if known:
                    script, asked = self._by_question[max(known, key=len)], index
        if script is None:
            return TextStep("no script for this question")
        done = sum(
            1 for m in messages[asked:] if m.get("role") == "assistant" and m.get("tool_calls")
        )
        rounds = script.get("rounds") or []
        if done < len(rounds):
            calls = [(name, json.dumps(args)) for name, args in rounds[done]]
            return tool_calls_step(calls)
        return TextStep(script["answer"], chunk_size=40)
