"""A hostile OpenAI-compatible server on loopback, against every contender, `chat` and `compare.py`.

The real client (`make_model("openai:...")`) against tests/openai_hostile.py: arguments nested 600 levels deep or
that are no JSON object, a reply with no choice, usage that is no number, a split emoji and a lone surrogate, an
HTTP 400, a server that trickles. Each one is an invalid reply the run stops on, a one-line failed call, or text
made whole (`shared_tools.replies.checked_reply`): never a traceback, and nothing it sends poisons what is kept.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from comparison.contenders import CONTENDERS, build_contender, spec_of
from comparison.records import masked_trace
from comparison.scenarios import INSTRUCTIONS, SEED_GOAL
from shared_tools.bookstore.store import BookStore
from shared_tools.bookstore.tools import make_tools
from shared_tools.contender import Capability
from shared_tools.models import ModelCallFailed, make_model
from shared_tools.results import AgentOptions, AgentResult, StopReason, Token
from tests.openai_hostile import USAGE, Answer, HostileServer, asked_by_the_user, call_json

ROOT = Path(__file__).resolve().parent.parent
ALL = list(CONTENDERS)


def is_framework(name: str) -> bool:
    """A contender on a framework of its own (``frameworks/``), whose loop and history are that framework's."""
    return spec_of(name).source_modules[0].startswith("frameworks.")


KEEPS_UNPARSABLE = [c for c in ALL if c != "maf" and not is_framework(c)]
"""The contenders whose history keeps a reply's unparsable calls: MAF is never given them, so its history holds
only what it was given (the reply's text and runnable calls). Nor does a framework's own history: PydanticAI and
the Agents SDK keep the call with no arguments (``{}``) and the error it was answered with, smolagents and Strands
keep no call at all."""


FEEDS_BACK: dict[str, int] = {"pydantic-ai": 1, "openai-agents": 1, "smolagents": 0}
"""The framework contenders whose loop answers a call it cannot run (arguments too deep, no object, not even
parsable) with an error the model reads, as their frameworks do, instead of stopping: the model's next reply
("Done.") ends the run, 2 requests. The value: the tool calls the run counts (PydanticAI and the Agents SDK answer
the call as a failed one; smolagents fails parsing the reply, so no tool is called)."""
assert all(is_framework(name) for name in FEEDS_BACK)


def assert_stopped_or_fed_back(contender: str, result: AgentResult, server: HostileServer) -> None:
    """The five, and a framework that stops there: an invalid reply, 1 request, no call. A framework that feeds
    the call back: its error sent back in the next request, and the model's answer to that ends the run."""
    if contender in FEEDS_BACK:
        assert (result.stop_reason, result.answer) == (StopReason.DONE, "Done.")
        assert len(server.requests) == 2 and result.tool_calls == FEEDS_BACK[contender]
        sent_back = server.requests[1]["messages"][2:]
        assert any("error" in str(m.get("content")).lower() for m in sent_back), sent_back
    else:
        assert result.stop_reason is StopReason.INVALID_RESPONSE
        assert len(server.requests) == 1 and result.tool_calls == 0


NESTED = '{"book_id": 7, "quantity": ' + "[" * 600 + "]" * 600 + "}"
"""1.2 KB of valid JSON, 600 levels deep: past the recursion limit of a walker that recurses once per level."""
NO_CHOICES = (
    '{"id": "x", "object": "chat.completion", "created": 1, "model": "hostile", "choices": [], "usage": ' + USAGE + "}"
)
SPLIT_EMOJI = Answer(content_pieces=['"I like \\ud83d"', '"\\udcda books"'])
"""📚 streamed as its two UTF-16 halves, each escaped in an event of its own."""


def run_contender(
    name: str, answers: list[Answer], *, stream: bool = False
) -> tuple[AgentResult, HostileServer, list[Token], BookStore]:
    tokens: list[Token] = []
    store = BookStore()
    with HostileServer(answers) as server:
        model = make_model("openai:hostile", base_url=server.base_url, timeout_s=20)
        options = AgentOptions(on_token=tokens.append if stream else None)
        result = build_contender(name, model, make_tools(store), options).run(INSTRUCTIONS, SEED_GOAL)
    return result, server, tokens, store


