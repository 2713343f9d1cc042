"""The conversation behind `compare.py chat`: who the customer is, how the human is asked, and the turn loop.

One customer per thread and contender; `ChatHuman`, the y/N prompt that answers the approval gate; `LiveTurn`, the
answer printed as the model writes it; and `converse`, one event loop that finishes a turn a crash cut short, then
reads line after line (`comparison.line_editor`), where Ctrl-C stops the turn that runs and the prompt stays.
Failures it cannot handle (`ThreadBusy`, an outage) propagate.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack, contextmanager, nullcontext
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from typing import Any

from rich.console import Console
from rich.text import Text

from comparison.conversations import Conversation, ConversationNotSaved
from comparison.line_editor import CtrlC, LineReader
from comparison.render import print_trace, render_turn
from comparison.sanitize import clean_line, clean_text
from shared_tools.conversation import NoRewind
from shared_tools.models.errors import ModelCallFailed
from shared_tools.models.personas import KNOWN_GOALS, ScriptExhausted, parse_goal
from shared_tools.results import AgentResult, ConcurrentTurn, StopReason, Token, TokenKind, TraceEvent
from shared_tools.sync import run_blocking

COMMANDS = (
    ("/help", "lists these commands"),
    ("/history", "lists the turns of this thread"),
    ("/rewind [N]", "takes back the last N turns (default 1); the cart is not rewound"),
    ("/bye", "ends the chat, as Ctrl-D does, or a second Ctrl-C at an empty prompt"),
)
"""The chat's commands, as /help lists them."""
BYE = ("/bye", "/quit", "/exit")


class ThreadBusy(Exception):
    """Another process has this chat's thread: it saved since this chat read it, it waits at its approval
    prompt, or its turn did not end within the wait. The command line says so in one line (exit 4)."""


@contextmanager
def another_process_says_so(thread: str) -> Iterator[None]:
    """Turn what another process's hold on the thread raises here into `ThreadBusy`, in words for the person at
    this prompt (the sessions' own messages name the methods a program would call)."""
    from handwritten import SessionConflict
    from langgraph_version.session import NotPaused, TurnNotOver

    try:
        yield
    except TurnNotOver as exc:
        if exc.awaiting_approval:
            raise ThreadBusy(
                f"thread {thread!r} is waiting for an approval, asked in another chat; answer it there, or end "
                "that chat and open the thread again here to be asked"
            ) from None
        raise ThreadBusy(
            f"thread {thread!r} has a turn another chat has not finished; open the thread again to finish it"
        ) from None
    except SessionConflict:
        raise ThreadBusy(
            f"thread {thread!r} was saved by another chat since this one read it, and nothing here was changed; "
            "open the thread again to go on from its latest turn"
        ) from None
    except NotPaused:
        raise ThreadBusy(answered_elsewhere(thread)) from None
    except ConcurrentTurn as exc:
        raise ThreadBusy(str(exc)) from None


def answered_elsewhere(thread: str) -> str:
    return (
        f"thread {thread!r}: the approval asked here was answered in another chat meanwhile, so this answer was "
        "not used; open the thread again to go on from there"
    )


def chat_customer(contender: str, thread: str) -> str:
    """The customer who shops in a chat thread: one per thread and per contender, so no two share a cart.

    Derived, not stored, so reopening the thread finds the same cart; the thread name is checked first
    (`shared_tools.conversation.check_thread_name`), so it can be part of an id.
    """
    return f"chat-{contender}-{thread}"


def scripted_knows(question: str) -> bool:
    """Does the scripted model have a script for `question`?"""
    try:
        return parse_goal(question) is not None
    except ValueError:  # an order number longer than Python turns into an int (4,300 digits): no script for it
        return False


def say_model_failed(console: Console, exc: ModelCallFailed, live: LiveTurn | None) -> None:
    if live is not None:
        live.close_line()  # a reply cut off mid-line
    console.print(
        Text(
            f"The model call failed: {clean_line(str(exc))}. The turn is kept, cut short; the next "
            "question finishes it first.",
            style="red",
        )
    )


def show_turn(console: Console, result: AgentResult) -> None:
    """One turn on the customer's own screen: from the result, not a record, so the answer is shown unmasked."""
    render_turn(console, [asdict(e) for e in result.trace], result.user_message(), result.stop_reason)


