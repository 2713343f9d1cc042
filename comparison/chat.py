"""The conversation behind `compare.py chat`: who the customer is, how the human is asked, and the turn loop.

One customer per thread and contender; the y/N prompt that answers the approval gate; `LiveTurn`, the answer
printed as the model writes it; and `converse`, which finishes a turn a crash cut short, then asks turn by turn,
with ``/rewind [N]`` and ``/history``. Failures it cannot handle (`ThreadBusy`, an outage) propagate.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import asdict, dataclass, replace

from rich.console import Console
from rich.text import Text

from comparison.conversations import Conversation, ConversationNotSaved, turns_in
from comparison.render import Progress, print_trace, render_turn
from comparison.sanitize import clean_line, clean_text
from shared_tools.models.errors import ModelCallFailed
from shared_tools.models.personas import KNOWN_GOALS, ScriptExhausted, parse_goal
from shared_tools.replies import whole_text
from shared_tools.results import AgentResult, StopReason, Token, TokenKind, TraceEvent
from shared_tools.sync import interrupt_run

COMMANDS = "/rewind [N] takes back the last N turns (default 1); /history lists the turns"


class ThreadBusy(Exception):
    """Another process has this chat's thread: it saved since this chat read it, it waits at its approval
    prompt, or its turn did not end within the wait. The command line says so in one line (exit 4)."""


@contextmanager
def another_process_says_so(thread: str) -> Iterator[None]:
    """Turn what another process's hold on the thread raises here into `ThreadBusy`, in words for the person at
    this prompt (the sessions' own messages name the methods a program would call)."""
    from handwritten import SessionConflict
    from langgraph_version.session import TurnNotOver
    from shared_tools.results import ConcurrentTurn

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
    except ConcurrentTurn as exc:
        raise ThreadBusy(str(exc)) from None


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


def approval_prompt(console: Console, progress: Progress | None) -> Callable[[str], bool]:
    """How chat asks the customer about a risky write: the reason, then y/n at the prompt (no input means no)."""

    def ask(reason: str) -> bool:
        pause: AbstractContextManager[None] = progress.paused() if progress is not None else nullcontext()
        with pause:
            console.print(Text("approval needed: ", style="bold") + Text(clean_line(reason)))
            try:
                with ctrl_c_raises():
                    answer = input("approve? [y/N] ")
            except EOFError:
                return False
            except KeyboardInterrupt:
                # Asked inside the turn's run: stopped the way a Ctrl-C stops any run (its task cancelled), so
                # the turn is saved as far as it got before the chat ends.
                if interrupt_run():
                    raise asyncio.CancelledError from None
                raise
        return answer.strip().lower() in ("y", "yes")

    return ask


@contextmanager
def ctrl_c_raises() -> Iterator[None]:
    """Python's own SIGINT handler while a prompt blocks the event loop: asyncio's would only cancel the task,
    which cannot run until the line is typed, so the first Ctrl-C would do nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler if previous is None else previous)


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


def run_command(
    console: Console, conversation: Conversation, command: str, cart: Callable[[], str], thread: str = "this thread"
) -> bool:
    """``/rewind [N]`` or ``/history``; False when `command` is neither (it is then no command at all)."""
    name, _, rest = command.partition(" ")
    if name == "/history":
        turns = turns_in(conversation)
        if not turns:
            console.print(Text("(no turns yet)"))
        for turn in turns:
            where = f"  [checkpoint {turn.checkpoint_id}]" if turn.checkpoint_id else ""
            console.print(Text(f"{turn.number:>3}. {clean_line(turn.question)}{where}"))
        return True
    if name == "/rewind":
        try:
            count = int(rest.strip() or "1")
            if count < 1:
                raise ValueError(count)
        except ValueError:
            console.print(Text("usage: /rewind [N], N a whole number of turns, at least 1"))
            return True
        try:
            with another_process_says_so(thread):
                rewound = conversation.rewind(count)
        except ValueError as exc:  # more turns than the conversation has
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
    progress: Progress | None,
    events: list[TraceEvent],
    live: LiveTurn | None = None,
    cart: Callable[[], str] = lambda: "unknown",
    thread: str = "this thread",
) -> None:
    """Finish a turn a crash or an outage cut short, then ask until an empty line, 'quit' or the end of input.

    With `live`, each turn is shown as it happens (the agent was built with its `on_token` and `on_event`);
    without, it is shown when it ends. `cart` says what the cart holds, for ``/rewind``. A model call that fails
    mid-turn is one line; the turn is kept, cut short, and finished before the next question."""
    chat = _Chat(console, conversation, scripted, progress, events, live, cart, thread)
    chat.cut_short = not chat.finish_cut_short()
    while (question := _next_question()) is not None:
        if question.startswith("/"):
            chat.command(question)
        elif scripted and not scripted_knows(question):
            # Refused before asking, so an unknown goal never lands in the stored conversation.
            console.print(Text("The scripted model has no script for that. It knows: " + " | ".join(KNOWN_GOALS)))
        elif chat.finished_first():  # the model still failing: the question is not asked, so not stored either
            chat.ask(question)


def _next_question() -> str | None:
    """The next line typed; None at an empty line, 'quit', 'exit' or the end of input."""
    try:
        # Bytes the terminal's encoding could not decode arrive as lone surrogates, which no request can
        # encode: each becomes U+FFFD before the question enters the conversation.
        question = whole_text(input("you> ")).strip()
    except EOFError:
        return None
    return None if question.lower() in ("", "quit", "exit") else question


@dataclass
class _Chat:
    """What `converse` holds between lines; `cut_short` while a turn an outage cut short waits to be finished."""

    console: Console
    conversation: Conversation
    scripted: bool
    progress: Progress | None
    events: list[TraceEvent]
    live: LiveTurn | None
    cart: Callable[[], str]
    thread: str
    cut_short: bool = False

    def start_turn(self) -> None:
        self.events.clear()
        if self.live is not None:
            self.live.start()

    def show(self, result: AgentResult) -> None:
        if self.live is not None:
            self.live.end(result)
        else:
            show_turn(self.console, result)

    def finish_cut_short(self) -> bool:
        """Finish a cut-short turn, if there is one; False when the model failed again (said in one line)."""
        self.start_turn()
        try:
            with another_process_says_so(self.thread):
                finished = self.conversation.continue_unfinished()
        except ModelCallFailed as exc:
            say_model_failed(self.console, exc, self.live)
            return False
        if finished is not None:
            self.console.print(Text("The last turn was cut short; finishing it from its last checkpoint:"))
            self.show(finished)
        return True

    def finished_first(self) -> bool:
        """Whether no cut-short turn is left (one is finished first); False when the model failed again."""
        if self.cut_short:
            self.cut_short = not self.finish_cut_short()
        return not self.cut_short

    def command(self, line: str) -> None:
        # A rewind goes back from a finished turn: a cut-short one is finished first, as before a question.
        if line.split()[0] == "/rewind" and not self.finished_first():
            return
        if not run_command(self.console, self.conversation, line, self.cart, self.thread):
            self.console.print(Text(f"unknown command {clean_line(line.split()[0])!r}; {COMMANDS}"))

    def ask(self, question: str) -> None:
        self.start_turn()
        spin = self.progress.spinning() if self.progress is not None and self.live is None else nullcontext()
        try:
            with spin, another_process_says_so(self.thread):
                result = self.conversation.ask(question)
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
        self.show(result)
