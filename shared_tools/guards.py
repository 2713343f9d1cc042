"""The texts and small pure checks behind every loop guard, shared so both agents say the same thing.

Nothing here knows the bookstore or either loop. Every refusal carries its `Guard` beside its text (`Refusal`),
and `tool_answer` puts it on the trace line, so what a guard decided is recorded where it is decided. The stale-read
guard (`stale_readings`) reads what a tool result read from the result's artifact, never from its text.
"""

from __future__ import annotations

import html
import json
import logging
import math
import re
import sys
import unicodedata
import urllib.parse
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from langchain_core.language_models import BaseLanguageModel
from langchain_core.messages import AIMessage, BaseMessage, InvalidToolCall, ToolCall, ToolMessage
from langchain_core.tools import BaseTool, ToolException
from pydantic import ValidationError

from shared_tools.replies import MAX_ARGS_DEPTH
from shared_tools.results import STREAM_FALLBACK, AgentLimits, Guard, RunUsage, TraceEvent
from shared_tools.steps import was_cut

log = logging.getLogger(__name__)

CANCELLED_CALL_TEXT = "Cancelled before it ran."
"""The result given to a tool call a cancelled run never started, so the history stays valid for a next turn."""

CANCELLED_WHILE_RUNNING_TEXT = "Cancelled while it was running: it may have completed. Check before doing it again."
"""The result given to a tool call a cancel cut off mid-run: its write may have landed (a store commit, a worker
thread that cannot be stopped), so the model must not be told it did not run."""

TOOL_CUT_RUNNING_TEXT = (
    "Cut off by the time budget while it was running: it may have completed. Check before doing it again."
)
"""The result of a tool call the time budget cut off mid-run: like a cancel's, its write may have landed."""

TOOL_CUT_UNSTARTED_TEXT = "Not run: the time budget ran out before it started."

MODEL_TIMED_OUT_DETAIL = "no reply within the time budget"
"""Trace detail of a model call that the time budget cut off."""

MODEL_CANCELLED_DETAIL = "reply cut off by a cancel"
"""Trace detail of a streamed model call that a cancel stopped mid-reply."""


def call_key(name: str, args: Mapping[str, Any]) -> str:
    """Canonical JSON of a call, so `{"a":1,"b":2}` and `{"b":2,"a":1}` count as the same call."""
    return name + ":" + json.dumps(args, sort_keys=True, separators=(",", ":"), default=str)


REPEAT_ERROR_PREFIX = "You already called"
"""How every repeat-rule refusal starts; models, personas and the renderer recognise it by this."""


def repeat_error(name: str, times: int) -> str:
    return (
        f"{REPEAT_ERROR_PREFIX} {name} with these arguments {times} times. "
        "Use the earlier result or try something else."
    )


def approval_rejected(name: str, reason: str) -> str:
    """The result of a call a human did not approve (or that nobody was there to approve)."""
    return f"The customer did not approve {name} ({reason}). Nothing was done."


def unknown_tool_error(name: str, available: Sequence[str]) -> str:
    return f"Unknown tool '{name}'. Available: {', '.join(available)}."


def invalid_args_error(tool: BaseTool, args: Any) -> str | None:
    """Validate `args` against the tool's model-facing schema; an error text naming the bad fields, or None."""
    if not isinstance(args, Mapping):
        return f"Invalid arguments for {tool.name}: expected a JSON object, got {type(args).__name__}."
    schema = _call_schema(tool)
    if not (isinstance(schema, type) and hasattr(schema, "model_validate")):
        return None
    try:
        schema.model_validate(dict(args))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(arguments)'}: {err['msg']}" for err in exc.errors()
        )
        return f"Invalid arguments for {tool.name}: {problems}. Fix the arguments and call it again."
    return None


@dataclass(frozen=True)
class Refusal:
    """A guard's decision not to run a call: which guard, and the error text the model gets instead."""

    guard: Guard
    text: str


