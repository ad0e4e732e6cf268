"""Provider names to adapter classes: the one place that knows every protocol."""

from __future__ import annotations

from typing import Any

from agent_gate.errors import UnknownProviderError
from agent_gate.providers.anthropic import AnthropicAdapter
from agent_gate.providers.base import ProviderAdapter
from agent_gate.providers.gemini import GeminiAdapter
from agent_gate.providers.openai_chat import OpenAIChatAdapter
from agent_gate.providers.openai_responses import OpenAIResponsesAdapter

ADAPTERS: dict[str, type[ProviderAdapter]] = {
    OpenAIResponsesAdapter.name: OpenAIResponsesAdapter,
    OpenAIChatAdapter.name: OpenAIChatAdapter,
    AnthropicAdapter.name: AnthropicAdapter,
    GeminiAdapter.name: GeminiAdapter,
}


AUTO = "auto"
"""Not a protocol: the name that asks for it to be told from the stream
(``agent_gate.autodetect``)."""


def provider_names() -> tuple[str, ...]:
    return tuple(ADAPTERS)


def adapter_for(name: str, **options: Any) -> ProviderAdapter:
    """A fresh adapter for one response stream of the named protocol.

    Options are the adapter's keyword arguments (``choice=`` for ``openai-chat``,
    ``candidate=`` for ``gemini``).
    """
    try:
        cls = ADAPTERS[name]
    except (KeyError, TypeError):
        raise UnknownProviderError(str(name), provider_names()) from None
    return cls(**options)
