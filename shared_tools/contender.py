"""What a contender declares about itself: `ContenderSpec`, read by the harness through the entry-point group
`ENTRY_POINT_GROUP`, so a new agent is one file and one line of `pyproject.toml` (`comparison.contenders` loads them).

At the ground floor so an agent can declare itself without importing the harness (agents sit below it).
How a framework file declares itself is in `ContenderSpec`'s docstring.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

from shared_tools.results import AgentOptions, AgentResult, Approve

if TYPE_CHECKING:  # the spec modules stay cheap to import: no LangChain at `--list` and `--help`
    from langchain_core.language_models import BaseChatModel
    from langchain_core.tools import BaseTool

ENTRY_POINT_GROUP = "agent_loop_compare.contenders"
"""The entry-point group every contender is declared in: name = the contender's name, value = "module:SPEC"."""


class Contender(Protocol):
    """What the harness needs of a built agent: one goal in, one result out (typed `StopReason`, a trace).

    Optional: `not_available`, a dict of option -> why the agent cannot honour it, noted on every record."""

    def run(self, instructions: str, goal: str) -> AgentResult: ...


Build = Callable[["BaseChatModel", "list[BaseTool]", AgentOptions, "Approve | None"], Contender]
"""`build(model, tools, options, approve) -> Contender`: imports its framework inside, not at module level."""


class Approval(StrEnum):
    """How a contender puts a risky write to a human (`AgentOptions.needs_approval` says which calls are risky)."""

    NONE = "none"
    """No gate: the approval variants are not run by it, and `lacks[Capability.APPROVAL]` says why."""
    ASKS = "asks"
    """It calls `approve(call, reason)` inside its own run and goes on (the hand-written loop); a bool at once,
    unless the spec says `awaits_approve`."""
    PAUSES = "pauses"
    """Its run stops with `StopReason.AWAITING_APPROVAL` and `result.pending` in its conversation; the harness
    answers each request through the conversation's `aresume` (the graphs). Needs a `conversation`."""


class Capability(StrEnum):
    """What a scenario variant may need of a contender; a contender without one is "not run" with its sentence."""

    APPROVAL = "approval"
    CONVERSATIONS = "conversations"
    REWIND = "rewind"
    REPLAY = "replay"
    STREAMING = "streaming"
    SEQUENTIAL_TOOLS = "sequential tools"
    HISTORY_WINDOW = "history window"
    SUMMARY = "summary"
    STORAGE_OPTIONS = "storage options"


