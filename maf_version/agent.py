"""`MafAgent`: Microsoft Agent Framework's `Agent` behind the other agents' contract, options in, result out.

MAF runs the tool loop; this file maps `AgentOptions` onto its settings, watches the run through MAF's middleware
(the trace, the cancel) and derives the stop reason. At a limit MAF asks the model once more without tools and
returns that text as if done: such a run is stopped, its text kept as `AgentResult.forced_answer`.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

from agent_framework import (
    Agent,
    AgentResponse,
    AgentSession,
    ChatContext,
    ChatMiddleware,
    ChatResponse,
    Content,
    FunctionInvocationContext,
    FunctionMiddleware,
    InMemoryHistoryProvider,
    Message,
    MiddlewareFailure,
    MiddlewareTermination,
    ResponseStream,
)
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolCall
from langchain_core.tools import BaseTool
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from maf_version.client import LangChainChatClient, kept_reply, maf_tool, result_text, to_langchain
from shared_tools import guards
from shared_tools.adapters import not_honoured, tools_by_name
from shared_tools.conversation import HistoryPolicy
from shared_tools.results import (
    AgentOptions,
    AgentResult,
    Approve,
    Guard,
    NeedsApproval,
    RunStopped,
    RunUsage,
    StopReason,
    Token,
    TokenKind,
    TraceEvent,
)
from shared_tools.steps import InvalidResponse, classify, was_cut
from shared_tools.sync import run_blocking

log = logging.getLogger(__name__)


NO_LIMIT = sys.maxsize
"""What our "no limit" (None) becomes for MAF's settings, which take numbers only."""

PENDING_KEY = "agent_loop_compare_pending"
"""The `AgentSession.state` key of a paused run's approval requests: MAF's own (to answer them, after a restart
too) and which of them wait for the human (the others the rule waved through)."""

NOT_AVAILABLE: dict[str, str] = {
    "max_tokens": "MAF has no token budget: its loop counts model round-trips, tool calls and seconds, never tokens",
    "max_repeats": "MAF has no repeated-call check: the same call with the same arguments runs every time it is asked",
    "max_tool_result_chars": "MAF does not cut tool results for the model (its payload budget is for the host only)",
}
"""Options MAF cannot honour, and why: `MafAgent.not_available` lists the ones a given `AgentOptions` asks for."""


@dataclass(frozen=True)
class MafSettings:
    """Our limits as MAF's `FunctionInvocationConfiguration`, and the hard wall-clock bound MAF lacks."""

    configuration: dict[str, Any]
    hard_timeout: float | None
    """Seconds for one `Agent.run`, enforced around it: MAF checks `max_duration_seconds` only after a tool round,
    so a model call that never returns would hold the run forever."""

    @classmethod
    def of(cls, options: AgentOptions) -> MafSettings:
        limits = options.limits
        configuration: dict[str, Any] = {
            "max_iterations": NO_LIMIT if limits.max_steps is None else limits.max_steps,
            "max_consecutive_errors_per_request": (
                NO_LIMIT if limits.max_consecutive_errors is None else limits.max_consecutive_errors
            ),
            "include_detailed_errors": options.detailed_errors,
            "allow_concurrent_invocation": options.parallel_tools,
        }
        if limits.max_duration is not None:
            configuration["max_duration_seconds"] = limits.max_duration
        return cls(configuration, limits.max_duration)


class MafCancelled(asyncio.CancelledError):
    """The task running `MafAgent.arun` was cancelled. Still a `CancelledError`, so the cancellation is never
    swallowed; `.result` is what the run did. MAF keeps nothing of a run that raised, so the cut turn (the
    question, the replies, a result for every call) is written into the session before this is raised."""

    def __init__(self, result: AgentResult) -> None:
        super().__init__("agent run cancelled")
        self.result = result


