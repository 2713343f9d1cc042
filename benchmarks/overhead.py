"""What each orchestration layer adds to one bookstore job when the model costs nothing.

The article's goal on the zero-latency scripted model, so all that is timed is orchestration; every variant (our loop,
the graphs, sessions in memory and SQLite, spans on) is a ratio to a bare langchain-core loop written here.

    python benchmarks/overhead.py [--runs 200] [--json PATH]
"""

from __future__ import annotations

import asyncio
import functools
import os
import tempfile
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import common
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.tools import BaseTool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from comparison import CUSTOMER_ID, INSTRUCTIONS, SEED_GOAL
from comparison.contenders import SPECS, build_contender
from handwritten import AgentLoop
from langgraph_version import DefaultsGraphAgent, GraphAgent, GraphSession, create_agent_contender
from langgraph_version.checkpoints import SqliteCheckpoints
from shared_tools.bookstore.store import BookStore
from shared_tools.bookstore.tools import make_tools
from shared_tools.models import make_model
from shared_tools.results import AgentOptions
from shared_tools.telemetry import CAPTURE_CONTENT_ENV

MODEL_CALLS, TOOL_CALLS = 5, 4
DURABILITIES = ("sync", "async", "exit")
FLOOR = "floor: bare langchain-core loop"
ASYNC_FLOOR = "floor, async: asyncio.run + ainvoke"
BARE_GRAPH = "DefaultsGraphAgent (bare graph)"
GUARDED_GRAPH = "GraphAgent (guarded)"
CREATE_AGENT = "create_agent contender"
HANDWRITTEN = "handwritten AgentLoop"
MAF = "MafAgent (Microsoft Agent Framework)"
SPANS, CONTENT = " + spans", " + spans + content"
TRACED = (HANDWRITTEN, GUARDED_GRAPH, BARE_GRAPH, CREATE_AGENT)
"""The variants that write spans to the provider they are given (MAF writes to the global one only)."""
TUNED = {"handwritten": HANDWRITTEN, "langgraph": GUARDED_GRAPH, "langgraph-defaults": BARE_GRAPH}
TUNED |= {"create-agent": CREATE_AGENT, "maf": MAF}
"""The contenders measured by a variant of their own above; every other one of the registry is measured as
built by its spec (`registry_label`), so a new contender is in this benchmark with no edit here."""


def registry_label(name: str) -> str:
    return f"{name} contender (built by its spec)"


class BareLoop:
    """The floor: what any tool loop over langchain-core must at least do, with no guard at all."""

    def __init__(self, model: BaseChatModel, tools: Sequence[BaseTool]) -> None:
        self.bound = model.bind_tools(list(tools))
        self.tools = {tool.name: tool for tool in tools}

    def run(self, instructions: str, goal: str) -> list[BaseMessage]:
        messages: list[BaseMessage] = [SystemMessage(instructions), HumanMessage(goal)]
        while True:
            reply = self.bound.invoke(messages)
            messages.append(reply)
            if not isinstance(reply, AIMessage) or not reply.tool_calls:
                return messages
            for call in reply.tool_calls:
                # A ToolCall in, a ToolMessage out (with the call's id), as the real loops do it.
                messages.append(self.tools[call["name"]].invoke({**call, "type": "tool_call"}))

    async def arun(self, instructions: str, goal: str) -> list[BaseMessage]:
        """The same loop on the async path, to show what `asyncio.run` and `ainvoke` cost by themselves."""
        messages: list[BaseMessage] = [SystemMessage(instructions), HumanMessage(goal)]
        while True:
            reply = await self.bound.ainvoke(messages)
            messages.append(reply)
            if not isinstance(reply, AIMessage) or not reply.tool_calls:
                return messages
            for call in reply.tool_calls:
                messages.append(await self.tools[call["name"]].ainvoke({**call, "type": "tool_call"}))


@dataclass
class Job:
    """One timed run, and the store it works on (so `check` can read the cart afterwards)."""

    run: Callable[[], Any]
    store: BookStore
    spans: InMemorySpanExporter | None = None
    """Where a "+ spans" variant's spans go."""

    def __call__(self) -> None:
        self.run()


