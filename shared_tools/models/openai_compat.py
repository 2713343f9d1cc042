"""`CompatChatOpenAI`: ChatOpenAI for OpenAI-compatible servers, with the request quirks of local servers fixed.

The quirks (each measured against llama-cpp-python's server, langchain-openai 1.7.4): tools sent without
``tool_choice`` are ignored; an assistant message with tool calls goes out with ``"content": null`` (HTTP 500);
``max_tokens`` goes out as ``max_completion_tokens`` (ignored); a streamed call with tools ends without a single
chunk. Wire failures become `ModelCallFailed`, one line naming the server. `check_server` is the cheap first look.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
import weakref
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import openai
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import LanguageModelInput
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, InvalidToolCall, ToolCallChunk
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from langchain_openai import ChatOpenAI

# The HTTP library the installed openai SDK is built on (httpx2 for openai 3, httpx before), which is what its
# transports and errors are made of; langchain-openai resolves it for exactly this use.
from langchain_openai._compat import httpx as sdk_httpx
from langchain_openai.chat_models._client_utils import StreamChunkTimeoutError
from pydantic import PrivateAttr

from shared_tools.models.errors import ModelCallFailed, ModelRequestRefused, ModelUnavailable, caused_by
from shared_tools.replies import JoinedPieces, checked_reply, invalid_call, unusable_args
from shared_tools.results import STREAM_FALLBACK

log = logging.getLogger(__name__)

WIRE_ERRORS = (openai.APIError, httpx.HTTPError, sdk_httpx.HTTPError, json.JSONDecodeError, StreamChunkTimeoutError)
"""What the openai client lets through when the server is gone, slow, or says something that is not a reply."""

NO_KEY = "not-needed"
"""The API key sent when `OPENAI_API_KEY` is not set: the client insists on one, local servers ignore it."""

_CHECK_TIMEOUT_S = 3.0


def describe_failure(server: str, timeout_s: float | None, exc: BaseException) -> str:
    """One line: which server, what happened, and the client's own words."""
    where = f"the OpenAI-compatible server at {server}"
    if caused_by(exc, RequestDeadlineExceeded):
        what = f"{where} sent no whole reply within {timeout_s} s (the request timeout)"
    elif isinstance(exc, openai.APITimeoutError | httpx.TimeoutException | StreamChunkTimeoutError):
        what = f"{where} sent nothing for {timeout_s} s (the request timeout)"
    elif isinstance(exc, openai.APIConnectionError | httpx.ConnectError):
        what = f"{where} refused the connection or broke it; is it still running?"
    elif isinstance(exc, openai.APIStatusError):
        what = f"{where} answered HTTP {exc.status_code}"
    elif isinstance(exc, httpx.TransportError):
        what = f"the connection to {where} broke in the middle of a reply"
    elif isinstance(exc, json.JSONDecodeError | openai.APIResponseValidationError):
        what = f"{where} sent a reply that is not valid JSON"
    else:
        what = f"the request to {where} failed"
    detail = " ".join(str(exc).split())[:300] or type(exc).__name__
    return f"{what} ({type(exc).__name__}: {detail})"


class RequestDeadlineExceeded(sdk_httpx.ReadTimeout):
    """The whole request outlasted the request timeout: a server that trickles a byte now and then is never
    silent for a whole read timeout, so the client's own (per read) timeout never ends it."""


def _past_deadline(request: Any, timeout_s: float) -> RequestDeadlineExceeded:
    return RequestDeadlineExceeded(f"no whole reply within {timeout_s} s", request=request)


class _AsyncDeadlineStream(sdk_httpx.AsyncByteStream):
    """A response body whose reads end at the request's deadline (a loop time)."""

    def __init__(self, stream: Any, request: Any, deadline: float, timeout_s: float) -> None:
        self._stream, self._request, self._deadline, self._timeout_s = stream, request, deadline, timeout_s

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunks = self._stream.__aiter__()
        while True:
            try:
                async with asyncio.timeout_at(self._deadline):
                    chunk = await anext(chunks)
            except StopAsyncIteration:
                return
            except TimeoutError:
                raise _past_deadline(self._request, self._timeout_s) from None
            yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