class MafAgent:
    """The bookstore agent on MAF's `Agent`, with the same `run`/`arun` -> `AgentResult` as the other agents."""

    def __init__(
        self,
        model: BaseChatModel,
        tools: Sequence[BaseTool],
        options: AgentOptions = AgentOptions(),  # noqa: B008 - frozen, so one shared default is safe
        *,
        approve: Approve | None = None,
    ) -> None:
        """`approve` is the human behind `options.needs_approval`, asked during the run; without one a call that
        needs approval pauses the run (`StopReason.AWAITING_APPROVAL`), answered with `MafSession.resume`.

        MAF gates whole tools (``approval_mode="always_require"``), not calls: the tools the rule may ask about
        (its `tool_names` attribute, if it has one; else every tool) are gated, and each call MAF pauses on is
        put to the rule, which waves most of them through (answered yes at once, without a human).
        """
        self.model = model
        self.options = options
        self.limits = options.limits
        self.approve = approve
        self.tools = tools_by_name(tools)
        self.settings = MafSettings.of(options)
        gated = _gated_tools(options.needs_approval, self.tools)
        self.client = LangChainChatClient(
            model,
            function_invocation_configuration=self.settings.configuration,  # type: ignore[arg-type]
            middleware=[_ModelWatch(), _ToolWatch()],
        )
        self.maf_tools = [maf_tool(tool, needs_approval=tool.name in gated) for tool in tools]
        self._agents: dict[tuple[str, int | None], Agent] = {}

    @property
    def not_available(self) -> dict[str, str]:
        """The options these `AgentOptions` ask for that MAF cannot honour, each with the reason."""
        return not_honoured(NOT_AVAILABLE, self.options)

    def agent_for(self, instructions: str, keep_turns: int | None = None) -> Agent:
        """MAF's `Agent` for these instructions (fixed when it is built) and history window: one per pair. With
        `keep_turns`, its history provider is `WindowedHistory`; without, MAF's own `InMemoryHistoryProvider`."""
        key = (instructions, keep_turns)
        if key not in self._agents:
            providers = None if keep_turns is None else [WindowedHistory(keep_turns)]
            self._agents[key] = Agent(
                client=self.client,
                name="bookstore",
                instructions=instructions,
                tools=list(self.maf_tools),
                context_providers=providers,
            )
        return self._agents[key]

    # --- running -------------------------------------------------------------------------------------------------

    def run(
        self,
        instructions: str,
        goal: str,
        *,
        session: AgentSession | None = None,
        cancel: threading.Event | None = None,
        keep_turns: int | None = None,
    ) -> AgentResult:
        """`arun` for sync callers. Inside a running event loop, await `arun` instead."""
        return run_blocking(
            lambda: self.arun(instructions, goal, session=session, cancel=cancel, keep_turns=keep_turns),
            instead="MafAgent.arun(...)",
        )

    async def arun(
        self,
        instructions: str,
        goal: str,
        *,
        session: AgentSession | None = None,
        cancel: threading.Event | None = None,
        keep_turns: int | None = None,
    ) -> AgentResult:
        """Work on `goal` until MAF's loop returns. `session` continues a conversation (MAF loads its history and
        stores the turn); without one a fresh session is used and dropped. `cancel` is checked before every model
        call and every tool call."""
        agent = self.agent_for(instructions, keep_turns)
        session = session if session is not None else agent.create_session()
        return await self._drive(
            agent, instructions, goal, session, _Run(cancel, self.options, self.settings, frozenset(self.tools))
        )

    async def aresume(
        self,
        instructions: str,
        session: AgentSession,
        approved: bool | Mapping[str, bool],
        *,
        cancel: threading.Event | None = None,
        keep_turns: int | None = None,
    ) -> AgentResult:
        """Answer the approval requests `session` is paused on and let the run go on: one yes or no for all, or
        ``{call id: yes or no}`` naming every request the human was asked. Each answer is MAF's own
        `to_function_approval_response` of the request it names, so a yes approves that call and no other.

        The calls of the paused reply are judged again first, as the guarded graph judges them when it resumes:
        a call the rule waved through at the pause may need a human now (the cart changed while the human
        thought). Such a call is put to `approve`, or the run pauses again and asks about every call that needs a
        human on the cart as it is now: a no given so far stands, a yes is asked again (the record of a pause
        holds no yes, so no edit of a session file can approve a call). ValueError when the session's record of
        the pause is damaged (`paused_run`).
        """
        paused = paused_run(session)
        if paused is None:
            raise RuntimeError("the session is not waiting for an approval")
        asked = paused.asked
        if isinstance(approved, Mapping):
            unknown = set(approved) - set(asked)
            missing = set(asked) - set(approved)
            if unknown or missing:
                raise ValueError(
                    f"answer each pending request by its call id: expected {sorted(asked)}, got {sorted(approved)}"
                )
            answers = {call_id: approved[call_id] is True for call_id in asked}
        else:
            answers = dict.fromkeys(asked, approved is True)
        run = _Run(cancel, self.options, self.settings, frozenset(self.tools))
        # The counters go on from the pause (MAF's own iteration count does too), as a resumed graph's do.
        run.usage.model_calls, run.usage.tool_calls, run.usage.tokens = paused.counts
        # The agent's clock goes on from the pause too, without the human's wait.
        run.usage.started = time.monotonic() - paused.elapsed
        requests = paused.contents()
        responses = self._decide(run, requests, {**dict.fromkeys(paused.refused, False), **answers})
        if responses is None:  # a call the rule let through at the pause needs a human now
            return self._result(instructions, session, run, StopReason.AWAITING_APPROVAL)
        run.answering(requests)
        del session.state[PENDING_KEY]
        agent = self.agent_for(instructions, keep_turns)
        return await self._drive(agent, instructions, Message("user", responses), session, run)

    async def _drive(
        self, agent: Agent, instructions: str, goal: str | Message, session: AgentSession, run: _Run
    ) -> AgentResult:
        """Run MAF until it ends the run, answering the approvals the rule (or `approve`) can answer on the way."""
        token = _RUN.set(run)
        turn: str | Message = goal
        in_maf = False
        try:
            while True:
                in_maf = True
                response = await self._one_run(agent, turn, session, run)
                in_maf = False
                requests = response.user_input_requests
                if not requests:
                    break
                decided = self._decide(run, requests)
                if decided is None:  # a human must answer: the run pauses
                    return self._result(instructions, session, run, StopReason.AWAITING_APPROVAL)
                turn = Message("user", decided)
                run.answering(requests)
        except RunStopped as stop:
            # A cancel before a model call, or mid-stream: MAF raised, so it stored nothing of this run.
            if run.model_in_flight is not None:
                run.usage.model_calls += 1
                run.emit(guards.model_cancelled_event(run.usage.model_calls, time.perf_counter() - run.model_in_flight))
                run.model_in_flight = None
            run.close_open_calls()
            keep_cut_turn(session, run.partial_turn(turn))
            return self._result(instructions, session, run, stop.reason)
        except MiddlewareFailure as failure:
            if isinstance(failure.__cause__, _CallerError):
                raise failure.__cause__.error from None  # the caller's own exception, from on_event
            raise
        except (asyncio.CancelledError, TimeoutError) as exc:
            timed_out = isinstance(exc, TimeoutError) and run.deadline_hit
            if run.model_in_flight is not None and timed_out:
                run.usage.model_calls += 1
                run.emit(guards.model_timeout_event(run.usage.model_calls, time.perf_counter() - run.model_in_flight))
            run.close_open_calls(timed_out=timed_out)
            keep_cut_turn(session, run.partial_turn(turn, timed_out=timed_out))  # MAF keeps nothing of a raised run
            reason = StopReason.TIME_BUDGET if timed_out else StopReason.CANCELLED
            result = self._result(instructions, session, run, reason)
            if timed_out:
                return result
            raise MafCancelled(result) from None
        except Exception:
            # A model call that failed (a server gone, a refused request): MAF raised, so it stored nothing of
            # this run. What the run did is kept, cut short, as a cancel keeps it: a turn whose add landed is not
            # lost, and a resumed run's answered calls keep their results. The failure is the caller's to see.
            # (An exception of `approve`, between two runs of MAF, leaves what MAF stored as it is.)
            if in_maf:
                run.model_in_flight = None
                keep_cut_turn(session, run.partial_turn(turn))
            raise
        finally:
            _RUN.reset(token)
        run.reconcile(response.messages)
        return self._result(instructions, session, run, run.stop_reason(response), response=response)

    async def _one_run(self, agent: Agent, turn: str | Message, session: AgentSession, run: _Run) -> AgentResponse:
        """One `Agent.run`, bounded by what is left of the time budget (the bound MAF does not have)."""
        left = self.limits.time_left(run.usage)
        if left is None:
            return await self._ask(agent, turn, session, run)
        try:
            async with asyncio.timeout(max(left, 0.0)) as deadline:
                return await self._ask(agent, turn, session, run)
        except TimeoutError:
            run.deadline_hit = deadline.expired()
            raise

    async def _ask(self, agent: Agent, turn: str | Message, session: AgentSession, run: _Run) -> AgentResponse:
        """`Agent.run`; streamed with `on_token`: each plan and text piece of a reply is handed on as it comes, and
        a cancel it sets cuts the reply there (MAF then keeps nothing of the run; the cut turn is kept for it)."""
        on_token = self.options.on_token
        if on_token is None:
            return await agent.run(turn, session=session)
        stream = agent.run(turn, session=session, stream=True)
        async for update in stream:
            if str(update.role) != "assistant":
                continue
            step = run.usage.model_calls + 1
            for content in update.contents:
                if content.type in ("text", "text_reasoning") and content.text:
                    kind = TokenKind.ANSWER if content.type == "text" else TokenKind.PLAN
                    on_token(Token(str(content.text), kind, step))  # the caller's code: not ours to hide
            if run.check_cancel():
                raise RunStopped(StopReason.CANCELLED)
        return await stream.get_final_response()

    def _decide(
        self, run: _Run, requests: Sequence[Content], answers: Mapping[str, bool] | None = None
    ) -> list[Content] | None:
        """The answers to MAF's approval requests, or None when the human must be asked later.

        A call the human has answered (`answers`, at a resume) gets that answer. Every other call is put to the
        rule with the calls of its reply before it that will run, so 4 + 3 copies of one book ask about the
        second add too. A call the rule waves through is approved at once; with `approve`, the human is asked
        now, in call order; without, the run pauses (`_questions`).
        """
        rule = self.options.needs_approval
        answers = answers or {}
        responses: list[Content] = []
        earlier: list[ToolCall] = []
        must_ask = False
        for request in requests:
            call = request_call(request)
            if call["id"] in answers:
                yes = answers[call["id"]]
                log.info("approval for %s (the human's answer): %s", call["name"], "yes" if yes else "no")
            else:
                reason = None if rule is None else rule(call, list(earlier))
                if reason is None:
                    yes = True
                elif self.approve is None:
                    must_ask = True
                    break
                else:
                    waited = time.monotonic()
                    yes = self.approve(call, reason)
                    run.usage.started += time.monotonic() - waited  # the human's time is not the agent's
                    log.info("approval for %s (%s): %s", call["name"], reason, "yes" if yes else "no")
            if yes:
                earlier.append(call)
            else:
                run.refused.add(call["id"])
            responses.append(request.to_function_approval_response(approved=yes))
        if not must_ask:
            return responses
        run.refused.clear()  # nothing is answered yet: the run pauses before any answer reaches MAF
        refused = [c["id"] for c in map(request_call, requests) if answers.get(c["id"]) is False]
        asked = self._questions(requests, set(refused))
        calls = [request_call(r) for r in requests]
        run.pending = [{"tool_call": c, "reason": asked[c["id"]]} for c in calls if c["id"] in asked]
        run.paused = PausedRun(
            requests=[r.to_dict() for r in requests],
            asked=asked,
            refused=refused,
            counts=[run.usage.model_calls, run.usage.tool_calls, run.usage.tokens],
            elapsed=run.usage.elapsed,
        ).model_dump()
        return None

    def _questions(self, requests: Sequence[Content], refused: set[str]) -> dict[str, str]:
        """Call id -> reason, for each call of a pause that needs a human: every call but the refused ones is put to
        the rule with all the others before it counted as run (the cautious reading of a pause that asks about
        several at once)."""
        rule = self.options.needs_approval
        asked: dict[str, str] = {}
        earlier: list[ToolCall] = []
        for call in map(request_call, requests):
            if call["id"] in refused:
                continue
            if rule is not None and (reason := rule(call, list(earlier))) is not None:
                asked[call["id"]] = reason
            earlier.append(call)
        if not asked:
            raise RuntimeError("the approval rule asked about a call, then about none of the same calls")
        return asked

    def _result(
        self,
        instructions: str,
        session: AgentSession,
        run: _Run,
        reason: StopReason,
        *,
        response: AgentResponse | None = None,
    ) -> AgentResult:
        if run.paused is not None:
            session.state[PENDING_KEY] = run.paused
        answer = forced = None
        if response is not None:
            text = str(response.text).strip()
            if reason is StopReason.DONE:
                answer = text
            elif run.forced_by is not None and run.unusable is None:
                forced = text
        messages = history_of(instructions, session)
        usage = run.usage
        log.info(
            "stop: %s after %d step(s), %d tool call(s), %d tokens",
            reason,
            usage.model_calls,
            usage.tool_calls,
            usage.tokens,
        )
        result = AgentResult.of_run(
            reason, usage, answer=answer, trace=list(run.trace), messages=messages, pending=run.pending or None
        )
        result.forced_answer = forced
        return result


