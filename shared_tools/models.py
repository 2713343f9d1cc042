"""The chat models both agents run on: the embedded `ScriptedChatModel` and a checked `ChatOllama`.

`make_model("scripted")` gives the default model, whose decisions are deterministic, so every demo and test runs
offline (its tool-call ids also carry a per-instance `id_salt`, random unless fixed);
`make_model("ollama:qwen3:4b")` gives the real local model the seed article used, after a cheap check
that Ollama is up and the model is pulled (so a missing server is one clear line, not a traceback from
deep inside httpx). `ScriptedChatModel` is only LangChain plumbing (tool binding, usage, ids, reasoning
text); the decisions come from the persona policies in `personas.py`. The model reads tool results only
from the message history it is given, never from the store, exactly like a real model.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import os
import uuid
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

import httpx
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.language_models.base import LangSmithParams
from langchain_core.messages import AIMessage, BaseMessage, ToolCall
from langchain_core.messages.ai import UsageMetadata
from langchain_core.messages.utils import count_tokens_approximately
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict, Field, field_validator

from shared_tools.personas import (
    FRESH_CART_INSTRUCTION,
    FRESH_CART_PHRASES,
    PERSONAS,
    Decision,
    ScriptExhausted,
    ToolNotBound,
    decide,
)

__all__ = [
    "DEFAULT_OLLAMA_URL",
    "FRESH_CART_INSTRUCTION",
    "FRESH_CART_PHRASES",
    "PERSONAS",
    "ModelCallFailed",
    "ModelSpecError",
    "ModelUnavailable",
    "ScriptExhausted",
    "ScriptedChatModel",
    "ToolNotBound",
    "make_model",
    "ollama_base_url",
]

logger = logging.getLogger(__name__)

DEFAULT_OLLAMA_URL = "http://127.0.0.1:11434"
_REACHABILITY_TIMEOUT_S = 3.0


class ModelSpecError(ValueError):
    """A model spec string that `make_model` does not understand."""


class ModelUnavailable(RuntimeError):
    """The requested real model cannot be used right now; the message says what to run."""


class ModelCallFailed(ModelUnavailable):
    """A real model call failed mid-run (refused, cut off, garbled or timed out); see `ollama_model`."""


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

    Every run builds fresh tools and binds them again; converting them was a third of a scripted
    `python compare.py` run's CPU (benchmarks/startup.py), and the schema only depends on these three.
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
    # langchain-tests' construction checks). A script has no sampling, network or length limit, so none of
    # them changes a reply.
    model: str = "scripted"
    temperature: float | None = None
    max_tokens: int | None = None
    timeout: float | None = None
    max_retries: int | None = None
    stop: list[str] | None = None
    streaming: bool = False

    id_salt: str = Field(default_factory=lambda: uuid.uuid4().hex[:8])
    """Mixed into tool-call ids: unique per instance, like a provider's ids; fix it to compare runs by id."""

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
        schemas: list[dict[str, Any]] = list(kwargs.get("tools") or [])
        names = [s["function"]["name"] for s in schemas]
        decision = decide(messages, names, self.persona)
        reply = self._reply(decision, messages)
        # Usage mirrors a real provider: the prompt is the whole history plus the tool schemas, so it
        # grows every step; that growth is what the seed's token column teaches.
        prompt_tokens = count_tokens_approximately(messages, tools=schemas or None)
        output_tokens = count_tokens_approximately([reply])
        reply.usage_metadata = UsageMetadata(
            input_tokens=prompt_tokens, output_tokens=output_tokens, total_tokens=prompt_tokens + output_tokens
        )
        logger.debug("scripted %s: %s", self.persona, decision.plan)
        return ChatResult(generations=[ChatGeneration(message=reply)])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        # A script is a few microseconds of pure CPU, so it answers inline on the event loop. Without this method
        # BaseChatModel hands every async call to a worker thread, and that hop cost more than the whole reply
        # (benchmarks/overhead.py: the hand-written loop went from 1.87x to 1.45x the bare sync loop).
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


# ---------------------------------------------------------------------------------------------------------------------
# make_model


def ollama_base_url(host: str | None = None) -> str:
    """`OLLAMA_HOST` (or `host`) as a full URL: "host:port" and bare hosts get a scheme and the default port."""
    raw = (host if host is not None else os.environ.get("OLLAMA_HOST", "")).strip()
    if not raw:
        return DEFAULT_OLLAMA_URL
    if "://" not in raw:
        raw = "http://" + raw
    parts = urlsplit(raw)
    hostname = parts.hostname or "127.0.0.1"
    if ":" in hostname:  # IPv6 literal
        hostname = f"[{hostname}]"
    port = parts.port or (443 if parts.scheme == "https" else 11434)
    return f"{parts.scheme}://{hostname}:{port}{parts.path.rstrip('/')}"


def _with_tag(name: str) -> str:
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"


def _check_ollama(base_url: str, model: str) -> None:
    """Raise `ModelUnavailable` (one line, with the command to run) unless `model` is pulled at `base_url`."""
    start = f"start it with `ollama serve`, then `ollama pull {model}`."
    try:
        response = httpx.get(f"{base_url}/api/tags", timeout=_REACHABILITY_TIMEOUT_S)
    except httpx.HTTPError as exc:
        raise ModelUnavailable(f"Ollama is not reachable at {base_url} - {start}") from exc
    if response.status_code != 200:
        raise ModelUnavailable(
            f"Ollama at {base_url} answered HTTP {response.status_code} to /api/tags - check the server, or {start}"
        )
    try:
        listed = response.json().get("models", [])
    except (ValueError, AttributeError) as exc:
        raise ModelUnavailable(f"{base_url} does not answer like Ollama (bad /api/tags) - {start}") from exc
    pulled = {_with_tag(str(m.get(k))) for m in listed if isinstance(m, dict) for k in ("name", "model") if m.get(k)}
    if _with_tag(model) not in pulled:
        raise ModelUnavailable(f"Model {model} is not pulled in Ollama at {base_url} - run `ollama pull {model}`.")


def _spec_error(spec: str) -> ModelSpecError:
    personas = ", ".join(f"scripted:{p}" for p in PERSONAS)
    return ModelSpecError(
        f"Unknown model spec {spec!r}; use 'scripted', {personas}, or 'ollama:<model>' (e.g. ollama:qwen3:4b)."
    )


def make_model(spec: str, *, timeout_s: float | None = 120.0) -> BaseChatModel:
    """Build the model named by `spec`: "scripted", "scripted:<persona>" or "ollama:<model>"."""
    kind, colon, rest = spec.strip().partition(":")
    if kind == "scripted":
        persona = rest if colon else "shopper"
        if persona not in PERSONAS:
            raise _spec_error(spec)
        return ScriptedChatModel(persona=persona)
    if kind == "ollama" and rest:
        # Imported here so scripted runs never load the Ollama client.
        from shared_tools.ollama_model import CheckedChatOllama

        base_url = ollama_base_url()
        _check_ollama(base_url, rest)
        return CheckedChatOllama(
            model=rest,
            temperature=0,
            seed=42,
            reasoning=True,
            base_url=base_url,
            # The ollama client's default timeout is None (wait forever); a stuck server must not hang a run.
            client_kwargs={"timeout": timeout_s},
        )
    raise _spec_error(spec)