class _DeadlineStream(sdk_httpx.SyncByteStream):
    """A response body read by a sync client: a blocking read cannot be interrupted, so the deadline is checked
    as each piece arrives (each read is bounded by the read timeout, so the request ends by then too)."""

    def __init__(self, stream: Any, request: Any, deadline: float, timeout_s: float) -> None:
        self._stream, self._request, self._deadline, self._timeout_s = stream, request, deadline, timeout_s

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._stream:
            if time.monotonic() > self._deadline:
                raise _past_deadline(self._request, self._timeout_s)
            yield chunk

    def close(self) -> None:
        self._stream.close()


class PerLoopTransport(sdk_httpx.AsyncBaseTransport):
    """A connection pool per event loop: a pooled connection belongs to the loop that opened it, and the agents'
    sync drivers run each call in a loop of their own ("Event loop is closed" on the second run otherwise;
    langchain-openai shares one pool between every model with the same address and timeout).

    With a `timeout_s`, the whole request (headers and every piece of the body, a stream's too) must be done
    within it: the SDK's own timeout is per read, which a server that trickles never reaches."""

    def __init__(self, timeout_s: float | None = None) -> None:
        self._pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()
        self._timeout_s = timeout_s

    async def handle_async_request(self, request: Any) -> Any:
        loop = asyncio.get_running_loop()
        pool = self._pools.get(loop)
        if pool is None:
            pool = self._pools[loop] = sdk_httpx.AsyncHTTPTransport()
        if self._timeout_s is None:
            return await pool.handle_async_request(request)
        deadline = loop.time() + self._timeout_s
        try:
            async with asyncio.timeout_at(deadline):
                response = await pool.handle_async_request(request)
        except TimeoutError:
            # No response yet, as when the client's own read timeout fires: said the same way ("sent nothing").
            raise sdk_httpx.ReadTimeout("timed out", request=request) from None
        stream = _AsyncDeadlineStream(response.stream, request, deadline, self._timeout_s)
        return sdk_httpx.Response(
            response.status_code, headers=response.headers, stream=stream, extensions=response.extensions
        )


class DeadlineTransport(sdk_httpx.BaseTransport):
    """`PerLoopTransport`'s whole-request deadline for the sync client (checked as each piece of the body
    arrives, `_DeadlineStream`)."""

    def __init__(self, timeout_s: float | None) -> None:
        self._pool = sdk_httpx.HTTPTransport()
        self._timeout_s = timeout_s

    def handle_request(self, request: Any) -> Any:
        deadline = time.monotonic() + (self._timeout_s or 0)
        response = self._pool.handle_request(request)
        if self._timeout_s is None:
            return response
        stream = _DeadlineStream(response.stream, request, deadline, self._timeout_s)
        return sdk_httpx.Response(
            response.status_code, headers=response.headers, stream=stream, extensions=response.extensions
        )

    def close(self) -> None:
        self._pool.close()


def async_http_client(timeout_s: float | None) -> Any:
    """The async HTTP client of one `CompatChatOpenAI`: the SDK's defaults, one pool per event loop, and the
    request timeout `timeout_s` for the whole request (`PerLoopTransport`)."""
    return openai.DefaultAsyncHttpxClient(transport=PerLoopTransport(timeout_s), timeout=timeout_s)


def sync_http_client(timeout_s: float | None) -> Any:
    """The sync HTTP client of one `CompatChatOpenAI`, with the same whole-request timeout (`DeadlineTransport`)."""
    return openai.DefaultHttpxClient(transport=DeadlineTransport(timeout_s), timeout=timeout_s)


def _as_chunk(result: ChatResult) -> ChatGenerationChunk:
    """A whole reply as the one chunk of a stream: the message a stream would have merged into, its calls as call
    chunks, and the metadata a stream's chunks carry (finish_reason, model_name, ...; usage on the message)."""
    generation = result.generations[0]
    message = generation.message
    assert isinstance(message, AIMessage)
    metadata = {k: v for k, v in (result.llm_output or {}).items() if k != "token_usage"}
    metadata |= {**(generation.generation_info or {}), **message.response_metadata}
    raw = [*message.tool_calls, *message.invalid_tool_calls]
    calls = [
        ToolCallChunk(
            name=call.get("name"),
            args=call.get("args") if isinstance(call.get("args"), str | None) else json.dumps(call["args"]),
            id=call.get("id"),
            index=i,
            type="tool_call_chunk",
        )
        for i, call in enumerate(raw)
    ]
    extra = {k: v for k, v in message.additional_kwargs.items() if k not in ("tool_calls", "function_call")}
    return ChatGenerationChunk(
        message=AIMessageChunk(
            content=message.content,
            additional_kwargs=extra,
            response_metadata=metadata,
            usage_metadata=message.usage_metadata,
            tool_call_chunks=calls,
            id=message.id,
        )
    )


