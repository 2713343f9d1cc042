"""Small test-only chat models: a fixed script of replies that fails loudly when it runs out.

The embedded `ScriptedChatModel` decides from the history; these doubles are for tests that need an
exact, hand-picked sequence of replies (a silent model, a model that sends bad arguments, one that
asks for three tools at once). Each reply reports usage so token sums can be asserted exactly.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import PrivateAttr

Reply = AIMessage | Callable[[list[BaseMessage]], AIMessage]


class ScriptExhaustedError(AssertionError):
    """The test model was called more often than its script allows."""


def call(name: str, call_id: str | None = None, **args: Any) -> dict[str, Any]:
    """One tool call entry for `ai(...)`."""
    return {"name": name, "args": args, "id": call_id or f"{name}-{sorted(args.items())}", "type": "tool_call"}


def provider_id(call_id: str) -> str:
    """The id a scripted reply gave a call, from the id a session kept: a session gives every call a fresh one,
    the provider's id with a suffix (`guards.with_call_ids`)."""
    return re.sub(r"_[0-9a-f]{12}$", "", call_id)


def ai(text: str = "", *calls: dict[str, Any], tokens: int = 10) -> AIMessage:
    """An AIMessage with the given text, tool calls and a fixed usage of `tokens` (input 8/10 of it)."""
    inp = tokens * 8 // 10
    return AIMessage(
        content=text,
        tool_calls=list(calls),
        usage_metadata={"input_tokens": inp, "output_tokens": tokens - inp, "total_tokens": tokens},
    )


class ToolBindingDouble(BaseChatModel):
    """A test chat model that binds tools as ChatOllama does (OpenAI-format schemas), so the agents can bind it."""

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: str | None = None, **kwargs: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)


class ScriptModel(ToolBindingDouble):
    """Returns its replies in order; a callable reply is given the history. Raises when exhausted."""

    replies: Sequence[Any]
    """`AIMessage`s or callables of the history (typed loosely: pydantic would try to parse a callable as a message)."""
    _index: int = PrivateAttr(default=0)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _seen: list[list[BaseMessage]] = PrivateAttr(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "test-script"

    @property
    def calls(self) -> int:
        return self._index

    @property
    def prompts(self) -> list[list[BaseMessage]]:
        """Every history this model was called with, in order."""
        return self._seen

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        with self._lock:
            if self._index >= len(self.replies):
                raise ScriptExhaustedError(
                    f"ScriptModel has {len(self.replies)} replies and was called a {self._index + 1}th time"
                )
            reply = self.replies[self._index]
            self._index += 1
            self._seen.append(list(messages))
        message = reply(list(messages)) if callable(reply) else reply
        # A copy, so one scripted reply object never ends up shared between two histories.
        return ChatResult(generations=[ChatGeneration(message=message.model_copy(deep=True))])


class RunawayModel(ToolBindingDouble):
    """A model whose reply never ends on its own: "la " for `length` tokens, unless a `max_tokens` (its own
    setting, or the call's keyword) cuts it first, as a provider cuts it (``finish_reason="length"``).
    `caps` records the keyword each call was given (None: none)."""

    max_tokens: int | None = None
    length: int = 100_000
    prompt_tokens: int = 100
    _caps: list[int | None] = PrivateAttr(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "test-runaway"

    @property
    def caps(self) -> list[int | None]:
        return self._caps

    def _reply(self, kwargs: dict[str, Any]) -> AIMessage:
        self._caps.append(kwargs.get("max_tokens"))
        limit = kwargs.get("max_tokens", self.max_tokens)
        written = self.length if limit is None else min(self.length, limit)
        return AIMessage(
            content="la " * written,
            response_metadata={"finish_reason": "length" if written < self.length else "stop"},
            usage_metadata={
                "input_tokens": self.prompt_tokens,
                "output_tokens": written,
                "total_tokens": self.prompt_tokens + written,
            },
        )

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._reply(kwargs))])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        reply = self._reply(kwargs)
        text = str(reply.content)
        for start in range(0, len(text), 300):
            yield ChatGenerationChunk(message=AIMessageChunk(content=text[start : start + 300]))
        yield ChatGenerationChunk(
            message=AIMessageChunk(
                content="", usage_metadata=reply.usage_metadata, response_metadata=reply.response_metadata
            )
        )
