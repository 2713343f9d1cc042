"""Where a model's reply enters: made safe to keep, send back, store and show, before anything else reads it.

`checked_reply` is the one boundary, applied by the model clients and by every contender's model step: a split
emoji (a surrogate pair sent as two escaped halves) is joined and a lone surrogate becomes U+FFFD, so the reply
can be encoded; tool-call arguments nested deeper than `MAX_ARGS_DEPTH` or that are no JSON object become
unparsable calls, which nothing runs (`steps.classify` then stops the run as an invalid response).
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from langchain_core.messages import AIMessage, InvalidToolCall, ToolCall

log = logging.getLogger(__name__)

MAX_ARGS_DEPTH = 32
"""The deepest nesting (objects and lists) a reply's values may have: far past any tool's schema, and far below
the recursion limit of every walker that reads them (masking, JSON encoders, serializers, validators)."""

_SURROGATE = re.compile(r"[\ud800-\udfff]")


def whole_text(text: str) -> str:
    """`text` with each surrogate pair joined into the character it stands for, a lone surrogate as U+FFFD."""
    if _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


class JoinedPieces:
    """The pieces of one streamed text, each made whole: a piece ending in the first half of a surrogate pair
    holds it back until the next piece brings the second half (an emoji split across two chunks)."""

    def __init__(self) -> None:
        self._held = ""

    def piece(self, text: str) -> str:
        text = self._held + text
        self._held = text[-1] if text and "\ud800" <= text[-1] <= "\udbff" else ""
        return whole_text(text[:-1] if self._held else text)

    def rest(self) -> str:
        """What is still held back when the stream ends: a lone half, as U+FFFD."""
        held, self._held = self._held, ""
        return whole_text(held)


def depth_of(value: Any, limit: int = MAX_ARGS_DEPTH) -> int:
    """How deeply `value` nests dicts, lists and tuples (a scalar is 0), counted without recursion; stops
    counting once past `limit` (returns limit + 1)."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > limit:
            return limit + 1
        stack.extend((child, depth + 1) for child in children)
    return deepest


def whole_value(value: Any) -> Any:
    """`whole_text` on every string inside a JSON-like value, keys too. Only for values `depth_of` has bounded."""
    if isinstance(value, str):
        return whole_text(value)
    if isinstance(value, dict):
        return {whole_text(k) if isinstance(k, str) else k: whole_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [whole_value(v) for v in value]
    return value


def bounded_value(value: Any, fallback: Any) -> Any:
    """`whole_value(value)` when it nests no deeper than `MAX_ARGS_DEPTH`, else `fallback`."""
    return whole_value(value) if depth_of(value) <= MAX_ARGS_DEPTH else fallback


def unusable_args(args: Any) -> str | None:
    """Why a tool call's parsed arguments cannot be run, or None: they must be a JSON object of bounded depth."""
    if not isinstance(args, dict):
        return f"the arguments are a JSON {type(args).__name__}, not an object"
    if depth_of(args) > MAX_ARGS_DEPTH:
        return f"the arguments nest deeper than {MAX_ARGS_DEPTH} levels"
    return None


def invalid_call(name: Any, call_id: Any, args: Any, why: str) -> InvalidToolCall:
    """An unparsable call in place of one whose arguments cannot run. Arguments too deep are not kept (they may
    be 100,000 levels deep), only why; others are kept as their JSON text."""
    text = json.dumps(whole_value(args), ensure_ascii=False, default=str) if depth_of(args) <= MAX_ARGS_DEPTH else ""
    return InvalidToolCall(
        name=whole_text(name) if isinstance(name, str) else None,
        args=text,
        id=whole_text(call_id) if isinstance(call_id, str) else None,
        error=why,
        type="invalid_tool_call",
    )


def checked_reply(reply: AIMessage) -> AIMessage:
    """The reply as it may enter a conversation: every string whole (`whole_text`), every tool call's arguments
    a bounded JSON object, else the call is an unparsable one (`invalid_call`). The same message when nothing
    needed changing, so a clean reply costs one scan."""
    update: dict[str, Any] = {}
    content = reply.content
    if isinstance(content, str):
        if (whole := whole_text(content)) != content:
            update["content"] = whole
    else:
        whole_content = bounded_value(content, "")
        if whole_content != content:
            update["content"] = whole_content
    calls: list[ToolCall] = []
    invalid = [
        InvalidToolCall(**{**bad, **{k: whole_text(bad[k]) for k in ("name", "args", "id", "error")
                                     if isinstance(bad.get(k), str)}})  # type: ignore[typeddict-item]
        for bad in reply.invalid_tool_calls
    ]  # fmt: skip
    for call in reply.tool_calls:
        if why := unusable_args(call["args"]):
            log.warning("tool call %s is not run: %s", whole_text(str(call["name"]))[:80], why)
            invalid.append(invalid_call(call["name"], call["id"], call["args"], why))
        else:
            calls.append(whole_value(call))
    if calls != reply.tool_calls or invalid != reply.invalid_tool_calls:
        update |= {"tool_calls": calls, "invalid_tool_calls": invalid}
    for field in ("additional_kwargs", "response_metadata"):
        original = getattr(reply, field)
        checked = bounded_value(original, {})
        if checked != original:
            update[field] = checked
    return reply.model_copy(update=update) if update else reply