_USAGE_COUNTS = ("prompt_tokens", "completion_tokens", "total_tokens")


def _count(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def checked_usage(usage: Any) -> dict[str, Any] | None:
    """A reply's usage with every count that is not a non-negative finite number left out (langchain-openai
    adds them up: ``"lots" + 1`` would end the run with a TypeError), None when nothing is left."""
    if not isinstance(usage, dict):
        return None
    checked: dict[str, Any] = {k: int(usage[k]) for k in _USAGE_COUNTS if _count(usage.get(k))}
    for details in ("prompt_tokens_details", "completion_tokens_details"):
        if isinstance(usage.get(details), dict):
            checked[details] = {k: int(v) for k, v in usage[details].items() if isinstance(k, str) and _count(v)}
    return checked or None


def checked_message(message: Any) -> tuple[dict[str, Any], list[InvalidToolCall]]:
    """A reply's message as langchain-openai can read it, and the calls it could not run.

    The message is an assistant's whatever role it claims; content that is no text is dropped; a call that is no
    call, or whose arguments parse to something other than a bounded JSON object (`[7, 10]`, 600 levels deep),
    is taken out and returned as an unparsable call (langchain-openai would raise a ValidationError on it).
    Arguments that do not parse at all are left to langchain-openai, which makes them unparsable calls too."""
    message = dict(message) if isinstance(message, dict) else {}
    message["role"] = "assistant"
    if not isinstance(message.get("content"), str | None):
        message["content"] = ""
    raw_calls = message.get("tool_calls")
    if raw_calls is None:
        return message, []
    kept: list[dict[str, Any]] = []
    invalid: list[InvalidToolCall] = []
    for raw in raw_calls if isinstance(raw_calls, list) else [raw_calls]:
        function = raw.get("function") if isinstance(raw, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            call_id = raw.get("id") if isinstance(raw, dict) else None
            invalid.append(invalid_call(None, call_id, None, "not a tool call"))
            continue
        arguments = function.get("arguments")
        try:
            args = json.loads(arguments, strict=False) if isinstance(arguments, str) and arguments else {}
        except (ValueError, RecursionError):
            kept.append(raw)  # not JSON: langchain-openai keeps it as an unparsable call, with its parse error
            continue
        if args is not None and (why := unusable_args(args)):  # null: no arguments, as langchain-openai reads it
            invalid.append(invalid_call(function["name"], raw.get("id"), args, why))
        else:
            kept.append(raw)
    message["tool_calls"] = kept or None
    return message, invalid


def _whole_piece(chunk: ChatGenerationChunk, text: JoinedPieces) -> ChatGenerationChunk:
    """A streamed chunk with its text whole (`JoinedPieces`: an emoji split across two chunks arrives joined in
    the second), so whoever merges or shows the chunks never holds half a character."""
    content = chunk.message.content
    if not isinstance(content, str):
        return chunk
    whole = text.piece(content)
    if whole == content:
        return chunk
    return ChatGenerationChunk(
        message=chunk.message.model_copy(update={"content": whole}), generation_info=chunk.generation_info
    )


class CompatChatOpenAI(ChatOpenAI):
    """ChatOpenAI that sends what OpenAI-compatible servers take, serves a refused stream as one plain call,
    and fails with `ModelCallFailed`. A per-call cap is ``max_tokens=N`` (sent as ``max_tokens``)."""

    _stream_refused: str | None = PrivateAttr(default=None)
    """Why this instance's server would not stream a call with tools, once it has refused one."""

    @property
    def server(self) -> str:
        return str(self.openai_api_base or "https://api.openai.com/v1")

    def _failed(self, exc: BaseException) -> ModelCallFailed:
        line = describe_failure(self.server, self.request_timeout, exc)
        if isinstance(exc, openai.APIStatusError) and exc.status_code in (400, 413, 422):
            return ModelRequestRefused(line)  # this request (a history past the context), not the server
        return ModelCallFailed(line)

    def _get_request_payload(
        self, input_: LanguageModelInput, *, stop: list[str] | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        payload = super()._get_request_payload(input_, stop=stop, **kwargs)
        # Without tool_choice llama-cpp-python's chatml-function-calling renders no tools at all (Ollama ignores
        # the field; vLLM needs --enable-auto-tool-choice for it).
        if payload.get("tools"):
            payload.setdefault("tool_choice", "auto")
        # The server's schema wants a string: "content": null on a message with tool calls is an HTTP 500.
        for message in payload.get("messages", []):
            if message.get("role") == "assistant" and message.get("content") is None:
                message["content"] = ""
        # langchain-openai renames max_tokens to OpenAI's newer max_completion_tokens, which llama-cpp-python
        # does not know (silently unlimited); every server here takes max_tokens.
        if "max_completion_tokens" in payload:
            payload["max_tokens"] = payload.pop("max_completion_tokens")
        # A refused stream leaves a connection the server has dropped: the next call would be sent down it and
        # fail ("Server disconnected without sending a response"). Streamed calls with tools use their own.
        if payload.get("stream") and payload.get("tools"):
            payload["extra_headers"] = {**(payload.get("extra_headers") or {}), "Connection": "close"}
        return payload

    # --- what the server sent ---------------------------------------------------------------------------------
    # A server may send anything: the reply is read as far as it is a reply, and made safe (`checked_reply`)
    # before anyone keeps it. A reply with no choice at all is an empty one, which the agents stop on.

    def _create_chat_result(self, response: Any, generation_info: dict[str, Any] | None = None) -> ChatResult:
        if isinstance(response, openai.BaseModel):
            response = response.model_dump(exclude={"choices": {"__all__": {"message": {"parsed"}}}}, warnings=False)
        if not isinstance(response, dict):
            raise ModelCallFailed(
                f"the OpenAI-compatible server at {self.server} sent a reply that is not a JSON "
                f"object ({type(response).__name__})"
            )
        if response.get("error"):
            detail = " ".join(str(response["error"]).split())[:300]
            raise ModelCallFailed(f"the OpenAI-compatible server at {self.server} answered with an error ({detail})")
        choices = response.get("choices")
        unrunnable: list[list[InvalidToolCall]] = []
        checked_choices: list[dict[str, Any]] = []
        for choice in choices if isinstance(choices, list) else []:
            choice = dict(choice) if isinstance(choice, dict) else {}
            choice["message"], invalid = checked_message(choice.get("message"))
            checked_choices.append(choice)
            unrunnable.append(invalid)
        if not checked_choices:
            log.warning("the server at %s sent a reply with no choices", self.server)
            checked_choices, unrunnable = [{"message": {"role": "assistant", "content": ""}}], [[]]
        response = {**response, "choices": checked_choices, "usage": checked_usage(response.get("usage"))}
        result = super()._create_chat_result(response, generation_info)
        for generation, invalid in zip(result.generations, unrunnable, strict=True):
            message = generation.message
            assert isinstance(message, AIMessage)
            if invalid:
                message = message.model_copy(update={"invalid_tool_calls": [*message.invalid_tool_calls, *invalid]})
            generation.message = checked_reply(message)
        return result

    def _convert_chunk_to_generation_chunk(
        self, chunk: dict[str, Any], default_chunk_class: type, base_generation_info: dict[str, Any] | None
    ) -> ChatGenerationChunk | None:
        if not isinstance(chunk, dict):
            return None
        chunk = {**chunk, "usage": checked_usage(chunk.get("usage"))}
        choices = chunk.get("choices")
        if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
            chunk["choices"] = []
        elif choices and not isinstance(choices[0].get("delta"), dict | None):
            chunk["choices"] = [{**choices[0], "delta": None}]
        return super()._convert_chunk_to_generation_chunk(chunk, default_chunk_class, base_generation_info)

    # --- plain calls -----------------------------------------------------------------------------------------

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        try:
            return super()._generate(messages, stop, run_manager, **kwargs)
        except WIRE_ERRORS as exc:
            raise self._failed(exc) from exc

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        try:
            return await super()._agenerate(messages, stop, run_manager, **kwargs)
        except WIRE_ERRORS as exc:
            raise self._failed(exc) from exc

    # --- streamed calls --------------------------------------------------------------------------------------
    # llama-cpp-python answers a streamed call with tools with HTTP 200 and an empty event stream ("Automatic
    # streaming tool choice is not supported" is only in its log). A reply always has at least one chunk, so an
    # empty stream is a refusal: that call and every later streamed call with tools on this instance are made
    # as plain calls, yielded as one chunk, so whoever takes the tokens still gets the answer.

    def _refused(self, kwargs: dict[str, Any]) -> str | None:
        """Remember the refusal; the reason the first time (said on that reply), None after."""
        if not kwargs.get("tools"):
            raise ModelCallFailed(
                f"the OpenAI-compatible server at {self.server} ended a streamed reply before its first chunk"
            )
        if self._stream_refused is not None:  # another call on this instance was refused meanwhile
            return None
        self._stream_refused = (
            f"the server at {self.server} sent no chunk for a streamed call with tools; this model's calls with "
            "tools are made whole from now on"
        )
        log.info("%s", self._stream_refused)
        return self._stream_refused

    def _whole(self, result: ChatResult, why: str | None) -> ChatGenerationChunk:
        chunk = _as_chunk(result)
        if why is not None:
            chunk.message.response_metadata[STREAM_FALLBACK] = why
        return chunk

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        plain = {k: v for k, v in kwargs.items() if k != "stream_usage"}
        if kwargs.get("tools") and self._stream_refused is not None:
            yield self._whole(self._generate(messages, stop, None, **plain), None)
            return
        started = False
        text = JoinedPieces()
        try:
            for chunk in super()._stream(messages, stop, run_manager, **kwargs):
                started = True
                yield _whole_piece(chunk, text)
        except WIRE_ERRORS as exc:
            raise self._failed(exc) from exc
        if rest := text.rest():
            yield ChatGenerationChunk(message=AIMessageChunk(content=rest))
        if not started:
            why = self._refused(kwargs)
            yield self._whole(self._generate(messages, stop, None, **plain), why)

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        plain = {k: v for k, v in kwargs.items() if k != "stream_usage"}
        if kwargs.get("tools") and self._stream_refused is not None:
            yield self._whole(await self._agenerate(messages, stop, None, **plain), None)
            return
        started = False
        text = JoinedPieces()
        try:
            async for chunk in super()._astream(messages, stop, run_manager, **kwargs):
                started = True
                yield _whole_piece(chunk, text)
        except WIRE_ERRORS as exc:
            raise self._failed(exc) from exc
        if rest := text.rest():
            yield ChatGenerationChunk(message=AIMessageChunk(content=rest))
        if not started:
            why = self._refused(kwargs)
            yield self._whole(await self._agenerate(messages, stop, None, **plain), why)


def check_server(base_url: str, model: str, api_key: str) -> None:
    """Raise `ModelUnavailable` (one line) unless `base_url` answers and serves `model`.

    A server with no ``/models`` (HTTP 404 or 405) is let through: listing models is not part of every
    OpenAI-compatible server, and the first real call says plainly if the model is not there.
    """
    url = f"{base_url.rstrip('/')}/models"
    hint = "start it, or give --base-url (or OPENAI_BASE_URL)"
    try:
        response = httpx.get(url, headers={"Authorization": f"Bearer {api_key}"}, timeout=_CHECK_TIMEOUT_S)
    except httpx.HTTPError as exc:
        raise ModelUnavailable(
            f"No OpenAI-compatible server answers at {base_url} ({type(exc).__name__}) - {hint}."
        ) from exc
    if response.status_code in (404, 405):
        log.warning(
            "%s has no /models (HTTP %s); %s is not checked before the first call",
            base_url,
            response.status_code,
            model,
        )
        return
    if response.status_code in (401, 403):
        raise ModelUnavailable(
            f"The server at {base_url} refused the API key (HTTP {response.status_code}) - set OPENAI_API_KEY."
        )
    if response.status_code != 200:
        raise ModelUnavailable(
            f"The server at {base_url} answered HTTP {response.status_code} to /models - "
            "check the server and --base-url."
        )
    try:
        listed = [str(m["id"]) for m in response.json()["data"] if isinstance(m, dict) and "id" in m]
    except (ValueError, KeyError, TypeError) as exc:
        raise ModelUnavailable(
            f"{base_url} does not answer like an OpenAI-compatible server (bad /models) - "
            "check --base-url; it usually ends in /v1."
        ) from exc
    if model not in listed and f"{model}:latest" not in listed:
        served = ", ".join(listed[:10]) + (f" and {len(listed) - 10} more" if len(listed) > 10 else "")
        raise ModelUnavailable(f"Model {model} is not served at {base_url}; it serves: {served or 'nothing'}.")
