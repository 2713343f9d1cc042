"""What goes over the wire: JSON replies and server-sent events in UTF-8, and the request body read with care.

Every reply carries `SECURITY_HEADERS`; the page and the reports carry their own Content-Security-Policy. A body
that is not a JSON object of at most `MAX_BODY_BYTES`, sent as JSON, is a `BadRequest`.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from webdemo.events import BadRequest

MAX_BODY_BYTES = 64 * 1024
"""Larger request bodies are refused (413) before they are read whole."""

PAGE_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "frame-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)
REPORT_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'self'; base-uri 'none'"
"""The reports are self-contained (inline CSS and SVG, no script): nothing else may load or run in them."""
SECURITY_HEADERS = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "Cache-Control": "no-store"}


def json_reply(data: Any, status: int = 200) -> Response:
    return Response(utf8(data), status, media_type="application/json", headers=SECURITY_HEADERS)


def sse(event: dict[str, Any]) -> bytes:
    # json.dumps never emits a raw newline, so one event is one `data:` line.
    return b"data: " + utf8(event) + b"\n\n"


def utf8(data: Any) -> bytes:
    """`data` as JSON in UTF-8 (`encoded`)."""
    return encoded(json.dumps(data, ensure_ascii=False, default=str))


def encoded(text: str) -> bytes:
    """`text` in UTF-8, whatever a model put in it: a surrogate left alone (half an emoji streamed as two escapes,
    or one half only) cannot be encoded, so two halves in a row become their character again and a lone half
    becomes U+FFFD. Never an exception: one such reply must not make a tab's state or report unreadable."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace").encode("utf-8")


def json_only(request: Request) -> None:
    """Every POST must say it is JSON. A page on another site cannot send that without the browser asking first
    (a CORS preflight, which this server never grants), so it cannot make tabs or start turns here."""
    if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
        raise BadRequest(415, "send the request as JSON (Content-Type: application/json)")


async def read_body(request: Request) -> dict[str, Any]:
    """The request's JSON object, read at most `MAX_BODY_BYTES`; anything else is a `BadRequest`."""
    json_only(request)
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY_BYTES):
        raise BadRequest(413, f"request too large (at most {MAX_BODY_BYTES // 1024} KB)")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise BadRequest(413, f"request too large (at most {MAX_BODY_BYTES // 1024} KB)")
        chunks.append(chunk)
    try:
        data = json.loads(b"".join(chunks).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise BadRequest(400, "the request is not valid JSON") from None
    except ValueError:  # an integer of more digits than Python reads from text (sys.get_int_max_str_digits)
        raise BadRequest(400, "the request holds a number too long to read") from None
    if not isinstance(data, dict):
        raise BadRequest(400, "the request must be a JSON object")
    return data
