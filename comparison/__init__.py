"""The comparison behind `compare.py`: the same bookstore goals run by every contender, recorded and shown side by side.

One file per concern: `scenarios` (the fifteen experiments as data, each with its lesson), `contenders` (which
agents compete, how each is built from one `AgentOptions`, the approval demo's human), `conversations` (one
session interface over `handwritten.Session` and `langgraph_version.GraphSession`), `runner` (every variant ×
contender of a scenario on a fresh store; `ScenarioRuns`, a whole selection, across worker processes when it
can), `experiments` (streaming and time travel, run their own way), `records` (`RunRecord`, built from a result
or from the events before a contender raised, with secrets masked), `lessons` (what to notice in the measured
numbers), `closing` (the guard matrix and the seed's "who owns what"), `render` (the terminal), `document` (the
JSON document) and `report` (the HTML page built from it), `sanitize` (untrusted text made harmless for a
terminal, a page or JSON), `files` (the paths the command line is given, checked before any work and written
whole or not at all), `chat` (the conversation behind `compare.py chat`), and the eval in `comparison.eval`:
`grading` (each scenario's outcome grader: success, safe or unsafe), `trials` (`compare.py eval`: trials,
pass^k, the JSON) and `report` (its tables and page). The names below are the public parts; `compare.py` adds only the
command line.
"""

from comparison.approvals import AskingHuman, DemoHuman, Human, resume_until_answered
from comparison.closing import GUARDS, OWNERS, WHO_OWNS_WHAT, guard_matrix
from comparison.contenders import APPROVAL_CONTENDERS, CONTENDERS, SESSION_CONTENDERS, Contender, build_contender
from comparison.conversations import Conversation, open_conversation, run_gated_graph
from comparison.document import build_document, mermaid_diagram, write_document
from comparison.files import UnusableFile, check_output_file, write_output
from comparison.records import RunKey, RunRecord, error_text, raised_record, result_record
from comparison.render import Progress, make_console, render_scenario
from comparison.report import render_report
from comparison.run_setup import CUSTOMER_ID, RunOptions, run_key
from comparison.runner import ScenarioRuns, parallel_workers, run_scenario, run_session, run_single
from comparison.sanitize import clean_line, clean_text, escape_for_json
from comparison.scenarios import INSTRUCTIONS, SCENARIOS, SCENARIOS_BY_NAME, SEED_GOAL, Scenario, Variant

__all__ = [
    "APPROVAL_CONTENDERS",
    "CONTENDERS",
    "CUSTOMER_ID",
    "GUARDS",
    "INSTRUCTIONS",
    "OWNERS",
    "SCENARIOS",
    "SCENARIOS_BY_NAME",
    "SEED_GOAL",
    "SESSION_CONTENDERS",
    "WHO_OWNS_WHAT",
    "AskingHuman",
    "Contender",
    "Conversation",
    "DemoHuman",
    "Human",
    "Progress",
    "RunKey",
    "RunOptions",
    "RunRecord",
    "Scenario",
    "ScenarioRuns",
    "UnusableFile",
    "Variant",
    "build_contender",
    "build_document",
    "check_output_file",
    "clean_line",
    "clean_text",
    "error_text",
    "escape_for_json",
    "guard_matrix",
    "make_console",
    "mermaid_diagram",
    "open_conversation",
    "parallel_workers",
    "raised_record",
    "render_report",
    "render_scenario",
    "result_record",
    "resume_until_answered",
    "run_gated_graph",
    "run_key",
    "run_scenario",
    "run_session",
    "run_single",
    "write_document",
    "write_output",
]