def assert_keepable(result: AgentResult) -> None:
    """What a record, a session file and the next request are made of encodes: no lone surrogate, no depth that
    a walker (the trace's masking, a JSON encoder) cannot take."""
    trace = masked_trace(result.trace)
    json.dumps(trace, ensure_ascii=False).encode("utf-8")
    for message in result.messages:
        message.model_dump_json().encode("utf-8")


@pytest.mark.parametrize("contender", ALL)
def test_arguments_nested_600_deep_stop_the_run_as_an_invalid_reply(contender: str) -> None:
    result, server, _, store = run_contender(contender, [Answer.calls(call_json("add_to_cart", NESTED))])
    assert_keepable(result)
    assert store.cart("c1").lines == ()
    assert_stopped_or_fed_back(contender, result, server)
    if contender in KEEPS_UNPARSABLE:
        reply = next(m for m in result.messages if m.type == "ai")
        assert not reply.tool_calls and "deeper than 32 levels" in reply.invalid_tool_calls[0]["error"]
    elif is_framework(contender):
        kept = json.dumps([m.model_dump() for m in result.messages])
        assert "[[[[" not in kept, "the call's arguments are not kept"


@pytest.mark.parametrize("contender", ALL)
@pytest.mark.parametrize("arguments", ["[7, 10]", "7", '"book 7"', "true"])
def test_arguments_that_are_no_object_stop_the_run_as_an_invalid_reply(contender: str, arguments: str) -> None:
    """The plain (non-streamed) path: langchain-openai would build a message with list arguments and raise."""
    result, server, _, store = run_contender(contender, [Answer.calls(call_json("add_to_cart", arguments))])
    assert_keepable(result)
    assert store.cart("c1").lines == ()
    assert_stopped_or_fed_back(contender, result, server)


@pytest.mark.parametrize("contender", ALL)
def test_a_reply_with_no_choices_is_an_invalid_reply(contender: str) -> None:
    result, server, _, store = run_contender(contender, [Answer(body=NO_CHOICES)])
    assert store.cart("c1").lines == ()
    assert_keepable(result)
    if contender == "pydantic-ai":  # PydanticAI asks again after an empty reply ("Please return text or call a tool.")
        assert (result.stop_reason, result.answer, len(server.requests)) == (StopReason.DONE, "Done.", 2)
        return
    assert result.stop_reason is StopReason.INVALID_RESPONSE
    assert len(server.requests) == 1


@pytest.mark.parametrize("contender", ALL)
@pytest.mark.parametrize("stream", [False, True])
def test_usage_that_is_no_number_counts_as_none(contender: str, stream: bool) -> None:
    usage = '{"prompt_tokens": "lots", "completion_tokens": [1], "total_tokens": -5}'
    result, _, _, _ = run_contender(contender, [Answer(content='"All done."', usage=usage)], stream=stream)
    assert (result.stop_reason, result.answer, result.tokens) == (StopReason.DONE, "All done.", 0)


@pytest.mark.parametrize("contender", ALL)
def test_a_split_emoji_is_joined_and_every_streamed_piece_can_be_shown(contender: str) -> None:
    result, _, tokens, _ = run_contender(contender, [SPLIT_EMOJI], stream=True)
    assert result.stop_reason is StopReason.DONE
    assert result.answer == "I like \U0001f4da books"
    if spec_of(contender).has(Capability.STREAMING):
        assert tokens, "the reply was streamed"
    else:
        assert not tokens, "a contender that does not stream shows no piece"
    for token in tokens:
        token.text.encode("utf-8")  # each half alone is U+FFFD on the screen; the kept reply has the emoji
    assert_keepable(result)


