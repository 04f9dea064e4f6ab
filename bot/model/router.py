"""The model router: resolves the agent policy a turn runs under, and says why.

A `ResolvedAgentPolicy` is frozen and complete: the tier, every budget the engine enforces,
the model's capabilities, the prompt pack and overlay, the reasoning setting, the tools
offered after role filtering, and one provenance line per decision ("tier high: profile
setting"). The engine and the prompt harness read only this object.

Tier priority: the profile's `tier` → a provider recommendation → a small built-in catalog
of exact model references → `low`; the policy says which one decided (`tier_source`).
LiteLLM (1.110) exposes nothing that recommends a tier (its model map has prices, context
sizes and `supports_*` flags, no size class), so the probe reports none today and the
catalog covers the common local and hosted models.

It knows no SDK: model capabilities come from a probe the composition root fills in
(`bot.model.gateway.probe_capabilities`, the only place that asks LiteLLM, or, for a model
only the openai-compatible client reaches, `bot.model.model_map`, which reads LiteLLM's
model map as data).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Protocol

from bot.config import MAX_ITERATIONS_CEILING, Config, Thinking, Tier
from bot.model.types import ModelCapabilities

log = logging.getLogger(__name__)

RESULT_CHARS_CEILING = 50_000


@dataclass(frozen=True)
class TierBudget:
    rounds: int
    history_chars: int
    history_strict: bool
    result_chars: int
    prompt_chars: int  # the system prompt's own budget, checked before sending


TIER_BUDGETS: dict[Tier, TierBudget] = {
    Tier.LOW: TierBudget(
        rounds=6, history_chars=24_000, history_strict=True, result_chars=3_000, prompt_chars=8_000
    ),
    Tier.HIGH: TierBudget(
        rounds=15,
        history_chars=120_000,
        history_strict=False,
        result_chars=8_000,
        prompt_chars=24_000,
    ),
}

# Exact model references only: a prefix or family match would guess wrong too often.
MODEL_CATALOG: dict[str, Tier] = {
    "ollama_chat/qwen3:8b": Tier.LOW,
    "ollama_chat/qwen3:4b": Tier.LOW,
    "ollama_chat/qwen2.5:7b": Tier.LOW,
    "ollama_chat/llama3.1:8b": Tier.LOW,
    "ollama_chat/llama3.2:3b": Tier.LOW,
    "ollama_chat/mistral:7b": Tier.LOW,
    "ollama_chat/gemma3:12b": Tier.LOW,
    "ollama_chat/qwen3:32b": Tier.HIGH,
    "ollama_chat/gpt-oss:120b": Tier.HIGH,
    "openai/gpt-4o": Tier.HIGH,
    "openai/gpt-4.1": Tier.HIGH,
    "openai/gpt-5": Tier.HIGH,
    "openai/gpt-4o-mini": Tier.LOW,
    "anthropic/claude-sonnet-4-20250514": Tier.HIGH,
    "anthropic/claude-opus-4-20250514": Tier.HIGH,
    "gemini/gemini-2.5-pro": Tier.HIGH,
    "gemini/gemini-2.5-flash": Tier.LOW,
}

# Provider prefix of the LiteLLM model reference → prompt overlay name.
_OVERLAYS = {
    "ollama": "local",
    "ollama_chat": "local",
    "hosted_vllm": "local",
    "lm_studio": "local",
    "openai": "openai",
    "azure": "openai",
    "anthropic": "anthropic",
    "bedrock": "anthropic",
    "gemini": "gemini",
    "vertex_ai": "gemini",
}


CapabilityProbe = Callable[[str], ModelCapabilities]


class TierSource(StrEnum):
    """Where a turn's tier came from, in the order the router asks."""

    SETTING = "profile setting"
    PROVIDER = "provider recommendation"
    CATALOG = "catalog"
    DEFAULT = "default"


def resolve_tier(
    model: str, profile_tier: Tier | None, capabilities: ModelCapabilities
) -> tuple[Tier, TierSource]:
    """Explicit setting → provider recommendation → built-in catalog → low."""
    if profile_tier is not None:
        return profile_tier, TierSource.SETTING
    if capabilities.recommended_tier in (Tier.LOW, Tier.HIGH):
        return Tier(capabilities.recommended_tier), TierSource.PROVIDER
    if model in MODEL_CATALOG:
        return MODEL_CATALOG[model], TierSource.CATALOG
    return Tier.LOW, TierSource.DEFAULT


