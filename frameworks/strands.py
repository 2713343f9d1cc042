"""Strands Agents as a contender: its own event loop, its `limits` (turns, total tokens), its human-in-the-loop gate
and its file session manager as the conversation.

`LangChainModel` is Strands' model seam (`Model.stream`, ConverseStream-shaped events) over any langchain-core chat
model; `strands_tool` puts one of our tools behind Strands' `PythonAgentTool`; `StrandsContender` runs the agent
and maps what it did to an `AgentResult`; `StrandsConversation` keeps the turns with `FileSessionManager`.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolCall, ToolMessage
from langchain_core.tools import BaseTool

from shared_tools import guards
from shared_tools.adapters import BridgedAgent, StepLines
from shared_tools.contender import Approval, Capability, Contender, ContenderSpec
from shared_tools.conversation import (
    KeptBeside,
    NoRewind,
    OneTurnAtATime,
    Opening,
    WholeTurns,
    check_owner,
    in_worker_thread,
)
from shared_tools.history import Rewound, among_other_conversations
from shared_tools.results import (
    AgentOptions,
    AgentResult,
    Approve,
    Guard,
    RunUsage,
    StopReason,
)

if TYPE_CHECKING:  # Strands is imported where it is used: `--help` imports this file for its SPEC
    from strands import Agent
    from strands.hooks.events import AfterToolCallEvent, BeforeToolCallEvent
    from strands.session.file_session_manager import FileSessionManager
    from strands.tools.tools import PythonAgentTool
    from strands.vended_interventions.hitl.classifier import ClassifierResult

log = logging.getLogger(__name__)


class _ShownOnTheTrace(logging.Filter):
    """Strands' tool executor logs every failed or unknown tool call at ERROR, with its traceback; here those
    failures are the point and each is on the trace, so they are logged only when logging is verbose (the root
    logger at INFO or below: `compare.py -v`), as `compare.py` treats MAF's, and masked as the trace is."""

    def filter(self, record: logging.LogRecord) -> bool:
        if logging.getLogger().getEffectiveLevel() > logging.INFO:
            return False
        # Kept: its text and traceback masked, since a tool's exception may carry credentials (Strands logs it whole).
        text = record.getMessage()
        if record.exc_info:
            text += "\n" + logging.Formatter().formatException(record.exc_info)
        record.msg, record.args, record.exc_info, record.exc_text = guards.mask_pii(text), None, None, None
        return True


logging.getLogger("strands.tools.executors._executor").addFilter(_ShownOnTheTrace())

STOP_REASONS: dict[str, StopReason] = {
    "end_turn": StopReason.DONE,
    "limit_turns": StopReason.MAX_STEPS,
    "limit_total_tokens": StopReason.TOKEN_BUDGET,
    "cancelled": StopReason.CANCELLED,
}
"""Strands' `AgentResult.stop_reason` -> ours; any other is an invalid response (`StrandsContender.run`)."""

NOT_AVAILABLE: dict[str, str] = {
    "max_duration": "Strands has no time budget: a blocked tool or model call holds the run",
    "max_repeats": "Strands has no repeated-call check: the same call runs every time it is asked",
    "max_consecutive_errors": "Strands has no error limit: each error is fed back and the loop goes on",
    "max_tool_result_chars": "Strands does not cut tool results",
    "detailed_errors": "Strands always feeds a tool's exception text back to the model ('Error: ...')",
}
"""Options Strands cannot honour, and why (`StrandsContender.not_available` lists those asked for)."""


# --- the model seam -------------------------------------------------------------------------------------------------


def _result_text(result: dict[str, Any]) -> str:
    parts = []
    for part in result.get("content", []):
        if "text" in part:
            parts.append(str(part["text"]))
        elif "json" in part:
            parts.append(guards.compact_json(part["json"]))
    return "".join(parts)