class WindowedHistory(InMemoryHistoryProvider):
    """MAF's in-memory history, stored whole, of which the model is sent the last `keep_turns` user turns (the
    question being asked among them), each with everything that followed it (`shared_tools.history`'s window).

    A turn paused for an approval is the one being answered when the run resumes: it is kept as the current one.
    """

    def __init__(self, keep_turns: int) -> None:
        HistoryPolicy(keep_turns)  # refuses a window of no turns
        super().__init__()  # the default source id: the session's state holds the history where it always does
        self.keep_turns = keep_turns

    async def get_messages(
        self, session_id: str | None, *, state: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[Message]:
        stored = await super().get_messages(session_id, state=state, **kwargs)
        starts = [i for i, message in enumerate(stored) if starts_turn(message)]
        paused = bool(stored) and any(c.type == "function_approval_request" for c in stored[-1].contents)
        earlier = self.keep_turns if paused else self.keep_turns - 1  # the turns sent besides the current one
        if len(starts) <= earlier:
            return stored
        return stored[starts[len(starts) - earlier] :] if earlier else []


def starts_turn(message: Message) -> bool:
    """A user message with text: a question (an approval answer is a user message too, but no turn)."""
    return str(message.role) == "user" and any(c.type == "text" and c.text for c in message.contents)


def history_of(instructions: str, session: AgentSession) -> list[BaseMessage]:
    """The session's conversation as langchain-core messages, system message first (as the other agents give it)."""
    stored = session.state.get(InMemoryHistoryProvider.DEFAULT_SOURCE_ID, {}).get("messages", [])
    return [SystemMessage(instructions), *to_langchain(stored)]


MAF_APPROVAL_STATE = "tool_approval"
MAF_PENDING_REQUESTS = "pending_approval_requests"
MAF_APPROVED_GROUPS = "already_approved_approval_request_groups"
"""Where MAF keeps, in `AgentSession.state`, the approval requests it surfaced (`agent_framework._tools`): it binds
each answer to its copy there and runs the call that copy names; and the calls of the paused round it may run
without asking (approved already), which our pauses never have."""


class PausedRun(BaseModel):
    """A paused run's record in `AgentSession.state[PENDING_KEY]`, and so in a saved session file: checked whole
    (`paused_run`) before a resume trusts any of it."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    requests: list[dict[str, Any]] = Field(min_length=1)
    """MAF's approval requests (`Content.to_dict`), in the reply's call order: every call of the paused round."""
    asked: dict[str, str] = Field(min_length=1)
    """Call id -> why the human is asked, for each request waiting for the human."""
    refused: list[str] = Field(default_factory=list)
    """Calls the human said no to at a resume that paused again (`MafAgent.aresume`); a yes is never kept."""
    counts: list[Annotated[int, Field(ge=0)]] = Field(min_length=3, max_length=3)
    """Model calls, tool calls and tokens at the pause."""
    elapsed: float = Field(ge=0, allow_inf_nan=False)
    """The agent's seconds at the pause, without the human's wait."""

    @model_validator(mode="after")
    def _names_its_own_calls(self) -> PausedRun:
        ids = [request_call(request)["id"] for request in self.contents()]
        if len(set(ids)) != len(ids):
            raise ValueError("two approval requests name the same call")
        if unknown := sorted((set(self.asked) | set(self.refused)) - set(ids)):
            raise ValueError(f"answers or questions for calls the paused reply does not have: {unknown}")
        if both := sorted(set(self.asked) & set(self.refused)):
            raise ValueError(f"calls both refused and still asked about: {both}")
        return self

    def contents(self) -> list[Content]:
        return [approval_request(data) for data in self.requests]


def approval_request(data: object) -> Content:
    """A MAF approval request from its stored form; ValueError when it is not one that names a call."""
    try:
        request = Content.from_dict(data)  # type: ignore[arg-type]
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"not an approval request ({type(exc).__name__}: {exc})") from None
    call = request.function_call if request.type == "function_approval_request" else None
    if call is None or call.type != "function_call" or not isinstance(request.id, str):
        raise ValueError(f"not an approval request that names a call: {str(data)[:200]}")
    if not isinstance(call.call_id, str) or not call.call_id or not isinstance(call.name, str) or not call.name:
        raise ValueError(f"an approval request without a call id or tool name: {str(data)[:200]}")
    return request


def paused_run(session: AgentSession) -> PausedRun | None:
    """The record of the pause `session` waits on, None when it waits on none; ValueError when the record is
    damaged, or when MAF's own approval state (which says what MAF runs on a yes, and may run calls it holds as
    approved already) is not the one that pause left: other calls, or any call no human and no rule approved."""
    state = session.state.get(MAF_APPROVAL_STATE)
    if state is not None and not isinstance(state, dict):
        raise ValueError(f"MAF's approval state is a {type(state).__name__}, not an object")
    if PENDING_KEY not in session.state:
        if state and any(state.values()):
            raise ValueError("MAF's approval state holds requests that no pause of this session asked about")
        return None
    try:
        paused = PausedRun.model_validate(session.state[PENDING_KEY])
    except ValidationError as exc:
        wrong = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'record'}: {e['msg']}" for e in exc.errors()[:3])
        raise ValueError(f"the record of the paused run is damaged ({wrong})") from None
    _check_maf_state(state or {}, paused)
    return paused


def _check_maf_state(state: dict[str, Any], paused: PausedRun) -> None:
    """MAF's approval state as a pause of ours leaves it: its requests are ours, call for call, and it holds no
    call as approved already (we never give MAF one: every call of a gated tool is put to the rule first)."""
    if unknown := sorted(set(state) - {MAF_PENDING_REQUESTS, MAF_APPROVED_GROUPS}):
        raise ValueError(f"MAF's approval state holds more than a pause leaves: {unknown}")
    kept = state.get(MAF_PENDING_REQUESTS)
    if not isinstance(kept, list):
        raise ValueError("the session holds a paused run but not MAF's own approval requests")
    ours = {request.id: request.function_call.to_dict() for request in paused.contents()}  # type: ignore[union-attr]
    maf = {request.id: request.function_call.to_dict() for request in map(approval_request, kept)}  # type: ignore[union-attr]
    if maf != ours or len(maf) != len(kept) or len(ours) != len(paused.requests):
        raise ValueError("the record of the paused run names other calls than MAF's own approval requests")
    order = {(request_id, call["call_id"]) for request_id, call in ours.items()}
    groups = state.get(MAF_APPROVED_GROUPS, [])
    for group in groups if isinstance(groups, list) else [groups]:
        if (
            not isinstance(group, dict)
            or group.get("approval_requests") != []
            or not isinstance(ids := group.get("approval_request_ids"), list)
            or not set(map(str, ids)) <= set(ours)
            or not isinstance(calls := group.get("function_call_order"), list)
            or not all(isinstance(c, dict) and (c.get("id"), c.get("call_id")) in order for c in calls)
        ):
            raise ValueError("MAF's approval state holds calls as approved that no human and no rule approved")


def keep_cut_turn(session: AgentSession, messages: list[Message]) -> None:
    """Store a cut turn in the session's history, as MAF would have stored a finished one."""
    state = session.state.setdefault(InMemoryHistoryProvider.DEFAULT_SOURCE_ID, {})
    state["messages"] = [*state.get("messages", []), *messages]


