"""`CheckedChatOllama`: ChatOllama whose failures say, in one line, what went wrong with the Ollama server.

ChatOllama lets the HTTP client's exceptions through, which never mention Ollama; this subclass turns exactly
those, and a reply that is no Ollama reply, into `ModelCallFailed`, the original kept as ``__cause__``; a split
emoji is joined before ChatOllama reads the text. Cancellation and the time budget are untouched. Imported only
for real-model runs.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import httpx
import ollama
from langchain_core.exceptions import OutputParserException
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatGenerationChunk
from langchain_ollama import ChatOllama
from pydantic import BaseModel, PrivateAttr, ValidationError

from shared_tools.models.errors import ModelCallFailed
from shared_tools.replies import JoinedPieces, bounded_value

WIRE_ERRORS = (httpx.HTTPError, json.JSONDecodeError, ollama.ResponseError)

GARBLED = (ValidationError, RecursionError, AttributeError)
"""What the ollama client raises on a line that is JSON but no chat reply: a field of the wrong type or missing
(pydantic), nesting past the JSON decoder's recursion limit, a list where an object belongs."""

UNREADABLE = (ValidationError, RecursionError, OutputParserException)
"""What ChatOllama raises building a message out of such a reply (arguments that are a JSON string nested past
the recursion limit, say)."""


class _WholeText:
    """The parts of one Ollama stream with their text whole: an emoji split across two lines is joined, every
    other string has its lone surrogates replaced (`replies.whole_text`)."""

    def __init__(self) -> None:
        self.content, self.thinking = JoinedPieces(), JoinedPieces()

    def part(self, part: Any) -> Any:
        if isinstance(part, BaseModel):
            part = part.model_dump(exclude_none=True)
        if not isinstance(part, dict):
            return part
        message = part.get("message")
        if not isinstance(message, dict):
            return bounded_value(part, {})
        message = dict(message)
        done = part.get("done") is True
        for field, pieces in (("content", self.content), ("thinking", self.thinking)):
            if isinstance(message.get(field), str):
                message[field] = pieces.piece(message[field]) + (pieces.rest() if done else "")
        return {
            **bounded_value({k: v for k, v in part.items() if k != "message"}, {}),
            "message": {
                **bounded_value({k: v for k, v in message.items() if k not in ("content", "thinking")}, {}),
                **{k: message[k] for k in ("content", "thinking") if k in message},
            },
        }


def describe_failure(base_url: str, timeout_s: float | None, exc: BaseException) -> str:
    """One line: which server, what happened, and the client's own words."""
    where = f"Ollama at {base_url}"
    if isinstance(exc, httpx.ConnectError):
        what = f"{where} refused the connection; is `ollama serve` still running?"
    elif isinstance(exc, httpx.TimeoutException):
        what = f"{where} sent nothing for {timeout_s} s (the request timeout)"
    elif isinstance(exc, httpx.TransportError):
        what = f"the connection to {where} broke in the middle of a reply"
    elif isinstance(exc, json.JSONDecodeError):
        what = f"{where} sent a reply line that is not valid JSON"
    elif isinstance(exc, ollama.ResponseError):
        what = f"{where} answered HTTP {exc.status_code}"
    else:
        what = f"the request to {where} failed"
    detail = " ".join(str(exc).split()) or type(exc).__name__
    return f"{what} ({type(exc).__name__}: {detail})"


