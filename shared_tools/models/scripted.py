"""`ScriptedChatModel`: a deterministic, offline chat model that behaves like a tool-calling LLM.

The LangChain plumbing (tool binding, usage, ids, reasoning, streaming); decisions come from `personas.py`. It
reads tool results only from the history, never the store. Tool-call ids carry a per-instance `id_salt`, as a real
provider's differ between conversations; streamed chunks merge into exactly the reply `ainvoke` gives.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.language_models.base import LangSmithParams
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, InvalidToolCall, ToolCall, ToolCallChunk
from langchain_core.messages.ai import UsageMetadata
from langchain_core.messages.utils import count_tokens_approximately
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict, Field, field_validator

from shared_tools.models.personas import PERSONAS, Decision, Noise, decide

logger = logging.getLogger(__name__)


def _history_digest(messages: Sequence[BaseMessage], salt: str = "") -> str:
    """A stable fingerprint of the conversation so far, under one model instance's `salt`.

    Built from role, content and tool-call names/args only. Message ids and tool-call ids are left out on
    purpose: they are random in some implementations, and leaving them out means that replaying the same
    conversation to the same model yields the same tool-call ids, as a cached provider reply would. The salt
    keeps two *different* conversations that happen to read alike (the same goal asked in two sessions)
    from sharing ids: the store treats a tool-call id as an idempotency key, so a shared id would turn the
    second session's real add into a replay of the first.
    """
    parts: list[Any] = [salt]
    for m in messages:
        calls = [[tc["name"], tc["args"]] for tc in getattr(m, "tool_calls", None) or []]
        parts.append([m.type, m.content, calls])
    canonical = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str, ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:12]


def _openai_schema(tool: dict[str, Any] | type | Callable[..., Any] | BaseTool) -> dict[str, Any]:
    """`convert_to_openai_tool`, remembered per (name, description, argument class) of a `BaseTool`.

    Every run builds fresh tools and binds them again, converting them was a large part of a scripted run's CPU,
    and the schema only depends on these three (benchmarks/README.md has the numbers).
    """
    if not (isinstance(tool, BaseTool) and isinstance(tool.args_schema, type)):
        return convert_to_openai_tool(tool)
    key = (tool.name, tool.description, tool.args_schema)
    if key not in _SCHEMAS:
        _SCHEMAS[key] = convert_to_openai_tool(tool)
    return copy.deepcopy(_SCHEMAS[key])  # a copy, so no caller can change the remembered one


_SCHEMAS: dict[tuple[str, str, type], dict[str, Any]] = {}


class ScriptedChatModel(BaseChatModel):
    """A chat model whose replies come from a persona policy reading the history.

    Stateless: each reply's decisions (plan, tool calls, text) are derived from the messages alone, so they are
    deterministic, and one instance is safe to share between threads and event loops. The tool-call ids also
    carry the per-instance `id_salt` (random unless fixed), so two instances give different ids for the same
    history. See `personas.PERSONAS` for what each persona does.
    """

    # A typo such as persna="looper" must fail, not silently give the shopper.
    model_config = ConfigDict(extra="forbid")

    persona: str = "shopper"
    """Which policy decides the replies; a key of `PERSONAS`."""

    # The standard parameters of a provider model, accepted so this model can stand in for one (and pass
    # langchain-tests' construction checks). A script has no sampling or network, so only `max_tokens` changes
    # a reply.
    model: str = "scripted"
    temperature: float | None = None
    max_tokens: int | None = None
    """Output tokens a reply may use (also a per-call keyword): a longer reply is cut there, as a provider cuts
    it: its text shortened, its tool calls left unparsable, ``finish_reason="length"``."""
    timeout: float | None = None
    max_retries: int | None = None
    stop: list[str] | None = None
    streaming: bool = False

    id_salt: str = Field(default_factory=lambda: uuid.uuid4().hex[:8])
    """Mixed into tool-call ids: unique per instance, like a provider's ids; fix it to compare runs by id."""

    seed: int = 0
    """The `noisy` persona's seed (other personas have no randomness to seed)."""
    noise: Noise = Field(default_factory=Noise)
    """How often the `noisy` persona slips."""
    chunk_delay: float = Field(default=0.0, ge=0.0)
    """Seconds slept between two streamed chunks, to show time-to-first-token against time-to-answer."""

    @field_validator("persona")
    @classmethod
    def _known_persona(cls, value: str) -> str:
        if value not in PERSONAS:
            raise ValueError(f"unknown persona {value!r}; choose one of {', '.join(PERSONAS)}")
        return value

    @property
    def _llm_type(self) -> str:
        return "scripted"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model": self.model, "persona": self.persona}

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> LangSmithParams:
        params = super()._get_ls_params(stop=stop, **kwargs)
        params["ls_provider"] = "scripted"
        return params

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Bind tools the way ChatOllama does: OpenAI-format schemas, `tool_choice` accepted and ignored."""
        return self.bind(tools=[_openai_schema(t) for t in tools], **kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._whole_reply(messages, kwargs))])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        for i, chunk in enumerate(stream_chunks(self._whole_reply(messages, kwargs))):
            if i and self.chunk_delay:
                time.sleep(self.chunk_delay)
            yield ChatGenerationChunk(message=chunk)

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        for i, chunk in enumerate(stream_chunks(self._whole_reply(messages, kwargs))):
            if i:
                # Even with no delay, each chunk is a turn of the event loop, as each read from a socket is: a
                # consumer (LangGraph's stream, a cancel set from on_token) gets to run between two chunks.
                await asyncio.sleep(self.chunk_delay)
            yield ChatGenerationChunk(message=chunk)

    def _whole_reply(self, messages: list[BaseMessage], kwargs: dict[str, Any]) -> AIMessage:
        """The reply to `messages`, decided whole (a stream is cut from it), with its usage."""
        schemas: list[dict[str, Any]] = list(kwargs.get("tools") or [])
        names = [s["function"]["name"] for s in schemas]
        decision = decide(messages, names, self.persona, seed=self.seed, noise=self.noise)
        reply = self._reply(decision, messages)
        # Usage mirrors a real provider: the prompt is the whole history plus the tool schemas, so it
        # grows every step; that growth is what the article's token column teaches.
        prompt_tokens = count_tokens_approximately(messages, tools=schemas or None)
        output_tokens = count_tokens_approximately([reply])
        limit = kwargs.get("max_tokens", self.max_tokens)
        if isinstance(limit, int) and output_tokens > limit:
            reply, output_tokens = cut_reply(reply, limit), limit
        reply.usage_metadata = UsageMetadata(
            input_tokens=prompt_tokens, output_tokens=output_tokens, total_tokens=prompt_tokens + output_tokens
        )
        logger.debug("scripted %s: %s", self.persona, decision.plan)
        return reply

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        # A script is a few microseconds of pure CPU, so it answers inline on the event loop. Without this method
        # BaseChatModel hands every async call to a worker thread, and that hop costs more than the whole reply.
        return self._generate(messages, stop, run_manager.get_sync() if run_manager else None, **kwargs)

    def _reply(self, decision: Decision, messages: Sequence[BaseMessage]) -> AIMessage:
        digest = _history_digest(messages, self.id_salt)
        tool_calls = [
            ToolCall(name=c.name, args=dict(c.args), id=f"call_{digest}_{i}") for i, c in enumerate(decision.calls)
        ]
        return AIMessage(
            content=decision.text,
            tool_calls=tool_calls,
            # Where ChatOllama(reasoning=True) puts a thinking model's reasoning, so loops read plans one way.
            additional_kwargs={"reasoning_content": decision.plan},
            response_metadata={"model_name": self.model, "model_provider": "scripted", "persona": self.persona},
        )


def cut_reply(reply: AIMessage, limit: int) -> AIMessage:
    """`reply` as a provider sends it when it runs out of output tokens after `limit` of them: the text cut
    (about four characters a token), every tool call's arguments cut mid-JSON, so none can be parsed."""
    text = reply.content if isinstance(reply.content, str) else ""
    kept = max(0, limit * 4 - len(text))  # what the cut text leaves of the limit, for the calls' arguments
    invalid = [
        InvalidToolCall(
            name=call["name"],
            args=json.dumps(call["args"])[: max(1, kept // 4)],
            id=call["id"],
            error=None,
            type="invalid_tool_call",
        )
        for call in reply.tool_calls
    ]
    return AIMessage(
        content=text[: limit * 4],
        invalid_tool_calls=invalid,
        additional_kwargs=dict(reply.additional_kwargs),
        response_metadata={**reply.response_metadata, "finish_reason": "length"},
    )


ARGS_PIECE_CHARS = 7
"""Characters of a tool call's JSON arguments per streamed chunk: small, so arguments are cut mid-JSON."""


def _pieces(text: str) -> list[str]:
    """Word-sized pieces (a word with the white space around it) that join back to exactly `text`."""
    return re.findall(r"\s*\S+\s*|\s+", text)


def stream_chunks(reply: AIMessage) -> list[AIMessageChunk]:
    """`reply` cut into the chunks a streaming provider sends, which merge back into it.

    The plan first (where ChatOllama puts a thinking model's reasoning), then the text, then the tool calls:
    each call's first chunk carries its index, id and name, its arguments follow as JSON fragments cut every
    `ARGS_PIECE_CHARS` characters, and the fragments of several calls take turns (index 0, 1, 0, 1...), as
    OpenAI-style providers interleave them. The last chunk carries the usage and the response metadata, as
    Ollama's final ``done`` line does, and says it is the last. Every chunk repeats the reasoning key, with ""
    when it has none of the plan, so the merged reply has the key even for an empty plan.
    """
    plan = reply.additional_kwargs.get("reasoning_content")
    chunks: list[AIMessageChunk] = []
    if isinstance(plan, str):
        chunks += [AIMessageChunk(content="", additional_kwargs={"reasoning_content": p}) for p in _pieces(plan)]
        if not chunks:
            chunks.append(AIMessageChunk(content="", additional_kwargs={"reasoning_content": ""}))
    text = reply.content if isinstance(reply.content, str) else ""
    chunks += [AIMessageChunk(content=p) for p in _pieces(text)]
    fragments: list[list[ToolCallChunk]] = []
    calls = [(c["name"], json.dumps(c["args"], ensure_ascii=False), c["id"]) for c in reply.tool_calls]
    calls += [(c["name"], c["args"] or "", c["id"]) for c in reply.invalid_tool_calls]
    for index, (name, args, call_id) in enumerate(calls):
        pieces = [args[i : i + ARGS_PIECE_CHARS] for i in range(0, len(args), ARGS_PIECE_CHARS)]
        head = ToolCallChunk(name=name, args="", id=call_id, index=index, type="tool_call_chunk")
        rest = [ToolCallChunk(name=None, args=p, id=None, index=index, type="tool_call_chunk") for p in pieces]
        fragments.append([head, *rest])
    for turn in range(max((len(f) for f in fragments), default=0)):
        for calls in fragments:
            if turn < len(calls):
                chunks.append(AIMessageChunk(content="", tool_call_chunks=[calls[turn]]))
    chunks.append(
        AIMessageChunk(
            content="" if isinstance(reply.content, str) else reply.content,
            usage_metadata=reply.usage_metadata,
            response_metadata=dict(reply.response_metadata),
            chunk_position="last",
        )
    )
    return chunks