def screen(
    call: ToolCall, tools: Mapping[str, BaseTool], seen: dict[str, int], limits: AgentLimits
) -> BaseTool | Refusal:
    """The tool to run for `call`, or the refusal the model gets instead of running anything.

    Order: unknown tool first (nothing to count or validate, and the list of real names is the most useful
    correction); then the repeat rule, counting every call in `seen` like the article (blocked and invalid calls
    too), so a model re-sending the same call is stopped whether the call is valid or not; then argument
    validation, so nothing runs on bad arguments. Both agents call this in call order, before any tool of the
    round runs, so the counts never depend on which parallel call finishes first.
    """
    name, args = call["name"], call["args"]
    tool = tools.get(name)
    if tool is None:
        return Refusal(Guard.UNKNOWN_TOOL, unknown_tool_error(name, list(tools)))
    key = call_key(name, args)
    count = seen[key] = seen.get(key, 0) + 1
    if limits.repeat_blocked(count - 1):
        return Refusal(Guard.REPEAT, repeat_error(name, count - 1))
    if problem := invalid_args_error(tool, args):
        return Refusal(Guard.INVALID_ARGS, problem)
    return tool


def approval_refusal(name: str, reason: str) -> Refusal:
    return Refusal(Guard.APPROVAL_REFUSED, approval_rejected(name, reason))


def tool_result(call: ToolCall, text: str, *, is_error: bool, artifact: Any = None) -> ToolMessage:
    """The one ToolMessage a call gets, matched to it by id; status "error" for every kind of failure. `artifact`
    is what the tool gave beside its text (a `Reading`), kept on the message and never sent to the model."""
    status = "error" if is_error else "success"
    return ToolMessage(text, tool_call_id=call["id"], name=call["name"], status=status, artifact=artifact)


def output_text(output: Any) -> tuple[str, bool]:
    """A tool's output as (text for the model, is it an error); a returned ToolMessage carries its own status."""
    if isinstance(output, ToolMessage):
        content, is_error = output.content, output.status == "error"
    else:
        content, is_error = output, False
    return (content if isinstance(content, str) else compact_json(content)), is_error


@dataclass(frozen=True)
class Outcome:
    """What running one admitted call gave: the text for the model, whether it is an error, the guard that hid
    its details (if any), and the artifact the tool returned beside its text (a `Reading`, or None)."""

    text: str
    is_error: bool
    guard: Guard | None = None
    artifact: Any = None


def _call_schema(tool: BaseTool) -> Any:
    """`tool.tool_call_schema`, remembered per (name, argument class) across tool objects.

    LangChain builds that pydantic model once per tool *object*; every run here makes fresh tools, so without
    this each run would pay for building it again on its first call of each tool.
    """
    if not isinstance(tool.args_schema, type):
        return tool.tool_call_schema
    key = (tool.name, tool.args_schema)
    if key not in _CALL_SCHEMAS:
        _CALL_SCHEMAS[key] = tool.tool_call_schema
    return _CALL_SCHEMAS[key]


_CALL_SCHEMAS: dict[tuple[str, type], Any] = {}


async def execute(tool: BaseTool, call: ToolCall, *, detailed_errors: bool) -> Outcome:
    """Run one admitted call: its result text, whether it is an error, the guard that hid its details, if any,
    and the tool's artifact.

    Only `Exception`s become results: a tool failure is something for the model to read, while CancelledError
    and KeyboardInterrupt are BaseExceptions and propagate. A ToolException is the tool talking to the model;
    anything else is a bug or an outage, logged louder. The log gets what the model gets: the exception's own
    text may hold a secret (a connection string).
    """
    try:
        # A ToolCall dict in, a ToolMessage out: LangChain fills InjectedToolCallId arguments from call["id"].
        output = await tool.ainvoke({**call, "type": "tool_call"})
    except Exception as exc:
        text, guard = tool_failure(call["name"], exc, detailed=detailed_errors)
        level = logging.INFO if isinstance(exc, ToolException) else logging.WARNING
        log.log(level, "tool %s raised %s: %s", mask_pii(str(call["name"])), type(exc).__name__, text)
        return Outcome(text, True, guard)
    text, is_error = output_text(output)
    return Outcome(text, is_error, artifact=None if is_error else getattr(output, "artifact", None))


def tool_failure(name: str, exc: Exception, *, detailed: bool) -> tuple[str, Guard | None]:
    """`tool_failure_text`, and `Guard.ERROR_HIDDEN` when the exception's own text was kept from the model."""
    hidden = not detailed and not isinstance(exc, ToolException)
    return tool_failure_text(name, exc, detailed=detailed), Guard.ERROR_HIDDEN if hidden else None