@pytest.mark.parametrize("contender", ALL)
@pytest.mark.parametrize("stream", [False, True])
def test_a_lone_surrogate_in_arguments_is_replaced_and_the_run_goes_on(contender: str, stream: bool) -> None:
    """The next request carries the call back to the server: it must be encodable, or every later call fails."""
    answers = [Answer.calls(call_json("search_books", '{"query": "orchard \\ud83d"}'))]
    result, server, _, _ = run_contender(contender, answers, stream=stream)
    assert result.stop_reason is StopReason.DONE and result.answer == "Done."
    assert len(server.requests) == 2, "the request after the tool round was sent"
    sent_back = json.dumps(server.requests[1]["messages"], ensure_ascii=False)
    assert "orchard \ufffd" in sent_back
    assert_keepable(result)


@pytest.mark.parametrize("contender", ALL)
def test_a_lone_surrogate_in_a_whole_reply_is_replaced(contender: str) -> None:
    result, _, _, _ = run_contender(contender, [Answer.text("Here \ud83d you go")])
    assert result.answer == "Here \ufffd you go"
    assert_keepable(result)


# --- the request timeout ---------------------------------------------------------------------------------------


TRICKLE = replace(Answer.text("slow " * 200), trickle_s=0.2)
"""A byte every 0.2 s: never silent for a whole read timeout, and the reply takes minutes."""


async def _astream(model: Any) -> list[Any]:
    return [chunk async for chunk in model.astream("hi")]


@pytest.mark.parametrize("call", ["invoke", "ainvoke", "stream", "astream"])
def test_a_trickling_server_is_stopped_at_the_request_timeout(call: str) -> None:
    calls = {
        "invoke": lambda m: m.invoke("hi"),
        "ainvoke": lambda m: asyncio.run(m.ainvoke("hi")),
        "stream": lambda m: list(m.stream("hi")),
        "astream": lambda m: asyncio.run(_astream(m)),
    }
    with HostileServer([TRICKLE]) as server:
        model = make_model("openai:hostile", base_url=server.base_url, timeout_s=1.0)
        started = time.monotonic()
        with pytest.raises(ModelCallFailed, match=r"sent no whole reply within 1\.0 s \(the request timeout\)"):
            calls[call](model)
        assert time.monotonic() - started < 3.0


def test_a_trickling_server_is_one_failed_call_for_an_agent() -> None:
    store = BookStore()
    with HostileServer([TRICKLE]) as server:
        model = make_model("openai:hostile", base_url=server.base_url, timeout_s=1.0)
        agent = build_contender("handwritten", model, make_tools(store), AgentOptions())
        started = time.monotonic()
        with pytest.raises(ModelCallFailed, match="sent no whole reply within"):
            agent.run(INSTRUCTIONS, SEED_GOAL)
        assert time.monotonic() - started < 3.0


# --- through the commands ----------------------------------------------------------------------------------------


def compare_py(*args: str, typed: str = "", timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "compare.py"), *args],
        input=typed,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def test_compare_shows_every_contender_after_a_reply_nested_600_deep() -> None:
    """The first reply of every run is the nested one: each run stops on it, and every run is shown and written."""

    def rule(body: dict[str, Any]) -> Answer:
        return Answer.calls(call_json("add_to_cart", NESTED)) if asked_by_the_user(body) else Answer.text("Done.")

    with HostileServer(rule=rule) as server:
        done = compare_py("--model", "openai:hostile", "--base-url", server.base_url, "bookstore", "--json", "-")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    runs = json.loads(done.stdout)["runs"]
    assert [r["contender"] for r in runs] == ALL * 2  # the default and the precise wording
    expected = {c: StopReason.DONE.value if c in FEEDS_BACK else "invalid model response" for c in ALL}
    assert {r["contender"]: r["stop_reason"] for r in runs} == expected
    assert all(r["cart"] == [] for r in runs)


HOSTILE_TURNS = {
    "http-400": (Answer(status=400), "answered HTTP 400"),
    "no-choices": (Answer(body=NO_CHOICES), "(stop reason: invalid model response)"),
    "usage-no-number": (Answer(content='"All done."', usage='{"prompt_tokens": "lots"}'), "assistant> All done."),
    "nested-arguments": (Answer.calls(call_json("add_to_cart", NESTED)), "(stop reason: invalid model response)"),
    "list-arguments": (Answer.calls(call_json("add_to_cart", "[7, 10]")), "(stop reason: invalid model response)"),
}