def to_langchain(messages: Sequence[dict[str, Any]], system_prompt: str | None = None) -> list[BaseMessage]:
    """Strands' messages (Bedrock Converse shape) as langchain messages: a user message of tool results becomes one
    ToolMessage per result."""
    out: list[BaseMessage] = [SystemMessage(system_prompt)] if system_prompt else []
    for message in messages:
        blocks = message.get("content", [])
        if message.get("role") == "assistant":
            text = "".join(str(b["text"]) for b in blocks if "text" in b)
            calls = [
                ToolCall(
                    name=b["toolUse"]["name"], args=dict(b["toolUse"].get("input") or {}), id=b["toolUse"]["toolUseId"]
                )
                for b in blocks
                if "toolUse" in b
            ]
            out.append(AIMessage(text, tool_calls=calls))
            continue
        for block in blocks:
            if "toolResult" in block:
                result = block["toolResult"]
                status = "error" if result.get("status") == "error" else "success"
                out.append(ToolMessage(_result_text(result), tool_call_id=result["toolUseId"], status=status))
        text = "".join(str(b["text"]) for b in blocks if "text" in b)
        if text or not any("toolResult" in b for b in blocks):
            out.append(HumanMessage(text))
    return out


def _call(use: dict[str, Any]) -> ToolCall:
    """A Strands tool use as a langchain tool call (a model's input that is not an object counts as none)."""
    args = use.get("input")
    return ToolCall(
        name=str(use.get("name")), args=dict(args) if isinstance(args, dict) else {}, id=str(use["toolUseId"])
    )


def _openai_tool(spec: dict[str, Any]) -> dict[str, Any]:
    schema = spec.get("inputSchema", {}).get("json", {"type": "object", "properties": {}})
    return {
        "type": "function",
        "function": {"name": spec["name"], "description": spec.get("description", ""), "parameters": schema},
    }


