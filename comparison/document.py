"""The JSON document: everything `compare.py --json` writes and `--report` renders, built from the run records.

`build_document` gathers the scenarios with their lessons, every run's record, the guard matrix, the article's table
and our graph; `write_document` writes it whole or not at all. The HTML report reads only this document, and every
string passes `guards.mask_pii` here, whatever put it into a record.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from comparison.closing import OWNERS, WHO_OWNS_WHAT, guard_matrix
from comparison.contenders import CONTENDERS
from comparison.files import write_output
from comparison.records import RunRecord, pick
from comparison.sanitize import escape_for_json
from comparison.scenarios import Scenario
from shared_tools.bookstore.store import BookStore
from shared_tools.bookstore.tools import make_tools
from shared_tools.guards import mask_pii, mask_values
from shared_tools.models import make_model


def _drawable_graph() -> Any:
    """Our guarded graph as LangGraph describes it (`langchain_core.runnables.graph.Graph`)."""
    from langgraph_version import GraphAgent

    return GraphAgent(make_model("scripted"), make_tools(BookStore())).graph.get_graph()


def mermaid_diagram() -> str:
    """Our guarded graph, drawn by LangGraph itself."""
    return _drawable_graph().draw_mermaid()


def graph_description() -> dict[str, Any]:
    """Our guarded graph for the document: its nodes and edges (for the report's picture) and its mermaid text.

    ``{"nodes": ["__start__", "model", ...], "edges": [{"source", "target", "conditional"}, ...], "mermaid": ...}``,
    in LangGraph's own order; a conditional edge is one a router may take.
    """
    graph = _drawable_graph()
    return {
        "nodes": list(graph.nodes),
        "edges": [{"source": e.source, "target": e.target, "conditional": bool(e.conditional)} for e in graph.edges],
        "mermaid": graph.draw_mermaid(),
    }


def build_document(
    model: str,
    contenders: Sequence[str],
    scenarios: Sequence[Scenario],
    records: list[RunRecord],
    *,
    interrupted: bool = False,
    matrix: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Everything `--json` writes and `--report` renders; `matrix` is the records' guard matrix if already built."""
    graph = graph_description()
    return {
        "model": model,
        "interrupted": interrupted,
        "contenders": [{"name": c, "description": CONTENDERS[c]} for c in contenders],
        "scenarios": [
            {
                "name": s.name,
                "description": s.description,
                "lesson": s.lesson,
                "goals": list(s.goals),
                "multi_turn": s.multi_turn,
                "variants": [{"name": v.name, "label": v.label} for v in s.variants],
                "notice": mask_pii(s.notice_text(pick(records, scenario=s.name))),
            }
            for s in scenarios
        ],
        # Records are masked when they are made; facts added later (approval reasons, titles) are masked here.
        "runs": [mask_values({**asdict(r), "outcome": r.outcome}) for r in records],
        "guard_matrix": guard_matrix(records, contenders) if matrix is None else matrix,
        "who_owns_what": {"columns": ["", *OWNERS], "rows": [list(row) for row in WHO_OWNS_WHAT]},
        "graph": {"nodes": graph["nodes"], "edges": graph["edges"]},
        "mermaid": graph["mermaid"],
    }


def document_json(document: dict[str, Any]) -> str:
    """The document as indented JSON text, safe to print: no raw control character, and encodable as UTF-8."""
    return escape_for_json(json.dumps(document, indent=1, ensure_ascii=False, default=str)) + "\n"


def write_document(document: dict[str, Any], target: str) -> None:
    """The document as indented JSON, to the file `target` (whole or not at all) or, for ``-``, to stdout."""
    text = document_json(document)
    if target == "-":
        sys.stdout.write(text)
    else:
        write_output(Path(target), text)