class CheckedChatOllama(ChatOllama):
    """ChatOllama, except that a failed call raises `ModelCallFailed` with a message naming the server, and a
    call takes ``max_tokens=N`` as the other models do (Ollama's ``num_predict``, never above the model's own)."""

    max_tokens: int | None = None
    """Output tokens a reply may use, also a per-call keyword: Ollama's `num_predict`, under the name both agents
    pass what is left of the token budget in (`guards.reply_cap`)."""

    def _chat_params(self, messages: list[BaseMessage], stop: list[str] | None = None, **kwargs: Any) -> dict[str, Any]:
        cap = kwargs.pop("max_tokens", self.max_tokens)
        params = super()._chat_params(messages, stop, **kwargs)
        if cap is not None:
            options = dict(params.get("options") or {})
            options["num_predict"] = min(cap, self.num_predict) if self.num_predict else cap
            params["options"] = options
        return params

    _client_loop: asyncio.AbstractEventLoop | None = PrivateAttr(default=None)
    """The event loop the async client's connections belong to."""

    def _async_client_of_this_loop(self) -> None:
        # httpx keeps a connection in its pool for the next request, bound to the loop that opened it. A sync
        # driver (`chat`, `run`) runs each turn on a loop of its own, so the next turn would reuse a connection
        # of a closed loop ("Event loop is closed"): one client per loop instead.
        loop = asyncio.get_running_loop()
        if self._client_loop is not None and self._client_loop is not loop:
            self._set_clients()
        self._client_loop = loop

    @property
    def request_timeout_s(self) -> float | None:
        return self.client_kwargs.get("timeout")

    def _failed(self, exc: BaseException) -> ModelCallFailed:
        return ModelCallFailed(describe_failure(str(self.base_url), self.request_timeout_s, exc))

    def _garbled(self, exc: BaseException) -> ModelCallFailed:
        detail = " ".join(str(exc).split())[:300] or type(exc).__name__
        return ModelCallFailed(
            f"Ollama at {self.base_url} sent a reply that is not a chat reply it can be read as "
            f"({type(exc).__name__}: {detail})"
        )

    def _past_deadline(self) -> ModelCallFailed:
        return ModelCallFailed(
            f"Ollama at {self.base_url} sent no whole reply within {self.request_timeout_s} s (the request timeout)"
        )

    # The request timeout is the httpx client's, which is per read: a server that sends a line now and then is
    # never silent that long. So the whole reply must also be in by then; the wait for the first line is the
    # client's own timeout ("sent nothing"), as before.

    def _create_chat_stream(
        self, messages: list[BaseMessage], stop: list[str] | None = None, **kwargs: Any
    ) -> Iterator[Mapping[str, Any] | str]:
        whole = _WholeText()
        timeout = self.request_timeout_s
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            for part in super()._create_chat_stream(messages, stop, **kwargs):
                if deadline is not None and time.monotonic() > deadline:
                    raise self._past_deadline()
                yield whole.part(part)
        except WIRE_ERRORS as exc:
            raise self._failed(exc) from exc
        except GARBLED as exc:
            raise self._garbled(exc) from exc

    async def _acreate_chat_stream(
        self, messages: list[BaseMessage], stop: list[str] | None = None, **kwargs: Any
    ) -> AsyncIterator[Mapping[str, Any] | str]:
        self._async_client_of_this_loop()
        whole = _WholeText()
        timeout = self.request_timeout_s
        deadline = None if timeout is None else asyncio.get_running_loop().time() + timeout
        parts = super()._acreate_chat_stream(messages, stop, **kwargs).__aiter__()
        first = True
        try:
            while True:
                try:
                    async with asyncio.timeout_at(None if first else deadline):
                        part = await anext(parts)
                except StopAsyncIteration:
                    return
                except TimeoutError:
                    raise self._past_deadline() from None
                first = False
                yield whole.part(part)
        except WIRE_ERRORS as exc:
            raise self._failed(exc) from exc
        except GARBLED as exc:
            raise self._garbled(exc) from exc
        finally:
            await parts.aclose()  # type: ignore[attr-defined]

    def _iterate_over_stream(
        self, messages: list[BaseMessage], stop: list[str] | None = None, **kwargs: Any
    ) -> Iterator[ChatGenerationChunk]:
        try:
            yield from super()._iterate_over_stream(messages, stop, **kwargs)
        except UNREADABLE as exc:
            raise self._garbled(exc) from exc

    async def _aiterate_over_stream(
        self, messages: list[BaseMessage], stop: list[str] | None = None, **kwargs: Any
    ) -> AsyncIterator[ChatGenerationChunk]:
        try:
            async for chunk in super()._aiterate_over_stream(messages, stop, **kwargs):
                yield chunk
        except UNREADABLE as exc:
            raise self._garbled(exc) from exc
