"""The harness behind `compare.py`, the one package that imports both agents: the same goals, side by side.

One file per concern: `scenarios/` (the course, one file per scenario), `contenders`, `approvals` (the humans),
`conversations`, `run_setup` (what every run is given), `runner` (a scenario's runs, the fork pool),
`experiments`, `records`, `closing` (the guard matrix), `render`, `document`, `report`,
`sanitize`, `files`, `chat`, `command` (the work behind the command line), and `eval/`.
"""

from comparison.approvals import AskingHuman, DemoHuman, Human, resume_until_answered
from comparison.closing import GUARDS, OWNERS, WHO_OWNS_WHAT, guard_matrix
from comparison.contenders import APPROVAL_CONTENDERS, CONTENDERS, SESSION_CONTENDERS, Contender, build_contender
from comparison.conversations import Conversation, open_conversation, run_gated
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
    "run_gated",
    "run_key",
    "run_scenario",
    "run_session",
    "run_single",
    "write_document",
    "write_output",
]
