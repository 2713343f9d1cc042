"""A loopback OpenAI-compatible server that answers as told, hostile answers included, for the real client.

It runs no model: each `POST /v1/chat/completions` gets the next scripted `Answer`, as one JSON body or as
server-sent events, written as raw JSON text so that what a parser would never produce can be sent: a lone
surrogate escape, arguments nested 600 deep, a list for an object, an empty `choices`, usage that is no number,
a byte every second (`trickle_s`). Use: ``with HostileServer([Answer.text("Hi")]) as server: ...``."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "hostile"
"""The one model the server lists: ``openai:hostile``."""

USAGE = '{"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150}'


def call_json(name: str, arguments: str, call_id: str = "call_1", index: int = 0) -> str:
    """One tool call of a whole reply, its arguments the raw JSON text the model wrote (sent as a JSON string)."""
    return (
        f'{{"index": {index}, "id": "{call_id}", "type": "function", '
        f'"function": {{"name": "{name}", "arguments": {quoted(arguments)}}}}}'
    )


def quoted(text: str) -> str:
    """`text` as a JSON string literal, every non-ASCII character escaped (a lone surrogate as ``\\ud83d``)."""
    return json.dumps(text, ensure_ascii=True)


@dataclass(frozen=True)
class Answer:
    """One answer to one chat completion: raw JSON pieces, so nothing has to be valid for a parser to build."""

    content: str | None = None
    """The message's content as raw JSON text (``'"Hi"'``, ``'"\\ud83d"'``); None sends ``null``."""
    content_pieces: Sequence[str] = ()
    """Streamed: the content as these raw JSON strings, one event each (a split emoji: ``'"\\ud83d"', '"\\udcda"'``)."""
    tool_calls: Sequence[str] = ()
    """Raw JSON of each call (`call_json`)."""
    finish_reason: str = "stop"
    usage: str = USAGE
    """Raw JSON of the usage object."""
    body: str | None = None
    """The whole response body, raw, instead of one built from the fields above (an empty `choices`)."""
    status: int = 200
    trickle_s: float = 0.0
    """Send the answer one byte at a time, this long apart (a server that is never quite silent)."""

    @classmethod
    def text(cls, text: str) -> Answer:
        return cls(content=quoted(text))

    @classmethod
    def calls(cls, *calls: str) -> Answer:
        return cls(content='""', tool_calls=calls, finish_reason="tool_calls")

    def whole(self) -> str:
        if self.body is not None:
            return self.body
        content = (
            self.content
            if self.content is not None
            else (quoted("".join(json.loads(p) for p in self.content_pieces)) if self.content_pieces else "null")
        )
        calls = f', "tool_calls": [{", ".join(self.tool_calls)}]' if self.tool_calls else ""
        return (
            f'{{"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "{MODEL}", '
            f'"choices": [{{"index": 0, "message": {{"role": "assistant", "content": {content}{calls}}}, '
            f'"finish_reason": "{self.finish_reason}"}}], "usage": {self.usage}}}'
        )

    def events(self) -> list[str]:
        """The answer as a stream: one event per content piece, one per call, then the finish and the usage."""
        if self.body is not None:
            return [self.body]

        def event(delta: str, finish: str = "null", usage: str = "null") -> str:
            choice = f'{{"index": 0, "delta": {delta}, "finish_reason": {finish}}}'
            return (
                f'{{"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "{MODEL}", '
                f'"choices": [{choice}], "usage": {usage}}}'
            )

        pieces = list(self.content_pieces) or ([self.content] if self.content is not None else [])
        out = [event('{"role": "assistant", "content": ""}')]
        out += [event(f'{{"content": {piece}}}') for piece in pieces]
        out += [event(f'{{"tool_calls": [{call}]}}') for call in self.tool_calls]
        out.append(event("{}", finish=f'"{self.finish_reason}"'))
        out.append(
            f'{{"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "{MODEL}", '
            f'"choices": [], "usage": {self.usage}}}'
        )
        return out


@dataclass
class HostileServer:
    """Serve `script` on 127.0.0.1 (a free port) until the `with` block ends; a script that runs out answers a
    plain "Done." (so a contender that asks once more still ends), counted in `unscripted`. With `rule`, each
    request is answered by `rule(body)` instead (a body whose last message is the user's is a new run)."""

    script: Sequence[Answer] = ()
    rule: Callable[[dict[str, Any]], Answer] | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)
    unscripted: int = 0
    _left: list[Answer] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stopping: threading.Event = field(default_factory=threading.Event)
    _httpd: ThreadingHTTPServer | None = None

    def __enter__(self) -> HostileServer:
        self._left = list(self.script)
        self._httpd = _Server(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, name="hostile-openai", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        assert self._httpd is not None
        self._httpd.shutdown()
        self._httpd.server_close()

    @property
    def base_url(self) -> str:
        assert self._httpd is not None, "use the server inside a `with` block"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._left)

    def _next(self, body: dict[str, Any]) -> Answer:
        with self._lock:
            self.requests.append(body)
            if self.rule is not None:
                return self.rule(body)
            if self._left:
                return self._left.pop(0)
            self.unscripted += 1
            return Answer.text("Done.")


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gives up on a hostile answer (a timeout, a bad reply) is no error of the server's.
        if not isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            super().handle_error(request, client_address)


def _handler_for(server: HostileServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 10

        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_GET(self) -> None:
            if self.path.endswith("/models"):
                self._send(200, json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}).encode())
            else:
                self._send(404, b'{"error": "no route"}')

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"null")
            if not self.path.endswith("/chat/completions"):
                self._send(404, b'{"error": "no route"}')
                return
            answer = server._next(body)
            try:
                if answer.status != 200:
                    self._send(answer.status, json.dumps({"error": {"message": "context window full"}}).encode())
                elif body.get("stream"):
                    data = "".join(f"data: {e}\n\n" for e in answer.events()) + "data: [DONE]\n\n"
                    self._send(200, data.encode(), "text/event-stream", trickle_s=answer.trickle_s)
                else:
                    self._send(200, answer.whole().encode(), trickle_s=answer.trickle_s)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

        def _send(self, status: int, data: bytes, kind: str = "application/json", trickle_s: float = 0.0) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if not trickle_s:
                self.wfile.write(data)
                return
            for i in range(len(data)):
                self.wfile.write(data[i : i + 1])
                self.wfile.flush()
                if server._stopping.wait(trickle_s):
                    return

    return Handler


def asked_by_the_user(body: dict[str, Any]) -> bool:
    """Whether a request is a run's first model call: its last message is the user's question."""
    messages = body.get("messages") or [{}]
    return messages[-1].get("role") == "user"
