"""The conversation behind `compare.py chat`: who the customer is, how the human is asked, and the turn loop.

`compare.py` parses the command line, checks the files and maps failures to exit codes; this module holds
what happens once the conversation is open: the customer a thread shops as (one per thread and contender, so
no two share a cart), the y/N prompt that answers the approval gate, and `converse`, the loop that finishes a
turn a crash cut short and then asks, turn by turn, until the customer stops. Failures it cannot handle
(the model going away, a save another process made meanwhile) propagate for the command line to report.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict

from rich.console import Console
from rich.text import Text

from shared_tools.comparison.conversations import Conversation, ConversationNotSaved
from shared_tools.comparison.render import Progress, render_turn
from shared_tools.comparison.sanitize import clean_line
from shared_tools.models.personas import KNOWN_GOALS, ScriptExhausted, parse_goal
from shared_tools.results import AgentResult, TraceEvent


def chat_customer(contender: str, thread: str) -> str:
    """The customer who shops in a chat thread: one per thread and per contender, so no two share a cart.

    Derived, not stored, so reopening the thread finds the same cart; the thread name is checked first
    (`conversations.check_thread_name`), so it can be part of an id.
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
                answer = input("approve? [y/N] ")
            except EOFError:
                return False
        return answer.strip().lower() in ("y", "yes")

    return ask


def show_turn(console: Console, result: AgentResult) -> None:
    """One turn on the customer's own screen: from the result, not a record, so the answer is shown unmasked."""
    render_turn(console, [asdict(e) for e in result.trace], result.user_message(), result.stop_reason)


def converse(
    console: Console,
    conversation: Conversation,
    *,
    scripted: bool,
    progress: Progress | None,
    events: list[TraceEvent],
) -> None:
    """Finish a turn a crash or an outage cut short, then ask until an empty line, 'quit' or the end of input."""
    events.clear()
    finished = conversation.finish_unfinished()
    if finished is not None:
        console.print(Text("The last turn was cut short; finishing it from its last checkpoint:"))
        show_turn(console, finished)
    while True:
        try:
            question = input("you> ").strip()
        except EOFError:
            return
        if question.lower() in ("", "quit", "exit"):
            return
        if scripted and not scripted_knows(question):
            # Refused before asking, so an unknown goal never lands in the stored conversation.
            console.print(Text("The scripted model has no script for that. It knows: " + " | ".join(KNOWN_GOALS)))
            continue
        events.clear()
        spin = progress.spinning() if progress is not None else nullcontext()
        try:
            with spin:
                result = conversation.ask(question)
        except ScriptExhausted as exc:
            console.print(Text(f"(scripted model) {clean_line(str(exc))}", style="yellow"))
            continue
        except ConversationNotSaved as exc:  # the answer stands; the file keeps the other process's turns
            show_turn(console, exc.result)
            raise
        show_turn(console, result)
