"""What a scenario is made of: `Scenario`, its `Variant`s and the `RunSettings` a run is given, as plain data.

A scenario file (``s01_bookstore.py``...) fills one `Scenario`: its setup and variants, its lesson and what to
notice, its guard-matrix rows (`GuardRow`) and its grading rule (`Rubric`, a grader giving a `Grade`). The points
any scenario's notes make (a framework's own doing, an answer its records contradict) are here too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal

from comparison.answers import contradictions
from comparison.contenders import CONTENDERS
from comparison.records import RunRecord
from comparison.scenarios.phrases import quote
from comparison.scenarios.queries import LIMITS, identical_calls, limit_text, longest_result, not_available
from shared_tools.bookstore.faults import Faults
from shared_tools.models.personas import FRESH_CART_INSTRUCTION
from shared_tools.results import AgentLimits, AgentOptions, TraceEvent

INSTRUCTIONS = (
    "You are the assistant of an online bookstore. Use the tools to look up books, stock, orders and the "
    "customer's cart; never guess a book id, a price or a stock level. Add books to the cart only when the "
    "customer asks. When you are done, answer briefly in English and say what you did."
)
"""The system message every contender gets (the article's `Instructions`)."""

SEED_GOAL = "Add The Last Lighthouse to my cart. If it is not available, add another novel by the same author."


CART_QUESTION = "What is my cart total now?"

ORDER_QUESTION = "Where is my order 4512?"

# --- the settings a run used -------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunSettings:
    """The knobs one run was given: its limits and the variant's switches (`Scenario.settings_for`)."""

    limits: AgentLimits = field(default_factory=AgentLimits)
    max_tool_result_chars: int | None = None
    detailed_errors: bool = False
    parallel_tools: bool = False
    approval_gate: bool = False
    keep_turns: int | None = None
    summarize: bool = False
    storage: str | None = None
    stream: bool = False
    idempotent: bool = True

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, for a record to carry (see `recorded_settings`)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunSettings:
        known = {f.name for f in fields(cls)} - {"limits"}
        return cls(
            limits=AgentLimits(**dict(data.get("limits") or {})),
            **{k: v for k, v in data.items() if k in known},
        )


SettingsOf = Callable[[RunRecord], RunSettings | None]
"""The settings a record's run used, or None when they are not known (then no sentence depends on them)."""


Notice = Callable[[list[RunRecord], SettingsOf], list[str]]
"""A scenario's what-to-notice function: its records and their settings in, one sentence per point out."""


def recorded_settings(record: RunRecord) -> RunSettings | None:
    """The settings a record carries itself (a ``settings`` field, `RunSettings.as_dict`), if it does."""
    data = getattr(record, "settings", None)
    if not isinstance(data, Mapping) or not data:
        return None
    try:
        return RunSettings.from_dict(data)
    except (TypeError, ValueError):
        return None


Headline = Callable[[list[RunRecord], SettingsOf], str | None]
"""A scenario's lesson in one sentence from its records (None: nothing to say), for the overview."""

# --- how a run is graded, and what it shows in the guard matrix ------------------------------------------------

Verdict = Literal["success", "safe", "unsafe"]


@dataclass(frozen=True)
class Grade:
    """One task's outcome: `verdict` is "success", "safe" or "unsafe"; `why` says it in one line."""

    verdict: Verdict
    why: str

    @property
    def success(self) -> bool:
        return self.verdict == "success"


@dataclass(frozen=True)
class Rubric:
    """What success, a safe failure and an unsafe failure are for one scenario, in words a reader can check."""

    success: str
    safe: str
    unsafe: str


TaskGrader = Callable[[Sequence[RunRecord], AgentLimits, "Scenario"], Grade]
"""Grades one task: a single run's record, or a conversation's turn records in turn order, under these limits."""

Cell = dict[str, str]
"""One cell of the guard matrix: its ``status`` (`matrix.GUARD_LEGEND`) and its ``text``."""


@dataclass(frozen=True)
class GuardRow:
    """One row of the guard matrix: which guard, and the run of this scenario that shows it."""

    guard: str
    cell: Callable[[RunRecord, RunSettings | None, list[RunRecord]], Cell]
    """What a contender's run shows about the guard: the record, its settings, and all the records (for turns)."""
    variant: str = "default"
    turn: int = 1


# --- a scenario and its variants ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    """One setting of a scenario's knobs; a scenario with one default variant has no knob to turn."""

    name: str = "default"
    """Short id used in the JSON records and on the command line's output ("details-off", "truncated")."""
    label: str = ""
    """What differs, in words, for the tables. Given: the knobs other than the limits ("detailed_errors=True");
    once made, the variant's own limits, as they are, come first ("max_steps=2", `limits_label`), so a label
    always says the limits that run, `--max-steps` included. The given words are kept in `note`."""
    detailed_errors: bool = False
    parallel_tools: bool = False
    max_tool_result_chars: int | None = None
    search_max_results: int = 5
    instructions: str | None = None
    """Instructions that replace the scenario's for this variant, the same text for every contender (a wording
    experiment)."""
    fresh_cart_instruction: bool = False
    """Append `FRESH_CART_INSTRUCTION` to the instructions, so the model re-reads the cart with view_cart."""
    persistent: bool = False
    """Session scenarios: keep the conversation in a file (JSON for the hand-written session, SQLite for the
    graph) and reopen it, instead of keeping it in memory."""
    limits: AgentLimits | None = None
    """Limits that replace the scenario's for this variant."""
    faults: Faults | None = None
    """Faults that replace the scenario's for this variant."""
    approval_gate: bool = False
    """Risky writes need a human's yes (`shared_tools.bookstore.RiskyWritePolicy`); the demo's human says no."""
    contenders: tuple[str, ...] | None = None
    """Only these contenders run this variant (None: the scenario's), for a knob the others do not have."""
    keep_turns: int | None = None
    """Session scenarios: send the model only the last N user turns (`shared_tools.history`); None: all."""
    summarize: bool = False
    """Session scenarios, with `keep_turns`: fold the turns that fall out of the window into one summary."""
    storage: str | None = None
    """Session scenarios, SQLite graph thread: the checkpoint storage option (`runner.STORAGE_OPTIONS`); None: as
    shipped."""
    stream: bool = False
    """Stream the model's reply (`AgentOptions.on_token`), so the answer is seen as it is written."""
    chunk_delay: float = 0.0
    """The scripted model's simulated wait per streamed chunk (a real model ignores it)."""
    time_travel: str | None = None
    """The time-travel scenario's experiment: "rewind", "replay" or "retry" (`experiments.run_time_travel`)."""
    idempotent: bool = True
    """add_to_cart passes the tool-call id to the store as its idempotency key; False: a re-run adds again."""
    why_not: tuple[tuple[str, str], ...] = ()
    """(contender, reason) for the contenders this variant leaves out: why, in words (`not_available`)."""
    note: str | None = None
    """The label's own words, without the limits (None: take them from `label`)."""

    def __post_init__(self) -> None:
        note = self.label if self.note is None else self.note
        object.__setattr__(self, "note", note)
        limits = [] if self.limits is None else [limits_label(self.limits)]
        object.__setattr__(self, "label", ", ".join(part for part in [*limits, note] if part))


def limits_label(limits: AgentLimits) -> str:
    """The limits that differ from the defaults ("max_steps=2, max_tokens=2,500"), or the defaults' step limit."""
    default = AgentLimits()
    changed = [f.name for f in fields(AgentLimits) if getattr(limits, f.name) != getattr(default, f.name)]
    if not changed:
        return f"default limits ({limit_text('max_steps', limits.max_steps)})"
    return ", ".join(limit_text(name, getattr(limits, name)) for name in changed)


@dataclass(frozen=True)
class Scenario:
    """One experiment: the same goal(s), limits, faults and model for every contender."""

    name: str
    description: str
    """One line, for --list and --help."""
    lesson: str
    """The article's point, in a paragraph, shown before the runs."""
    goals: tuple[str, ...]
    what_to_notice: Notice | None = None
    """The lesson said again with the measured numbers, shown after the runs (`notice_points`)."""
    multi_turn: bool = False
    """True: the goals are turns of one conversation (a session). False: each goal is a separate run."""
    persona: str = "shopper"
    """The scripted model's persona (ignored for a real model, which behaves as it does)."""
    instructions: str = INSTRUCTIONS
    limits: AgentLimits = field(default_factory=AgentLimits)
    faults: Faults = field(default_factory=Faults)
    contenders: tuple[str, ...] = tuple(CONTENDERS)
    variants: tuple[Variant, ...] = (Variant(),)
    change_between_turns: int | None = None
    """Session scenarios: the id of a book that "another channel" (a web shop tab) removes from the cart
    between turn 1 and turn 2, behind the agent's back."""
    injection: tuple[int, str] | None = None
    """(book id, text): before the run, the text is appended to that book's description, as a seller's
    catalog feed could, so search results carry it to the model (`BookStore.set_description`)."""
    experiment: str | None = None
    """Run by an experiment of its own instead of the goal runner: "streaming" or "time-travel" (see
    `comparison.experiments`)."""
    others_reason: str | None = None
    """Why the contenders this scenario does not list cannot run it, in words (None: "run only by ...")."""
    why_not: tuple[tuple[str, str], ...] = ()
    """(contender, reason) for an unlisted contender whose reason differs from `others_reason`."""
    growth: bool = False
    """Many turns: shown as one row per contender (tokens, storage, time as the turns go by), not one per turn."""
    headline: Headline | None = None
    """The lesson in one sentence from the records, for the overview, when no guard-matrix row says it."""
    guards: tuple[GuardRow, ...] = ()
    """The rows of the guard matrix this scenario's runs fill (`comparison.closing.guard_matrix`)."""
    rubric: Rubric | None = None
    """What success, a safe and an unsafe failure are, in words (None: a cost measurement, not graded)."""
    grader: TaskGrader | None = None
    """Grades one task of this scenario (`comparison.eval.grading.grade`); set together with `rubric`."""
    goals_for_turns: Callable[[int], tuple[str, ...]] | None = None
    """The goals for N turns (the --turns option), for a scenario whose turns can be chosen."""

    def instructions_for(self, variant: Variant) -> str:
        instructions = variant.instructions or self.instructions
        if variant.fresh_cart_instruction:
            return f"{instructions} {FRESH_CART_INSTRUCTION}"
        return instructions

    def limits_for(self, variant: Variant) -> AgentLimits:
        return variant.limits or self.limits

    def faults_for(self, variant: Variant) -> Faults:
        return variant.faults or self.faults

    def options_for(self, variant: Variant, on_event: Callable[[TraceEvent], None] | None = None) -> AgentOptions:
        """The options every contender of this variant is built with (each takes the knobs it has)."""
        return AgentOptions(
            limits=self.limits_for(variant),
            detailed_errors=variant.detailed_errors,
            parallel_tools=variant.parallel_tools,
            max_tool_result_chars=variant.max_tool_result_chars,
            on_event=on_event,
        )

    def settings_for(self, variant: Variant) -> RunSettings:
        """The settings a run of this variant is given: what `options_for` applies, as a fact lessons can read."""
        return RunSettings(
            limits=self.limits_for(variant),
            max_tool_result_chars=variant.max_tool_result_chars,
            detailed_errors=variant.detailed_errors,
            parallel_tools=variant.parallel_tools,
            approval_gate=variant.approval_gate,
            keep_turns=variant.keep_turns,
            summarize=variant.summarize,
            storage=variant.storage,
            stream=variant.stream,
            idempotent=variant.idempotent,
        )

    def settings_of(self, record: RunRecord) -> RunSettings | None:
        """The settings `record`'s run used: those it carries, else this scenario's for its variant.

        None when neither is known: the record is another scenario's, or its variant is not this scenario's as it
        ran (a label that differs says the variant was changed, e.g. by `--max-steps`, after this one was made).
        """
        carried = recorded_settings(record)
        if carried is not None:
            return carried
        variant = next((v for v in self.variants if v.name == record.variant), None)
        if record.scenario != self.name or variant is None or variant.label != record.variant_label:
            return None
        return self.settings_for(variant)

    def notice_points(self, records: list[RunRecord]) -> list[str]:
        """What to notice in this scenario's measured numbers, one sentence per point.

        Records of a contender that could not run a variant at all (`not_available`) are no run to speak
        of: they get one line saying so, and the lesson's points are made from the runs alone.
        """
        if not records or self.what_to_notice is None:
            return []
        ran = [r for r in records if not_available(r) is None and not r.model_failed]
        points = self.what_to_notice(ran, self.settings_of) if ran else []
        points += framework_points(ran, self.settings_of)
        points += answer_points(ran)
        # A run the model's outage ended says nothing about its contender: it is named, and left out of the rest.
        for r in (r for r in records if r.model_failed):
            points.append(
                f"[{r.variant_label}] {r.contender}: the model call failed ({r.error}), so the run stopped "
                f"after {r.model_calls} model call(s) and {r.tool_calls} tool call(s); it shows nothing about "
                f"{r.contender}."
            )
        skipped = [r for r in records if not_available(r) is not None]
        # One point per (contenders, reason), naming the variants it holds for: "[every variant]" when all.
        said: dict[tuple[str, str], list[str]] = {}
        for variant in dict.fromkeys(r.variant for r in skipped):
            runs = [r for r in skipped if r.variant == variant]
            for reason in dict.fromkeys(not_available(r) for r in runs):
                names = ", ".join(r.contender for r in runs if not_available(r) == reason)
                said.setdefault((names, str(reason)), []).append(runs[0].variant_label)
        for (names, reason), labels in said.items():
            where = "every variant" if len(labels) == len(self.variants) > 1 else " | ".join(labels)
            points.append(f"[{where}] {names}: not run, because {reason}.")
        return points

    def notice_text(self, records: list[RunRecord]) -> str:
        """`notice_points` as text, one point per line (as compare.py's JSON document carries them).

        A point never spans lines (a model's answer quoted in one is flattened), so a reader of the document, like
        the HTML report's bulleted list, gets the points back with `str.splitlines()`.
        """
        return "\n".join(" ".join(point.split()) for point in self.notice_points(records))

    def with_limits(self, **changes: Any) -> Scenario:
        """The same scenario with these limits replaced in it and in every variant (`AgentLimits` field names).

        Every variant then holds its limits itself, so its label says the limits it runs with ("max_steps=50").
        """
        return replace(
            self,
            limits=replace(self.limits, **changes),
            variants=tuple(replace(v, limits=replace(self.limits_for(v), **changes)) for v in self.variants),
        )

    def with_max_steps(self, max_steps: int) -> Scenario:
        """The same scenario with every variant's step limit replaced (the --max-steps option)."""
        return self.with_limits(max_steps=max_steps)

    def with_turns(self, turns: int) -> Scenario:
        """The scenario with `turns` turns (the --turns option), if its turns can be chosen; else it as it is."""
        if self.goals_for_turns is None:
            return self
        return replace(self, goals=self.goals_for_turns(turns))


# --- what any scenario's notes say ------------------------------------------------------------------------------


def _not_honoured_used(record: RunRecord, option: str, s: RunSettings | None) -> str | None:
    """`option` as set for the run (``max_tokens=2,500``) when the run went where it would have acted; else None."""
    if s is None:
        return None
    if option == "max_tool_result_chars":
        value = s.max_tool_result_chars
        return None if value is None or longest_result(record) <= value else f"max_tool_result_chars={value:,}"
    value = getattr(s.limits, option, None)
    if value is None:
        return None
    if option == "max_repeats":
        over = any(len(group) > value for group in identical_calls(record))
        return limit_text(option, value) if over else None
    if option in LIMITS:
        _, spent, _ = LIMITS[option]
        return limit_text(option, value) if spent(record) > value else None
    return None


def framework_points(records: list[RunRecord], settings: SettingsOf) -> list[str]:
    """Points any scenario makes about a contender that ignored a setting it has no counterpart for (its record's
    ``facts["not_honoured"]``, said only where the run went past it) or that forced an answer out at a limit
    (``facts["forced_answer"]``)."""
    points = []
    for r in records:
        where = f"[{r.variant_label}] " if r.variant_label else ""
        ignored = r.facts.get("not_honoured")
        if isinstance(ignored, Mapping):
            for option, reason in ignored.items():
                used = _not_honoured_used(r, option, settings(r))
                if used is not None:
                    points.append(
                        f"{where}{r.contender}: ran past {used}, which it was given but cannot honour: {reason}."
                    )
        forced = r.facts.get("forced_answer")
        if forced is not None and r.stop_reason is not None:
            said = quote(str(forced)) if str(forced).strip() else "a reply with no text"
            points.append(
                f"{where}{r.contender}: {r.stop_reason}, yet the framework did not stop there: it "
                f"made one more model call with tools disabled (call {r.model_calls}) and returned {said} as if "
                "done. That text is kept as a forced answer, not as the answer; the stop reason says what happened."
            )
    return list(dict.fromkeys(points))  # one point for the goals or turns it holds for alike


def answer_points(records: list[RunRecord]) -> list[str]:
    """Points any scenario makes about a run that ended "done" with an answer its records contradict (a book the
    cart holds called out of stock, a total other than the cart's): "done" says the model stopped calling tools,
    not that what it said is true. A conversation's later turns are left to their scenario's own points."""
    groups: dict[str, list[str]] = {}
    for r in records:
        if r.turn != 1 or not (found := contradictions(r)):
            continue
        where = f"[{r.variant_label}] " if r.variant_label else ""
        text = (
            f"ended done, but its answer contradicts the records: {'; '.join(found)}. The answer, "
            f"{quote(r.answer or '')}, is false: done is not correct."
        )
        groups.setdefault(f"{where}\0{text}", []).append(r.contender)
    points = []
    for key, names in groups.items():
        where, text = key.split("\0")
        points.append(f"{where}{', '.join(dict.fromkeys(names))}: {text}")
    return points
