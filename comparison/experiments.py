"""The experiments that are not "ask the goals": streaming and time travel, each on a fresh store, each a record.

`run_streaming` records when the first piece of the answer arrived against the whole answer, streamed or not;
`streaming_code` counts the lines each layer needed to stream. `run_time_travel` adds a book and goes back
(`rewind`, `replay` from the checkpoint before the tools node, or `retry` after a lost reply) and records
what the store holds afterwards, as facts read from the store and the trace.
"""

from __future__ import annotations

import ast
import functools
import inspect
import logging
import re
import textwrap
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.tools import BaseTool, StructuredTool

from comparison.contenders import SPECS, Contender, build_contender, spec_of
from comparison.conversations import Conversation, open_conversation
from comparison.records import RunRecord, raised_record, result_record
from comparison.scenarios import Scenario, Variant
from shared_tools.bookstore.store import BookStore
from shared_tools.conversation import resume_until_answered
from shared_tools.models import make_model
from shared_tools.results import AgentOptions, AgentResult, Token, TokenKind, TraceEvent
from shared_tools.sync import run_blocking

log = logging.getLogger("compare")

LOST_REPLY = "add_to_cart: the store did not answer in time (the write may have gone through)"
"""What the first add_to_cart raises in the retry experiments, after its write went through."""


# --- streaming -------------------------------------------------------------------------------------------------


def streaming_model(spec: str, chunk_delay: float, seed: int | None, temperature: float | None = None) -> BaseChatModel:
    """The model of a streaming run. The scripted model waits `chunk_delay` per chunk and is made to generate by
    streaming even when called with `ainvoke` (LangChain then merges the stream for the caller), so a reply takes
    as long to write either way, as a real model's does: only when the user sees it differs."""
    model = make_model(spec, seed=seed, temperature=temperature)
    if chunk_delay and "chunk_delay" in type(model).model_fields:
        model = model.model_copy(update={"chunk_delay": chunk_delay, "streaming": True})
    return model