def _gated_tools(rule: NeedsApproval | None, tools: Mapping[str, BaseTool]) -> set[str]:
    if rule is None:
        return set()
    names = getattr(rule, "tool_names", None)
    return set(tools) if names is None else set(names) & set(tools)


def request_call(request: Content) -> ToolCall:
    call = request.function_call
    if call is None or not call.call_id:
        raise ValueError("an approval request names the call it is about")
    return ToolCall(name=call.name or "", args=call.parse_arguments() or {}, id=call.call_id, type="tool_call")


# --- watching the run ---------------------------------------------------------------------------------------


class _CallerError(Exception):
    """Carries an exception of the caller's `on_event` through MAF, which would turn it into a tool result."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(repr(error))
        self.error = error


@dataclass
class _Run:
    """What one run (one `arun` or `aresume`) has seen: its trace, counts, open calls, and why MAF forced an end."""

    cancel: threading.Event | None
    options: AgentOptions
    settings: MafSettings
    tool_names: frozenset[str]
    usage: RunUsage = field(default_factory=RunUsage)
    trace: list[TraceEvent] = field(default_factory=list)
    steps: dict[str, int] = field(default_factory=dict)
    """Call id -> the step (model call) whose reply asked for it."""
    calls: dict[str, ToolCall] = field(default_factory=dict)
    traced: set[str] = field(default_factory=set)
    """Calls that have their trace line."""
    round_open: bool = False
    """A tool round has been answered since the last model call."""
    round_errors: bool = False
    """The tool round in progress has an error result (MAF counts such rounds in a row)."""
    model_in_flight: float | None = None
    """`time.perf_counter()` when the model call in progress started."""
    refused: set[str] = field(default_factory=set)
    """Calls the human said no to: MAF answers them itself ("rejected by user")."""
    running: dict[str, Content] = field(default_factory=dict)
    """Calls whose tool has started, by id, and the call."""
    results: dict[str, Content] = field(default_factory=dict)
    """The results of the round in progress, for a turn cut off mid-round."""
    transcript: list[Message] = field(default_factory=list)
    """The run's messages so far (what the model was sent after the question, and its last reply)."""
    resumed: list[Content] = field(default_factory=list)
    """A resumed run: the paused calls it answers first, the open round until its first model call."""
    start: int | None = None
    forced_by: StopReason | None = None
    deadline_hit: bool = False
    pending: list[dict[str, Any]] = field(default_factory=list)
    paused: dict[str, Any] | None = None
    unusable: str | None = None
    """Why the last reply is unusable (`steps.InvalidResponse`: cut off, only unparsable calls, empty), or None:
    none of its calls reached MAF (`client.reply_message`), and the run stops on it."""

    def answering(self, requests: Sequence[Content]) -> None:
        """The next `Agent.run` begins with the answers to `requests`: MAF stored the runs before it, so what a cut
        turn keeps of it starts at the results of these calls (`first_new`), never again at the question."""
        self.start = None
        self.resumed = []
        for request in requests:
            call = request_call(request)
            self.calls[call["id"]] = call
            self.steps.setdefault(call["id"], self.usage.model_calls)
            self.resumed.append(Content.from_function_call(call["id"], call["name"], arguments=call["args"]))

    def first_new(self, messages: Sequence[Message]) -> int:
        """Where this run's own messages begin in what its first model call is sent: after the history, or, in a
        resumed run, at the results of the calls it was paused on (answered before that call)."""
        resumed = {c.call_id for c in self.resumed}
        for at, message in enumerate(messages):
            if any(c.type == "function_result" and c.call_id in resumed for c in message.contents):
                return at
        return len(messages)

    def check_cancel(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()

    def emit(self, event: TraceEvent) -> None:
        self.trace.append(event)
        if log.isEnabledFor(logging.INFO):
            log.info("%s", event.line())
        if self.options.on_event is not None:
            try:
                self.options.on_event(event)
            except Exception as exc:  # the caller's code: raised again from arun, not hidden in a tool result
                raise MiddlewareFailure("on_event raised") from _CallerError(exc)

    # --- model calls ---

    def model_done(self, response: ChatResponse | None, started: float) -> None:
        """A model call returned `response`: its reply joins the transcript and gets its trace line."""
        self.model_in_flight = None
        message = next((m for m in getattr(response, "messages", []) if str(m.role) == "assistant"), None)
        converted = to_langchain([message]) if message is not None else []
        reply = converted[0] if converted and isinstance(converted[0], AIMessage) else AIMessage("")
        kept = kept_reply(response) if response is not None else None
        step = classify(kept if kept is not None else reply)
        self.unusable = step.reason if isinstance(step, InvalidResponse) else None
        if kept is not None:  # what MAF was not given of the reply, for its trace line to say
            if was_cut(kept):
                reply.response_metadata["finish_reason"] = "length"
            reply.invalid_tool_calls = list(kept.invalid_tool_calls)
        usage = getattr(response, "usage_details", None) or {}
        reply.usage_metadata = {
            "input_tokens": usage.get("input_token_count") or 0,
            "output_tokens": usage.get("output_token_count") or 0,
            "total_tokens": usage.get("total_token_count") or 0,
        }
        if message is not None:
            self.transcript.append(message)
        self.model_called(reply, time.perf_counter() - started)
        if self.unusable is not None:
            log.warning("[step %d] invalid model response: %s", self.usage.model_calls, self.unusable)

    def model_called(self, reply: AIMessage, duration: float) -> None:
        self.usage.model_calls += 1
        step = self.usage.model_calls
        self.results.clear()
        for call in reply.tool_calls:
            self.steps[call["id"]] = step
            self.calls[call["id"]] = call
        event = guards.model_event(step, reply, duration)
        self.usage.tokens += event.tokens
        self.emit(event)

    def close_round(self) -> None:
        """Count the tool round answered since the last model call, as MAF does: an error in it or not."""
        if self.round_open:
            self.usage.end_round(self.round_errors)
        self.round_open = self.round_errors = False

    def over_max_steps(self) -> bool:
        """Whether a call with tools on would pass max_steps: each approval MAF pauses on ends one `Agent.run` and
        its answer starts another, so MAF's iteration count alone lets a model that keeps asking go on forever."""
        max_steps = self.options.limits.max_steps
        return max_steps is not None and self.usage.model_calls >= max_steps

    def forced(self) -> StopReason:
        """Why MAF disabled the tools for the call about to be made: in `AgentLimits.check`'s order."""
        limits = self.options.limits
        config = self.settings.configuration
        if self.usage.error_rounds >= config["max_consecutive_errors_per_request"]:
            return StopReason.TOO_MANY_ERRORS
        if limits.max_duration is not None and self.usage.elapsed >= limits.max_duration:
            return StopReason.TIME_BUDGET
        if self.usage.model_calls >= config["max_iterations"]:
            return StopReason.MAX_STEPS
        raise RuntimeError(
            f"MAF disabled the tools after {self.usage.model_calls} model call(s) and "
            f"{self.usage.error_rounds} error round(s) in a row, and no limit of this run explains it"
        )

    # --- tool calls ---

    def tool_answered(self, call: ToolCall, text: str, duration: float, *, is_error: bool, guard: Guard | None) -> None:
        self.traced.add(call["id"])
        self.usage.tool_calls += 1
        self.round_open = True
        self.round_errors |= is_error
        self.emit(
            guards.tool_event(
                self.steps.get(call["id"], self.usage.model_calls), call, text, duration, is_error=is_error, guard=guard
            )
        )

    def reconcile(self, messages: Sequence[Message]) -> None:
        """A trace line for each result MAF wrote itself, without running a tool (no middleware saw it): an
        unknown tool, a refused approval."""
        for message in messages:
            for content in message.contents:
                if content.type != "function_result" or not content.call_id or content.call_id in self.traced:
                    continue
                call = self.calls.get(content.call_id)
                if call is None:
                    continue  # a call of an earlier run (a resumed one) that ran there
                guard = Guard.APPROVAL_REFUSED if call["id"] in self.refused else None
                if guard is None and call["name"] not in self.tool_names:
                    guard = Guard.UNKNOWN_TOOL
                # MAF's result for a refused call carries no exception; it is an error result all the same.
                is_error = content.exception is not None or guard is Guard.APPROVAL_REFUSED
                self.tool_answered(call, result_text(content), 0.0, is_error=is_error, guard=guard)

    def close_open_calls(self, *, timed_out: bool = False) -> None:
        """The trace lines of a round cut off by a cancel or the time budget (the handwritten loop's rule)."""
        for call_id, call in self.calls.items():
            if call_id in self.traced or call_id not in self.open_ids():
                continue
            if call_id in self.refused:  # the human's no, which MAF would have answered had it got that far
                self.tool_answered(call, MAF_REJECTED, 0.0, is_error=True, guard=Guard.APPROVAL_REFUSED)
                continue
            text = _cut_text(call_id in self.running, timed_out=timed_out)
            guard = Guard.TOOL_TIMEOUT if timed_out else Guard.CANCELLED
            self.tool_answered(call, text, 0.0, is_error=True, guard=guard)

    def _last_round(self) -> tuple[list[Content], set[str]]:
        """The calls of the last reply in the transcript, and the ids of those the transcript already answers."""
        at = next(
            (i for i in range(len(self.transcript) - 1, -1, -1) if str(self.transcript[i].role) == "assistant"), None
        )
        if at is None:  # no reply yet: a resumed run's open round is the calls it was paused on
            answered = {c.call_id for m in self.transcript for c in m.contents if c.type == "function_result"}
            return list(self.resumed), {call_id for call_id in answered if call_id}
        calls = [c for c in self.transcript[at].contents if c.type == "function_call" and c.call_id]
        answered = {
            c.call_id
            for m in self.transcript[at + 1 :]
            for c in m.contents
            if c.type == "function_result" and c.call_id
        }
        return calls, answered

    def open_ids(self) -> list[str]:
        """Calls of the last reply with no result yet."""
        calls, answered = self._last_round()
        return [c.call_id for c in calls if c.call_id not in answered and c.call_id not in self.results]

    def partial_turn(self, turn: str | Message, *, timed_out: bool = False) -> list[Message]:
        """The cut turn as MAF messages: the question, what the run produced, a result for every open call."""
        # The question, or the approval answers a resumed run began with (MAF stores them, and they mark the
        # results of the refused calls as errors: `client.to_langchain`).
        question = [Message("user", [turn])] if isinstance(turn, str) else [turn]
        calls, answered = self._last_round()
        tail: list[Content] = []
        for content in calls:
            if content.call_id in answered:
                continue
            done = self.results.get(content.call_id)
            if done is None and content.call_id in self.refused:
                done = Content.from_function_result(content.call_id, result=MAF_REJECTED)
            if done is None:
                text = _cut_text(content.call_id in self.running, timed_out=timed_out)
                done = Content.from_function_result(content.call_id, result=text, exception="cancelled")
            tail.append(done)
        return [*question, *self.transcript, *([Message("tool", tail)] if tail else [])]

    def stop_reason(self, response: AgentResponse) -> StopReason:
        """Why a run MAF returned from ended: a forced last call, a cancel that ended the loop, or the reply."""
        if self.forced_by is not None:
            return self.forced_by
        if self.check_cancel() and self.usage.model_calls and _ends_with_tool_results(response):
            return StopReason.CANCELLED
        # An unusable reply's text is no answer: half of one (cut off), or a preamble to calls that did not parse.
        if self.unusable is not None or not str(response.text).strip():
            return StopReason.INVALID_RESPONSE
        return StopReason.DONE


def _cut_text(running: bool, *, timed_out: bool) -> str:
    """What a call cut off mid-round is answered: by the time budget (it may have completed) or by a cancel."""
    if timed_out:
        return guards.TOOL_CUT_RUNNING_TEXT if running else guards.TOOL_CUT_UNSTARTED_TEXT
    return guards.CANCELLED_WHILE_RUNNING_TEXT if running else guards.CANCELLED_CALL_TEXT


def _ends_with_tool_results(response: AgentResponse) -> bool:
    return bool(response.messages) and str(response.messages[-1].role) == "tool"


_RUN: contextvars.ContextVar[_Run | None] = contextvars.ContextVar("maf_run", default=None)


def _this_run() -> _Run | None:
    return _RUN.get()


class _ModelWatch(ChatMiddleware):
    """Around each model call: the cancel check, the forced last call noticed, the trace line with its tokens."""

    async def process(self, context: ChatContext, call_next: Callable[[], Awaitable[None]]) -> None:
        run = _this_run()
        if run is None:
            await call_next()
            return
        if run.check_cancel():
            raise RunStopped(StopReason.CANCELLED)
        run.reconcile(context.messages)
        run.close_round()
        forced = context.options.get("tool_choice") == "none"
        if forced and run.forced_by is None:
            run.forced_by = run.forced()
        if run.start is None:
            run.start = run.first_new(context.messages)
        run.transcript = list(context.messages[run.start :])
        if not forced and run.over_max_steps():
            raise RunStopped(StopReason.MAX_STEPS)
        started = run.model_in_flight = time.perf_counter()
        await call_next()
        result = context.result
        if isinstance(result, ResponseStream):
            # Streamed: the reply is whole when MAF's loop finalizes the stream, once per model call.
            def finished(response: ChatResponse) -> ChatResponse:
                run.model_done(response, started)
                return response

            result.with_result_hook(finished)
            return
        run.model_done(result, started)


class _ToolWatch(FunctionMiddleware):
    """Around each tool call MAF runs: the cancel check (a cancelled call ends MAF's loop gracefully, with an
    error result, so MAF keeps the turn), and the trace line with the text MAF gives the model."""

    async def process(self, context: FunctionInvocationContext, call_next: Callable[[], Awaitable[None]]) -> None:
        run = _this_run()
        call_id = context.metadata.get("call_id")
        if run is None or not isinstance(call_id, str):
            await call_next()
            return
        call = run.calls.get(call_id) or ToolCall(
            name=context.function.name, args=dict(context.arguments or {}), id=call_id, type="tool_call"
        )
        if run.check_cancel():
            result = Content.from_function_result(call_id, result=guards.CANCELLED_CALL_TEXT, exception="cancelled")
            run.results[call_id] = result
            run.tool_answered(call, guards.CANCELLED_CALL_TEXT, 0.0, is_error=True, guard=Guard.CANCELLED)
            raise MiddlewareTermination("cancelled", result=result)
        detailed = bool(run.options.detailed_errors)
        invalid = _invalid_arguments(context)
        started = time.perf_counter()
        run.running[call_id] = Content.from_function_call(call_id, call["name"])
        try:
            await call_next()
        except (MiddlewareFailure, MiddlewareTermination):
            raise
        except Exception as exc:
            text, guard = maf_error_text(exc, detailed=detailed, invalid_arguments=invalid)
            run.running.pop(call_id, None)
            run.results[call_id] = Content.from_function_result(call_id, result=text, exception=str(exc))
            run.tool_answered(call, text, time.perf_counter() - started, is_error=True, guard=guard)
            raise
        run.running.pop(call_id, None)
        text = result_text(Content.from_function_result(call_id, result=context.result))
        run.results[call_id] = Content.from_function_result(call_id, result=text)
        run.tool_answered(call, text, time.perf_counter() - started, is_error=False, guard=None)
        if run.check_cancel():  # set by on_event of this very line: no more model calls
            raise MiddlewareTermination("cancelled", result=run.results[call_id])


def _invalid_arguments(context: FunctionInvocationContext) -> bool:
    """Whether MAF's own validation (the tool's input model) will refuse these arguments."""
    model = getattr(context.function, "input_model", None)
    if model is None:
        return False
    try:
        model.model_validate(dict(context.arguments or {}))
    except (ValidationError, TypeError, ValueError):
        return True
    return False


MAF_FAILED = "Error: Function failed."
MAF_REJECTED = "Error: Tool call invocation was rejected by user."
"""MAF's result for a call whose approval was refused (`agent_framework._tools`)."""
MAF_BAD_ARGUMENTS = "Error: Argument parsing failed."


def maf_error_text(exc: Exception, *, detailed: bool, invalid_arguments: bool) -> tuple[str, Guard | None]:
    """The text MAF gives the model for a tool call that raised, and the guard that decided it.

    MAF's words (`agent_framework._tools`): every exception, a `ToolException` too, is "Error: Function
    failed."; bad arguments are "Error: Argument parsing failed."; `include_detailed_errors` appends
    " Exception: <its text>". The tests check these against what the model was actually sent.
    """
    base = MAF_BAD_ARGUMENTS if invalid_arguments else MAF_FAILED
    text = f"{base} Exception: {exc}" if detailed else base
    if invalid_arguments:
        return text, Guard.INVALID_ARGS
    return text, None if detailed else Guard.ERROR_HIDDEN
