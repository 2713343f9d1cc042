"""What the real model costs each contender on `--model local`: orchestration's share of wall time, prefix reuse,
seconds a model call, the article's goal under each lever (engine build, threads, server flags, search results),
`keep_turns` (this CPU's limits: `limits.py`). Nothing here asserts. Tokens sent are each call's `prompt_tokens`;
evaluated, llama.cpp's log after every call (cached share: 1 - evaluated / sent).
    python benchmarks/real_model.py [--model local|local:NAME] [--runs 1] [--turns 4] [--max-steps 4] [--json PATH]
        [--portable-python PATH]  # the lever "portable build as before": an interpreter with the portable build
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import common
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.outputs import LLMResult

from comparison.contenders import CONTENDERS, build_contender
from comparison.scenarios import INSTRUCTIONS, SEED_GOAL
from shared_tools.bookstore.store import Book, BookStore
from shared_tools.bookstore.tools import make_tools
from shared_tools.models.local import ServerFlags
from shared_tools.results import AgentLimits, AgentOptions, AgentResult, Guard, Token

QUESTIONS = ("Where is my order 4512?", "What is my cart total now?", "Where is my order 9999?", SEED_GOAL)
"""A session's questions, asked in this order and again from the start when `--turns` is larger: three short
turns first, enough for `keep_turns=1` to drop one (the article's goal is the costly fourth)."""
POLICIES: dict[str, dict[str, Any]] = {
    "full history": {},
    "keep_turns=1": {"keep_turns": 1},
    "summarize, keep_turns=1": {"keep_turns": 1, "summarize": True},
}
"""The history policies of `handwritten.Session` compared over one conversation."""
PARTS = ("contenders", "sessions", "levers")


@dataclass(frozen=True)
class Lever:
    """One engine, server and tool setting for the article's goal; None keeps what ships."""

    threads: int | None = None
    """None: chosen by the load when the server starts (`threads_by_load`)."""
    flags: ServerFlags = field(default_factory=ServerFlags)
    search_cap: int | None = None
    """At most this many books per search, whatever `max_results` the model asks for (Qwen asks for 10)."""
    cpu_variant: str | None = None
    """llama.cpp's CPU variant pinned (what the probe falls back to), None: the best for this CPU."""
    portable: bool = False
    """Served by `--portable-python`'s llama-cpp-python (the portable AVX2 build) instead of this interpreter's."""


BEFORE = ServerFlags(prompt_logits=True, flash_attn=False, repack=True)
"""llama-cpp-python's server defaults, which shipped before: logits for every prompt token, no flash attention,
the weights repacked."""
LEVERS = {
    "as shipped": Lever(),
    "portable build as before": Lever(threads=1, flags=BEFORE, portable=True),
    "1 thread": Lever(threads=1),
    "2 threads": Lever(threads=2),
    "server defaults": Lever(flags=BEFORE),
    "haswell variant": Lever(cpu_variant="haswell"),
    "prompt batch 2048": Lever(flags=ServerFlags(batch=2048)),
    "weights repacked": Lever(flags=ServerFlags(repack=True)),
    "search returns <= 2 books": Lever(search_cap=2),
}
"""Each run on a server of its own, started for it, its instructions and tools evaluated once before the clock
(that warm-up's seconds are kept: what a server's first run pays on top)."""

_PROMPT_EVAL = re.compile(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens")
_GENERATED = re.compile(r"^llama_perf_context_print:\s+eval time =\s*([\d.]+) ms /\s*(\d+) runs", re.M)


class CappedSearch(BookStore):
    """The shop whose search returns at most `cap` books: the search-results lever (the article's goal needs the
    first two of "The Last Lighthouse": the book and the author's other novel)."""

    def __init__(self, cap: int | None) -> None:
        super().__init__()
        self.cap = cap

    def search(self, query: str, max_results: int = 5) -> list[Book]:
        return super().search(query, max_results if self.cap is None else min(max_results, self.cap))


@dataclass
class ServerWork:
    """What the server's log says it did between two readings."""

    evaluated: int = 0
    """Prompt tokens it evaluated (those past the reused prefix), over every completion."""
    prompt_ms: float = 0.0
    generated: int = 0
    generate_ms: float = 0.0
    completions: int = 0


@dataclass
class ServerLog:
    """Reads what the server wrote to its log since the last `read()`."""

    path: Path
    offset: int = field(default=0)

    def __post_init__(self) -> None:
        self.offset = self.path.stat().st_size

    def read(self) -> ServerWork:
        with self.path.open("rb") as handle:
            handle.seek(self.offset)
            text = handle.read().decode("utf-8", errors="replace")
            self.offset = handle.tell()
        work = ServerWork()
        for ms, tokens in _PROMPT_EVAL.findall(text):
            work.evaluated += int(tokens)
            work.prompt_ms += float(ms)
            work.completions += 1
        for ms, runs in _GENERATED.findall(text):
            work.generated += int(runs)
            work.generate_ms += float(ms)
        return work


@dataclass
class ServedCall:
    """One model call as the server served it."""

    sent: int
    """Its prompt tokens (the server's usage)."""
    evaluated: int
    """Of them (and of the few the handler adds to pick a call's name), those the server evaluated."""
    server_s: float
    prompt_s: float = 0.0
    """Of `server_s`, evaluating the prompt tokens."""
    generated: int = 0
    """Tokens the server generated (those of the picks of a call's name included)."""


class CallMeter(BaseCallbackHandler):
    """Every answered model call (a summary's included): its prompt tokens, and the server's log read right after."""

    run_inline = True

    def __init__(self, log: ServerLog | None = None) -> None:
        self._log = log
        self.calls: list[ServedCall] = []

    @property
    def log(self) -> ServerLog:
        if self._log is None:
            raise RuntimeError("CallMeter.start(log) first: no server's log to read")
        return self._log

    def start(self, log: ServerLog | None = None) -> None:
        """Forget what came before: a new run (on the server of `log`, if given) starts now."""
        self._log = log or self._log
        self.log.read()
        self.calls = []

    def on_llm_end(self, response: LLMResult, **_kwargs: Any) -> None:
        sent = 0
        for generations in response.generations:
            for generation in generations:
                message = getattr(generation, "message", None)
                if isinstance(message, AIMessage):
                    usage = message.usage_metadata or {}
                    sent += usage.get("input_tokens") or (
                        (message.response_metadata.get("token_usage") or {}).get("prompt_tokens", 0)
                    )
        work = self.log.read()
        served = ServedCall(sent, work.evaluated, (work.prompt_ms + work.generate_ms) / 1000)
        served.prompt_s, served.generated = work.prompt_ms / 1000, work.generated
        self.calls.append(served)

    def take(self) -> list[ServedCall]:
        """The calls since `start`, anything the log said after the last answer counted to the last call."""
        rest = self.log.read()
        if self.calls and rest.completions:
            last = self.calls[-1]
            last.evaluated += rest.evaluated
            last.server_s += (rest.prompt_ms + rest.generate_ms) / 1000
            last.prompt_s += rest.prompt_ms / 1000
            last.generated += rest.generated
        calls, self.calls = self.calls, []
        return calls


def tally(calls: list[ServedCall]) -> dict[str, Any]:
    """A run's calls summed; `cached_after_first` is the share of prompt tokens the server did not evaluate, over
    every call but the first (whose prompt is new to the server by construction)."""
    later = calls[1:]
    later_sent = sum(c.sent for c in later)
    evaluated, prompt_s = sum(c.evaluated for c in calls), sum(c.prompt_s for c in calls)
    generated, generate_s = sum(c.generated for c in calls), sum(c.server_s - c.prompt_s for c in calls)
    return {
        "calls": len(calls),
        "sent": sum(c.sent for c in calls),
        "evaluated": evaluated,
        "server_s": sum(c.server_s for c in calls),
        "prompt_tokens_per_s": evaluated / prompt_s if prompt_s > 0 else None,
        "generated": generated,
        "generated_tokens_per_s": generated / generate_s if generate_s > 0 else None,
        "cached_after_first": 1 - sum(c.evaluated for c in later) / later_sent if later_sent else None,
        "per_call": [asdict(c) for c in calls],
    }


def load() -> str:
    """The 1/5/15-minute load averages now: every measurement is read next to them."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def cart_of(store: BookStore) -> str:
    cart = store.cart("c1")
    return ", ".join(f"{line.book.title} x{line.quantity}" for line in cart.lines) or "empty"


def tool_path(result: AgentResult) -> str:
    """The tool calls the model asked for, in order, with their arguments: what to compare across engines."""
    calls = [call for m in result.messages if isinstance(m, AIMessage) for call in m.tool_calls]
    return " -> ".join(f"{call['name']}({json.dumps(call['args'], sort_keys=True)})" for call in calls)


def model_seconds(result: AgentResult) -> float:
    return sum(e.duration_s for e in result.trace if e.is_model)


def measure_run(run: Callable[[], AgentResult], meter: CallMeter, store: BookStore) -> dict[str, Any]:
    """One timed run: its wall time, the model's share of it, how it ended, the cart it left and its calls."""
    meter.start()
    started = time.perf_counter()
    try:
        result: AgentResult | None = run()
        error = None
    except Exception as exc:  # a contender that raises is a finding (langgraph-defaults' ToolException)
        result, error = None, f"{type(exc).__name__}: {exc}"[:120]
    wall = time.perf_counter() - started
    model_s = model_seconds(result) if result else None
    return {
        "wall_s": wall,
        "model_s": model_s,
        "orchestration_share": (wall - model_s) / wall if model_s is not None else None,
        "model_calls": result.model_calls if result else None,
        "s_per_model_call": model_s / result.model_calls if result and result.model_calls else None,
        "stop_reason": str(result.stop_reason) if result else None,
        "error": error,
        "cart": cart_of(store),
        "tools": tool_path(result) if result else None,
        "answer": result.answer if result else None,
        "load": load(),
        **tally(meter.take()),
    }


def run_contenders(
    model: Any, meter: CallMeter, names: list[str], runs: int, max_steps: int
) -> dict[str, list[dict[str, Any]]]:
    """Each contender on the article's goal, `runs` times, interleaved, all on one shared server."""
    found: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for _ in range(runs):
        for name in names:
            store = BookStore()
            options = AgentOptions(limits=AgentLimits(max_steps=max_steps))
            agent = build_contender(name, model, make_tools(store), options)
            found[name].append(measure_run(lambda agent=agent: agent.run(INSTRUCTIONS, SEED_GOAL), meter, store))
    return found


def run_sessions(model: Any, meter: CallMeter, turns: int, max_steps: int) -> dict[str, dict[str, Any]]:
    """One conversation per history policy, each whole before the next: the server keeps the KV cache of one
    prompt only, so conversations taking turns would each find the other's prompt there."""
    from handwritten import AgentLoop, Session

    found: dict[str, dict[str, Any]] = {}
    for label, policy in POLICIES.items():
        store = BookStore()
        options = AgentOptions(limits=AgentLimits(max_steps=max_steps))
        session = Session(AgentLoop(model, make_tools(store), options), INSTRUCTIONS, customer_id="c1", **policy)
        asked = [QUESTIONS[turn % len(QUESTIONS)] for turn in range(turns)]
        measured = [measure_run(lambda q=question, s=session: s.ask(q), meter, store) for question in asked]
        calls = [ServedCall(**call) for turn in measured for call in turn["per_call"]]
        found[label] = {"turns": measured, "conversation": tally(calls)}
    return found


def lever_model(name: str, base_url: str) -> Any:
    """The model `--model local:<name>` makes, on another server of the same weights."""
    from shared_tools.models import make_model
    from shared_tools.models.factory import LOCAL_MAX_TOKENS, LOCAL_REQUEST_TIMEOUT_S

    model = make_model(f"openai:{name}", base_url=base_url, timeout_s=LOCAL_REQUEST_TIMEOUT_S)
    return model.model_copy(update={"max_tokens": LOCAL_MAX_TOKENS})


def served_threads(pid: int) -> int:
    """The threads a server was started with, read off its command line (chosen by the load when not given)."""
    command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    return int(command[command.index(b"--n_threads") + 1])


def run_lever(name: str, lever: Lever, meter: CallMeter, limits: AgentLimits, portable: str | None) -> dict[str, Any]:
    """The article's goal with the hand-written loop on a server started for `lever`, its prompt prefix (the
    instructions and tools) evaluated once first, as on a server that has answered this shop before."""
    from handwritten import AgentLoop
    from shared_tools.models.llama_server import loaded_variant
    from shared_tools.models.local import find_weights, start_server

    python = portable if lever.portable else None
    server = start_server(
        find_weights(name),
        model=name,
        threads=lever.threads,
        flags=lever.flags,
        cpu_variant=lever.cpu_variant,
        python=python,
    )
    try:
        engine = {"threads": served_threads(server.process.pid), "variant": loaded_variant(server.process.pid)}
        model = lever_model(name, server.base_url)
        store = CappedSearch(lever.search_cap)
        tools = make_tools(store)
        started = time.perf_counter()
        model.bind_tools(tools).invoke([SystemMessage(INSTRUCTIONS), HumanMessage("Hello.")], max_tokens=1)
        engine["warm_up_s"] = time.perf_counter() - started
        model.callbacks = [meter]
        meter.start(ServerLog(server.log_path))
        loop = AgentLoop(model, tools, AgentOptions(limits=limits))
        return {**engine, **measure_run(lambda: loop.run(INSTRUCTIONS, SEED_GOAL), meter, store)}
    finally:
        server.stop()


def run_levers(
    name: str, labels: list[str], meter: CallMeter, runs: int, limits: AgentLimits, portable: str | None
) -> dict[str, list[dict[str, Any]]]:
    """Every lever `runs` times, interleaved; `limits` stop a lever that makes a run hopelessly slow."""
    found: dict[str, list[dict[str, Any]]] = {label: [] for label in labels}
    for _ in range(runs):
        for label in labels:
            found[label].append(run_lever(name, LEVERS[label], meter, limits, portable))
    return found


def first_tokens(model: Any, max_steps: int) -> dict[str, Any]:
    """Time to the first streamed token: a plain streamed answer (no tools), and an agent run with `on_token`
    (tools: the server refuses to stream, the agent falls back to a plain call)."""
    started = time.perf_counter()
    first: float | None = None
    for chunk in model.stream([HumanMessage("Say hello to a bookstore customer in one sentence.")]):
        if first is None and chunk.content:
            first = time.perf_counter() - started
    plain = {"first_token_s": first, "total_s": time.perf_counter() - started}
    from handwritten import AgentLoop

    seen: list[float] = []
    started = time.perf_counter()

    def on_token(_token: Token) -> None:
        if not seen:
            seen.append(time.perf_counter() - started)

    options = AgentOptions(limits=AgentLimits(max_steps=max_steps), on_token=on_token)
    loop = AgentLoop(model, make_tools(BookStore()), options)
    result = loop.run(INSTRUCTIONS, "Where is my order 4512?")
    agent = {
        "first_token_s": seen[0] if seen else None,
        "total_s": time.perf_counter() - started,
        "fallback": any(e.guard is Guard.STREAM_FALLBACK for e in result.trace),
    }
    return {"plain answer, streamed": plain, "agent with tools (on_token)": agent}


# --- the tables ---------------------------------------------------------------------------------------------


def median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else float("nan")


def _med(runs: list[dict[str, Any]], key: str, spec: str = ".2f") -> str:
    values = [r[key] for r in runs if r[key] is not None]
    return format(median(values), spec) if values else "-"


def _ended(runs: list[dict[str, Any]]) -> str:
    return ", ".join(sorted({r["stop_reason"] or r["error"] for r in runs}))


def _loads(runs: list[dict[str, Any]]) -> str:
    return " | ".join(r["load"].split()[0] for r in runs)


def goal_row(label: str, runs: list[dict[str, Any]], base_wall: float | None = None) -> list[Any]:
    """One row of the article's goal: medians over `runs`; `base_wall` adds the wall time's ratio to it."""
    wall = median([r["wall_s"] for r in runs])
    row = [label, len(runs), _ended(runs), " / ".join(sorted({r["cart"] for r in runs})), f"{wall:.1f}"]
    if base_wall is not None:
        row.append(common.ratio(wall, base_wall))
    return [
        *row,
        _med(runs, "model_calls", ".0f"),
        _med(runs, "s_per_model_call", ".1f"),
        _med(runs, "orchestration_share", ".2%"),
        _med(runs, "sent", ".0f"),
        _med(runs, "evaluated", ".0f"),
        _med(runs, "cached_after_first", ".1%"),
        _loads(runs),
    ]


GOAL_COLUMNS = [
    "runs",
    "how it ended",
    "cart",
    "wall s",
    "model calls",
    "s / model call",
    "orchestration share",
    "tokens sent",
    "tokens evaluated",
    "cached after 1st call",
    "load (1 min)",
]


def print_contenders(console: Any, contenders: dict[str, list[dict[str, Any]]], title: str) -> None:
    rows = [goal_row(name, runs) for name, runs in contenders.items()]
    console.print(common.table(title, ["contender", *GOAL_COLUMNS], rows))


def _rate(runs: list[dict[str, Any]], key: str) -> str:
    return _med(runs, key, ".1f")


def print_levers(console: Any, levers: dict[str, list[dict[str, Any]]], title: str) -> None:
    base = median([r["wall_s"] for r in levers["as shipped"]])
    rows = []
    for label, runs in levers.items():
        row = goal_row(label, runs, base)
        engine = [
            " / ".join(sorted({str(r["threads"]) for r in runs})),
            " / ".join(sorted({str(r["variant"] or "linked in") for r in runs})),
            _rate(runs, "prompt_tokens_per_s"),
            _rate(runs, "generated_tokens_per_s"),
            _med(runs, "warm_up_s", ".1f"),
        ]
        rows.append([*row[:6], *engine, *row[6:]])
    columns = ["lever", *GOAL_COLUMNS[:4], "× as shipped", "threads", "CPU variant", "prompt tok/s", "gen tok/s"]
    columns += ["warm-up s", *GOAL_COLUMNS[4:]]
    console.print(common.table(title, columns, rows))
    shipped = levers["as shipped"][0]
    for label, runs in levers.items():
        same = all(
            (r["tools"], r["answer"], r["cart"]) == (shipped["tools"], shipped["answer"], shipped["cart"]) for r in runs
        )
        verdict = "the same calls, answer and cart as shipped" if same else "another path than shipped"
        console.print(f"{label}: {verdict}: {runs[0]['tools']}; answered {runs[0]['answer']!r}")


def print_sessions(console: Any, sessions: dict[str, dict[str, Any]], turns: int) -> None:
    rows = []
    for label, found in sessions.items():
        whole = found["conversation"]
        rows.append(
            [
                label,
                len(found["turns"]),
                whole["calls"],
                whole["sent"],
                whole["evaluated"],
                f"{whole['evaluated'] / whole['sent']:.1%}" if whole["sent"] else "-",
                f"{whole['cached_after_first']:.1%}" if whole["cached_after_first"] is not None else "-",
                f"{whole['server_s']:.1f}",
                f"{sum(t['wall_s'] for t in found['turns']):.1f}",
                _loads(found["turns"]),
            ]
        )
    columns = ["policy", "turns", "calls", "tokens sent", "tokens evaluated", "evaluated/sent"]
    columns += ["cached after 1st call", "server s", "wall s", "load (1 min) per turn"]
    title = f"One conversation of {turns} turns per history policy (handwritten Session)"
    console.print(common.table(title, columns, rows))
    least = min(sessions, key=lambda label: sessions[label]["conversation"]["evaluated"])
    fewest = min(sessions, key=lambda label: sessions[label]["conversation"]["sent"])
    console.print(f"Fewest tokens sent: {fewest}. Fewest tokens the server evaluated: {least}.")


def print_first_tokens(console: Any, firsts: dict[str, Any]) -> None:
    rows = [
        [
            what,
            f"{v['first_token_s']:.2f}" if v["first_token_s"] is not None else "none (no text answer)",
            f"{v['total_s']:.2f}",
        ]
        for what, v in firsts.items()
    ]
    console.print(common.table("Time to first token", ["what", "first token s", "total s"], rows))
    if firsts["agent with tools (on_token)"]["fallback"]:
        console.print("The server refused to stream a reply with tools; the agent fell back to a plain call.")


# --- the command --------------------------------------------------------------------------------------------


def parse(argv: list[str] | None) -> Any:
    parser = common.parser(__doc__.splitlines()[0], default_runs=1, runs_help="runs per contender and per lever")
    parser.add_argument("--turns", type=int, default=4, help="turns of the session per history policy (default 4)")
    parser.add_argument("--max-steps", type=int, default=6, help="each run's (each turn's) step limit (default 6)")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"which to run (default {','.join(PARTS)})")
    parser.add_argument("--contenders", default=",".join(CONTENDERS), help="which contenders run (default: all)")
    parser.add_argument("--first-token", action="store_true", help="also time the first streamed token")
    parser.add_argument(
        "--levers",
        help="which levers run (default: all, the portable build's with --portable-python; 'as shipped' always)",
    )
    parser.add_argument(
        "--lever-budget-s", type=float, default=600.0, help="a lever run's time budget in seconds (default 600)"
    )
    parser.add_argument(
        "--portable-python",
        help="an interpreter with llama-cpp-python built portable (AVX2, CPU code linked in), for the lever "
        "'portable build as before'",
    )
    parser.add_argument(
        "--model",
        default="local",
        help="'local' (the strongest bundled model installed) or 'local:<name>' (default local)",
    )
    args = parser.parse_args(argv)
    if args.model.partition(":")[0] != "local":
        parser.error(f"--model {args.model}: this benchmark reads a bundled model's server log; use local[:<name>]")
    unknown = [name for name in args.contenders.split(",") if name not in CONTENDERS]
    if unknown:
        parser.error(f"--contenders: no contender {', '.join(unknown)}; there are {', '.join(CONTENDERS)}")
    if args.levers is None:
        args.levers = ",".join(label for label in LEVERS if args.portable_python or not LEVERS[label].portable)
    if unknown := [label for label in args.levers.split(",") if label not in LEVERS]:
        parser.error(f"--levers: no lever {', '.join(unknown)}; there are {', '.join(LEVERS)}")
    if "portable build as before" in args.levers.split(",") and not args.portable_python:
        parser.error("--levers 'portable build as before' needs --portable-python PATH")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    console = common.console()
    from shared_tools.models import make_model
    from shared_tools.models.local import default_model, local_server

    name = args.model.partition(":")[2] or default_model()
    parts = args.parts.split(",")
    model, meter = None, CallMeter()
    if args.first_token or {"contenders", "sessions"} & set(parts):  # the levers start servers of their own
        model = make_model(args.model)
        meter = CallMeter(ServerLog(local_server(name).log_path))
        model.callbacks = [meter]  # every call of every contender goes through this one model
    info = common.machine()
    steps = f"max_steps={args.max_steps}, median of {args.runs} run(s)"
    document: dict[str, Any] = {"machine": info, "max_steps": args.max_steps}
    if "contenders" in parts:
        document["contenders"] = found = run_contenders(
            model, meter, args.contenders.split(","), args.runs, args.max_steps
        )
        print_contenders(console, found, f"The article's goal on {args.model} ({name}), {steps}, one shared server")
    if "sessions" in parts:
        document["sessions"] = sessions = run_sessions(model, meter, args.turns, args.max_steps)
        print_sessions(console, sessions, args.turns)
    if "levers" in parts:
        limits = AgentLimits(max_steps=args.max_steps, max_duration=args.lever_budget_s)
        labels = ["as shipped", *(label for label in args.levers.split(",") if label != "as shipped")]
        document["levers"] = levers = run_levers(name, labels, meter, args.runs, limits, args.portable_python)
        title = f"The article's goal, handwritten, one server per run and lever ({name}), {steps}, "
        title += f"{args.lever_budget_s:.0f} s budget"
        print_levers(console, levers, title)
    if args.first_token:
        document["first_token"] = firsts = first_tokens(model, args.max_steps)
        print_first_tokens(console, firsts)
    console.print(common.machine_line(info) + f" · load at the end {load()}")
    common.write_json(args.json, document)
    return 0


if __name__ == "__main__":
    sys.exit(main())
