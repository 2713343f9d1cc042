"""A loopback HTTP server that replays Ollama's wire format, so ChatOllama can be tested without Ollama.

It runs no model: `/api/tags` gives a fixed list, each `/api/chat` streams the next scripted `ReplayReply` as
Ollama's NDJSON, with fault modes (`delay_s`, `drop_mid_stream`, `malformed`). It proves our code and ChatOllama's
agree with the format, nothing about a real model; a script that runs out answers HTTP 500, so the test fails:
    with OllamaReplayServer(script=[ReplayReply(text="Hi")]) as server: ChatOllama(base_url=server.base_url, ...)
"""

from __future__ import annotations

import json
import re
import socket
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_CREATED_AT = "2026-01-01T00:00:00.000000000Z"  # fixed so recorded replies are byte-for-byte repeatable


@dataclass(frozen=True)
class ReplayReply:
    """One scripted answer to one POST /api/chat."""

    text: str = ""
    thinking: str = ""
    tool_calls: Sequence[tuple[str, dict[str, Any]]] = ()
    """(name, arguments) pairs, sent in one chunk as Ollama does."""
    prompt_eval_count: int | None = 120
    """Prompt tokens as Ollama reports them; None leaves the field out (ChatOllama then reports no usage)."""
    eval_count: int | None = 30
    done_reason: str = "stop"
    delay_s: float = 0.0
    """Sleep this long before answering (a slow or queued model)."""
    drop_mid_stream: bool = False
    """Close the connection right after the first chunk (a crashed server or a cut network)."""
    malformed: bool = False
    """Send a line that is not JSON in the middle of the stream."""
    chunk_delay_s: float = 0.0
    """Sleep this long between two streamed lines (a model generating token by token), for mid-stream stops."""
    raw_lines: Sequence[str] = ()
    """Stream these lines as they are instead (raw JSON text: a lone surrogate escape, a list for arguments)."""


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    body: Any
    """Parsed JSON body (None for a GET)."""


def free_port() -> int:
    """A loopback port that was free a moment ago, with nothing listening on it (a server that is gone)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _pieces(text: str) -> list[str]:
    """Split like a token stream: word plus trailing space, so the pieces join back to the exact text."""
    return re.findall(r"\s*\S+\s*|\s+", text)


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up (a fault test's client gives up on a broken reply) is no error of the server's.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class OllamaReplayServer:
    """Serve scripted Ollama replies on 127.0.0.1 (a free port) until the `with` block ends."""

    def __init__(self, script: Sequence[ReplayReply] = (), *, models: Sequence[str] = ("qwen3:4b",)) -> None:
        self._script = list(script)
        self._models = list(models)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self.requests: list[RecordedRequest] = []
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------------------------------

    def __enter__(self) -> OllamaReplayServer:
        self._httpd = _Server(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="ollama-replay", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()  # wakes handlers sleeping in delay_s
        assert self._httpd is not None and self._thread is not None
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    @property
    def base_url(self) -> str:
        assert self._httpd is not None, "use the server inside a `with` block"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    # -- what tests read -----------------------------------------------------------------------------------------------

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        """Bodies of every POST /api/chat, in arrival order."""
        with self._lock:
            return [r.body for r in self.requests if r.path == "/api/chat"]

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._script)

    # -- what the handler uses -----------------------------------------------------------------------------------------

    def _record(self, request: RecordedRequest) -> ReplayReply | None:
        with self._lock:
            self.requests.append(request)
            if request.path == "/api/chat" and self._script:
                return self._script.pop(0)
        return None

    def _tags(self) -> dict[str, Any]:
        return {
            "models": [
                {
                    "name": m,
                    "model": m,
                    "modified_at": _CREATED_AT,
                    "size": 0,
                    "digest": "0" * 64,
                    "details": {"format": "gguf", "family": "replay", "parameter_size": "0B"},
                }
                for m in self._models
            ]
        }

    def _chunks(self, reply: ReplayReply, model: str) -> Iterator[dict[str, Any]]:
        def chunk(**message: Any) -> dict[str, Any]:
            return {
                "model": model,
                "created_at": _CREATED_AT,
                "message": {"role": "assistant", "content": "", **message},
                "done": False,
            }

        for piece in _pieces(reply.thinking):
            yield chunk(thinking=piece)
        for piece in _pieces(reply.text):
            yield chunk(content=piece)
        if reply.tool_calls:
            calls = [{"function": {"name": name, "arguments": args}} for name, args in reply.tool_calls]
            yield chunk(tool_calls=calls)
        final: dict[str, Any] = {
            "model": model,
            "created_at": _CREATED_AT,
            "message": {"role": "assistant", "content": ""},
            "done": True,
            "done_reason": reply.done_reason,
            "total_duration": 1_000_000,
            "load_duration": 100_000,
            "prompt_eval_duration": 400_000,
            "eval_duration": 500_000,
        }
        if reply.prompt_eval_count is not None:
            final["prompt_eval_count"] = reply.prompt_eval_count
        if reply.eval_count is not None:
            final["eval_count"] = reply.eval_count
        yield final


def _handler_for(server: OllamaReplayServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # Ollama streams with chunked transfer encoding, which needs 1.1
        timeout = 10  # idle keep-alive connections end on their own

        def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
            return

        def do_GET(self) -> None:
            server._record(RecordedRequest("GET", self.path, None))
            if self.path == "/api/tags":
                self._send_json(200, server._tags())
            else:
                self._send_json(404, {"error": f"replay server: no route GET {self.path}"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"null")
            reply = server._record(RecordedRequest("POST", self.path, body))
            if self.path != "/api/chat":
                self._send_json(404, {"error": f"replay server: no route POST {self.path}"})
            elif reply is None:
                self._send_json(500, {"error": "replay script exhausted: no scripted reply left for this /api/chat"})
            else:
                self._stream(reply, str(body.get("model", "")))

        def _send_json(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _write_chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def _stream(self, reply: ReplayReply, model: str) -> None:
            if reply.delay_s and server._stopping.wait(reply.delay_s):
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/x-ndjson")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                if reply.raw_lines:
                    for line in reply.raw_lines:
                        self._write_chunk(line.encode() + b"\n")
                    self._write_chunk(b"")
                    return
                for index, part in enumerate(server._chunks(reply, model)):
                    if index and reply.chunk_delay_s and server._stopping.wait(reply.chunk_delay_s):
                        return
                    self._write_chunk(json.dumps(part).encode() + b"\n")
                    if index == 0 and reply.drop_mid_stream:
                        self.close_connection = True
                        self.connection.shutdown(socket.SHUT_RDWR)
                        return
                    if index == 0 and reply.malformed:
                        self._write_chunk(b'{"model": "broken", "message": {this is not json\n')
                self._write_chunk(b"")  # the zero-length chunk ends the body
            except (BrokenPipeError, ConnectionResetError):
                # The client gave up mid-stream (e.g. after the malformed line); there is nobody left to answer.
                self.close_connection = True

    return Handler
