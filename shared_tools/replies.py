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
    if text.isascii() or _SURROGATE.search(text) is None:
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


def _has_surrogate(text: str) -> bool:
    return not text.isascii() and _SURROGATE.search(text) is not None


_FLAT = (str, int, float, bool, type(None))


def scan(value: Any, limit: int = MAX_ARGS_DEPTH) -> tuple[int, bool]:
    """How deeply `value` nests dicts, lists and tuples (a scalar is 0; past `limit` counting stops at limit + 1),
    and whether a string in it (a key too) holds a surrogate; without recursion, and without copying anything."""
    if isinstance(value, dict) and all(isinstance(v, _FLAT) for v in value.values()):  # most arguments: one level
        texts = [t for t in (*value.keys(), *value.values()) if isinstance(t, str)]
        return (1 if limit >= 1 else limit + 1), any(_has_surrogate(t) for t in texts)
    deepest, surrogate = 0, False
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            surrogate = surrogate or _has_surrogate(item)
            continue
        if isinstance(item, dict):
            children: Any = (*item.keys(), *item.values())
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        deepest = max(deepest, depth + 1)
        if deepest > limit:
            return limit + 1, surrogate
        stack.extend((child, depth + 1) for child in children)
    return deepest, surrogate


def depth_of(value: Any, limit: int = MAX_ARGS_DEPTH) -> int:
    """How deeply `value` nests dicts, lists and tuples (`scan`)."""
    return scan(value, limit)[0]


def whole_value(value: Any) -> Any:
    """`whole_text` on every string inside a JSON-like value, keys too. Only for values `scan` has bounded."""
    if isinstance(value, str):
        return whole_text(value)
    if isinstance(value, dict):
        return {whole_text(k) if isinstance(k, str) else k: whole_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [whole_value(v) for v in value]
    return value


def bounded_value(value: Any, fallback: Any) -> Any:
    """`value` with its strings whole (the same object when none needed it) when it nests no deeper than
    `MAX_ARGS_DEPTH`, else `fallback`."""
    depth, surrogate = scan(value)
    if depth > MAX_ARGS_DEPTH:
        return fallback
    return whole_value(value) if surrogate else value


def unusable_args(args: Any, depth: int | None = None) -> str | None:
    """Why a tool call's parsed arguments cannot be run, or None: they must be a JSON object of bounded depth
    (`depth`, when the caller has `scan`ned them already)."""
    if not isinstance(args, dict):
        return f"the arguments are a JSON {type(args).__name__}, not an object"
    if (depth_of(args) if depth is None else depth) > MAX_ARGS_DEPTH:
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


def _too_deep_text(text: str) -> bool:
    """Whether JSON text nests deeper than `MAX_ARGS_DEPTH` (text that is no JSON at all is not)."""
    if len(text) <= 2 * MAX_ARGS_DEPTH:
        return False  # too short to open and close that many levels
    try:
        return depth_of(json.loads(text)) > MAX_ARGS_DEPTH
    except RecursionError:
        return True
    except ValueError:
        return False


def checked_reply(reply: AIMessage) -> AIMessage:
    """The reply as it may enter a conversation: every string whole (`whole_text`), every tool call's arguments
    a bounded JSON object, else the call is an unparsable one (`invalid_call`). The same message when nothing
    needed changing: a clean reply costs one scan, no copy."""
    update: dict[str, Any] = {}
    content = reply.content
    checked_content = whole_text(content) if isinstance(content, str) else bounded_value(content, "")
    if checked_content is not content and checked_content != content:
        update["content"] = checked_content
    calls: list[ToolCall] = []
    invalid: list[InvalidToolCall] = []
    changed = False
    for bad in reply.invalid_tool_calls:
        if isinstance(bad.get("args"), str) and _too_deep_text(bad["args"]):
            # Kept, the text would be parsed again by whoever answers the call (a framework's loop may), past its
            # recursion limit.
            bad = InvalidToolCall(
                **{**bad, "args": "", "error": f"the arguments nest deeper than {MAX_ARGS_DEPTH} levels"}
            )
            changed = True
        if any(isinstance(bad.get(k), str) and _has_surrogate(bad[k]) for k in ("name", "args", "id", "error")):
            bad = InvalidToolCall(
                **{
                    **bad,
                    **{
                        k: whole_text(bad[k])
                        for k in ("name", "args", "id", "error")  # type: ignore[typeddict-item]
                        if isinstance(bad.get(k), str)
                    },
                }
            )
            changed = True
        invalid.append(bad)
    for call in reply.tool_calls:
        depth, surrogate = scan(call["args"])
        if why := unusable_args(call["args"], depth):
            log.warning("tool call %s is not run: %s", whole_text(str(call["name"]))[:80], why)
            invalid.append(invalid_call(call["name"], call["id"], call["args"], why))
            changed = True
        elif surrogate or any(isinstance(call.get(k), str) and _has_surrogate(call[k]) for k in ("name", "id")):
            calls.append(whole_value(call))
            changed = True
        else:
            calls.append(call)
    if changed:
        update |= {"tool_calls": calls, "invalid_tool_calls": invalid}
    for field in ("additional_kwargs", "response_metadata"):
        original = getattr(reply, field)
        checked = bounded_value(original, {})
        if checked is not original:
            update[field] = checked
    return reply.model_copy(update=update) if update else reply