class TokenClock:
    """An `on_token` that notes when each reply's first piece of answer text arrived and keeps the pieces."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.first_answer_s: dict[int, float] = {}
        """Per model call (`Token.step`): seconds from the start of the run to its first piece of answer text."""
        self.text: dict[int, list[str]] = {}
        self.plan_chunks = 0

    def __call__(self, token: Token) -> None:
        if token.kind is not TokenKind.ANSWER:
            self.plan_chunks += 1
            return
        if not token.text:
            return
        self.first_answer_s.setdefault(token.step, time.perf_counter() - self.started)
        self.text.setdefault(token.step, []).append(token.text)

    @property
    def last_step(self) -> int | None:
        """The last model call that streamed answer text: the one whose text is the final answer."""
        return max(self.text, default=None)

    def answer(self) -> str | None:
        step = self.last_step
        return None if step is None else "".join(self.text[step])

    def first_text_s(self) -> float | None:
        step = self.last_step
        return None if step is None else self.first_answer_s[step]

    def chunks(self) -> int:
        step = self.last_step
        return 0 if step is None else len(self.text[step])


STREAMING_MARKERS = ("on_token", "AIMessageChunk", "tool_call_chunks", "astream_events", 'stream_mode="messages"')
"""Words only token streaming code uses: a function holding one of them is part of what streaming costs."""
_STREAMING_WORD = re.compile("|".join(rf"(?<![\w]){re.escape(marker)}(?![\w])" for marker in STREAMING_MARKERS))
"""A marker as a whole word: `cancellation_token` holds "on_token" and is no streaming code."""


def is_streaming_code(source: str) -> bool:
    """Whether `source` holds one of `STREAMING_MARKERS` as a word of its own."""
    return _STREAMING_WORD.search(source) is not None


def code_lines(source: str) -> int:
    """Lines of code in `source`: not blank, not a comment, not part of a docstring."""
    tree = ast.parse(textwrap.dedent(source))
    docstrings: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                docstrings.update(range(body[0].lineno, (body[0].end_lineno or body[0].lineno) + 1))
    lines = textwrap.dedent(source).splitlines()
    return sum(
        1
        for number, line in enumerate(lines, start=1)
        if line.strip() and not line.strip().startswith("#") and number not in docstrings
    )


def _functions(module: ModuleType) -> list[tuple[str, Any]]:
    """Every function and method defined in `module`, by qualified name."""
    found: list[tuple[str, Any]] = []
    for name, value in vars(module).items():
        if inspect.isfunction(value) and value.__module__ == module.__name__:
            found.append((name, value))
        elif inspect.isclass(value) and value.__module__ == module.__name__:
            for attr, member in vars(value).items():
                function = member.__func__ if isinstance(member, staticmethod | classmethod) else member
                if inspect.isfunction(function):
                    found.append((f"{name}.{attr}", function))
    return found


@functools.cache
def _function_spans(module: ModuleType) -> tuple[list[str], dict[str, tuple[int, int]]]:
    """The module's source lines, and where each module-level function and each method of a module-level class is
    in them, by qualified name: (first line, decorators included, as `inspect.getsource` starts; last line).

    One parse per module and process instead of `inspect.getsource` per function, which tokenizes the file again
    for each (40 ms for the four contenders' modules, in every streaming run)."""
    try:
        lines = inspect.getsourcelines(module)[0]
        tree = ast.parse("".join(lines))
    except (OSError, TypeError, SyntaxError):
        return [], {}
    spans: dict[str, tuple[int, int]] = {}

    def span(node: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[int, int]:
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        return first, node.end_lineno or node.lineno

    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            spans[node.name] = span(node)
        elif isinstance(node, ast.ClassDef):
            for member in node.body:
                if isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef):
                    spans[f"{node.name}.{member.name}"] = span(member)
    return lines, spans


def streaming_code(contender: str) -> list[dict[str, Any]]:
    """The functions of `contender`'s modules that stream tokens, with their lines of code, read from the source.

    Empty when none does: the contender has no streaming of its own.
    """
    import importlib

    found: list[dict[str, Any]] = []
    for module_name in SPECS[contender].source_modules if contender in SPECS else ():
        module = importlib.import_module(module_name)
        lines, spans = _function_spans(module)
        for name, function in _functions(module):
            try:
                if name in spans and function.__code__.co_firstlineno == spans[name][0]:
                    first, last = spans[name]
                    source = "".join(lines[first - 1 : last])
                else:  # defined somewhere the index does not look (under an `if`, by another name)
                    source = inspect.getsource(function)
            except (OSError, TypeError):
                continue
            if is_streaming_code(source):
                found.append({"where": f"{module_name}.{name}", "lines": code_lines(source)})
    return found


def run_streaming(scenario: Scenario, variant: Variant, contender: str, options: Any) -> list[RunRecord]:
    """Each goal once, streamed or not; when the first piece of the answer arrived and when the whole of it."""
    from comparison.run_setup import collector, model_spec_for, open_store, run_key, scenario_tools

    records: list[RunRecord] = []
    for goal in scenario.goals:
        with open_store(options, scenario) as (store, customer):
            tools = scenario_tools(store, customer, scenario, variant)
            model = streaming_model(
                model_spec_for(options.model, scenario.persona),
                variant.chunk_delay,
                options.model_seed,
                options.model_temperature,
            )
            events: list[TraceEvent] = []
            clock = TokenClock()
            agent_options = AgentOptions(
                **{
                    **vars(scenario.options_for(variant, collector(events, options.progress))),
                    "on_token": clock if variant.stream else None,
                }
            )
            agent = build_contender(contender, model, tools, agent_options)
            key = run_key(scenario, variant, contender, goal, 1)
            started = time.perf_counter()
            clock.started = started
            result = _attempt(lambda agent=agent, goal=goal: agent.run(scenario.instructions_for(variant), goal))
            wall_s = time.perf_counter() - started
            if isinstance(result, Exception):
                records.append(raised_record(key, store, customer, wall_s, events, result))
                continue
            record = result_record(key, store, customer, wall_s, result)
            streamed = clock.answer()
            record.facts.update(
                {
                    "streamed": variant.stream,
                    "chunk_delay_s": variant.chunk_delay,
                    # Without streaming the user sees the answer when the run returns it, all at once.
                    "first_text_s": clock.first_text_s() if variant.stream else wall_s,
                    "answer_s": wall_s,
                    "text_chunks": clock.chunks(),
                    "plan_chunks": clock.plan_chunks,
                    "streamed_text_is_answer": None
                    if not variant.stream or result.answer is None or streamed is None
                    else streamed.strip() == result.answer.strip(),
                    "streaming_code": streaming_code(contender),
                }
            )
            records.append(record)
    return records


def _attempt(run: Callable[[], AgentResult]) -> AgentResult | Exception:
    from comparison.run_setup import attempt

    return attempt(run, "experiment")


# --- time travel ------------------------------------------------------------------------------------------------


class LostReply:
    """add_to_cart whose first reply is lost after its write went through: a timeout the caller cannot tell from
    a write that never happened. Later calls answer normally."""

    def __init__(self) -> None:
        self.calls = 0
        self._lock = threading.Lock()

    def wrap(self, tools: list[BaseTool]) -> list[BaseTool]:
        return [self._wrapped(t) if t.name == "add_to_cart" else t for t in tools]

    def _lose_first(self) -> bool:
        with self._lock:
            self.calls += 1
            return self.calls == 1

    def _wrapped(self, tool: BaseTool) -> BaseTool:
        assert isinstance(tool, StructuredTool) and tool.func is not None and tool.coroutine is not None
        func, coroutine = tool.func, tool.coroutine

        def lossy(**kwargs: Any) -> Any:
            result = func(**kwargs)
            if self._lose_first():
                raise TimeoutError(LOST_REPLY)
            return result

        async def alossy(**kwargs: Any) -> Any:
            result = await coroutine(**kwargs)
            if self._lose_first():
                raise TimeoutError(LOST_REPLY)
            return result

        # A copy, so the tool keeps what it is besides its functions: a cart result's text and reading.
        return tool.model_copy(update={"func": lossy, "coroutine": alossy})


def _quantities(store: BookStore, customer: str) -> dict[str, int]:
    return {line.book.title: line.quantity for line in store.cart(customer).lines}


@dataclass
class _TimeTravelRun:
    """One time-travel run's fixed parts: whose run it is, on which store, and the trace its turns fill."""

    scenario: Scenario
    variant: Variant
    contender: str
    store: BookStore
    customer: str
    events: list[TraceEvent] = field(default_factory=list)

    def record_of(self, goal: str, turn: int, started: float, result: AgentResult | Exception) -> RunRecord:
        from comparison.run_setup import run_key

        key = run_key(self.scenario, self.variant, self.contender, goal, turn)
        wall_s = time.perf_counter() - started
        if isinstance(result, Exception):
            return raised_record(key, self.store, self.customer, wall_s, self.events, result)
        return result_record(key, self.store, self.customer, wall_s, result)

    def copies(self) -> dict[str, int]:
        return _quantities(self.store, self.customer)


def _time_travel_agent(run: _TimeTravelRun, options: Any) -> tuple[Contender, LostReply | None]:
    """The contender of the run, on tools whose first add_to_cart reply is lost in the retry experiment."""
    from comparison.run_setup import collector, model_spec_for
    from shared_tools.bookstore.tools import make_tools

    scenario, variant, contender = run.scenario, run.variant, run.contender
    lost = LostReply() if variant.time_travel == "retry" else None
    tools = make_tools(run.store, run.customer, scenario.faults_for(variant), idempotent=variant.idempotent)
    if lost is not None:
        tools = lost.wrap(tools)
    agent_options = scenario.options_for(variant, collector(run.events, options.progress))
    spec = model_spec_for(options.model, scenario.persona)
    model = make_model(spec, seed=options.model_seed, temperature=options.model_temperature)
    retrying = spec_of(contender).build_retrying
    if lost is not None and retrying is not None:
        return retrying(model, tools, agent_options, None), lost
    return build_contender(contender, model, tools, agent_options), lost


def _retried(run: _TimeTravelRun, agent: Contender, lost: LostReply | None, instructions: str) -> RunRecord:
    """The retry experiment: one turn whose first add_to_cart reply is lost; who retried, and the copies after."""
    goal = run.scenario.goals[0]
    started = time.perf_counter()
    result = _attempt(lambda: agent.run(instructions, goal))
    record = run.record_of(goal, 1, started, result)
    record.facts.update(
        {
            "reply_lost": lost is not None and lost.calls >= 1,
            "add_to_cart_ran": lost.calls if lost is not None else 0,
            "retried_by": spec_of(run.contender).retried_by or "the model",
            "idempotent": run.variant.idempotent,
            "copies": run.copies(),
        }
    )
    return record


def _rewound(run: _TimeTravelRun, conversation: Any, before: dict[str, int]) -> RunRecord:
    """Turn 2 after rewinding turn 1: the scenario's second question, and what the rewind took back."""
    rewound = conversation.rewind(1)
    question = run.scenario.goals[1]
    started = time.perf_counter()
    second = run.record_of(question, 2, started, _attempt(lambda: conversation.ask(question)))
    second.facts.update(
        {
            "rewound_turns": rewound.turns,
            "rewound_messages": rewound.messages,
            "rewound_to": rewound.checkpoint_id,
            "copies_before_rewind": before,
            "copies": run.copies(),
        }
    )
    return second


def _replayed(run: _TimeTravelRun, conversation: Any, first: RunRecord, before: dict[str, int]) -> RunRecord | None:
    """Turn 2 replayed from the checkpoint before add_to_cart ran; None (noted on `first`) when there is none."""
    try:
        checkpoint = checkpoint_before_tool(conversation, "add_to_cart")
    except LookupError:  # the model added nothing (a real or noisy model may not): nothing to replay
        first.facts["nothing_to_replay"] = True
        return None
    label = f"replay from checkpoint {checkpoint}"
    started = time.perf_counter()
    second = run.record_of(label, 2, started, _attempt(lambda: replayed(conversation, checkpoint)))
    second.facts.update(
        {
            "replayed_from": checkpoint,
            "idempotent": run.variant.idempotent,
            "copies_before_replay": before,
            "copies": run.copies(),
        }
    )
    return second


def _went_back(run: _TimeTravelRun, agent: Contender, instructions: str) -> list[RunRecord]:
    """Turn 1 adds a book in a conversation; turn 2 rewinds or replays it."""
    scenario, variant = run.scenario, run.variant
    goal = scenario.goals[0]
    conversation = open_conversation(
        run.contender,
        agent,
        instructions,
        f"{scenario.name}-{variant.name}",
        None,
        resume=False,
        customer_id=run.customer,
    )
    try:
        run.events.clear()
        started = time.perf_counter()
        first = run.record_of(goal, 1, started, _attempt(lambda: conversation.ask(goal)))
        first.facts["copies"] = run.copies()
        if first.error is not None:
            return [first]
        before = run.copies()
        run.events.clear()
        if variant.time_travel == "rewind":
            second: RunRecord | None = _rewound(run, conversation, before)
        else:
            second = _replayed(run, conversation, first, before)
        return [first] if second is None else [first, second]
    finally:
        conversation.close()


def run_time_travel(scenario: Scenario, variant: Variant, contender: str, options: Any) -> list[RunRecord]:
    """Add a book, then go back in time (`variant.time_travel`), and record what the store holds afterwards."""
    from comparison.run_setup import open_store

    with open_store(options, scenario) as (store, customer):
        run = _TimeTravelRun(scenario, variant, contender, store, customer)
        agent, lost = _time_travel_agent(run, options)
        instructions = scenario.instructions_for(variant)
        if variant.time_travel == "retry":
            return [_retried(run, agent, lost, instructions)]
        return _went_back(run, agent, instructions)


def checkpoint_before_tool(conversation: Conversation, tool: str) -> str:
    """The id of the last checkpoint of a graph's thread whose next step runs the tools node on a call of `tool`."""
    return str(run_blocking(lambda: conversation.acheckpoint_before_tool(tool), instead="acheckpoint_before_tool"))  # type: ignore[attr-defined]


def replayed(conversation: Conversation, checkpoint_id: str) -> AgentResult:
    """A graph's thread run again from `checkpoint_id`, its approval pauses answered as its `ask`'s are."""
    result = run_blocking(lambda: conversation.areplay(checkpoint_id), instead="areplay(...)")  # type: ignore[attr-defined]
    return resume_until_answered(conversation, result, getattr(conversation, "approve", None))[0]
