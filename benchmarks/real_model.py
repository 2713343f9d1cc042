"""What the real model costs each contender on `--model local`: model time vs orchestration, prefix reuse, first token.

Tokens sent are every call's `prompt_tokens`; tokens evaluated come from llama.cpp's own log, which shows how much of
each prompt its cached prefix saved, for the whole history, `keep_turns` and a summary. Nothing here asserts.

    python benchmarks/real_model.py [--model local|local:NAME] [--runs 1] [--turns 4] [--max-steps 4] [--json PATH]
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import common
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.outputs import LLMResult
from rich.table import Table

from comparison.contenders import CONTENDERS, build_contender
from comparison.scenarios import INSTRUCTIONS, SEED_GOAL
from shared_tools.bookstore.store import BookStore
from shared_tools.bookstore.tools import make_tools
from shared_tools.results import AgentLimits, AgentOptions, AgentResult, Guard, Token

QUESTIONS = ("Where is my order 4512?", "What is my cart total now?", SEED_GOAL, "Where is my order 9999?")
"""A session's questions, asked in this order and again from the start when `--turns` is larger."""
POLICIES: dict[str, dict[str, Any]] = {
    "full history": {},
    "keep_turns=1": {"keep_turns": 1},
    "summarize, keep_turns=1": {"keep_turns": 1, "summarize": True},
}
"""The history policies of `handwritten.Session` compared over one conversation."""