class LiveTurn:
    """A turn shown as it happens: `on_token` prints the reply as the model writes it (the plan dimmed), `on_event`
    each trace line when it is done; `end` finishes the turn with what was not streamed (an honest stop message).

    Every piece goes through `clean_text`, so no control character a model sends reaches the terminal."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.kind: TokenKind | None = None
        """What is being printed on the open line (None: no line is open)."""
        self.answered = False
        """Answer text was printed in this turn."""
        self.planned: set[int] = set()
        """The steps whose plan was streamed, so their trace line does not print it again."""

    def start(self) -> None:
        self.kind, self.answered, self.planned = None, False, set()

    def close_line(self) -> None:
        if self.kind is not None:
            self.console.print()
            self.kind = None

    def on_token(self, token: Token) -> None:
        if not token.text:
            return
        if token.kind is not self.kind:
            self.close_line()
            label = "assistant> " if token.kind is TokenKind.ANSWER else "plan: "
            self.console.print(Text(label, style="bold" if token.kind is TokenKind.ANSWER else "dim"), end="")
            self.kind = token.kind
        self.answered |= token.kind is TokenKind.ANSWER
        if token.kind is TokenKind.PLAN:
            self.planned.add(token.step)
        style = "dim" if token.kind is TokenKind.PLAN else ""
        self.console.print(Text(clean_text(token.text), style=style), end="")

    def on_event(self, event: TraceEvent) -> None:
        self.close_line()
        if event.is_model and event.step in self.planned:
            event = replace(event, detail=event.detail.partition("; plan: ")[0])
        print_trace(self.console, [asdict(event)])

    def end(self, result: AgentResult) -> None:
        """The end of a turn: the stop reason when it is not "done", the honest message when no answer streamed."""
        self.close_line()
        if not (self.answered and result.stop_reason is StopReason.DONE):
            self.console.print(Text("assistant> ", style="bold") + Text(clean_text(result.user_message())))
        if result.stop_reason is not StopReason.DONE:
            self.console.print(Text(f"(stop reason: {clean_line(str(result.stop_reason))})"))


async def run_command(
    console: Console,
    conversation: Conversation,
    command: str,
    cart: Callable[[], str],
    thread: str = "this thread",
    no_rewind: str | None = None,
) -> bool:
    """``/help``, ``/history`` or ``/rewind [N]``; False when `command` is none of them (``/bye`` is the chat's).

    `no_rewind`: why this conversation has no rewind (its contender's sentence), said by /help and /rewind."""
    name, _, rest = command.partition(" ")
    if name == "/help":
        for usage, what in COMMANDS:
            if usage.startswith("/rewind") and no_rewind is not None:
                what = f"not here: {no_rewind}"
            console.print(Text(f"  {usage:<12} {clean_line(what)}"))
        console.print(Text("  Ctrl-C stops a turn that runs, keeping what it did; the prompt stays."))
        return True
    if name == "/history":
        turns = await conversation.aturns()
        if not turns:
            console.print(Text("(no turns yet)"))
        for turn in turns:
            where = f"  [checkpoint {turn.checkpoint_id}]" if turn.checkpoint_id else ""
            console.print(Text(f"{turn.number:>3}. {clean_line(turn.question)}{where}"))
        return True
    if name == "/rewind":
        if no_rewind is not None:
            console.print(Text(f"cannot rewind: {clean_line(no_rewind)}; nothing was changed"))
            return True
        try:
            count = int(rest.strip() or "1")
            if count < 1:
                raise ValueError(count)
        except ValueError:
            console.print(Text("usage: /rewind [N], N a whole number of turns, at least 1"))
            return True
        try:
            with another_process_says_so(thread):
                rewound = await conversation.arewind(count)
        except (ValueError, NoRewind) as exc:  # more turns than it has; a session that has no rewind after all
            console.print(Text(f"cannot rewind: {clean_line(str(exc))}"))
            return True
        to = f"; the thread goes on from checkpoint {rewound.checkpoint_id}" if rewound.checkpoint_id else ""
        console.print(
            Text(f"Rewound {rewound.turns} turn(s) ({rewound.messages} messages){to}. ")
            + Text(f"The cart is not rewound: {clean_line(cart())}.")
        )
        return True
    return False


def converse(
    console: Console,
    conversation: Conversation,
    *,
    scripted: bool,
    reader: LineReader,
    events: list[TraceEvent],
    live: LiveTurn | None = None,
    cart: Callable[[], str] = lambda: "unknown",
    thread: str = "this thread",
    human: ChatHuman | None = None,
    no_rewind: str | None = None,
) -> Ending:
    """Finish a turn a crash or an outage cut short, then ask until /bye, the end of input or a Ctrl-C at an
    empty prompt right after another; how it ended. All of it in one event loop, the prompt's and the turns'.

    With `live`, each turn is shown as it happens (the agent was built with its `on_token` and `on_event`);
    without, it is shown when it ends. `cart` says what the cart holds, for ``/rewind``; `human` asks the
    approvals (a graph's pauses here, the hand-written loop's inside its run); `no_rewind`, why this
    conversation has no ``/rewind`` (None: it has one). A model call that fails mid-turn
    is one line; the turn is kept, cut short, and finished before the next question. `ThreadBusy`,
    `ConversationNotSaved` and an outage that is not a failed call propagate."""
    chat = _Chat(console, conversation, scripted, reader, events, live, cart, thread, human or ChatHuman(), no_rewind)
    chat.human.chat = chat
    return run_blocking(chat.arun, instead="_Chat.arun()")


class Ending(StrEnum):
    """How a chat ended: the person said so (/bye, the end of input) or pressed Ctrl-C to leave."""

    BYE = "bye"
    INTERRUPTED = "interrupted"


class ChatHuman:
    """The customer at the chat's prompt, asked about each risky write: ``approve? [y/N]``, no answer a no.

    The hand-written loop awaits `decide` inside its run (through `AskingHuman`); a graph's pauses are put to it
    by the chat. A Ctrl-C at the question is a no, and stops the turn (`_Chat.stop_turn`)."""

    def __init__(self) -> None:
        self.chat: _Chat | None = None
        """The chat whose prompt asks, and whose turn a Ctrl-C here stops (`converse` sets it)."""

    async def decide(self, reason: str) -> bool:
        assert self.chat is not None, "converse gives the human its chat"
        chat = self.chat
        chat.console.print(Text("approval needed: ", style="bold") + Text(clean_line(reason)))
        try:
            answer = await chat.read("approve? [y/N] ", question=False)
        except CtrlC:  # the key, on a terminal; from a pipe, `on_sigint` stopped the turn already
            if not chat.cancel.is_set():
                chat.stop_turn(at_once=False)
            chat.console.print(Text("(Ctrl-C: not approved, and the turn stops)"))
            return False
        return answer is not None and answer.strip().lower() in ("y", "yes")

    def decide_now(self, reason: str) -> bool:
        """`decide` for a contender whose run wants a bool at once (`ContenderSpec.awaits_approve` False): from a
        worker thread the chat's loop asks as usual; on the loop's own thread, with it blocked, the answer is read
        there (`LineReader.read_now`)."""
        assert self.chat is not None, "converse gives the human its chat"
        chat = self.chat
        if chat.loop is not None and threading.get_ident() != chat.loop_thread:
            return asyncio.run_coroutine_threadsafe(self.decide(reason), chat.loop).result()
        chat.console.print(Text("approval needed: ", style="bold") + Text(clean_line(reason)))
        try:
            answer = chat.reader.read_now("approve? [y/N] ")
        except CtrlC:
            chat.cancel.set()  # the turn stops before its next model or tool call
            chat.console.print(Text("(Ctrl-C: not approved, and the turn stops)"))
            return False
        return answer is not None and answer.strip().lower() in ("y", "yes")


@dataclass
class _Chat:
    """What `converse` holds between lines: `cut_short` while a turn an outage cut short waits to be finished;
    `turn`, the task of the turn that runs, and `cancel`, its stop; `interrupts`, the Ctrl-Cs in a row."""

    console: Console
    conversation: Conversation
    scripted: bool
    reader: LineReader
    events: list[TraceEvent]
    live: LiveTurn | None
    cart: Callable[[], str]
    thread: str
    human: ChatHuman
    no_rewind: str | None = None
    cut_short: bool = False
    turn: asyncio.Task[Any] | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    reading: asyncio.Task[Any] | None = None
    interrupts: int = 0
    loop: asyncio.AbstractEventLoop | None = None
    loop_thread: int | None = None
    """The chat's event loop and its thread, for an approval asked from a turn's worker thread (`decide_now`)."""

    async def arun(self) -> Ending:
        self.loop, self.loop_thread = asyncio.get_running_loop(), threading.get_ident()
        with self.ctrl_c_stops_the_turn():
            self.cut_short = not await self.finish_cut_short()
            while True:
                try:
                    line = await self.read("you> ")
                except CtrlC:  # at an empty prompt
                    self.interrupts += 1
                    if self.interrupts > 1:
                        return Ending.INTERRUPTED
                    self.console.print(Text("(Ctrl-C again, Ctrl-D or /bye to leave)"))
                    continue
                if line is None:
                    return Ending.BYE
                question = line.strip()
                if question:
                    self.interrupts = 0
                if not question:
                    continue  # an empty line asks nothing
                if question.split()[0] in BYE or question.lower() in ("quit", "exit"):
                    return Ending.BYE
                if question.startswith("/"):
                    await self.command(question)
                elif self.scripted and not scripted_knows(question):
                    # Refused before asking, so an unknown goal never lands in the stored conversation.
                    self.console.print(
                        Text("The scripted model has no script for that. It knows: " + " | ".join(KNOWN_GOALS))
                    )
                elif await self.finished_first():  # the model still failing: the question is not asked, nor stored
                    await self.ask(question)

    async def read(self, prompt: str, *, question: bool = True) -> str | None:
        """The next line (None: the end of input); a Ctrl-C while it is read is `CtrlC` here: on a terminal the
        line editor's, from a pipe `on_sigint`'s, which cancels the read."""
        self.reading = reading = asyncio.ensure_future(self.reader.read(prompt, question=question))
        try:
            return await reading
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if not reading.cancelled() or (task is not None and task.cancelling()):
                raise  # this task itself was cancelled: not a Ctrl-C at the prompt
            raise CtrlC from None
        finally:
            self.reading = None

    @contextmanager
    def ctrl_c_stops_the_turn(self) -> Iterator[None]:
        """SIGINT, for the loop to act on (never a KeyboardInterrupt raised inside asyncio or a save): a turn
        that runs is stopped, a prompt read from a pipe is interrupted. Outside the main thread: Python's own."""
        loop = asyncio.get_running_loop()
        try:
            loop.add_signal_handler(signal.SIGINT, self.on_sigint)
        except (RuntimeError, ValueError, NotImplementedError):  # not the main thread, or no signals here
            yield
            return
        try:
            yield
        finally:
            loop.remove_signal_handler(signal.SIGINT)

    def on_sigint(self) -> None:
        if self.reading is not None:  # a prompt read from a pipe: the question's, or an approval's in the turn
            self.stop_turn(at_once=False)
            self.reading.cancel()
        else:
            self.stop_turn(at_once=True)

    def stop_turn(self, *, at_once: bool) -> bool:
        """Stop the turn that runs, if one does; whether one did. `at_once`: its task is cancelled (a model call
        or a tool is cut where it is; the turn is saved as far as it got, cut calls answered so); else the
        cancel event stops it before its next model or tool call, which a refused approval does at once. A
        Ctrl-C while a stopped turn winds down (its save) is not passed on: the save is not cut."""
        if self.turn is None or self.turn.done():
            return False
        if not self.cancel.is_set():
            self.interrupts += 1
            self.cancel.set()
        if at_once and not self.turn.cancelling():
            self.turn.cancel()
        return True

    def start_turn(self) -> None:
        self.events.clear()
        self.cancel = threading.Event()
        if self.live is not None:
            self.live.start()

    def show(self, result: AgentResult) -> None:
        if self.live is not None:
            self.live.end(result)
        else:
            show_turn(self.console, result)

    async def run_turn(self, work: Callable[[], Awaitable[AgentResult | None]]) -> AgentResult | None:
        """`work()` as the turn's task, which a Ctrl-C stops: a task cancelled ends in `AgentCancelled` (the
        hand-written turn, saved) or a plain cancel; either way its stop is said here and the chat goes on."""
        self.start_turn()
        self.turn = asyncio.ensure_future(work())
        try:
            await asyncio.wait({self.turn})
        except asyncio.CancelledError:  # this chat's own task: the turn goes too, and its save is waited for
            self.turn.cancel()
            await asyncio.wait({self.turn})
            raise
        finally:
            turn, self.turn = self.turn, None
        try:
            return turn.result()
        except asyncio.CancelledError as cancelled:
            kept = getattr(cancelled, "result", None)
            if isinstance(kept, AgentResult):
                self.show(kept)
            else:  # a graph's: its thread records the cut node's calls and the stop (`record_cancellation`)
                if self.live is not None:
                    self.live.close_line()
                self.console.print(Text("(stop reason: cancelled; the turn is kept as far as it got)"))
            return None

    async def answered(self, result: AgentResult | None) -> AgentResult | None:
        """A graph's approval pauses put to the human one by one, and the run resumed, until the turn ends."""
        if result is None:
            return None
        trace = list(result.trace)
        while result.stop_reason is StopReason.AWAITING_APPROVAL:
            result = await self.decide_and_resume(result.pending or [])
            trace += result.trace
        return replace(result, trace=trace)

    async def decide_and_resume(self, pending: list[dict[str, Any]]) -> AgentResult:
        """Put each request of a pause to the human and resume with the answers, holding the pause meanwhile
        (`answering`), so a chat opened on the thread now is refused instead of asking about it too."""
        async with AsyncExitStack() as held:
            try:
                await held.enter_async_context(self.answering())
            except ConcurrentTurn:
                raise ThreadBusy(
                    f"thread {self.thread!r} is waiting for an approval, asked in another chat; answer it there, or "
                    "end that chat and open the thread again here to be asked"
                ) from None
            answers = [await self.human.decide(request["reason"]) for request in pending]
            # Answered elsewhere meanwhile (by a program: a chat would have been kept out), the thread may wait
            # at another request: these answers are not for it.
            if [r["tool_call"]["id"] for r in await self.conversation.apending()] != [
                r["tool_call"]["id"] for r in pending
            ]:
                raise ThreadBusy(answered_elsewhere(self.thread))
            return await self.conversation.aresume(answers[0] if len(answers) == 1 else answers, cancel=self.cancel)

    def answering(self) -> AbstractAsyncContextManager[None]:
        # Only a graph's conversation pauses (the hand-written loop asks during its run): the others hold nothing.
        hold = getattr(self.conversation, "answering", None)
        return hold() if hold is not None else nullcontext()

    async def finish_cut_short(self) -> bool:
        """Finish a cut-short turn (or ask a pause nobody answered again), if there is one; False when the model
        failed again (said in one line)."""

        async def finish() -> AgentResult | None:
            with another_process_says_so(self.thread):
                pending = await self.conversation.apending()
                if pending:
                    self.console.print(Text("The last turn waits for an approval; asking it again:"))
                    return await self.answered(await self.decide_and_resume(pending))
                unfinished = await self.conversation.acontinue_unfinished(cancel=self.cancel)
                if unfinished is not None:
                    self.console.print(Text("The last turn was cut short; finishing it from its last checkpoint:"))
                return await self.answered(unfinished)

        try:
            finished = await self.run_turn(finish)
        except ModelCallFailed as exc:
            say_model_failed(self.console, exc, self.live)
            return False
        except ScriptExhausted as exc:  # a turn asked on another model: this one cannot finish it
            self.console.print(
                Text(f"(scripted model) {clean_line(str(exc))} ", style="yellow")
                + Text("The cut-short turn stays as it is; open the thread on the model it was asked on to finish it.")
            )
            return False
        if finished is not None:
            self.show(finished)
        return True

    async def finished_first(self) -> bool:
        """Whether no cut-short turn is left (one is finished first); False when the model failed again."""
        if self.cut_short:
            self.cut_short = not await self.finish_cut_short()
        return not self.cut_short

    async def command(self, line: str) -> None:
        # A rewind goes back from a finished turn: a cut-short one is finished first, as before a question.
        if line.split()[0] == "/rewind" and self.no_rewind is None and not await self.finished_first():
            return
        if not await run_command(self.console, self.conversation, line, self.cart, self.thread, self.no_rewind):
            self.console.print(Text(f"unknown command {clean_line(line.split()[0])!r}; /help lists the commands"))

    async def ask(self, question: str) -> None:
        async def turn() -> AgentResult | None:
            with another_process_says_so(self.thread):
                return await self.answered(await self.conversation.aask(question, cancel=self.cancel))

        try:
            result = await self.run_turn(turn)
        except ModelCallFailed as exc:
            say_model_failed(self.console, exc, self.live)
            self.cut_short = True
            return
        except ScriptExhausted as exc:
            self.console.print(Text(f"(scripted model) {clean_line(str(exc))}", style="yellow"))
            return
        except ConversationNotSaved as exc:  # the answer stands; the file keeps the other process's turns
            self.show(exc.result)
            raise
        if result is not None:
            self.show(result)