@dataclass
class _Prepared:
    """The jobs of each variant, all on one model and, unless a variant says otherwise, one set of options."""

    model: Any
    options: AgentOptions

    def fresh(self) -> tuple[BookStore, list[BaseTool]]:
        store = BookStore()
        return store, make_tools(store, CUSTOMER_ID)

    def floor(self) -> Job:
        store, tools = self.fresh()
        loop = BareLoop(self.model, tools)
        return Job(lambda: loop.run(INSTRUCTIONS, SEED_GOAL), store)

    def async_floor(self) -> Job:
        store, tools = self.fresh()
        loop = BareLoop(self.model, tools)

        async def main() -> None:
            # Nothing returned: asyncio.run reprs its finished main task, result included (see run_blocking).
            await loop.arun(INSTRUCTIONS, SEED_GOAL)

        return Job(lambda: asyncio.run(main()), store)

    def handwritten(self) -> Job:
        store, tools = self.fresh()
        loop = AgentLoop(self.model, tools, self.options)
        return Job(lambda: loop.run(INSTRUCTIONS, SEED_GOAL), store)

    def graph(self, kind: type[GraphAgent] | type[DefaultsGraphAgent]) -> common.Prepare:
        def prepare() -> Job:
            store, tools = self.fresh()
            agent = kind(self.model, tools, self.options)
            return Job(lambda: agent.run(INSTRUCTIONS, SEED_GOAL), store)

        return prepare

    def create_agent(self, own: AgentOptions | None = None) -> Job:
        store, tools = self.fresh()
        contender = create_agent_contender(self.model, tools, self.options if own is None else own)
        contender.agent_for(INSTRUCTIONS)  # compiled outside the clock, like the graphs
        return Job(lambda: contender.run(INSTRUCTIONS, SEED_GOAL), store)

    def maf(self) -> Job:
        from maf_version import MafAgent

        store, tools = self.fresh()
        agent = MafAgent(self.model, tools, self.options)
        agent.agent_for(INSTRUCTIONS)  # MAF's Agent built outside the clock, like the graphs' compile
        return Job(lambda: agent.run(INSTRUCTIONS, SEED_GOAL), store)

    def contender(self, name: str) -> Job:
        """A contender as the harness builds it (`build_contender`); built, and warmed where it can be
        (`agent_for`), outside the clock, like the graphs' compile."""
        store, tools = self.fresh()
        agent = build_contender(name, self.model, tools, self.options)
        warm = getattr(agent, "agent_for", None)
        if callable(warm):
            warm(INSTRUCTIONS)
        return Job(lambda: agent.run(INSTRUCTIONS, SEED_GOAL), store)

    def traced(self, kind: str, content: bool) -> common.Prepare:
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        own = AgentOptions(tracer_provider=provider)

        def prepare() -> Job:
            exporter.clear()  # outside the clock: the spans of the last run
            os.environ.pop(CAPTURE_CONTENT_ENV, None)
            if content:
                os.environ[CAPTURE_CONTENT_ENV] = "true"  # read when the run starts, so it holds for this run only
            if kind == CREATE_AGENT:
                job = self.create_agent(own)
            else:
                store, tools = self.fresh()
                agent: Any = {HANDWRITTEN: AgentLoop, GUARDED_GRAPH: GraphAgent, BARE_GRAPH: DefaultsGraphAgent}[kind](
                    self.model, tools, own
                )
                job = Job(lambda: agent.run(INSTRUCTIONS, SEED_GOAL), store)
            job.spans = exporter
            return job

        return prepare

    def session(self, saver: BaseCheckpointSaver | SqliteCheckpoints, durability: str) -> common.Prepare:
        def prepare() -> Job:
            store, tools = self.fresh()
            agent = GraphAgent(self.model, tools, self.options)
            conversation = GraphSession(
                agent,
                INSTRUCTIONS,
                f"bench-{uuid.uuid4()}",
                checkpointer=saver,
                durability=durability,  # type: ignore[arg-type]
            )
            return Job(lambda: conversation.ask(SEED_GOAL), store)

        return prepare


def _session_variants(prepared: _Prepared, scratch: Path) -> dict[str, common.Prepare]:
    """GraphSession on each checkpointer and durability; the checkpointers are shared by all runs of a variant."""
    result: dict[str, common.Prepare] = {}
    memory = InMemorySaver()
    for durability in DURABILITIES:
        result[f"GraphSession InMemorySaver {durability}"] = prepared.session(memory, durability)
    for durability in DURABILITIES:
        # One file per mode, so a mode never reads another's threads.
        path = str(scratch / f"checkpoints-{durability}.db")
        result[f"GraphSession SQLite {durability}"] = prepared.session(
            SqliteCheckpoints(path, synchronous="FULL"), durability
        )
    for durability in ("sync", "async"):
        # NORMAL (the usual WAL setting) still survives a crash of the process; only a power cut can lose the
        # last commits. sync + NORMAL is what GraphSession.sqlite ships with.
        path = str(scratch / f"checkpoints-{durability}-normal.db")
        result[f"GraphSession SQLite {durability} synchronous=NORMAL"] = prepared.session(
            SqliteCheckpoints(path), durability
        )
    return result


def variants(scratch: Path) -> dict[str, common.Prepare]:
    """Every variant as prepare-then-run; the checkpointers are shared by all runs of their variant."""
    # compare.py's bookstore scenario: default limits, tools one after another.
    prepared = _Prepared(make_model("scripted"), AgentOptions())
    result: dict[str, common.Prepare] = {
        FLOOR: prepared.floor,
        ASYNC_FLOOR: prepared.async_floor,
        HANDWRITTEN: prepared.handwritten,
        BARE_GRAPH: prepared.graph(DefaultsGraphAgent),
        GUARDED_GRAPH: prepared.graph(GraphAgent),
        CREATE_AGENT: prepared.create_agent,
    }
    result[MAF] = prepared.maf
    for name in (n for n in SPECS if n not in TUNED):
        result[registry_label(name)] = functools.partial(prepared.contender, name)
    for kind in TRACED:
        result[kind + SPANS] = prepared.traced(kind, content=False)
        result[kind + CONTENT] = prepared.traced(kind, content=True)
    return result | _session_variants(prepared, scratch)