_PROMPT_EVAL = re.compile(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens")
_GENERATED = re.compile(r"^llama_perf_context_print:\s+eval time =\s*([\d.]+) ms /\s*(\d+) runs", re.M)


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


class SentTokens(BaseCallbackHandler):
    """Adds up the prompt tokens of every call the model answers (a summary's included), from the server's usage."""

    def __init__(self) -> None:
        self.total = 0

    def on_llm_end(self, response: LLMResult, **_kwargs: Any) -> None:
        for generations in response.generations:
            for generation in generations:
                message = getattr(generation, "message", None)
                if isinstance(message, AIMessage):
                    self.total += (message.response_metadata.get("token_usage") or {}).get("prompt_tokens", 0)

    def read(self) -> int:
        total, self.total = self.total, 0
        return total


def model_seconds(result: AgentResult) -> float:
    return sum(e.duration_s for e in result.trace if e.is_model)


def run_contenders(
    model: Any, log: ServerLog, sent: SentTokens, runs: int, max_steps: int
) -> dict[str, list[dict[str, Any]]]:
    """Each contender on the article's goal, `runs` times, interleaved: wall time, the model's share, the server's."""
    found: dict[str, list[dict[str, Any]]] = {name: [] for name in CONTENDERS}
    for _ in range(runs):
        for name in CONTENDERS:
            options = AgentOptions(limits=AgentLimits(max_steps=max_steps))
            agent = build_contender(name, model, make_tools(BookStore()), options)
            log.read()
            sent.read()
            started = time.perf_counter()
            try:
                result: AgentResult | None = agent.run(INSTRUCTIONS, SEED_GOAL)
                error = None
            except Exception as exc:  # a contender that raises is a finding (langgraph-defaults' ToolException)
                result, error = None, f"{type(exc).__name__}: {exc}"[:120]
            wall = time.perf_counter() - started
            work = log.read()
            found[name].append(
                {
                    "wall_s": wall,
                    "model_s": model_seconds(result) if result else None,
                    "model_calls": result.model_calls if result else None,
                    "stop_reason": str(result.stop_reason) if result else None,
                    "error": error,
                    "sent": sent.read(),
                    "evaluated": work.evaluated,
                    "server_s": (work.prompt_ms + work.generate_ms) / 1000,
                }
            )
    return found


def run_sessions(
    model: Any, log: ServerLog, sent: SentTokens, turns: int, max_steps: int
) -> dict[str, list[dict[str, Any]]]:
    """One conversation per history policy, each whole before the next: the server keeps the KV cache of one
    prompt only, so conversations taking turns would each find the other's prompt there."""
    from handwritten import AgentLoop, Session

    found: dict[str, list[dict[str, Any]]] = {}
    for label, policy in POLICIES.items():
        options = AgentOptions(limits=AgentLimits(max_steps=max_steps))
        session = Session(AgentLoop(model, make_tools(BookStore()), options), INSTRUCTIONS, customer_id="c1", **policy)
        found[label] = []
        for turn in range(turns):
            log.read()
            sent.read()
            started = time.perf_counter()
            result = session.ask(QUESTIONS[turn % len(QUESTIONS)])
            wall = time.perf_counter() - started
            work = log.read()
            found[label].append(
                {
                    "turn": turn + 1,
                    "wall_s": wall,
                    "stop_reason": str(result.stop_reason),
                    "sent": sent.read(),
                    "evaluated": work.evaluated,
                    "server_s": (work.prompt_ms + work.generate_ms) / 1000,
                }
            )
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


def median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else float("nan")


def build_parser() -> argparse.ArgumentParser:
    parser = common.parser(__doc__.splitlines()[0], default_runs=1, runs_help="runs per contender")
    parser.add_argument("--turns", type=int, default=4, help="turns of the session per history policy (default 4)")
    parser.add_argument("--max-steps", type=int, default=4, help="each run's (each turn's) step limit (default 4)")
    parser.add_argument(
        "--parts",
        default="contenders,sessions",
        help="which to run (default contenders,sessions; the time to first token always runs)",
    )
    parser.add_argument(
        "--model",
        default="local",
        help="'local' (the strongest bundled model installed) or 'local:<name>' (default local)",
    )
    return parser


def contenders_table(contenders: dict[str, list[dict[str, Any]]], model: str, max_steps: int, runs: int) -> Table:
    """Per contender, medians of its runs: wall, the model's and the server's time, orchestration, tokens."""
    rows = []
    for name, mine in contenders.items():
        done = [r for r in mine if r["error"] is None]
        wall = median([r["wall_s"] for r in mine])
        model_s = median([r["model_s"] for r in done]) if done else float("nan")
        rows.append(
            [
                name,
                len(mine),
                ", ".join(sorted({r["stop_reason"] or r["error"] for r in mine})),
                f"{wall:.2f}",
                f"{model_s:.2f}",
                f"{wall - model_s:.3f}",
                f"{(wall - model_s) / wall:.1%}" if done else "-",
                f"{median([r['server_s'] for r in mine]):.2f}",
                median([r["sent"] for r in done]) if done else "-",
                median([r["evaluated"] for r in mine]),
            ]
        )
    return common.table(
        f"The article's goal on {model}, max_steps={max_steps}, median of {runs} run(s) per contender",
        [
            "contender",
            "runs",
            "how it ended",
            "wall s",
            "model s",
            "orchestration s",
            "orch. share",
            "server s",
            "tokens sent",
            "tokens evaluated",
        ],
        rows,
    )


def sessions_table(sessions: dict[str, list[dict[str, Any]]], turns: int) -> Table:
    """Per history policy, the whole conversation: tokens sent and evaluated, server and wall time."""
    rows = []
    for label, mine in sessions.items():
        sent_in_all = sum(t["sent"] for t in mine)
        evaluated = sum(t["evaluated"] for t in mine)
        rows.append(
            [
                label,
                len(mine),
                sent_in_all,
                evaluated,
                f"{evaluated / sent_in_all:.1%}" if sent_in_all else "-",
                f"{sum(t['server_s'] for t in mine):.1f}",
                f"{sum(t['wall_s'] for t in mine):.1f}",
            ]
        )
    return common.table(
        f"One conversation of {turns} turns per history policy (handwritten Session)",
        ["policy", "turns", "tokens sent", "tokens evaluated", "evaluated/sent", "server s", "wall s"],
        rows,
    )


def first_token_table(firsts: dict[str, dict[str, Any]]) -> Table:
    return common.table(
        "Time to first token",
        ["what", "first token s", "total s"],
        [
            [
                what,
                f"{v['first_token_s']:.2f}" if v["first_token_s"] is not None else "none (no text answer)",
                f"{v['total_s']:.2f}",
            ]
            for what, v in firsts.items()
        ],
    )


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    console = common.console()
    from shared_tools.models import make_model
    from shared_tools.models.local import default_model, local_server

    kind, _, name = args.model.partition(":")
    if kind != "local":
        parser.error(f"--model {args.model}: this benchmark reads a bundled model's server log; use local[:<name>]")
    model = make_model(args.model)
    sent = SentTokens()
    model.callbacks = [sent]  # every call of every contender goes through this one model
    log = ServerLog(local_server(name or default_model()).log_path)
    info = common.machine()
    contenders = run_contenders(model, log, sent, args.runs, args.max_steps) if "contenders" in args.parts else {}
    if contenders:
        console.print(contenders_table(contenders, args.model, args.max_steps, args.runs))
    sessions = run_sessions(model, log, sent, args.turns, args.max_steps) if "sessions" in args.parts else {}
    if sessions:
        console.print(sessions_table(sessions, args.turns))
        least = min(sessions, key=lambda label: sum(t["evaluated"] for t in sessions[label]))
        fewest = min(sessions, key=lambda label: sum(t["sent"] for t in sessions[label]))
        console.print(f"Fewest tokens sent: {fewest}. Fewest tokens the server evaluated: {least}.")
    firsts = first_tokens(model, args.max_steps)
    console.print(first_token_table(firsts))
    if firsts["agent with tools (on_token)"]["fallback"]:
        console.print("The server refused to stream a reply with tools; the agent fell back to a plain call.")
    console.print(common.machine_line(info))
    common.write_json(
        args.json,
        {
            "machine": info,
            "contenders": contenders,
            "sessions": sessions,
            "first_token": firsts,
            "max_steps": args.max_steps,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
