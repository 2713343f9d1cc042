"""The page's routes: `/` and `/api/...`, each a module-level endpoint reading the app's `Page` from its request.

A tab id, its event stream (whose first event is the whole state), turns, the lessons' routes, approvals,
settings, rewind, jobs and reports. Every bad request is a 4xx JSON ``{"error": ...}``, never a 500.
"""

from __future__ import annotations

import asyncio
import html
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response, StreamingResponse
from starlette.routing import Route

from comparison.chat import scripted_knows
from comparison.scenarios import SCENARIOS, SCENARIOS_BY_NAME, SEED_GOAL
from shared_tools.models.personas import KNOWN_GOALS, PERSONAS
from webdemo import reports
from webdemo.approvals import graph_request_ids
from webdemo.events import BadRequest, for_page
from webdemo.page import page_of
from webdemo.panes import MAX_MESSAGE_CHARS, Pane, Phase, TurnRunner
from webdemo.settings import PageSettings
from webdemo.tabs import Tab
from webdemo.wire import PAGE_CSP, REPORT_CSP, SECURITY_HEADERS, encoded, json_only, json_reply, read_body, sse

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
HEARTBEAT_S = 15.0
"""An event stream sends a comment this often, so proxies and the browser keep it open."""
MAX_EVAL_RUNS = 20


NUMBER_WORDS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve")


def page_html() -> str:
    """index.html with the contenders filled in from the registry (`comparison.contenders`): its title and heading
    name every one, so a contender declared by another package is named without an edit here."""
    from comparison.contenders import CONTENDERS

    count = len(CONTENDERS)
    how_many = NUMBER_WORDS[count] if count < len(NUMBER_WORDS) else str(count)
    text = (STATIC / "index.html").read_text(encoding="utf-8")
    return text.replace("%HOW_MANY%", how_many).replace("%CONTENDERS%", html.escape(", ".join(CONTENDERS)))


async def index(request: Request) -> Response:
    return HTMLResponse(page_html(), headers={**SECURITY_HEADERS, "Content-Security-Policy": PAGE_CSP})


async def new_tab(request: Request) -> Response:
    json_only(request)
    tab_id, tab = await page_of(request).tabs.new()
    return json_reply({"tab": tab_id, "state": tab.state()})


async def state(request: Request) -> Response:
    tab = await page_of(request).tabs.get(request.query_params.get("tab"))
    return json_reply(tab.state())


async def meta(request: Request) -> Response:
    """What the page's controls offer: scenarios, personas, the goals a scripted model knows."""
    page = page_of(request)
    return json_reply(
        {
            "model": page.model,
            "scripted": page.scripted,
            "seed_goal": SEED_GOAL,
            "known_goals": list(KNOWN_GOALS),
            "personas": PERSONAS,
            "contenders": _contenders(),
            "scenarios": [{"name": s.name, "description": s.description} for s in SCENARIOS],
        }
    )


async def events(request: Request) -> Response:
    tabs = page_of(request).tabs
    tab = await tabs.get(request.query_params.get("tab"))
    await tabs.stream_opening(tab)
    queue = tab.hub.subscribe()
    if tab.gone_timer is not None:  # the page is back (a reload): its runs go on
        tab.gone_timer.cancel()
        tab.gone_timer = None

    async def stream() -> AsyncIterator[bytes]:
        try:
            yield b"retry: 1000\n\n"
            yield sse({"type": "hello", "state": tab.state()})
            while True:
                try:
                    event = await asyncio.wait_for(queue.get(), HEARTBEAT_S)
                except TimeoutError:
                    yield b": ping\n\n"
                    continue
                if event is None:  # dropped for reading too slowly: the page reconnects and reloads
                    return
                yield sse(event)
        finally:
            tab.hub.unsubscribe(queue)
            tabs.stream_closed(tab)

    headers = {**SECURITY_HEADERS, "X-Accel-Buffering": "no"}
    return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)