@pytest.mark.parametrize("contender", ["handwritten", "langgraph"])
@pytest.mark.parametrize("hostile", list(HOSTILE_TURNS))
def test_chat_says_a_hostile_reply_in_one_line_and_goes_on(tmp_path: Path, contender: str, hostile: str) -> None:
    answer, said = HOSTILE_TURNS[hostile]
    with HostileServer([answer, Answer.text("Second answer.")]) as server:
        done = compare_py(
            "chat",
            "--contender",
            contender,
            "--model",
            "openai:hostile",
            "--base-url",
            server.base_url,
            "--session-db",
            str(tmp_path / "s.db"),
            typed="first question\nsecond question\n",
        )
        asked = len(server.requests)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "Traceback" not in done.stdout
    assert said in " ".join(done.stdout.split())
    assert "Second answer." in done.stdout, "the chat went on to the next question"
    # A failed call leaves its turn cut short, finished before the next question is asked: one request more.
    assert asked == (3 if hostile == "http-400" else 2)


@pytest.mark.parametrize("contender", ["handwritten", "langgraph"])
def test_a_split_emoji_in_chat_is_kept_whole_and_the_thread_reopens(tmp_path: Path, contender: str) -> None:
    """The next question of the same chat, and the first of a reopened one, send the thread back: encodable."""
    db = str(tmp_path / "s.db")
    with HostileServer([SPLIT_EMOJI, Answer.text("Still here."), Answer.text("Here too.")]) as server:
        argv = [
            "chat",
            "--contender",
            contender,
            "--model",
            "openai:hostile",
            "--base-url",
            server.base_url,
            "--session-db",
            db,
        ]
        first = compare_py(*argv, typed="recommend a book\nand another?\n")
        reopened = compare_py(*argv, typed="one more?\n")
        requests = list(server.requests)
    for done in (first, reopened):
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
    assert "Still here." in first.stdout
    # The header names the session file, so where it wraps depends on the folder (longer under `pytest -n`).
    assert "2 turn(s) so far" in " ".join(reopened.stdout.split()) and "Here too." in reopened.stdout
    assert len(requests) == 3
    for request in requests[1:]:
        history = json.dumps(request["messages"], ensure_ascii=False)
        assert "I like \U0001f4da books" in history, "the thread sends the emoji whole"


def test_eval_exits_3_when_every_model_call_failed() -> None:
    """As compare.py does: the runs are shown and written, and the exit code says nothing was evaluated."""
    with HostileServer(rule=lambda body: Answer(status=500)) as server:
        done = compare_py(
            "eval",
            "bookstore",
            "--runs",
            "1",
            "--contenders",
            "handwritten,langgraph",
            "--model",
            "openai:hostile",
            "--base-url",
            server.base_url,
            "--json",
            "-",
        )
    assert done.returncode == 3, done.stderr
    assert "every model call failed, so nothing was evaluated" in done.stderr
    assert "Traceback" not in done.stderr
    assert json.loads(done.stdout)["runs"] == 1


def test_eval_with_one_answering_model_call_exits_0() -> None:
    """The control: the first run's call fails, the second contender's model answers, so something was evaluated."""
    answers = iter([Answer(status=500)])
    with HostileServer(rule=lambda body: next(answers, Answer.text("No."))) as server:
        done = compare_py(
            "eval",
            "bookstore",
            "--runs",
            "1",
            "--contenders",
            "handwritten,langgraph",
            "--model",
            "openai:hostile",
            "--base-url",
            server.base_url,
            "--json",
            "-",
        )
    assert done.returncode == 0, done.stderr
    assert "raised ModelCallFailed" in done.stderr


