"""`CheckedChatOllama`: ChatOllama whose failures say, in one line, what went wrong with the Ollama server.

ChatOllama lets the HTTP client's exceptions through, which never mention Ollama; this subclass turns exactly
those into `ModelCallFailed`, the original kept as ``__cause__``. Cancellation and the time budget are untouched.
Imported only for real-model runs.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import httpx
import ollama
from langchain_core.messages import BaseMessage
from langchain_ollama import ChatOllama
from pydantic import PrivateAttr

from shared_tools.models.errors import ModelCallFailed

WIRE_ERRORS = (httpx.HTTPError, json.JSONDecodeError, ollama.ResponseError)


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

    def _create_chat_stream(
        self, messages: list[BaseMessage], stop: list[str] | None = None, **kwargs: Any
    ) -> Iterator[Mapping[str, Any] | str]:
        try:
            yield from super()._create_chat_stream(messages, stop, **kwargs)
        except WIRE_ERRORS as exc:
            raise self._failed(exc) from exc

    async def _acreate_chat_stream(
        self, messages: list[BaseMessage], stop: list[str] | None = None, **kwargs: Any
    ) -> AsyncIterator[Mapping[str, Any] | str]:
        self._async_client_of_this_loop()
        try:
            async for part in super()._acreate_chat_stream(messages, stop, **kwargs):
                yield part
        except WIRE_ERRORS as exc:
            raise self._failed(exc) from exc