async def turn(request: Request) -> Response:
    page = page_of(request)
    body = await read_body(request)
    tab = await page.tabs.get(body.get("tab"))
    _not_applying(tab)
    text = _message(body.get("text"), scripted=page.scripted)
    panes = [p for p in tab.panes.values() if p.error is None]
    if not panes:
        raise BadRequest(409, "no pane can take a turn; check the settings")
    # Checked and claimed with no await in between: two requests cannot both start a turn on a pane.
    if waiting := [p.contender for p in panes if p.busy or p.phase is Phase.AWAITING_APPROVAL]:
        raise BadRequest(
            409, f"{waiting[0]} has a turn in progress or waits for your approval; one turn at a time per pane"
        )
    await page.claim(
        tab,
        [p.contender for p in panes],
        "a turn is already in progress in this tab (another server worker took it); one turn at a time per pane",
    )
    for pane in panes:
        pane.busy = True
    for pane in panes:
        pane.start("ask", _asking(pane, text), text)
    return json_reply({"started": [p.contender for p in panes]}, 202)


async def approve(request: Request) -> Response:
    page = page_of(request)
    body = await read_body(request)
    tab = await page.tabs.get(body.get("tab"))
    _not_applying(tab)
    pane = _pane(tab, body.get("pane"))
    request_id, approved = body.get("id"), body.get("approved")
    if not isinstance(request_id, str) or not isinstance(approved, bool):
        raise BadRequest(400, "approve needs the request's id and approved: true or false")
    if pane.bridge.answer(request_id, approved):
        return json_reply({"answered": request_id, "approved": approved})
    if any(q.get("id") == request_id for q in pane.remote_pending):
        # The question waits in the worker that runs the turn: the answer travels there as a command.
        answer = {"type": "_answer", "pane": pane.contender, "id": request_id, "approved": approved}
        page.tabs.store.tell_workers(tab.key, answer)
        return json_reply({"answered": request_id, "approved": approved})
    ids = graph_request_ids(pane.graph_pending)
    if request_id in ids and request_id not in pane.graph_answers:
        return await _answer_graph(request, tab, pane, request_id, approved)
    raise BadRequest(409, "that approval is no longer waiting (answered, timed out or cancelled)")


async def _answer_graph(request: Request, tab: Tab, pane: Pane, request_id: str, approved: bool) -> Response:
    """One answer to a request of a graph's pause; the run goes on once every request of the pause has one."""
    page = page_of(request)
    if pane.busy:
        raise BadRequest(409, f"{pane.contender} is already going on with this approval")
    # This answer is for this request only.
    pane.graph_answers[request_id] = approved
    tab.hub.publish(
        {
            "type": "approval_done",
            "pane": pane.contender,
            "id": request_id,
            "approved": approved,
            "how": "yes" if approved else "no",
        }
    )
    ids = graph_request_ids(pane.graph_pending)
    waiting = [i for i in ids if i not in pane.graph_answers]
    if waiting:
        await page.in_worker(pane.save_snapshot)  # the next answer may reach another worker
        return json_reply({"answered": request_id, "approved": approved, "waiting": waiting})
    answers = [pane.graph_answers[i] for i in ids]
    try:
        await page.claim(tab, [pane.contender], f"{pane.contender} is already going on with this approval")
    except BadRequest:
        pane.graph_answers.pop(request_id, None)
        raise
    pane.busy = True
    pane.graph_pending = []
    pane.graph_answers = {}
    pane.start("resume", _resuming(pane, answers), None)
    return json_reply({"answered": request_id, "approved": approved}, 202)


async def settings(request: Request) -> Response:
    page = page_of(request)
    body = await read_body(request)
    tab = await page.tabs.get(body.get("tab"))
    _not_applying(tab)
    new = PageSettings.from_json(body, tab.settings)
    if tab.busy or any(p.phase is Phase.AWAITING_APPROVAL for p in tab.panes.values()):
        raise BadRequest(409, "a turn is in progress or waits for an approval; change the settings after it")
    held = sorted({*tab.panes, *new.contenders})
    await page.claim(tab, held, "a turn is in progress or waits for an approval; change the settings after it")
    _not_applying(tab)  # checked again after the await: another apply may have begun meanwhile
    tab.applying = True
    try:
        for pane in tab.panes.values():
            pane.bridge.deny_all(close=True)
            if pane.conversation is not None:
                pane.conversation.close()
        tab.settings = new
        await page.in_worker(tab.save_settings)
        await tab.open_panes()
    finally:
        tab.applying = False
        await page.release(tab, held)
    tab.hub.publish({"type": "state", "state": tab.state()})
    return json_reply(tab.state())


