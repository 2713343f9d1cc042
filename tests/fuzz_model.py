"""Hostile model output for property tests: a hypothesis strategy of reply sequences and a model that plays one.

`scripts()` draws what a broken or adversarial model might send (invented tools, wrong types, huge strings,
repeats, reused or missing ids, empty and unparseable replies); `FuzzModel` plays one, then answers with plain
text, so a short script still runs a whole run. Shared by tests/test_fuzz.py and benchmarks/soak.py.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import PrivateAttr

from shared_tools.bookstore.tools import TOOL_NAMES
from shared_tools.results import AgentLimits
from tests.doubles import ToolBindingDouble

HUGE = 50_000
FINAL_TEXT = "That is all I can do."

# -- argument values --------------------------------------------------------------------------------------------

_huge_strings = st.builds(lambda c, n: c * n, st.sampled_from(["a", "x ", "Lighthouse ", "é", "\x00"]), st.just(HUGE))
_texts = st.one_of(
    st.sampled_from(["", " ", "The Last Lighthouse", "Mira Holt", "novel", "7", "2", "-1", "null", "🙂", "a@b.co"]),
    st.text(max_size=30),
)
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=20),  # the real ids, quantities and their edges
    st.sampled_from([0, 4512, 9999, 2**31, -(2**63), 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
    _texts,
)
_values = st.one_of(
    _scalars,
    _huge_strings,
    st.lists(_scalars, max_size=3),
    st.dictionaries(st.text(max_size=5), _scalars, max_size=2),
)

_FIELDS = ("query", "max_results", "book_id", "quantity", "order_id", "tool_call_id", "id", "")


def _plausible_args(name: str) -> st.SearchStrategy[dict[str, Any]]:
    """Arguments close to right for `name`, so many calls reach the store (and some change the cart)."""
    ids = st.integers(min_value=0, max_value=14)
    match name:
        case "search_books":
            return st.fixed_dictionaries(
                {"query": _texts}, optional={"max_results": st.integers(min_value=-1, max_value=60)}
            )
        case "check_stock":
            return st.fixed_dictionaries({"book_id": ids})
        case "get_order_status":
            return st.fixed_dictionaries({"order_id": st.sampled_from([4512, 9999, 1, -5])})
        case "add_to_cart":
            return st.fixed_dictionaries(
                {"book_id": ids}, optional={"quantity": st.integers(min_value=-1, max_value=12)}
            )
        case _:
            return st.just({})


_tool_names = st.one_of(
    st.sampled_from(TOOL_NAMES),
    st.sampled_from(["delete_cart", "checkout", "search_book", "Add_To_Cart", "", " view_cart", "tools"]),
    st.text(max_size=12),
)


@st.composite
def tool_calls(draw: st.DrawFn, ids: st.SearchStrategy[str | None]) -> dict[str, Any]:
    """One tool call: a real or invented name with plausible, arbitrary or extra-field arguments."""
    name = draw(_tool_names)
    shape = draw(st.sampled_from(["plausible", "plausible", "plausible", "arbitrary", "extra", "empty"]))
    if shape == "arbitrary":
        args = draw(st.dictionaries(st.sampled_from(_FIELDS), _values, max_size=3))
    elif shape == "empty":
        args = {}
    else:
        args = dict(draw(_plausible_args(name if name in TOOL_NAMES else draw(st.sampled_from(TOOL_NAMES)))))
        if shape == "extra":
            args[draw(st.sampled_from((*_FIELDS, "extra", "book_id")))] = draw(_values)
    return {"name": name, "args": args, "id": draw(ids), "type": "tool_call"}


def _call_ids() -> st.SearchStrategy[str | None]:
    """Mostly fresh ids, some from a small pool (ids reused within a turn and across turns), rarely none."""
    fresh = st.uuids().map(lambda u: f"call_{u.hex[:8]}")
    pool = st.sampled_from(["call_0", "call_1", "call_2"])
    # langchain-core allows a call with ``id=None``; a provider that sends one must not crash a loop.
    return st.one_of(fresh, fresh, fresh, fresh, fresh, pool, pool, st.none())


_invalid_calls = st.builds(
    lambda name, args, cid: {"name": name, "args": args, "id": cid, "error": "bad", "type": "invalid_tool_call"},
    st.one_of(st.none(), _tool_names),
    st.one_of(st.none(), st.sampled_from(['{"book_id": 7', "not json", "{}", ""])),
    st.one_of(st.none(), st.just("bad_0")),
)

_usage = st.one_of(
    st.none(),
    st.builds(
        lambda i, o: {"input_tokens": i, "output_tokens": o, "total_tokens": i + o},
        st.integers(min_value=0, max_value=5_000),
        st.integers(min_value=0, max_value=500),
    ),
)

_reply_texts = st.one_of(
    st.just(""),
    st.sampled_from([" ", "\n\t", "Let me check.", "Done: added it.", "<think>hm</think>"]),
    st.text(max_size=40),
    _huge_strings,
)


@st.composite
def replies(draw: st.DrawFn) -> AIMessage:
    """One model reply: text, calls, unparseable calls and usage, each possibly missing."""
    kind = draw(st.sampled_from(["calls", "calls", "calls", "repeat", "text", "empty", "invalid", "mixed"]))
    calls: list[dict[str, Any]] = []
    invalid: list[dict[str, Any]] = []
    text = ""
    if kind in ("calls", "mixed"):
        calls = draw(st.lists(tool_calls(_call_ids()), min_size=1, max_size=4))
    if kind == "repeat":  # the same call several times in one turn, with the same or fresh ids
        call = draw(tool_calls(_call_ids()))
        same_id = draw(st.booleans())
        calls = [call if same_id else {**call, "id": f"{call['id']}-{i}"} for i in range(draw(st.integers(2, 4)))]
    if kind in ("text", "mixed", "invalid"):
        text = draw(_reply_texts)
    if kind == "invalid" or (kind == "mixed" and draw(st.booleans())):
        invalid = draw(st.lists(_invalid_calls, min_size=1, max_size=2))
    return AIMessage(content=text, tool_calls=calls, invalid_tool_calls=invalid, usage_metadata=draw(_usage))


@st.composite
def scripts(draw: st.DrawFn, max_len: int = 10) -> list[AIMessage]:
    """A reply sequence; a previous turn may be repeated verbatim (a model stuck in a loop)."""
    script = draw(st.lists(replies(), min_size=0, max_size=max_len))
    if script and draw(st.booleans()):
        script += [script[-1]] * draw(st.integers(1, 3))
    return script


limits = st.builds(
    AgentLimits,
    max_steps=st.integers(min_value=1, max_value=8),
    max_tokens=st.one_of(st.none(), st.integers(min_value=0, max_value=20_000)),
    max_duration=st.none(),
    max_repeats=st.one_of(st.none(), st.integers(min_value=0, max_value=3)),
    max_consecutive_errors=st.one_of(st.none(), st.integers(min_value=0, max_value=4)),
)
"""Budgets worth fuzzing; no time budget, so every stop is decided by the script, not by the clock."""


# -- the model --------------------------------------------------------------------------------------------------


class FuzzModel(ToolBindingDouble):
    """Plays `replies` in order, then answers `FINAL_TEXT` (with usage) for ever; remembers what it returned."""

    replies: Sequence[AIMessage]
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _returned: list[AIMessage] = PrivateAttr(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "fuzz-script"

    @property
    def calls(self) -> int:
        return len(self._returned)

    @property
    def returned(self) -> list[AIMessage]:
        """Every reply given out, in order (copies of what the agent received)."""
        return list(self._returned)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        with self._lock:
            index = len(self._returned)
            if index < len(self.replies):
                reply = self.replies[index].model_copy(deep=True)
            else:
                reply = AIMessage(
                    FINAL_TEXT, usage_metadata={"input_tokens": 7, "output_tokens": 3, "total_tokens": 10}
                )
            self._returned.append(reply)
        return ChatResult(generations=[ChatGeneration(message=reply.model_copy(deep=True))])