@pytest.mark.skipif(sys.platform == "win32", reason="sends SIGINT")
@pytest.mark.parametrize("contender", ["handwritten", "langgraph"])
def test_ctrl_c_after_an_add_landed_keeps_the_turn(tmp_path: Path, contender: str) -> None:
    """The second model call of the turn is made only after the add's result is in, and it never ends (a byte
    every 10 s): Ctrl-C there stops the turn at once and the chat goes on to the end of its input; the reopened
    chat lists the turn, as the cart holds the book."""
    from comparison.chat import chat_customer

    def rule(body: dict[str, Any]) -> Answer:
        if asked_by_the_user(body):
            return Answer.calls(call_json("add_to_cart", '{"book_id": 7, "quantity": 1}'))
        return replace(Answer.text("Added it."), trickle_s=10)

    db = tmp_path / "s.db"
    with HostileServer(rule=rule) as server:
        argv = [
            sys.executable,
            str(ROOT / "compare.py"),
            "chat",
            "--contender",
            contender,
            "--model",
            "openai:hostile",
            "--base-url",
            server.base_url,
            "--session-db",
            str(db),
        ]
        process = subprocess.Popen(
            argv,
            cwd=ROOT,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert process.stdin is not None
        process.stdin.write("add The Quiet Orchard\n")
        process.stdin.flush()
        deadline = time.monotonic() + 60
        while len(server.requests) < 2 and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.05)
        assert len(server.requests) == 2, "the second model call of the turn was made"
        time.sleep(0.3)  # in the middle of its reply
        process.send_signal(signal.SIGINT)
        started = time.monotonic()
        out, err = process.communicate(timeout=60)
        assert time.monotonic() - started < 8, "the turn stopped at the Ctrl-C, not at the reply's next byte"
        assert "Traceback" not in err, err
        assert process.returncode == 0 and "(stop reason: cancelled" in out, out
        reopened = compare_py(*argv[2:], typed="/history\n")
    assert reopened.returncode == 0, reopened.stderr
    text = " ".join(reopened.stdout.split())
    assert "1 turn(s) so far" in text and "1. add The Quiet Orchard" in text
    with BookStore(db.with_name(f"{db.stem}.store.db")) as store:
        assert store.cart(chat_customer(contender, "default")).quantity_of(7) == 1


# --- a hostile Ollama reply ----------------------------------------------------------------------------------------


def _ollama_line(message: str, *, done: bool = False, extra: str = "") -> str:
    return (
        f'{{"model": "qwen3:4b", "created_at": "2026-01-01T00:00:00Z", "message": {message}, '
        f'"done": {"true" if done else "false"}{extra}}}'
    )


OLLAMA_END = _ollama_line(
    '{"role": "assistant", "content": ""}',
    done=True,
    extra=', "done_reason": "stop", "prompt_eval_count": 120, "eval_count": 30',
)


def _ollama_call(arguments: str) -> str:
    call = f'{{"function": {{"name": "add_to_cart", "arguments": {arguments}}}}}'
    return _ollama_line(f'{{"role": "assistant", "content": "", "tool_calls": [{call}]}}')


GARBLED_OLLAMA = {
    "arguments-a-list": [_ollama_call("[7, 10]"), OLLAMA_END],
    "arguments-a-string": [_ollama_call('"7"'), OLLAMA_END],
    "arguments-100000-deep": [_ollama_call('{"book_id": ' + "[" * 100_000 + "]" * 100_000 + "}"), OLLAMA_END],
    "a-value-2000-deep-as-text": [
        _ollama_call('{"book_id": 7, "quantity": "' + "[" * 2000 + "]" * 2000 + '"}'),
        OLLAMA_END,
    ],
    "a-call-without-function": [_ollama_line('{"role": "assistant", "tool_calls": [{"x": 1}]}'), OLLAMA_END],
    "usage-no-number": [
        _ollama_line('{"role": "assistant", "content": "hi"}'),
        _ollama_line(
            '{"role": "assistant", "content": ""}', done=True, extra=', "prompt_eval_count": "lots", "eval_count": 30'
        ),
    ],
    "no-message": ['{"model": "qwen3:4b", "done": false}', OLLAMA_END],
    "content-a-number": [_ollama_line('{"role": "assistant", "content": 5}'), OLLAMA_END],
    "a-line-that-is-a-list": ["[1, 2, 3]", OLLAMA_END],
}