async def stale(request: Request) -> Response:
    page = page_of(request)
    body = await read_body(request)
    tab = await page.tabs.get(body.get("tab"))
    _not_applying(tab)
    if any(p.busy for p in tab.panes.values()):
        raise BadRequest(409, "wait for the turn to finish, then change the cart")
    held = list(tab.panes)
    await page.claim(tab, held, "wait for the turn to finish, then change the cart")
    try:
        changed = await page.in_worker(tab.change_carts)
    finally:
        await page.release(tab, held)
    if not changed:
        raise BadRequest(409, "the carts are empty; ask the article's goal first, then change the cart")
    tab.hub.publish({"type": "changed", "changed": changed})
    return json_reply({"changed": changed})


async def injection(request: Request) -> Response:
    page = page_of(request)
    body = await read_body(request)
    tab = await page.tabs.get(body.get("tab"))
    on = body.get("on")
    if not isinstance(on, bool):
        raise BadRequest(400, "injection needs on: true or false")
    await page.in_worker(lambda: tab.set_injection(on))
    tab.hub.publish({"type": "injection", "injected": on})
    return json_reply({"injected": on})


async def rewind(request: Request) -> Response:
    page = page_of(request)
    body = await read_body(request)
    tab = await page.tabs.get(body.get("tab"))
    _not_applying(tab)
    pane = _pane(tab, body.get("pane"))
    if pane.busy or pane.phase is Phase.AWAITING_APPROVAL:
        raise BadRequest(409, f"{pane.contender} has a turn in progress or waits for an approval")
    await page.claim(tab, [pane.contender], f"{pane.contender} has a turn in progress or waits for an approval")
    pane.busy = True
    try:
        done = await pane.rewind(TurnRunner(page.executor))
        await page.in_worker(pane.save_snapshot)
    except (ValueError, LookupError, RuntimeError) as exc:
        # No turn left to take back, or a thread the session cannot rewind now: a sentence, never a 500.
        raise BadRequest(409, f"{pane.contender} cannot rewind: {for_page(exc)}") from None
    finally:
        pane.busy = False
        await page.release(tab, [pane.contender])
    tab.hub.publish({"type": "rewound", **done})
    return json_reply(done)


async def cancel(request: Request) -> Response:
    page = page_of(request)
    body = await read_body(request)
    tab = await page.tabs.get(body.get("tab"))
    tab.cancel_all()
    page.tabs.store.tell_workers(tab.key, {"type": "_cancel"})  # and in whichever worker runs them
    return json_reply({"cancelled": True})


async def scenario(request: Request) -> Response:
    page = page_of(request)
    body = await read_body(request)
    tab = await page.tabs.get(body.get("tab"))
    names = _scenario_names(body.get("scenarios"))
    await reports.start_job(page, tab, "scenario", reports.scenario_report, names, page.model, tab.folder)
    return json_reply({"running": names}, 202)


async def evaluation(request: Request) -> Response:
    page = page_of(request)
    body = await read_body(request)
    tab = await page.tabs.get(body.get("tab"))
    from comparison.eval.grading import GRADERS

    given = body.get("scenarios")
    names = [s.name for s in SCENARIOS if s.name in GRADERS] if given is None else _scenario_names(given)
    if ungraded := [n for n in names if n not in GRADERS]:
        raise BadRequest(400, f"the eval grades only {', '.join(GRADERS)}; {ungraded[0]!r} has no grader")
    runs = body.get("runs", 4)
    if isinstance(runs, bool) or not isinstance(runs, int) or not 1 <= runs <= MAX_EVAL_RUNS:
        raise BadRequest(400, f"runs must be a whole number from 1 to {MAX_EVAL_RUNS}")
    await reports.start_job(page, tab, "eval", reports.eval_report, names, runs, page.model)
    return json_reply({"running": names, "runs": runs}, 202)


