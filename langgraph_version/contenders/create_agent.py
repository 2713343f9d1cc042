"""LangChain's `create_agent` as a contender (`SPEC`, the entry point ``create-agent``): its built-in
middleware for the call limits, tool errors and approvals (`HumanInTheLoopMiddleware`, which pauses)."""

from __future__ import annotations

from typing import Any

from langgraph_version.contenders.langgraph_defaults import THREAD_LACKS
from shared_tools.contender import Approval, Capability, Contender, ContenderSpec
from shared_tools.results import AgentOptions, Approve


def own_options(options: AgentOptions) -> AgentOptions:
    """create_agent has no switch for parallel tools or for truncating results: that gap is part of the lesson."""
    return AgentOptions(
        tracer_provider=options.tracer_provider,
        limits=options.limits,
        detailed_errors=options.detailed_errors,
        on_event=options.on_event,
        on_token=options.on_token,
        needs_approval=options.needs_approval,
    )


def build(model: Any, tools: list[Any], options: AgentOptions, approve: Approve | None) -> Contender:
    """Gated, `HumanInTheLoopMiddleware` pauses with interrupt(), which needs a checkpointer (a thread swaps in
    its own); `approve` is asked by whoever resumes the thread."""
    from langgraph_version.prebuilt.create_agent import create_agent_contender

    own = own_options(options)
    if options.needs_approval is None:
        return create_agent_contender(model, tools, own)
    from langgraph.checkpoint.memory import InMemorySaver

    return create_agent_contender(model, tools, own, checkpointer=InMemorySaver())


def build_retrying(model: Any, tools: list[Any], options: AgentOptions, approve: Approve | None) -> Contender:
    """create_agent with `ToolRetryMiddleware` retrying a timed-out tool once, at once, with the same call."""
    from langchain.agents.middleware import ToolRetryMiddleware

    from langgraph_version.prebuilt.create_agent import CreateAgentContender

    class Retrying(CreateAgentContender):
        def _middleware(self) -> list[Any]:
            middleware: list[Any] = super()._middleware()
            # Inside the error middleware (which would turn the timeout into a result before a retry sees it)
            # and outside the trace, so the trace shows each attempt.
            retry = ToolRetryMiddleware(max_retries=1, retry_on=(TimeoutError,), initial_delay=0.0, jitter=False)
            middleware.insert(len(middleware) - 1, retry)
            return middleware

    return Retrying(model, tools, own_options(options))


def asked_through(answer: bool) -> str:
    decision = "{'type': 'approve'}" if answer else "{'type': 'reject', 'message': <the reason>}"
    return (
        "HumanInTheLoopMiddleware: the run stopped 'awaiting approval' (interrupt), then "
        "Command(resume={'decisions': [" + decision + "]})"
    )


SPEC = ContenderSpec(
    name="create-agent",
    description="langchain.agents.create_agent with its built-in middleware (call limits, tool errors, "
    "HumanInTheLoopMiddleware for approvals)",
    requirement="langchain>=1.5,<1.6",
    build=build,
    order=4,
    approval=Approval.PAUSES,
    capabilities=frozenset({Capability.STREAMING}),
    guards={
        "step limit": "ModelCallLimitMiddleware",
        "unknown tool": "ToolNode's error result for an unknown tool",
        "error hiding": "ToolErrorMiddleware",
        "approval gate": "HumanInTheLoopMiddleware",
    },
    lacks=THREAD_LACKS,
    conversation="langgraph_version.conversation",
    source_modules=("langgraph_version.prebuilt.create_agent", "langgraph_version.run"),
    asked_through=asked_through,
    owner="create_agent + middleware",
    owns={
        "loop": "framework (prebuilt graph)",
        "tool invocation": "framework: ToolNode",
        "error handling": "re-raises unless you add ToolErrorMiddleware",
        "step limit": "ModelCallLimitMiddleware (none by default; recursion_limit 9,999)",
        "token budget": "nobody (you write middleware)",
        "time budget": "nobody (you write middleware)",
        "reply cap": "nobody (the model's own max_tokens, if any)",
        "repeat check": "nobody (ToolCallLimitMiddleware caps counts, not repeats)",
        "session memory": "checkpointer per thread_id",
        "persistence": "the same checkpointers",
        "stale reads": "you",
        "human approval": "HumanInTheLoopMiddleware (interrupt-based)",
        "tracing (OTel spans)": "the same callbacks, but a call it answers itself (unknown tool, a refused "
        "approval) fires none; the official instrumentation is beta",
    },
    build_retrying=build_retrying,
    retried_by="ToolRetryMiddleware",
)
