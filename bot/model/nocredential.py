"""`auth: none`: the HTTP client of a model profile that sends no credential at all.

LiteLLM looks a provider's key up in the environment whenever it is given none, and some
of its providers (Anthropic, Gemini) will not build a request without one. So kelpie gives
LiteLLM a fixed placeholder key (not a secret) together with this client, whose request hook
removes every credential header and `key` query parameter just before a request leaves:
whatever LiteLLM or the SDK put there, the server receives no credential.
"""

from __future__ import annotations

from typing import Any

PLACEHOLDER_KEY = "kelpie-auth-none"
CREDENTIAL_HEADERS = ("authorization", "x-api-key", "x-goog-api-key", "api-key")
# Providers LiteLLM speaks to through its own HTTP handler; the others go through the
# openai SDK (every OpenAI-compatible server).
_HANDLER_PROVIDERS = frozenset({"anthropic", "gemini", "ollama", "ollama_chat"})


async def _strip_credentials(request: Any) -> None:
    # An httpx request (LiteLLM's handler) or an httpx2 one (the openai SDK): same API.
    for name in CREDENTIAL_HEADERS:
        request.headers.pop(name, None)
    if "key" in request.url.params:
        request.url = request.url.copy_remove_param("key")


def no_credential_client(provider: str, *, api_base: str | None, timeout_s: float) -> Any:
    """The `client` LiteLLM takes for `provider` (its LiteLLM name), stripping credentials."""
    hooks: dict[str, list[Any]] = {"request": [_strip_credentials]}
    if provider in _HANDLER_PROVIDERS:
        from litellm.llms.custom_httpx.http_handler import AsyncHTTPHandler

        return AsyncHTTPHandler(timeout=timeout_s, event_hooks=hooks)
    import openai

    return openai.AsyncOpenAI(
        api_key=PLACEHOLDER_KEY,
        base_url=api_base,
        max_retries=0,  # the engine owns the retry policy
        timeout=timeout_s,
        http_client=openai.DefaultAsyncHttpxClient(event_hooks=hooks, timeout=timeout_s),
    )