def tool_failure_text(name: str, exc: Exception, *, detailed: bool) -> str:
    """What the model reads when a tool raised.

    A `ToolException` is the tool's own message, written to be safe to show. Anything else is a bug
    or an outage whose text may hold internals (a connection string, a host name), so the model gets a
    generic line unless the caller opted in to details, as FunctionInvokingChatClient (the .NET piece that runs
    tools in the article) does.
    """
    if isinstance(exc, ToolException):
        return str(exc) or f"{name} failed."
    if detailed:
        return f"{name} failed: {type(exc).__name__}: {exc}"
    return f"{name} failed."


def truncate(text: str, max_chars: int | None) -> str:
    """Cut a tool result to `max_chars` and say how much was cut, so the model knows it is partial."""
    if max_chars is None or len(text) <= max_chars:
        return text
    cut = len(text) - max_chars
    return f"{text[:max_chars]}... [truncated {cut} characters]"


# The lookbehind starts a match only where a run of address characters starts, so a long argument with no "@" is
# scanned once, not from every position (which is quadratic: seconds per trace line for 50,000 letters).
_EMAIL = re.compile(r"(?<![\w.+-])[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
# Between the words of an address: white space, or white space as it reads inside JSON text ("12\nBaker St").
_GAP = r"(?:\s|\\[nrt])+"
_STREET = re.compile(
    rf"\b\d{{1,5}}[A-Za-z]?{_GAP}(?:[A-Za-z][\w'-]*{_GAP}){{1,3}}"
    r"(?:Street|St|Avenue|Ave|Road|Rd|Lane|Ln|Boulevard|Blvd|Drive|Dr|Court|Ct|Way|Place|Pl)\b\.?",
    re.IGNORECASE,
)
# Everything between "://" and "@" is a URL's userinfo: "user:password", ":password" and a bare token alike.
_URL_USERINFO = re.compile(r"(?<=://)[^/\s@]+@")


# Other spellings of an address, as a person, a browser or a mail client reads them. An e-mail address is looked for
# in the text as read (`_read`): NFKC ("＠" and "﹫" are "@", full-width letters are letters), the ideographic and
# full-width full stops as ".", format and combining characters (zero-width space and joiners, soft hyphen, bidi
# marks) dropped, %-escapes decoded (twice, for "%2540"), HTML character references and JSON "\u" escapes read, and
# "[at]", "(at)", "{at}", "<at>" and their "dot" twins as "@" and ".". What it finds is masked in the text as
# written. Not read as addresses: "alice at example dot com" and "alice @ example.com", which prose and prices
# ("3 @ 5.00 each") spell too.
_ASCII_SPELLING = re.compile(
    r"(?:%(?:25)?[0-9a-f]{2})+|&(?:#\d{1,7}|#x[0-9a-f]{1,6}|[a-z][a-z0-9]{1,15});|\\u[0-9a-f]{4}"
    r"|[ \t]*[\[({<][ \t]*(?:at|dot)[ \t]*[\])}>][ \t]*",
    re.IGNORECASE,
)
"""The spellings in ASCII that read otherwise: %-escapes, character references, "\\u" escapes, "[at]", "[dot]"."""
_BRACKETED_AT = re.compile(r"[\[({<][ \t]*at[ \t]*[\])}>]", re.IGNORECASE)
_CHUNK = re.compile(r"(?:[ \t]*[\[({<][ \t]*(?:at|dot)[ \t]*[\])}>][ \t]*|\S)+", re.IGNORECASE)
"""A run of text an address cannot cross: no white space but around "[at]" and "[dot]"."""
_READ_AS: dict[int, str | None] | None = None


def mask_pii(text: str) -> str:
    """Mask e-mail addresses, street addresses and URL credentials before text reaches a trace, a log or a record.

    An e-mail address is masked however it is spelled (see the note above `_ASCII_SPELLING`): ``alice%40example.com``,
    ``alice＠example.com``, ``alice@example。com``, ``alice [at] example [dot] com``, with zero-width characters."""
    if "@" in text:
        text = _URL_USERINFO.sub("<credentials>@", text)
    if not _may_be_spelled(text):
        # Read as written: the plain pattern, which needs an "@" (skipping it spares a scan of every tool result,
        # most of the hand-written loop's own cost per seed job; benchmarks/README.md).
        if "@" in text:
            text = _EMAIL.sub("<email>", text)
    elif _may_spell_at(text):
        text = _mask_emails_as_read(text)
    return _STREET.sub("<address>", text)


def _may_be_spelled(text: str) -> bool:
    """Whether `text` may read differently than it is written (cheap checks first: most text is plain ASCII)."""
    if not text.isascii():
        return True
    return "%" in text or "&" in text or "\\" in text or _bracketed_at(text)


def _may_spell_at(text: str) -> bool:
    """Whether `text` may hold a spelling of "@", by cheap checks first."""
    return (
        "@" in text
        or "%" in text
        or "&" in text
        or "\\" in text
        or "\uff20" in text
        or "\ufe6b" in text
        or (_bracketed_at(text))
    )


def _bracketed_at(text: str) -> bool:
    # Most text has no "at" right before a closing bracket: four substring tests spare it the search.
    low = text.lower()
    return ("at]" in low or "at)" in low or "at}" in low or "at>" in low) and bool(_BRACKETED_AT.search(text))


def _mask_emails_as_read(text: str) -> str:
    """`text` with every e-mail address in it as read (`_read`) masked where it is written.

    Each run of text an address cannot cross (`_CHUNK`) is read whole; where its reading holds an address, the
    run is masked from its first address to its last, keeping what stands before and after them unchanged as
    written (a bracket, a quote, a "mailto:"). Reading whole runs keeps the cost per character in C."""
    parts: list[str] = []
    done = 0
    for chunk in _CHUNK.finditer(text):
        word = chunk.group()
        if not _may_spell_at(word):
            continue
        read = _read(word)
        found = [m.span() for m in _EMAIL.finditer(read)]
        if not found:
            continue
        if read == word:
            masked = _EMAIL.sub("<email>", word)
        else:
            # What the written run shares with its reading before the first address and after the last is kept:
            # it reads the same, so it shows nothing of the address, whatever spelling it belongs to.
            head = min(found[0][0], _shared(read, word))
            tail = min(len(read) - found[-1][1], _shared(read[::-1], word[::-1]))
            masked = word[:head] + "<email>" + word[len(word) - tail :]
        parts += [text[done : chunk.start()], masked]
        done = chunk.end()
    return "".join([*parts, text[done:]]) if parts else text


def _shared(one: str, other: str) -> int:
    """How many characters `one` and `other` start with alike (compared in halves, so no loop per character)."""
    low, high = 0, min(len(one), len(other))
    while low < high:
        middle = (low + high + 1) // 2
        if one[:middle] == other[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def _read(word: str) -> str:
    """`word` as read for an address (see the note above `_ASCII_SPELLING`)."""
    return _characters(_ASCII_SPELLING.sub(lambda m: _reading(m.group()), word))


def _reading(spelled: str) -> str:
    """How one spelling that `_ASCII_SPELLING` found reads."""
    first = spelled.lstrip(" \t")[:1]
    if first == "%":
        once = urllib.parse.unquote(spelled, errors="replace")
        return _characters(urllib.parse.unquote(once, errors="replace") if "%" in once else once)
    if first == "&":
        return _characters(html.unescape(spelled))
    if first == "\\":
        return _characters(chr(int(spelled[2:], 16)))
    if first in "[({<" and len(spelled) > 1:
        return "@" if "at" in spelled.lower() else "."
    return _characters(spelled)


def _characters(text: str) -> str:
    """`text` as read: format and combining characters dropped, full stops as ".", then NFKC."""
    global _READ_AS
    if text.isascii():
        return text
    if _READ_AS is None:  # built once, when text other than ASCII is first read (a few tenths of a second)
        dropped = {"Cf", "Mn", "Me"}
        _READ_AS = {c: None for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) in dropped}
        _READ_AS.update(dict.fromkeys(map(ord, "\u3002\uff0e\uff61"), "."))
    return unicodedata.normalize("NFKC", text.translate(_READ_AS))


TOO_DEEP = "<nested too deeply>"
"""What `mask_values` writes for a value nested deeper than `replies.MAX_ARGS_DEPTH` (none of a checked reply's)."""


def mask_values(value: Any, depth: int = 0) -> Any:
    """`mask_pii` on every string inside a JSON-like value (keys too), before it is encoded. Bounded: past
    `MAX_ARGS_DEPTH` levels the rest is `TOO_DEEP`, so no value reaches the recursion limit here."""
    if isinstance(value, str):
        return mask_pii(value)
    if depth >= MAX_ARGS_DEPTH and isinstance(value, Mapping | list | tuple):
        return TOO_DEEP
    if isinstance(value, Mapping):
        return {mask_pii(str(k)): mask_values(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [mask_values(v, depth + 1) for v in value]
    return value


def compact_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def tool_detail(args: Mapping[str, Any] | Any, result: str) -> str:
    """A tool trace line's detail, in the article's `args -> result` form, personal data masked.

    The arguments are masked as values, before encoding, so an address split by a newline is still one
    address; the result is already text, and `mask_pii` reads JSON escapes as the white space they stand for.
    """
    return f"{compact_json(mask_values(args))} -> {mask_pii(result)}"


def tool_event(
    step: int, call: ToolCall, text: str, duration_s: float, *, is_error: bool, guard: Guard | None = None
) -> TraceEvent:
    """The trace line of one answered tool call; every contender builds its tool lines here."""
    # The name too is the model's text: an e-mail sent as a tool name must not reach a record or a log.
    name = mask_pii(str(call["name"]))
    args = call["args"]
    # Masking a whole tool result is the dearest part of a trace line, and most lines are never read: the
    # detail is made (masked) when it is first read.
    return TraceEvent.deferred(step, name, duration_s, lambda: tool_detail(args, text), is_error=is_error, guard=guard)


def tool_answer(
    step: int,
    call: ToolCall,
    text: str,
    duration_s: float,
    *,
    is_error: bool,
    guard: Guard | None = None,
    max_chars: int | None = None,
    artifact: Any = None,
) -> tuple[ToolMessage, TraceEvent]:
    """The one ToolMessage a call gets and its trace line, after the truncation guard (both our agents)."""
    cut = truncate(text, max_chars)
    if cut != text and guard is None:
        guard = Guard.TRUNCATED
    event = tool_event(step, call, cut, duration_s, is_error=is_error, guard=guard)
    return tool_result(call, cut, is_error=is_error, artifact=artifact), event


def tool_cut_answer(step: int, call: ToolCall, *, running: bool, duration_s: float) -> tuple[ToolMessage, TraceEvent]:
    """The answer and trace line of a call the time budget cut off: mid-run (`running`), or before it started."""
    text = TOOL_CUT_RUNNING_TEXT if running else TOOL_CUT_UNSTARTED_TEXT
    event = tool_event(step, call, text, duration_s, is_error=True, guard=Guard.TOOL_TIMEOUT)
    return tool_result(call, text, is_error=True), event


def model_event(
    step: int, reply: AIMessage, duration_s: float, *, budget_capped: bool = False, stale_read: bool = False
) -> TraceEvent:
    """The trace line of one model call: its tool calls, its plan (masked when the line is first read), its tokens.

    Its guard: `Guard.REPLY_CAPPED` when the reply was cut at the cap `reply_cap` took from the token budget
    (`budget_capped`: the run ends on it), else `Guard.STALE_READ` when this call was sent results marked stale
    (`stale_read`, `stale_readings`), else `Guard.STREAM_FALLBACK` on the reply a model could not stream (said
    once, by the model).
    """
    guard = None
    if budget_capped and was_cut(reply):
        guard = Guard.REPLY_CAPPED
    elif stale_read:
        guard = Guard.STALE_READ
    elif reply.response_metadata.get(STREAM_FALLBACK):
        guard = Guard.STREAM_FALLBACK
    return TraceEvent.deferred(
        step, "model", duration_s, lambda: model_detail(reply), tokens=usage_tokens(reply), guard=guard
    )


def reply_cap(model: BaseLanguageModel, limits: AgentLimits, usage: RunUsage) -> tuple[dict[str, int], bool]:
    """The keyword arguments that cap the next reply at what is left of the token budget, and whether that cap is
    the budget's (rather than the model's own, lower, `max_tokens`).

    A model takes the cap as a per-call `max_tokens` when its class has that setting (ChatOpenAI, ChatAnthropic,
    the project's scripted and Ollama models); any other model gets no keyword, and its reply is judged by the
    budget only once it has arrived. No framework here caps a reply by the budget: it is our guard.
    """
    cap = limits.reply_cap(usage)
    if cap is None or "max_tokens" not in getattr(type(model), "model_fields", {}):
        return {}, False
    own = getattr(model, "max_tokens", None)
    if isinstance(own, int) and own <= cap:
        return {}, False  # the model's own limit is the tighter one: it caps the reply already
    return {"max_tokens": cap}, True


def model_timeout_event(step: int, duration_s: float) -> TraceEvent:
    """The trace line of a model call the time budget cut off: counted as a step, with no reply and no tokens."""
    return TraceEvent(step, "model", duration_s, MODEL_TIMED_OUT_DETAIL, guard=Guard.MODEL_TIMEOUT)


def model_cancelled_event(step: int, duration_s: float) -> TraceEvent:
    """The trace line of a streamed model call a cancel cut off: a step, with no reply kept and no tokens counted
    (a streamed reply reports its usage only in its last chunk)."""
    return TraceEvent(step, "model", duration_s, MODEL_CANCELLED_DETAIL, guard=Guard.MODEL_CANCELLED)


def plan_of(message: AIMessage) -> str | None:
    """The model's one-line plan, where reasoning models (ChatOllama with reasoning=True) put it."""
    reasoning = message.additional_kwargs.get("reasoning_content")
    if not isinstance(reasoning, str) or not reasoning.strip():
        return None
    return " ".join(reasoning.split())


def model_detail(message: AIMessage) -> str:
    """A model trace line's detail: how many tool calls (and unparsable ones), and the plan when the model gave one."""
    detail = f"{len(message.tool_calls)} tool call(s)"
    if was_cut(message):
        detail += ", reply cut off at its length limit"
    elif message.invalid_tool_calls:  # never run (`steps.classify`); a cut reply's are its cut calls
        detail += f", {len(message.invalid_tool_calls)} unparsable call(s) not run"
    plan = plan_of(message)
    return f"{detail}; plan: {mask_pii(plan)}" if plan else detail


FORGOT_CALLS = "forgot_tool_calls"
"""`additional_kwargs` key, True on a message of a conversation that cannot see every tool call whose id the store
holds as a request key (a summary stands in for some, a rewind dropped some, or another conversation of the same
customer made them: every session marks its system message, `history.among_other_conversations`), so
`with_call_ids` can no longer tell a reused id and gives every later call a fresh one."""


def forgot_calls(history: Sequence[BaseMessage]) -> bool:
    """Whether `history` has forgotten tool calls whose ids may still be taken (`FORGOT_CALLS`)."""
    return any(message.additional_kwargs.get(FORGOT_CALLS) is True for message in history)


def with_call_ids(reply: AIMessage, history: Sequence[BaseMessage] = ()) -> AIMessage:
    """The reply with an id on every tool call that no other call of this conversation has.

    langchain-core allows a call without an id, but its result (a ToolMessage) must name the id it answers, so
    an unnamed call gets a fresh id. A call whose id an earlier reply in `history` (or an earlier call of this
    reply) already used gets a fresh one too: some providers number their calls call_0, call_1... afresh in
    every reply, and the store takes the id as the request key of an add, so a reused id would turn the next
    turn's "one more copy" into a replay of the old add. Once the history has forgotten calls (`forgot_calls`:
    a summary, a rewind), every call gets a fresh id, since the ids it could reuse are no longer there to see.
    The renamed reply is the one kept in the history, so a re-run of this same reply (a retry, a resumed graph
    node) still carries the new ids and still replays.
    """
    used = {call["id"] for message in history if isinstance(message, AIMessage) for call in message.tool_calls}
    fresh = forgot_calls(history)
    calls: list[ToolCall] = []
    for call in reply.tool_calls:
        if fresh or not call["id"] or call["id"] in used:
            call = {**call, "id": f"{call['id'] or 'call'}_{uuid.uuid4().hex[:12]}"}
        used.add(call["id"])
        calls.append(call)
    if calls == reply.tool_calls:
        return reply
    return reply.model_copy(update={"tool_calls": calls})


def without_cut_calls(reply: AIMessage) -> AIMessage:
    """The reply with the tool calls of a cut reply moved to its unparsable calls, where nothing runs them and no
    ToolMessage is owed: a reply that ran out of output tokens may end in half a call that still parses."""
    if not (was_cut(reply) and reply.tool_calls):
        return reply
    cut = [
        InvalidToolCall(
            name=c["name"], args=compact_json(c["args"]), id=c["id"], error="reply cut off", type="invalid_tool_call"
        )
        for c in reply.tool_calls
    ]
    return reply.model_copy(update={"tool_calls": [], "invalid_tool_calls": [*reply.invalid_tool_calls, *cut]})


def usage_tokens(message: AIMessage) -> int:
    """Total tokens a reply reports; 0 where a model reports none.

    Read defensively, because a budget is only as good as its meter: a negative count would pay tokens back and
    a total below its parts would hide them, either switching the token budget off. Each count that is not a
    non-negative finite number counts as 0, and the larger of the total and input + output is taken.
    """
    usage = message.usage_metadata
    if not usage:
        return 0
    parts = token_count(usage.get("input_tokens")) + token_count(usage.get("output_tokens"))
    return max(token_count(usage.get("total_tokens")), parts)


def token_count(value: object) -> int:
    """One reported token count, read as `usage_tokens` reads it: anything but a non-negative finite number is 0."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        return 0
    return int(value)


# --- the stale-read guard ----------------------------------------------------------------------------------------

READING = "reading"
"""`ToolMessage.artifact` key under which a tool says what its result read (`Reading`)."""

STALE_SINCE = "stale_since"
"""`ToolMessage.artifact` key set on a result the stale-read guard marked: the revision it was found stale at."""


@dataclass(frozen=True)
class Reading:
    """What a tool result read, and at which revision: `source` (the cart), `revision` (the store's count of its
    writes then), and `reread_with`, the tool that reads it again.

    The tool writes it into its result's artifact, which the model is never sent and cannot write; no text is
    ever parsed for it, so neither the model's words nor data in a result (a book description) can fake one.
    """

    source: str
    revision: int
    reread_with: str

    def artifact(self) -> dict[str, Any]:
        return {READING: {"source": self.source, "revision": self.revision, "reread_with": self.reread_with}}

    @classmethod
    def of(cls, message: BaseMessage) -> Reading | None:
        """The reading a successful tool result carries, or None (any other message, or a malformed artifact)."""
        if not isinstance(message, ToolMessage) or message.status == "error":
            return None
        artifact = message.artifact
        found = artifact.get(READING) if isinstance(artifact, Mapping) else None
        if not isinstance(found, Mapping):
            return None
        source, revision, tool = found.get("source"), found.get("revision"), found.get("reread_with")
        if not (isinstance(source, str) and isinstance(tool, str) and type(revision) is int):
            return None
        return cls(source, revision, tool)


@runtime_checkable
class Rereadable(Protocol):
    """A tool whose results are `Reading`s of `reads`, which can tell that data's revision now."""

    reads: str

    async def arevision_now(self) -> int | None:
        """The revision of `reads` in the store now; None when it cannot be told (the store is unreachable)."""
        ...


def stale_note(reading: Reading) -> str:
    """What a result marked stale is sent with, after its own text."""
    return (
        f"[Out of date: the {reading.source} has changed since this result was read. Call {reading.reread_with} "
        f"again before you say anything about the {reading.source}.]"
    )


def marked_stale(message: ToolMessage, reading: Reading, now: int) -> ToolMessage:
    """`message` as the model is sent it from now on: its text with `stale_note`, its artifact marked
    (`STALE_SINCE`), the same id, so LangGraph's `add_messages` replaces it in place."""
    artifact = {**message.artifact, STALE_SINCE: now}
    text = f"{message.text}\n{stale_note(reading)}"
    return message.model_copy(update={"content": text, "artifact": artifact})


async def stale_readings(history: Sequence[BaseMessage], tools: Mapping[str, BaseTool]) -> dict[int, ToolMessage]:
    """The stale-read guard, before a model call: the results of `history` to send marked stale, by position.

    A source is stale when no reading of it in `history` is at the store's revision now (one current reading
    clears it, however many old ones precede it, in whatever order parallel calls finished). Then every reading
    of it not yet marked
    is marked (`marked_stale`), once: an empty answer means nothing new to tell, and no `Guard.STALE_READ` for
    this call. The revision is asked of the tools that can tell it (`Rereadable`), which wait for a shared store
    off the event loop.
    """
    probes = {tool.reads: tool for tool in tools.values() if isinstance(tool, Rereadable)}
    found: dict[str, list[tuple[int, Reading]]] = {}
    for index, message in enumerate(history):
        reading = Reading.of(message)
        if reading is not None and reading.source in probes:
            found.setdefault(reading.source, []).append((index, reading))
    marked: dict[int, ToolMessage] = {}
    for source, readings in found.items():
        now = await probes[source].arevision_now()
        if now is None or any(reading.revision == now for _, reading in readings):
            continue
        for index, reading in readings:
            message = history[index]
            assert isinstance(message, ToolMessage)
            if reading.revision != now and STALE_SINCE not in message.artifact:
                marked[index] = marked_stale(message, reading, now)
    return marked