@dataclass(frozen=True)
class ContenderSpec:
    """Everything the harness needs to know of one contender; one module holds one, as the entry point's value.

    A contender's module (here a made-up ``my_agent.py`` on a framework ``my-framework``) holds its bridge and,
    at module level::

        SPEC = ContenderSpec(
            name="my-agent",                           # the entry point's name too; lower case, '-' between words
            description="My framework's agent: ...",   # one line, shown by --help, --list, the page, the report
            requirement="my-framework==1.2.0",         # exact pin, also in pyproject.toml's dependencies
            build=build,                               # build(model, tools, options, approve) -> Contender
            order=10,                                  # its place among this project's own (an outside one's: last)
            approval=Approval.ASKS,                    # NONE, ASKS (calls `approve` in its run) or PAUSES
            capabilities=frozenset({Capability.STREAMING, Capability.SEQUENTIAL_TOOLS}),
            guards={"step limit": "Agent(max_steps=)", "time budget": "run(timeout=)"},
            lacks={Capability.REWIND: "my framework's history ...", ...},  # a sentence per one it lacks
            conversation="my_agent",                   # module with aopen_conversation/acheck_saved, or None
            source_modules=("my_agent",),
        )

    and in ``pyproject.toml``::

        [project.entry-points."agent_loop_compare.contenders"]
        my-agent = "my_agent:SPEC"

    `build` gets `AgentOptions` (limits, on_event, on_token, needs_approval, tracer_provider...), LangChain tools
    and a LangChain chat model (the scripted model offline), and returns an object with ``run(instructions,
    goal) -> AgentResult``; it imports its framework inside (the spec module is imported by ``--help``). With
    approval ASKS it answers ``approve(call, reason)`` for each call `options.needs_approval` names; with PAUSES
    it ignores `approve`: its conversation's `aask` stops AWAITING_APPROVAL and `aresume(answers)` goes on.

    `guards`: the guards of the matrix it claims (the row names: "step limit", "token budget", "time budget",
    "reply cap", "repeat check", "unknown tool", "error hiding", "truncation", "stale read", "approval gate") ->
    the framework's own name for it. The matrix still says what the records show; a test fails when the runs
    contradict a claim (the cell says "missing").

    `conversation`: the module keeping its multi-turn conversations, with
    ``async aopen_conversation(agent, instructions, thread_id, db, *, resume, **opening) ->
    shared_tools.conversation.Conversation`` (`opening`: the keywords of `shared_tools.conversation.Opening`,
    customer_id, approve, policy, storage) and ``async acheck_saved(db, thread_id, customer_id)``;
    None, and `lacks[Capability.CONVERSATIONS]` says why. Each `Capability` not in `capabilities` needs its
    sentence in `lacks` (said in the tables as the reason it did not run); CONVERSATIONS is implied by
    `conversation`, APPROVAL by `approval`.
    """

    name: str
    description: str
    requirement: str
    """The pinned requirement its framework needs ("my-framework==1.2.0"; "" for our own code)."""
    build: Build
    order: int | None = None
    """Its place in the tables among this project's own contenders (pyproject.toml's entry points): 1 first.
    An outside package's contenders come after ours, by name, whatever they say here."""
    approval: Approval = Approval.NONE
    awaits_approve: bool = False
    """With `Approval.ASKS`: its run awaits an `approve` answer that is awaitable (`AsyncApprove`), so a prompt in
    the run's own event loop can ask; otherwise `approve` returns a bool when called."""
    capabilities: frozenset[Capability] = frozenset()
    """Besides APPROVAL (from `approval`) and CONVERSATIONS (from `conversation`): what it has."""
    guards: Mapping[str, str] = field(default_factory=dict)
    lacks: Mapping[Capability, str] = field(default_factory=dict)
    conversation: str | None = None
    source_modules: tuple[str, ...] = ()
    """The modules its agent is built from: where its streaming code, if any, is counted."""
    asked_through: Callable[[bool], str] | None = None
    """How a human's answer reached the run (answer -> words, for the approval scenario's facts)."""
    owner: str | None = None
    """Its column in the closing "who owns what" table (None: it shares another contender's column)."""
    owns: Mapping[str, str] = field(default_factory=dict)
    """Row of that table ("loop", "tool invocation", ...) -> who owns it in this framework."""
    build_retrying: Build | None = None
    """The same agent with its framework's own retry of a failed tool call (the retry experiment), if it has one."""
    retried_by: str | None = None
    """The name of that retry ("ToolRetryMiddleware")."""
    shared_thread: bool = False
    """Its session-scenario threads are named without the contender's name (the two whose file names predate
    the registry); every other contender's thread names end in its own name."""

    def has(self, capability: Capability) -> bool:
        """Whether the contender has `capability` (approval and conversations from their own fields)."""
        if capability is Capability.APPROVAL:
            return self.approval is not Approval.NONE
        if capability is Capability.CONVERSATIONS:
            return self.conversation is not None
        return capability in self.capabilities

    def why_not(self, capability: Capability) -> str:
        """The sentence saying why it lacks `capability` (its own words, from `lacks`)."""
        if self.has(capability):
            raise ValueError(f"{self.name} has {capability}")
        return self.lacks[capability]

    def __post_init__(self) -> None:
        missing = [c for c in Capability if not self.has(c) and c not in self.lacks]
        if missing:
            raise ValueError(f"contender {self.name!r} lacks {', '.join(missing)} but says not why (`lacks`)")
        if self.approval is Approval.PAUSES and self.conversation is None:
            raise ValueError(f"contender {self.name!r} pauses for approval, which needs a conversation to resume")