@dataclass(frozen=True)
class ResolvedAgentPolicy:
    tier: Tier
    tier_source: TierSource
    model: str
    rounds: int
    history_chars: int
    history_strict: bool
    result_chars: int
    prompt_chars: int
    # None: every call of a round is accepted.
    calls_per_round: int | None
    capabilities: ModelCapabilities
    prompt_pack: str
    overlay: str
    reasoning_effort: str | None
    tool_names: tuple[str, ...]
    provenance: tuple[str, ...]

    def with_rounds(self, rounds: int, why: str) -> ResolvedAgentPolicy:
        """The same policy with another round budget (e.g. a background sub-agent's)."""
        return replace(
            self, rounds=rounds, provenance=(*self.provenance, f"rounds {rounds}: {why}")
        )


class NamedTool(Protocol):
    """All the policy needs of a tool: its name (the model layer knows no tool specs)."""

    @property
    def name(self) -> str: ...


def default_policy(model: str = "unknown") -> ResolvedAgentPolicy:
    """The low tier with nothing known about the model: what a bare engine runs under."""
    return resolve_policy(model=model, profile_tier=None, max_iterations=None)


def resolve_policy(
    *,
    model: str,
    profile_tier: Tier | None,
    max_iterations: int | None,
    thinking: Thinking = Thinking.NONE,
    capabilities: ModelCapabilities | None = None,
    tools: Sequence[NamedTool] = (),
) -> ResolvedAgentPolicy:
    capabilities = capabilities or ModelCapabilities()
    provenance: list[str] = []

    tier, tier_source = resolve_tier(model, profile_tier, capabilities)
    which = f" {model}" if tier_source is TierSource.CATALOG else ""
    provenance.append(f"tier {tier}: {tier_source}{which}")
    budget = TIER_BUDGETS[tier]

    if max_iterations is not None:
        rounds = max(1, min(max_iterations, MAX_ITERATIONS_CEILING))
        provenance.append(f"rounds {rounds}: agent.max_iterations")
    else:
        rounds = budget.rounds
        provenance.append(f"rounds {rounds}: tier {tier}")

    result_chars = min(budget.result_chars, RESULT_CHARS_CEILING)
    provenance.append(f"tool result {result_chars} chars: tier {tier}")
    strict = "strict" if budget.history_strict else "soft"
    provenance.append(f"history {budget.history_chars} chars ({strict}): tier {tier}")

    calls_per_round: int | None = 1
    if tier is Tier.HIGH and capabilities.parallel_tool_calls:
        calls_per_round = None
        provenance.append("calls per round unlimited: LiteLLM reports parallel function calling")
    elif tier is Tier.HIGH:
        provenance.append("calls per round 1: LiteLLM reports no parallel function calling")
    else:
        provenance.append("calls per round 1: tier low")

    reasoning_effort: str | None = None
    if thinking is not Thinking.NONE:
        if capabilities.reasoning:
            reasoning_effort = str(thinking)
            provenance.append(f"thinking {thinking}: sent as reasoning_effort")
        else:
            provenance.append(
                f"thinking {thinking}: not sent, LiteLLM reports no reasoning support for {model}"
            )

    provider = model.split("/", 1)[0] if "/" in model else ""
    overlay = _OVERLAYS.get(provider, "")
    provenance.append(f"prompt pack {tier}, overlay {overlay or 'none'}")
    return ResolvedAgentPolicy(
        tier=tier,
        tier_source=tier_source,
        model=model,
        rounds=rounds,
        history_chars=budget.history_chars,
        history_strict=budget.history_strict,
        result_chars=result_chars,
        prompt_chars=budget.prompt_chars,
        calls_per_round=calls_per_round,
        capabilities=capabilities,
        prompt_pack=str(tier),
        overlay=overlay,
        reasoning_effort=reasoning_effort,
        tool_names=tuple(tool.name for tool in tools),
        provenance=tuple(provenance),
    )


class ModelRouter:
    """Resolves the policy of the active profile for a turn; capabilities are probed once."""

    def __init__(self, config: Config, probe: CapabilityProbe) -> None:
        self._config = config
        self._probe = probe
        self._capabilities: dict[str, ModelCapabilities] = {}

    async def capabilities(self, model: str) -> ModelCapabilities:
        if model not in self._capabilities:
            try:
                # The first probe imports LiteLLM (seconds): keep it off the event loop.
                found = await asyncio.to_thread(self._probe, model)
            except Exception:
                log.warning("could not read the capabilities of %s", model, exc_info=True)
                found = ModelCapabilities()
            self._capabilities[model] = found
        return self._capabilities[model]

    async def resolve(
        self, tools: Sequence[NamedTool], profile_name: str | None = None
    ) -> ResolvedAgentPolicy:
        name = profile_name or self._config.models.active
        profile = self._config.models.profiles[name]
        policy = resolve_policy(
            model=profile.model,
            profile_tier=profile.tier,
            max_iterations=self._config.agent.max_iterations,
            thinking=self._config.agent.thinking,
            capabilities=await self.capabilities(profile.model),
            tools=tools,
        )
        log.debug("agent policy for profile %s: %s", name, "; ".join(policy.provenance))
        return policy