def reply_events(reply: AIMessage) -> list[dict[str, Any]]:
    """One langchain reply as the ConverseStream events Strands reads: its text, each tool call, the stop, usage."""
    events: list[dict[str, Any]] = [{"messageStart": {"role": "assistant"}}]
    if reply.text:
        events += [
            {"contentBlockStart": {"start": {}}},
            {"contentBlockDelta": {"delta": {"text": reply.text}}},
            {"contentBlockStop": {}},
        ]
    for call in reply.tool_calls:
        events += [
            {"contentBlockStart": {"start": {"toolUse": {"name": call["name"], "toolUseId": call["id"]}}}},
            {"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps(call["args"])}}}},
            {"contentBlockStop": {}},
        ]
    if reply.response_metadata.get("finish_reason") == "length":
        reason = "max_tokens"
    else:
        reason = "tool_use" if reply.tool_calls else "end_turn"
    usage = reply.usage_metadata or {}
    inputs, outputs = guards.token_count(usage.get("input_tokens")), guards.token_count(usage.get("output_tokens"))
    events += [
        {"messageStop": {"stopReason": reason}},
        {
            "metadata": {
                "usage": {"inputTokens": inputs, "outputTokens": outputs, "totalTokens": guards.usage_tokens(reply)},
                "metrics": {"latencyMs": 0},
            }
        },
    ]
    return events


@functools.cache
def model_class() -> type:
    """`LangChainModel`, made on first use: it subclasses Strands' own `Model`, and this file is imported for its
    SPEC by commands that never run Strands."""
    from strands.models.model import Model

    class LangChainModel(Model):
        """Strands' `Model` over a langchain-core chat model: each `stream` is one call of it, its reply given back as
        ConverseStream events (the whole reply at once: the chat model is called, not streamed)."""

        def __init__(
            self, chat_model: BaseChatModel, watch: _RunWatch | None = None, *, among_others: bool = False
        ) -> None:
            self.chat_model = chat_model
            self.watch = watch
            self.among_others = among_others
            """True in a conversation: one of the customer's several (`history.among_other_conversations`), so a
            provider that numbers its calls call_0 in each gets an id of its own for each, and no add is taken for
            another conversation's replay."""
            self.config: dict[str, Any] = {"model_id": getattr(chat_model, "model", None) or type(chat_model).__name__}

        def update_config(self, **model_config: Any) -> None:
            self.config.update(model_config)

        def get_config(self) -> dict[str, Any]:
            return dict(self.config)

        def structured_output(
            self, output_model: Any, prompt: Any, system_prompt: str | None = None, **kwargs: Any
        ) -> Any:
            raise NotImplementedError("the bookstore agent asks for no structured output")

        async def stream(  # type: ignore[override]
            self,
            messages: Sequence[dict[str, Any]],
            tool_specs: list[dict[str, Any]] | None = None,
            system_prompt: str | None = None,
            **kwargs: Any,
        ) -> AsyncGenerator[dict[str, Any], None]:
            prompt = to_langchain(messages, system_prompt)
            if self.among_others and system_prompt:
                prompt = among_other_conversations(prompt, system_prompt)
            model: Any = self.chat_model
            if tool_specs:
                model = model.bind_tools([_openai_tool(spec) for spec in tool_specs])
            started = time.monotonic()
            reply = await model.ainvoke(prompt)
            if not isinstance(reply, AIMessage):
                raise TypeError(f"the chat model replied with a {type(reply).__name__}, not an AIMessage")
            reply = guards.with_call_ids(reply, prompt)
            if self.watch is not None:
                self.watch.model_replied(reply, time.monotonic() - started)
            for event in reply_events(reply):
                yield event

    return LangChainModel


def __getattr__(name: str) -> Any:
    if name == "LangChainModel":
        return model_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --- the tools ------------------------------------------------------------------------------------------------------


def strands_tool(tool: BaseTool) -> PythonAgentTool:
    """One of our langchain tools as a Strands tool: its JSON schema, and the call's own id passed on (so a write
    keyed by call id, add_to_cart's, is not repeated by a replay). An exception is left to Strands, which feeds
    it back as "Error: <text>"."""
    from strands.tools.tools import PythonAgentTool

    spec = {
        "name": tool.name,
        "description": tool.description,
        "inputSchema": {"json": _schema(tool)},
    }

    def run(tool_use: dict[str, Any], **_: Any) -> dict[str, Any]:
        call = {**_call(tool_use), "name": tool.name}
        text, is_error = guards.output_text(tool.invoke({**call, "type": "tool_call"}))
        return {"toolUseId": call["id"], "status": "error" if is_error else "success", "content": [{"text": text}]}

    return PythonAgentTool(tool.name, spec, run)  # type: ignore[arg-type]


def _schema(tool: BaseTool) -> dict[str, Any]:
    from langchain_core.utils.function_calling import convert_to_openai_tool

    parameters: dict[str, Any] = convert_to_openai_tool(tool)["function"]["parameters"]
    return parameters


# --- the run --------------------------------------------------------------------------------------------------------


@dataclass
class _RunWatch(StepLines):
    """What one run saw: the trace lines (given to `on_event` as they happen), and the calls a human refused."""

    tool_names: frozenset[str]
    refused: set[str] = field(default_factory=set)

    def tool_done(self, event: AfterToolCallEvent) -> None:
        call = _call(dict(event.tool_use))
        is_error = event.result.get("status") == "error"
        guard = None
        if call["id"] in self.refused:
            guard = Guard.APPROVAL_REFUSED
        elif call["name"] not in self.tool_names:
            guard = Guard.UNKNOWN_TOOL
        text = _result_text(dict(event.result))
        self.emit(
            guards.tool_event(self.model_calls, call, text, event.duration or 0.0, is_error=is_error, guard=guard)
        )


RULE_FAILED = "the approval rule could not judge this call (it raised), so it needs your yes"


class _Gate:
    """Strands' own human-in-the-loop gate, asked per call by our rule (`AgentOptions.needs_approval`, given the
    calls of the same reply before this one) and answered inline by `approve` (no human: a no)."""

    def __init__(self, options: AgentOptions, approve: Approve | None, watch: _RunWatch) -> None:
        self.rule = options.needs_approval
        self.approve = approve
        self.watch = watch
        self.asking: tuple[ToolCall, str] | None = None

    def classify(self, event: BeforeToolCallEvent, **_: Any) -> ClassifierResult:
        from strands.vended_interventions.hitl.classifier import ClassifierResult

        call = _call(dict(event.tool_use))
        earlier = _earlier_calls(event.agent.messages, call["id"])
        # Strands calls `ask` right after this, with no await between, so the call it asks about is this one. A
        # rule that raises makes Strands ask anyway (it fails closed): the human is told the rule could not judge it.
        self.asking = (call, RULE_FAILED)
        reason = None if self.rule is None else self.rule(call, earlier)
        if reason is None:
            self.asking = None
            return ClassifierResult(requires_human_in_the_loop=False)
        self.asking = (call, reason)
        return ClassifierResult(requires_human_in_the_loop=True, reason=reason)

    def ask(self, prompt: str, **_: Any) -> str:
        call, reason = self.asking or (None, "")
        self.asking = None
        yes = call is not None and self.approve is not None and self.approve(call, reason) is True
        if not yes and call is not None:
            self.watch.refused.add(call["id"])
        return "yes" if yes else "no"


def _earlier_calls(messages: Sequence[dict[str, Any]], call_id: str) -> list[ToolCall]:
    """The calls of the reply that asked for `call_id`, before it."""
    for message in reversed(messages):
        uses = [b["toolUse"] for b in message.get("content", []) if "toolUse" in b]
        ids = [u["toolUseId"] for u in uses]
        if call_id in ids:
            return [_call(u) for u in uses[: ids.index(call_id)]]
    return []


class StrandsContender(BridgedAgent):
    """The bookstore agent on Strands' `Agent`, `run(instructions, goal) -> AgentResult`.

    Its guards are Strands' `limits`: ``turns`` from `AgentLimits.max_steps` and ``total_tokens`` from
    `AgentLimits.max_tokens`, each checked by Strands between turns; and its `HumanInTheLoop` gate when
    `AgentOptions.needs_approval` is set, answered by `approve`.
    """

    NOT_AVAILABLE = NOT_AVAILABLE

    @property
    def limits(self) -> dict[str, int]:
        """`AgentLimits` as Strands' `limits`: ``turns`` and ``total_tokens``, each left out when not set."""
        limits = self.options.limits
        mapped: dict[str, int] = {}
        if limits.max_steps is not None:
            mapped["turns"] = limits.max_steps
        if limits.max_tokens is not None and limits.max_tokens > 0:
            mapped["total_tokens"] = limits.max_tokens
        return mapped

    def agent(
        self,
        instructions: str,
        watch: _RunWatch,
        session: FileSessionManager | None = None,
        *,
        conversation: bool = False,
    ) -> Agent:
        """Strands' `Agent` for one run, or for a conversation (`session`, kept or not: `StrandsConversation`)."""
        from strands import Agent
        from strands.hooks.events import AfterToolCallEvent
        from strands.tools.executors import ConcurrentToolExecutor, SequentialToolExecutor
        from strands.vended_interventions.hitl import HumanInTheLoop

        gate = None
        if self.options.needs_approval is not None:
            asker = _Gate(self.options, self.approve, watch)
            gate = [HumanInTheLoop(classifier=asker.classify, ask=asker.ask)]
        agent = Agent(
            model=model_class()(self.model, watch, among_others=conversation),
            tools=[strands_tool(t) for t in self.tools.values()],
            system_prompt=instructions,
            callback_handler=None,
            tool_executor=ConcurrentToolExecutor() if self.options.parallel_tools else SequentialToolExecutor(),
            interventions=gate,
            session_manager=session,
        )
        agent.hooks.add_callback(AfterToolCallEvent, watch.tool_done)
        return agent

    def run(self, instructions: str, goal: str, *, cancel: threading.Event | None = None) -> AgentResult:
        watch = _RunWatch(self.options, frozenset(self.tools))
        return run_turn(self, self.agent(instructions, watch), goal, watch, cancel)


def run_turn(
    contender: StrandsContender, agent: Agent, goal: str, watch: _RunWatch, cancel: threading.Event | None
) -> AgentResult:
    """One invocation of `agent` with the contender's limits, mapped to an `AgentResult`."""
    from strands.types.exceptions import MaxTokensReachedException

    try:
        result = agent(goal, limits=contender.limits or None, cancel_signal=cancel)
        reason = STOP_REASONS.get(str(result.stop_reason), StopReason.INVALID_RESPONSE)
        answer = str(result).strip() if reason is StopReason.DONE else None
        if not answer:  # an unusable reply's text is no answer: no choice, or only calls that did not parse
            reason, answer = (StopReason.INVALID_RESPONSE if reason is StopReason.DONE else reason), None
    except MaxTokensReachedException:
        reason, answer = StopReason.INVALID_RESPONSE, None
    usage = RunUsage.of_trace(watch.trace)
    system = agent.system_prompt if isinstance(agent.system_prompt, str) else None
    messages = to_langchain(agent.messages, system)
    return AgentResult.of_run(reason, usage, answer=answer, trace=watch.trace, messages=messages)


# --- the conversation -----------------------------------------------------------------------------------------------


OWNER_KEY = "agent_loop_compare_customer"
"""The key of the customer a conversation belongs to, in the agent state Strands' session manager keeps."""
AGENT_ID = "default"
"""Strands' id of an agent built without one: its state and messages are kept under ``agents/agent_default``."""


def saved_owner(storage_dir: Path, session_id: str) -> str | None:
    """The customer of the session `session_id` kept in `storage_dir` (None: none yet); ValueError if damaged."""
    path = storage_dir / f"session_{session_id}" / "agents" / f"agent_{AGENT_ID}" / "agent.json"
    if not path.exists():
        return None
    try:
        state = json.loads(path.read_bytes()).get("state") or {}
    except (UnicodeDecodeError, json.JSONDecodeError, AttributeError) as exc:
        raise ValueError(f"{path} is not a saved Strands agent ({type(exc).__name__}: {exc})") from None
    owner = state.get(OWNER_KEY) if isinstance(state, dict) else None
    return owner if isinstance(owner, str) else None


class StrandsConversation(WholeTurns):
    """Several turns on one Strands `Agent` (a `shared_tools.conversation.Conversation`), kept by Strands' own
    `FileSessionManager` in `storage_dir` (None: in memory), which writes each message as it is added and gives
    the turns back to an agent opened on the same session. Strands' gate asks inline, so a turn never pauses;
    there is no rewind of ours."""

    def __init__(
        self,
        contender: StrandsContender,
        instructions: str,
        storage_dir: Path | None = None,
        session_id: str = "chat",
        customer_id: str | None = None,
    ) -> None:
        self.contender = contender
        self.storage_dir = self.kept_in = storage_dir
        if storage_dir is not None:
            check_owner(saved_owner(storage_dir, session_id), customer_id, str(storage_dir))
        self.watch = _RunWatch(contender.options, frozenset(contender.tools))
        session = None
        if storage_dir is not None:
            from strands.session.file_session_manager import FileSessionManager

            session = FileSessionManager(session_id=session_id, storage_dir=str(storage_dir))
        self.agent = contender.agent(instructions, self.watch, session, conversation=True)
        if customer_id is not None:
            self.agent.state.set(OWNER_KEY, customer_id)  # kept with the session, checked when it is reopened
        self.turn = OneTurnAtATime()

    async def aopen(self, *, resume: bool) -> None:
        pass  # a fresh conversation's directory is removed before its session manager reads it

    def ask(self, question: str, *, cancel: threading.Event | None = None) -> AgentResult:
        self.watch.trace, self.watch.model_calls = [], 0
        return run_turn(self.contender, self.agent, question, self.watch, cancel)

    async def aask(self, question: str, *, cancel: threading.Event | None = None) -> AgentResult:
        # Strands runs its own event loop in the worker thread; the cancel event is its cancel signal.
        return await in_worker_thread(self.turn, self.ask, question, cancel)

    def resume(self, approved: Any, *, cancel: threading.Event | None = None) -> AgentResult:
        raise ValueError("strands: the gate asks the human during the run, so there is no pause to resume")

    async def aresume(self, approved: Any, *, cancel: threading.Event | None = None) -> AgentResult:
        return self.resume(approved, cancel=cancel)

    def rewind(self, turns: int = 1) -> Rewound:
        raise NoRewind("Strands' session manager keeps no rewind of ours: nothing was changed")

    async def arewind(self, turns: int = 1) -> Rewound:
        return self.rewind(turns)

    @property
    def messages(self) -> list[BaseMessage]:
        system = self.agent.system_prompt if isinstance(self.agent.system_prompt, str) else None
        return to_langchain(self.agent.messages, system)

    async def amessages(self) -> list[BaseMessage]:
        return self.messages

    def stored_bytes(self) -> int:
        where = self.storage_dir
        return sum(p.stat().st_size for p in where.rglob("*") if p.is_file()) if where and where.exists() else 0

    def close(self) -> None:
        pass


NO_POSTGRES = "Strands' session managers keep files or S3 objects: there is no Postgres one"
NO_WINDOW = (
    "Strands' conversation managers window by messages (SlidingWindowConversationManager), not by user turns, and "
    "none is wired to our keep_turns or summary here"
)
KEPT = KeptBeside("strands", ".strands", NO_POSTGRES, NO_WINDOW)


async def aopen_conversation(
    agent: StrandsContender,
    instructions: str,
    thread_id: str,
    where: Path | str | None,
    *,
    resume: bool,
    **opening: Unpack[Opening],
) -> StrandsConversation:
    """The conversation `thread_id`, in memory (`where` None) or kept by `FileSessionManager` in a directory beside
    the session database `where`; a fresh one (not `resume`) replaces the directory. The contender's own `approve`
    answers its gate inline."""
    storage_dir = KEPT.opened(where, thread_id, resume=resume, policy=opening.get("policy"))
    return StrandsConversation(agent, instructions, storage_dir, thread_id, opening.get("customer_id"))


async def acheck_saved(where: Path | str, thread_id: str, customer_id: str | None) -> None:
    """Raise ValueError (`CustomerMismatch` among them) when the session of `thread_id` beside `where` is damaged
    or another customer's. Reads, never writes."""
    storage_dir = KEPT.saved(where, thread_id)
    if storage_dir is None:
        return
    check_owner(saved_owner(storage_dir, thread_id), customer_id, str(storage_dir))


# --- the declaration ------------------------------------------------------------------------------------------------


def build(model: BaseChatModel, tools: list[BaseTool], options: AgentOptions, approve: Approve | None) -> Contender:
    """With `options.needs_approval`, Strands' `HumanInTheLoop` gate asks `approve` inside the run (no human: a no)."""
    return StrandsContender(model, tools, options, approve=approve)


def asked_through(answer: bool) -> str:
    return (
        "Strands' HumanInTheLoop intervention (its classifier our rule, its ask callback our human) answered "
        f"{'yes' if answer else 'no'} inside the run, before the tool call"
    )


SPEC = ContenderSpec(
    name="strands",
    description="Strands Agents' Agent: its event loop with limits (turns, total tokens), its HumanInTheLoop "
    "gate, its FileSessionManager keeping the conversation",
    requirement="strands-agents==1.62.0",
    build=build,
    approval=Approval.ASKS,
    capabilities=frozenset({Capability.SEQUENTIAL_TOOLS}),
    guards={
        "step limit": 'limits={"turns": n}',
        "token budget": 'limits={"total_tokens": n}',
        "unknown tool": "the tool executor's 'Unknown tool' error result",
        "approval gate": "HumanInTheLoop (strands.vended_interventions.hitl)",
    },
    lacks={
        Capability.REWIND: "Strands' session manager appends messages and keeps no rewind; none is added here",
        Capability.REPLAY: "Strands' FileSessionManager keeps the messages, not checkpoints to replay from",
        Capability.STREAMING: "the bridge calls the chat model whole and gives Strands the reply as one burst of "
        "ConverseStream events",
        Capability.HISTORY_WINDOW: NO_WINDOW,
        Capability.SUMMARY: NO_WINDOW,
        Capability.STORAGE_OPTIONS: "FileSessionManager writes one JSON file per message: no storage options",
    },
    conversation="frameworks.strands",
    order=9,
    source_modules=("frameworks.strands",),
    asked_through=asked_through,
    owner="Strands Agents",
    owns={
        "loop": "framework: the event loop (event_loop_cycle)",
        "tool invocation": "framework: ConcurrentToolExecutor by default (SequentialToolExecutor here unless parallel)",
        "error handling": "framework: an exception becomes 'Error: <its text>'; an unknown tool 'Unknown tool: X'",
        "step limit": 'limits={"turns": n} (none by default: the looper ran 318 calls to a recursion error)',
        "token budget": 'limits={"total_tokens": n}, checked between turns (soft)',
        "time budget": "nobody (a cancel_signal event is yours to set)",
        "reply cap": "nobody (the model's own max_tokens, if any)",
        "repeat check": "nobody",
        "session memory": "agent.messages (a SlidingWindowConversationManager of 40 messages by default)",
        "persistence": "FileSessionManager (one JSON file per message), S3SessionManager",
        "stale reads": "you",
        "human approval": "HumanInTheLoop intervention: a classifier and an inline ask, or interrupt and resume",
        "tracing (OTel spans)": "the framework: invoke_agent, chat and execute_tool spans (the global tracer provider)",
    },
)