async def report(request: Request) -> Response:
    page = page_of(request)
    tab = await page.tabs.get(request.query_params.get("tab"))
    kind = request.path_params["kind"]
    if kind not in ("scenario", "eval"):
        raise BadRequest(404, "there are scenario and eval reports only")
    html = tab.reports.get(kind)
    if html is None:
        html = await page.in_worker(lambda: page.tabs.store.report(tab.key, kind))
    if html is None:
        raise BadRequest(404, f"no {kind} report in this tab yet; run one first")
    return HTMLResponse(encoded(html), headers={**SECURITY_HEADERS, "Content-Security-Policy": REPORT_CSP})


async def bad_request(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, BadRequest)
    log.info("%s %s: %d %s", request.method, request.url.path, exc.status, exc.message)
    return json_reply({"error": exc.message}, exc.status)


async def http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return json_reply({"error": exc.detail}, exc.status_code)


def _post(path: str, endpoint: Callable[[Request], Awaitable[Response]]) -> Route:
    return Route(path, endpoint, methods=["POST"])


ROUTES = [
    Route("/", index),
    Route("/api/meta", meta),
    _post("/api/tabs", new_tab),
    Route("/api/state", state),
    Route("/api/events", events),
    _post("/api/turn", turn),
    _post("/api/approve", approve),
    _post("/api/settings", settings),
    _post("/api/stale", stale),
    _post("/api/injection", injection),
    _post("/api/rewind", rewind),
    _post("/api/cancel", cancel),
    _post("/api/scenario", scenario),
    _post("/api/eval", evaluation),
    Route("/api/report/{kind:str}", report),
]
EXCEPTION_HANDLERS: dict[Any, Any] = {BadRequest: bad_request, HTTPException: http_error}


def _contenders() -> dict[str, str]:
    from comparison.contenders import CONTENDERS

    return dict(CONTENDERS)


def _asking(pane: Pane, text: str) -> Callable[[TurnRunner], Awaitable[Any]]:
    return lambda runner: pane.ask(runner, text)


def _resuming(pane: Pane, answers: list[bool]) -> Callable[[TurnRunner], Awaitable[Any]]:
    return lambda runner: pane.resume(runner, answers)


def _message(text: Any, *, scripted: bool) -> str:
    """The user's turn, checked: text, not empty, not over `MAX_MESSAGE_CHARS`, and (scripted) a known goal."""
    if not isinstance(text, str):
        raise BadRequest(400, "the message must be text")
    text = text.strip()
    if not text:
        raise BadRequest(400, "the message is empty; type a question first")
    if len(text) > MAX_MESSAGE_CHARS:
        raise BadRequest(413, f"the message is {len(text):,} characters; at most {MAX_MESSAGE_CHARS:,} are taken")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate from a JSON escape: no model or file can take it
        raise BadRequest(400, "the message holds a character that is not valid text") from None
    if scripted and not scripted_knows(text):
        # Refused before asking, so an unknown goal never lands in a stored conversation (as in chat).
        raise BadRequest(422, "the scripted model has no script for that; it knows: " + " | ".join(KNOWN_GOALS))
    return text


def _not_applying(tab: Tab) -> None:
    """Refuse what would start on panes the settings are closing and rebuilding (checked with no await before the
    route claims its panes, so nothing slips in between)."""
    if tab.applying:
        raise BadRequest(409, "the settings are being applied; try again in a moment")


def _pane(tab: Tab, name: Any) -> Pane:
    pane = tab.panes.get(name) if isinstance(name, str) else None
    if pane is None:
        raise BadRequest(404, "no such pane in this tab")
    if pane.error is not None:
        raise BadRequest(409, pane.error)
    return pane


def _scenario_names(value: Any) -> list[str]:
    if value is None:
        return [s.name for s in SCENARIOS]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise BadRequest(400, "scenarios must be a non-empty list of scenario names")
    bad = [v for v in value if v not in SCENARIOS_BY_NAME]
    if bad:
        raise BadRequest(400, f"unknown scenario {bad[0][:40]!r}; choose from {', '.join(SCENARIOS_BY_NAME)}")
    return list(dict.fromkeys(value))