def run_on_ollama(
    contender: str, lines: list[str], monkeypatch: pytest.MonkeyPatch, store: BookStore | None = None
) -> tuple[AgentResult, BookStore]:
    from tests.ollama_replay import OllamaReplayServer, ReplayReply

    store = store or BookStore()
    with OllamaReplayServer([ReplayReply(raw_lines=lines), ReplayReply(text="Done.")]) as server:
        monkeypatch.setenv("OLLAMA_HOST", server.base_url)
        model = make_model("ollama:qwen3:4b", timeout_s=20)
        result = build_contender(contender, model, make_tools(store), AgentOptions()).run(INSTRUCTIONS, SEED_GOAL)
    return result, store


@pytest.mark.parametrize("contender", ALL)
@pytest.mark.parametrize("garbled", list(GARBLED_OLLAMA))
def test_an_ollama_reply_that_is_no_chat_reply_is_one_failed_call(
    contender: str, garbled: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ollama client and ChatOllama raise ValidationError, RecursionError, AttributeError on these: now the
    one-line `ModelCallFailed` a comparison shows as that contender's failed run, the others going on."""
    store = BookStore()
    with pytest.raises(ModelCallFailed, match=r"Ollama at http://127\.0\.0\.1:\d+ sent a reply that is not a chat "):
        run_on_ollama(contender, GARBLED_OLLAMA[garbled], monkeypatch, store)
    assert store.cart("c1").lines == ()


@pytest.mark.parametrize("contender", ALL)
def test_an_emoji_ollama_split_across_two_lines_is_joined(contender: str, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = [
        _ollama_line('{"role": "assistant", "content": "I like \\ud83d"}'),
        _ollama_line('{"role": "assistant", "content": "\\udcda books \\udcda"}'),
        OLLAMA_END,
    ]
    result, _ = run_on_ollama(contender, lines, monkeypatch)
    assert result.stop_reason is StopReason.DONE
    assert result.answer == "I like \U0001f4da books \ufffd"
    assert_keepable(result)


@pytest.mark.parametrize("contender", ALL)
def test_ollama_arguments_nested_600_deep_stop_the_run(contender: str, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = [_ollama_call('{"book_id": 7, "quantity": ' + "[" * 600 + "]" * 600 + "}"), OLLAMA_END]
    result, store = run_on_ollama(contender, lines, monkeypatch)
    assert store.cart("c1").lines == ()
    if contender == "pydantic-ai":  # the call answered as a failed one, as PydanticAI does; the model then answers
        assert (result.stop_reason, result.answer) == (StopReason.DONE, "Done.")
    else:
        assert result.stop_reason is StopReason.INVALID_RESPONSE
    assert_keepable(result)


@pytest.mark.parametrize("contender", ["handwritten", "langgraph"])
def test_a_question_the_terminal_could_not_decode_is_asked_with_u_fffd(tmp_path: Path, contender: str) -> None:
    """Bytes that are no UTF-8 reach `input()` as lone surrogates (surrogateescape), which no request encodes."""
    with HostileServer([Answer.text("Hello."), Answer.text("Again.")]) as server:
        done = subprocess.run(
            [
                sys.executable,
                str(ROOT / "compare.py"),
                "chat",
                "--contender",
                contender,
                "--model",
                "openai:hostile",
                "--base-url",
                server.base_url,
                "--session-db",
                str(tmp_path / "s.db"),
            ],
            input=b"hello \xed\xa0\xbd \xff\nagain\n",
            capture_output=True,
            timeout=120,
            cwd=ROOT,
            env={**os.environ, "PYTHONIOENCODING": "utf-8:surrogateescape"},
        )
        requests = list(server.requests)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert b"Again." in done.stdout
    asked = [m["content"] for m in requests[0]["messages"] if m["role"] == "user"]
    assert asked == ["hello \ufffd\ufffd\ufffd \ufffd"]


# --- the boundary itself, for any chat model -------------------------------------------------------------------------


def _nested(levels: int) -> Any:
    value: Any = []
    for _ in range(levels - 1):
        value = [value]
    return value


def test_masking_a_value_nested_5000_deep_stops_at_its_bound() -> None:
    from shared_tools.guards import TOO_DEEP, mask_values

    masked = mask_values({"note": "mail alice@example.com", "deep": _nested(5000)})
    assert masked["note"] == "mail <email>"
    assert TOO_DEEP in json.dumps(masked)


@pytest.mark.parametrize("contender", ALL)
def test_a_reply_from_any_chat_model_is_checked_where_it_enters(contender: str) -> None:
    """Not only the project's clients: a chat model of the caller's own (a double here) gets the same boundary
    in every contender's model step, so arguments past the bound never reach a walker (100 levels: the double
    deep-copies each reply, which a deeper one would not survive)."""
    from tests.doubles import ScriptModel, ai, call

    model = ScriptModel(replies=[ai("", call("add_to_cart", "c1", book_id=7, quantity=_nested(100))), ai("Done.")])
    store = BookStore()
    result = build_contender(contender, model, make_tools(store), AgentOptions()).run(INSTRUCTIONS, SEED_GOAL)
    assert_keepable(result)
    assert store.cart("c1").lines == ()
    if is_framework(contender):
        # A framework's own loop runs the call: the bound is checked where our tool is called, which answers it
        # as a failed call the model reads, and the model's next reply ends the run.
        assert (result.stop_reason, result.answer, result.tool_calls, model.calls) == (StopReason.DONE, "Done.", 1, 2)
    else:
        assert result.stop_reason is StopReason.INVALID_RESPONSE and result.tool_calls == 0


@pytest.mark.parametrize("call", ["stream", "astream"])
def test_the_client_streams_a_split_emoji_joined(call: str) -> None:
    """The half held back until the other half arrives: no chunk carries half a character, and the merged
    reply (what a callback's on_llm_end or a span sees) has the emoji."""
    with HostileServer([SPLIT_EMOJI]) as server:
        model = make_model("openai:hostile", base_url=server.base_url, timeout_s=10)
        chunks = list(model.stream("hi")) if call == "stream" else asyncio.run(_astream(model))
    pieces = [chunk.content for chunk in chunks if chunk.content]
    assert "".join(pieces) == "I like \U0001f4da books"
    for piece in pieces:
        piece.encode("utf-8")


@pytest.mark.parametrize("contender", ALL)
@pytest.mark.parametrize("stream", [False, True])
def test_arguments_100000_deep_are_not_parsed_again_by_anyone(contender: str, stream: bool) -> None:
    """Past the JSON decoder's own limit the call cannot even be parsed: an unparsable call whose text is not
    kept, and no contender is given it to parse again."""
    deep = '{"book_id": 7, "quantity": ' + "[" * 100_000 + "]" * 100_000 + "}"
    result, server, _, store = run_contender(contender, [Answer.calls(call_json("add_to_cart", deep))], stream=stream)
    assert_keepable(result)
    assert store.cart("c1").lines == ()
    assert_stopped_or_fed_back(contender, result, server)
    assert "[[[[" not in json.dumps(server.requests[-1]["messages"]), "the call's text was sent back"


@pytest.mark.parametrize("call", ["invoke", "ainvoke"])
def test_an_ollama_server_that_sends_a_line_now_and_then_is_stopped_at_the_request_timeout(
    call: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each line 0.2 s after the last: the httpx client's timeout (per read) never fires; the request's does."""
    from tests.ollama_replay import OllamaReplayServer, ReplayReply

    with OllamaReplayServer([ReplayReply(text="slow " * 200, chunk_delay_s=0.2)]) as server:
        monkeypatch.setenv("OLLAMA_HOST", server.base_url)
        model = make_model("ollama:qwen3:4b", timeout_s=1.0)
        started = time.monotonic()
        with pytest.raises(ModelCallFailed, match=r"sent no whole reply within 1\.0 s \(the request timeout\)"):
            model.invoke("hi") if call == "invoke" else asyncio.run(model.ainvoke("hi"))
        assert time.monotonic() - started < 3.0