def check(all_variants: dict[str, common.Prepare]) -> None:
    """Every variant must do the article job (cart = The Quiet Orchard x1, 16.50) before its time means anything."""
    for name, prepare in all_variants.items():
        job = prepare()
        assert isinstance(job, Job)
        job()
        cart = job.store.cart(CUSTOMER_ID)
        if cart.total != Decimal("16.50") or [line.book.id for line in cart.lines] != [7]:
            raise SystemExit(f"{name} did not do the article job: cart {cart}")
        written = [] if job.spans is None else job.spans.get_finished_spans()
        if name.endswith((SPANS, CONTENT)) and len(written) != 1 + MODEL_CALLS + TOOL_CALLS:
            raise SystemExit(f"{name} wrote {len(written)} spans, not {1 + MODEL_CALLS + TOOL_CALLS}")
        with_content = any("gen_ai.input.messages" in (span.attributes or {}) for span in written)
        if with_content != name.endswith(CONTENT):
            raise SystemExit(f"{name}: content in its spans is {with_content}")


def target_ratios(measured: dict[str, common.Measured]) -> dict[str, float]:
    """The targets as ratios of wall medians; a pair whose variants did not run is left out."""
    pairs = {
        "handwritten / floor (target ≤ 1.2)": (HANDWRITTEN, FLOOR),
        "handwritten / async floor": (HANDWRITTEN, ASYNC_FLOOR),
        "guarded graph / bare graph (target ≤ 1.3)": (GUARDED_GRAPH, BARE_GRAPH),
        "create_agent / bare graph": (CREATE_AGENT, BARE_GRAPH),
        "MafAgent / handwritten": (MAF, HANDWRITTEN),
        **{f"{name} / handwritten": (registry_label(name), HANDWRITTEN) for name in SPECS if name not in TUNED},
        "in-memory session (async) / guarded graph": ("GraphSession InMemorySaver async", GUARDED_GRAPH),
    }
    for kind in TRACED:
        pairs[f"{kind}: spans on / off (the API's no-op)"] = (kind + SPANS, kind)
        pairs[f"{kind}: spans with content on / off"] = (kind + CONTENT, kind)
    for durability in DURABILITIES:
        pairs[f"SQLite / in-memory session, both durability={durability} (target ≤ 1.3)"] = (
            f"GraphSession SQLite {durability}",
            f"GraphSession InMemorySaver {durability}",
        )
    for durability in ("sync", "async"):
        shipped = " (GraphSession.sqlite's setting; target ≤ 1.3)" if durability == "sync" else ""
        pairs[f"SQLite synchronous=NORMAL / in-memory session, both durability={durability}{shipped}"] = (
            f"GraphSession SQLite {durability} synchronous=NORMAL",
            f"GraphSession InMemorySaver {durability}",
        )
    return {
        label: measured[top].wall.median / measured[bottom].wall.median
        for label, (top, bottom) in pairs.items()
        if top in measured and bottom in measured
    }


def main() -> None:
    parser = common.parser(__doc__.splitlines()[0], default_runs=200)
    parser.add_argument("--only", metavar="TEXT", help="run only the variants whose name contains TEXT (and the floor)")
    args = parser.parse_args()
    console = common.console()
    info = common.machine()
    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as scratch:
        all_variants = variants(Path(scratch))
        if args.only:
            all_variants = {k: v for k, v in all_variants.items() if k in (FLOOR, ASYNC_FLOOR) or args.only in k}
        check(all_variants)
        measured = common.interleave(all_variants, args.runs)
    floor = measured[FLOOR]
    rows = []
    for name, m in measured.items():
        rows.append(
            (
                name,
                common.us(m.wall.median),
                common.us(m.wall.p10),
                common.us(m.wall.p90),
                common.us(m.wall.median / MODEL_CALLS),
                common.ratio(m.wall.median, floor.wall.median),
                common.us(m.cpu.median),
                common.ratio(m.cpu.median, floor.cpu.median),
            )
        )
    console.print(
        common.table(
            f"One seed job ({MODEL_CALLS} model calls, {TOOL_CALLS} tool calls), scripted model, "
            f"{args.runs} interleaved runs per variant, µs",
            ("variant", "wall median", "p10", "p90", "per model call", "× floor", "CPU median", "CPU × floor"),
            rows,
        )
    )
    targets = target_ratios(measured)
    rows = [(name, f"{value:.2f}") for name, value in targets.items()]
    console.print(common.table("Ratios of wall medians (the targets)", ("ratio", "value"), rows))
    console.print(common.machine_line(info))
    common.write_json(
        args.json,
        {
            "benchmark": "overhead",
            "machine": info,
            "runs": args.runs,
            "model_calls": MODEL_CALLS,
            "tool_calls": TOOL_CALLS,
            "variants": measured,
            "ratios": targets,
        },
    )


if __name__ == "__main__":
    main()
