"""The page's scenario and eval reports: a job per kind and tab, run in a child process, its HTML kept.

`start_job` takes a job slot and the tab's claim on the job, then runs `scenario_report` or
`eval_report` in a child process (`webdemo.jobs`); the report is kept in the tab (and in Postgres, for every
worker) and the page is told by events.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from comparison.scenarios import SCENARIOS_BY_NAME
from webdemo.events import BadRequest, for_page
from webdemo.jobs import run_in_child
from webdemo.page import Page
from webdemo.tabs import Tab
from webdemo.wire import encoded

JOB_LEASE_S = 30.0
"""How long a job's claim outlives a worker that died running it (it is extended meanwhile)."""

log = logging.getLogger(__name__)


async def start_job(page: Page, tab: Tab, kind: str, function: Callable[..., str], *args: Any) -> None:
    """One job per kind and tab, at most `max_jobs` in this server, each in a child process of its own
    (`webdemo.jobs`): the turns' threads stay free, and a cancel ends the process."""
    job = tab.jobs.get(kind)
    if job is not None and not job.done():
        raise BadRequest(409, f"a {kind} run is already under way in this tab")
    if not page.slots.take():
        raise BadRequest(
            503,
            f"the server runs {page.slots.max_jobs} scenario or eval runs at once, as many as it "
            "takes; try again when one is done",
        )
    name = f"job:{kind}"
    try:
        await page.claim(tab, [name], f"a {kind} run is already under way in this tab", JOB_LEASE_S)
    except BaseException:
        page.slots.give_back()
        raise
    tab.jobs[kind] = asyncio.get_running_loop().create_task(_run_job(page, tab, kind, function, args))


async def _keep_claim(page: Page, tab: Tab, name: str) -> None:
    while True:
        await asyncio.sleep(JOB_LEASE_S / 3)
        with contextlib.suppress(Exception):
            await page.tabs.store.extend(tab.key, [name], page.tabs.owner, JOB_LEASE_S)


async def _run_job(page: Page, tab: Tab, kind: str, function: Callable[..., str], args: tuple[Any, ...]) -> None:
    tab.hub.publish({"type": "job", "kind": kind, "status": "running"})
    name = f"job:{kind}"
    keeper = asyncio.get_running_loop().create_task(_keep_claim(page, tab, name))
    try:
        html = encoded(await run_in_child(function, *args)).decode("utf-8")  # Postgres takes no half emoji
        tab.reports[kind] = html
        await page.in_worker(lambda: page.tabs.store.put_report(tab.key, kind, html))
    except Exception as exc:  # the model went away mid-run: said on the page
        log.warning("%s run failed: %s: %s", kind, type(exc).__name__, exc)
        tab.hub.publish({"type": "job", "kind": kind, "status": "failed", "error": for_page(exc)})
        return
    except asyncio.CancelledError:
        tab.hub.publish({"type": "job", "kind": kind, "status": "failed", "error": "stopped"})
        raise
    finally:
        page.slots.give_back()
        keeper.cancel()
        with contextlib.suppress(Exception):
            await page.release(tab, [name])
    tab.hub.publish({"type": "job", "kind": kind, "status": "done", "url": f"/api/report/{kind}"})


def scenario_report(names: list[str], model: str, folder: Path | None) -> str:
    """Run the scenarios as `compare.py` does and render them as its HTML report (blocking: in a worker)."""
    from comparison.contenders import CONTENDERS
    from comparison.document import build_document
    from comparison.report import render_report
    from comparison.runner import RunOptions, run_scenario

    scenarios = [SCENARIOS_BY_NAME[n] for n in names]
    records: list[Any] = []
    with tempfile.TemporaryDirectory(dir=folder, prefix="scenario-") as scratch:
        options = RunOptions(model=model, session_db=Path(scratch) / "sessions.db")
        for one in scenarios:
            run_scenario(one, options, records.append)
    return render_report(build_document(model, tuple(CONTENDERS), scenarios, records))


def eval_report(names: list[str], runs: int, model: str) -> str:
    """Run the eval as `compare.py eval` does and render its pass^k page (blocking: in a worker)."""
    from comparison.eval.report import render_eval_report
    from comparison.eval.trials import DEFAULT_MODEL, EvalPlan, eval_document, run_eval

    plan = EvalPlan(
        model=DEFAULT_MODEL if model == "scripted" else model,
        scenarios=tuple(SCENARIOS_BY_NAME[n] for n in names),
        runs=runs,
    )
    return render_eval_report(eval_document(run_eval(plan)))
