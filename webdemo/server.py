"""The live page's web server: a Starlette app with JSON routes, a server-sent event stream, and the page.

`create_app` serves `/` (plain HTML, CSS and JS from `webdemo/static`) and `/api/...`: a tab id, its event stream
(whose first event is the whole state), turns, the lessons' routes, approvals, settings, rewind, jobs and reports.
Every bad request is a 4xx JSON ``{"error": ...}``, never a 500. On a Postgres URL, state-changing routes claim
their panes there first, and `app_from_env` builds one app per uvicorn worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import tempfile
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from comparison.chat import scripted_knows
from comparison.scenarios import SCENARIOS, SCENARIOS_BY_NAME, SEED_GOAL
from shared_tools.models.personas import KNOWN_GOALS, PERSONAS
from shared_tools.telemetry_setup import setup_tracing
from webdemo.approvals import graph_request_ids
from webdemo.events import BadRequest, for_page
from webdemo.jobs import JobSlots, run_in_child
from webdemo.panes import MAX_MESSAGE_CHARS, Pane, Phase, TurnRunner
from webdemo.shared import LEASE_S, EventBus, SharedState, TabGone
from webdemo.tabs import Tab, Tabs

ENV_CONFIG = "WEBDEMO_CONFIG"
"""The environment variable `app_from_env` reads: the JSON of `create_app`'s arguments (set by `compare.py serve`)."""
JOB_LEASE_S = 30.0

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
MAX_BODY_BYTES = 64 * 1024
"""Larger request bodies are refused (413) before they are read whole."""
HEARTBEAT_S = 15.0
"""An event stream sends a comment this often, so proxies and the browser keep it open."""
MAX_EVAL_RUNS = 20

PAGE_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "frame-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)
REPORT_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'self'; base-uri 'none'"
"""The reports are self-contained (inline CSS and SVG, no script): nothing else may load or run in them."""
SECURITY_HEADERS = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "Cache-Control": "no-store"}


def app_from_env() -> Starlette:
    """The app described by ``$WEBDEMO_CONFIG`` (uvicorn's factory for ``--workers N``: one call per process)."""
    config = json.loads(os.environ[ENV_CONFIG])
    data = config.pop("data")
    setup_tracing(config.pop("otel", None))  # `compare.py serve --otel`: each worker process exports its own spans
    return create_app(data if "://" in data else Path(data), **config)


def create_app(
    data_dir: Path | str,
    *,
    model: str = "scripted",
    allowed_hosts: list[str] | None = None,
    approval_timeout: float = 120.0,
    gone_after: float = 10.0,
    max_tabs: int = 64,
    workers: int = 32,
    max_jobs: int = 2,
    keep_tabs_s: float = 7 * 24 * 3600.0,
    max_stored_tabs: int = 1_000,
    lease_s: float = LEASE_S,
) -> Starlette:
    """The live page over `data_dir` (a folder per tab; created when missing), or over a Postgres URL (several
    workers share it), on the model `model`.

    `allowed_hosts` are the Host headers accepted (against DNS rebinding; None accepts any);
    `approval_timeout` is how long the hand-written loop waits for the page's yes (then: no); `gone_after` is how
    long a tab may have no event stream open (a reload reconnects within it) before its runs are cancelled;
    `max_jobs`, how many scenario and eval runs the server runs at once (each in a process of its own);
    `keep_tabs_s` and `max_stored_tabs`, how long an unused tab is kept and how many at most; `lease_s` (Postgres),
    how long a turn's claim outlives a worker that died mid-turn before another worker may take the pane.
    """
    from shared_tools.bookstore.store import is_postgres_url

    executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="webdemo")
    shared = SharedState(str(data_dir), lease_s=lease_s) if is_postgres_url(data_dir) else None
    tabs = Tabs(
        Path(".") if shared is not None else Path(data_dir),
        shared=shared,
        model_spec=model,
        executor=executor,
        approval_timeout=approval_timeout,
        gone_after=gone_after,
        max_tabs=max_tabs,
        keep_tabs_s=keep_tabs_s,
        max_stored_tabs=max_stored_tabs,
    )
    scripted = model.startswith("scripted")
    slots = JobSlots(max_jobs)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        bus = None if shared is None else EventBus(shared, tabs.on_tab, tabs.active, tabs.watched)
        if bus is not None:
            bus.start()
        try:
            yield
        finally:
            await tabs.aclose()
            if bus is not None and shared is not None:
                await bus.stop()
                await asyncio.get_running_loop().run_in_executor(executor, shared.close)
            executor.shutdown(wait=False, cancel_futures=True)

    async def _claim(tab: Tab, names: list[str], refusal: str, lease: float | None = None) -> None:
        """Shared mode: hold `names` of `tab` in Postgres, or refuse with 409 (another worker holds one)."""
        if shared is None:
            return
        args = (tab.key, names, tabs.owner) if lease is None else (tab.key, names, tabs.owner, lease)
        try:
            claimed = await _in_worker(lambda: shared.try_claim(*args))
        except TabGone:
            raise BadRequest(410, "this tab was deleted, unused for long; reload the page to start afresh") from None
        if not claimed:
            raise BadRequest(409, refusal)

    async def _release(tab: Tab, names: list[str]) -> None:
        if shared is not None:
            await _in_worker(lambda: shared.release(tab.key, names, tabs.owner))

    async def page(request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers={**SECURITY_HEADERS, "Content-Security-Policy": PAGE_CSP})

    async def new_tab(request: Request) -> Response:
        _json_only(request)
        tab_id, tab = await tabs.new()
        return _json({"tab": tab_id, "state": tab.state()})

    async def state(request: Request) -> Response:
        tab = await tabs.get(request.query_params.get("tab"))
        return _json(tab.state())

    async def meta(request: Request) -> Response:
        """What the page's controls offer: scenarios, personas, the goals a scripted model knows."""
        return _json({
            "model": model, "scripted": scripted, "seed_goal": SEED_GOAL, "known_goals": list(KNOWN_GOALS),
            "personas": PERSONAS, "contenders": _contenders(),
            "scenarios": [{"name": s.name, "description": s.description} for s in SCENARIOS],
        })  # fmt: skip

    async def events(request: Request) -> Response:
        tab = await tabs.get(request.query_params.get("tab"))
        if shared is not None and tab.key not in tabs.active():
            # Nothing here has read this tab's events lately: start from now (the hello state holds the past).
            tab.hub.seq = await _in_worker(lambda: shared.last_seq(tab.key))
            await _in_worker(lambda: shared.touch([tab.key]))
            await tab.refresh()
        queue = tab.hub.subscribe()
        if tab.gone_timer is not None:  # the page is back (a reload): its runs go on
            tab.gone_timer.cancel()
            tab.gone_timer = None

        async def stream() -> AsyncIterator[bytes]:
            try:
                yield b"retry: 1000\n\n"
                yield _sse({"type": "hello", "state": tab.state()})
                while True:
                    try:
                        event = await asyncio.wait_for(queue.get(), HEARTBEAT_S)
                    except TimeoutError:
                        yield b": ping\n\n"
                        continue
                    if event is None:  # dropped for reading too slowly: the page reconnects and reloads
                        return
                    yield _sse(event)
            finally:
                tab.hub.unsubscribe(queue)
                tabs.stream_closed(tab)

        headers = {**SECURITY_HEADERS, "X-Accel-Buffering": "no"}
        return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)

    async def turn(request: Request) -> Response:
        body = await _body(request)
        tab = await tabs.get(body.get("tab"))
        _not_applying(tab)
        text = _message(body.get("text"), scripted=scripted)
        panes = [p for p in tab.panes.values() if p.error is None]
        if not panes:
            raise BadRequest(409, "no pane can take a turn; check the settings")
        # Checked and claimed with no await in between: two requests cannot both start a turn on a pane.
        if waiting := [p.contender for p in panes if p.busy or p.phase is Phase.AWAITING_APPROVAL]:
            raise BadRequest(409, f"{waiting[0]} has a turn in progress or waits for your approval; "
                             "one turn at a time per pane")  # fmt: skip
        await _claim(tab, [p.contender for p in panes], "a turn is already in progress in this tab (another "
                     "server worker took it); one turn at a time per pane")  # fmt: skip
        for pane in panes:
            pane.busy = True
        for pane in panes:
            pane.start("ask", _asking(pane, text), text)
        return _json({"started": [p.contender for p in panes]}, 202)

    async def approve(request: Request) -> Response:
        body = await _body(request)
        tab = await tabs.get(body.get("tab"))
        _not_applying(tab)
        pane = _pane(tab, body.get("pane"))
        request_id, approved = body.get("id"), body.get("approved")
        if not isinstance(request_id, str) or not isinstance(approved, bool):
            raise BadRequest(400, "approve needs the request's id and approved: true or false")
        if pane.bridge.answer(request_id, approved):
            return _json({"answered": request_id, "approved": approved})
        if shared is not None and any(q.get("id") == request_id for q in pane.remote_pending):
            # The question waits in the worker that runs the turn: the answer travels there as a command.
            tab.hub.publish({"type": "_answer", "pane": pane.contender, "id": request_id, "approved": approved})
            return _json({"answered": request_id, "approved": approved})
        ids = graph_request_ids(pane.graph_pending)
        if request_id in ids and request_id not in pane.graph_answers:
            if pane.busy:
                raise BadRequest(409, f"{pane.contender} is already going on with this approval")
            # This answer is for this request only; the run goes on once every request of the pause has one.
            pane.graph_answers[request_id] = approved
            tab.hub.publish({"type": "approval_done", "pane": pane.contender, "id": request_id,
                             "approved": approved, "how": "yes" if approved else "no"})  # fmt: skip
            waiting = [i for i in ids if i not in pane.graph_answers]
            if waiting:
                await _in_worker(pane.save_snapshot)  # shared mode: the next answer may reach another worker
                return _json({"answered": request_id, "approved": approved, "waiting": waiting})
            answers = [pane.graph_answers[i] for i in ids]
            try:
                await _claim(tab, [pane.contender], f"{pane.contender} is already going on with this approval")
            except BadRequest:
                pane.graph_answers.pop(request_id, None)
                raise
            pane.busy = True
            pane.graph_pending = []
            pane.graph_answers = {}
            pane.start("resume", _resuming(pane, answers), None)
            return _json({"answered": request_id, "approved": approved}, 202)
        raise BadRequest(409, "that approval is no longer waiting (answered, timed out or cancelled)")

    async def settings(request: Request) -> Response:
        body = await _body(request)
        tab = await tabs.get(body.get("tab"))
        _not_applying(tab)
        from webdemo.settings import PageSettings

        new = PageSettings.from_json(body, tab.settings)
        if tab.busy or any(p.phase is Phase.AWAITING_APPROVAL for p in tab.panes.values()):
            raise BadRequest(409, "a turn is in progress or waits for an approval; change the settings after it")
        held = sorted({*tab.panes, *new.contenders})
        await _claim(tab, held, "a turn is in progress or waits for an approval; change the settings after it")
        _not_applying(tab)  # checked again after the await: another apply may have begun meanwhile
        tab.applying = True
        try:
            for pane in tab.panes.values():
                pane.bridge.deny_all(close=True)
                if pane.conversation is not None:
                    pane.conversation.close()
            tab.settings = new
            await _in_worker(tab.save_settings)
            await tab.open_panes()
        finally:
            tab.applying = False
            await _release(tab, held)
        tab.hub.publish({"type": "state", "state": tab.state()})
        return _json(tab.state())

    async def stale(request: Request) -> Response:
        body = await _body(request)
        tab = await tabs.get(body.get("tab"))
        _not_applying(tab)
        if any(p.busy for p in tab.panes.values()):
            raise BadRequest(409, "wait for the turn to finish, then change the cart")
        held = list(tab.panes)
        await _claim(tab, held, "wait for the turn to finish, then change the cart")
        try:
            changed = await _in_worker(tab.change_carts)
        finally:
            await _release(tab, held)
        if not changed:
            raise BadRequest(409, "the carts are empty; ask the seed goal first, then change the cart")
        tab.hub.publish({"type": "changed", "changed": changed})
        return _json({"changed": changed})

    async def injection(request: Request) -> Response:
        body = await _body(request)
        tab = await tabs.get(body.get("tab"))
        on = body.get("on")
        if not isinstance(on, bool):
            raise BadRequest(400, "injection needs on: true or false")
        await _in_worker(lambda: tab.set_injection(on))
        tab.hub.publish({"type": "injection", "injected": on})
        return _json({"injected": on})

    async def rewind(request: Request) -> Response:
        body = await _body(request)
        tab = await tabs.get(body.get("tab"))
        _not_applying(tab)
        pane = _pane(tab, body.get("pane"))
        if pane.busy or pane.phase is Phase.AWAITING_APPROVAL:
            raise BadRequest(409, f"{pane.contender} has a turn in progress or waits for an approval")
        await _claim(tab, [pane.contender], f"{pane.contender} has a turn in progress or waits for an approval")
        pane.busy = True
        try:
            done = await pane.rewind(TurnRunner(tabs.executor))
            await _in_worker(pane.save_snapshot)
        except (ValueError, LookupError, RuntimeError) as exc:
            # No turn left to take back, or a thread the session cannot rewind now: a sentence, never a 500.
            raise BadRequest(409, f"{pane.contender} cannot rewind: {for_page(exc)}") from None
        finally:
            pane.busy = False
            await _release(tab, [pane.contender])
        tab.hub.publish({"type": "rewound", **done})
        return _json(done)

    async def cancel(request: Request) -> Response:
        body = await _body(request)
        tab = await tabs.get(body.get("tab"))
        tab.cancel_all()
        if shared is not None:  # and in whichever worker runs them
            tab.hub.publish({"type": "_cancel"})
        return _json({"cancelled": True})

    async def scenario(request: Request) -> Response:
        body = await _body(request)
        tab = await tabs.get(body.get("tab"))
        names = _scenario_names(body.get("scenarios"))
        await _start_job(tab, "scenario", _scenario_report, names, model, tab.folder)
        return _json({"running": names}, 202)

    async def evaluation(request: Request) -> Response:
        body = await _body(request)
        tab = await tabs.get(body.get("tab"))
        from comparison.eval.grading import GRADERS

        given = body.get("scenarios")
        names = [s.name for s in SCENARIOS if s.name in GRADERS] if given is None else _scenario_names(given)
        if ungraded := [n for n in names if n not in GRADERS]:
            raise BadRequest(400, f"the eval grades only {', '.join(GRADERS)}; {ungraded[0]!r} has no grader")
        runs = body.get("runs", 4)
        if isinstance(runs, bool) or not isinstance(runs, int) or not 1 <= runs <= MAX_EVAL_RUNS:
            raise BadRequest(400, f"runs must be a whole number from 1 to {MAX_EVAL_RUNS}")
        await _start_job(tab, "eval", _eval_report, names, runs, model)
        return _json({"running": names, "runs": runs}, 202)

    async def _start_job(tab: Tab, kind: str, function: Callable[..., str], *args: Any) -> None:
        """One job per kind and tab, at most `max_jobs` in this server, each in a child process of its own
        (`webdemo.jobs`): the turns' threads stay free, and a cancel ends the process."""
        job = tab.jobs.get(kind)
        if job is not None and not job.done():
            raise BadRequest(409, f"a {kind} run is already under way in this tab")
        if not slots.take():
            raise BadRequest(503, f"the server runs {slots.max_jobs} scenario or eval runs at once, as many as it "
                             "takes; try again when one is done")  # fmt: skip
        name = f"job:{kind}"
        try:
            await _claim(tab, [name], f"a {kind} run is already under way in this tab", JOB_LEASE_S)
        except BaseException:
            slots.give_back()
            raise

        async def keep_claim() -> None:
            assert shared is not None
            while True:
                await asyncio.sleep(JOB_LEASE_S / 3)
                with contextlib.suppress(Exception):
                    await _in_worker(lambda: shared.extend(tab.key, [name], tabs.owner, JOB_LEASE_S))

        async def run() -> None:
            tab.hub.publish({"type": "job", "kind": kind, "status": "running"})
            keeper = None if shared is None else asyncio.get_running_loop().create_task(keep_claim())
            try:
                html = _encoded(await run_in_child(function, *args)).decode("utf-8")  # Postgres takes no half emoji
                tab.reports[kind] = html
                if shared is not None:
                    await _in_worker(lambda: shared.put_report(tab.key, kind, html))
            except Exception as exc:  # the model went away mid-run: said on the page
                log.warning("%s run failed: %s: %s", kind, type(exc).__name__, exc)
                tab.hub.publish({"type": "job", "kind": kind, "status": "failed", "error": for_page(exc)})
                return
            except asyncio.CancelledError:
                tab.hub.publish({"type": "job", "kind": kind, "status": "failed", "error": "stopped"})
                raise
            finally:
                slots.give_back()
                if keeper is not None:
                    keeper.cancel()
                with contextlib.suppress(Exception):
                    await _release(tab, [name])
            tab.hub.publish({"type": "job", "kind": kind, "status": "done", "url": f"/api/report/{kind}"})

        tab.jobs[kind] = asyncio.get_running_loop().create_task(run())

    async def report(request: Request) -> Response:
        tab = await tabs.get(request.query_params.get("tab"))
        kind = request.path_params["kind"]
        if kind not in ("scenario", "eval"):
            raise BadRequest(404, "there are scenario and eval reports only")
        html = tab.reports.get(kind)
        if html is None and shared is not None:
            html = await _in_worker(lambda: shared.report(tab.key, kind))
        if html is None:
            raise BadRequest(404, f"no {kind} report in this tab yet; run one first")
        return HTMLResponse(_encoded(html), headers={**SECURITY_HEADERS, "Content-Security-Policy": REPORT_CSP})

    async def _in_worker(call: Callable[[], Any]) -> Any:
        return await asyncio.get_running_loop().run_in_executor(executor, call)

    async def bad_request(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, BadRequest)
        log.info("%s %s: %d %s", request.method, request.url.path, exc.status, exc.message)
        return _json({"error": exc.message}, exc.status)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return _json({"error": exc.detail}, exc.status_code)

    def post(path: str, endpoint: Callable[[Request], Awaitable[Response]]) -> Route:
        return Route(path, endpoint, methods=["POST"])

    middleware = [] if allowed_hosts is None else [Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts)]
    app = Starlette(
        routes=[
            Route("/", page),
            Route("/api/meta", meta),
            post("/api/tabs", new_tab),
            Route("/api/state", state),
            Route("/api/events", events),
            post("/api/turn", turn),
            post("/api/approve", approve),
            post("/api/settings", settings),
            post("/api/stale", stale),
            post("/api/injection", injection),
            post("/api/rewind", rewind),
            post("/api/cancel", cancel),
            post("/api/scenario", scenario),
            post("/api/eval", evaluation),
            Route("/api/report/{kind:str}", report),
            Mount("/static", StaticFiles(directory=STATIC), name="static"),
        ],
        middleware=middleware,
        exception_handlers={BadRequest: bad_request, HTTPException: http_error},
        lifespan=lifespan,
    )
    app.state.tabs = tabs
    return app


def _contenders() -> dict[str, str]:
    from comparison.contenders import CONTENDERS

    return dict(CONTENDERS)


def _asking(pane: Pane, text: str) -> Callable[[TurnRunner], Awaitable[Any]]:
    return lambda runner: pane.ask(runner, text)


def _resuming(pane: Pane, answers: list[bool]) -> Callable[[TurnRunner], Awaitable[Any]]:
    return lambda runner: pane.resume(runner, answers)


def _json(data: Any, status: int = 200) -> Response:
    return Response(_utf8(data), status, media_type="application/json", headers=SECURITY_HEADERS)


def _sse(event: dict[str, Any]) -> bytes:
    # json.dumps never emits a raw newline, so one event is one `data:` line.
    return b"data: " + _utf8(event) + b"\n\n"


def _utf8(data: Any) -> bytes:
    """`data` as JSON in UTF-8 (`_encoded`)."""
    return _encoded(json.dumps(data, ensure_ascii=False, default=str))


def _encoded(text: str) -> bytes:
    """`text` in UTF-8, whatever a model put in it: a surrogate left alone (half an emoji streamed as two escapes,
    or one half only) cannot be encoded, so two halves in a row become their character again and a lone half
    becomes U+FFFD. Never an exception: one such reply must not make a tab's state or report unreadable."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace").encode("utf-8")


def _json_only(request: Request) -> None:
    """Every POST must say it is JSON. A page on another site cannot send that without the browser asking first
    (a CORS preflight, which this server never grants), so it cannot make tabs or start turns here."""
    if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
        raise BadRequest(415, "send the request as JSON (Content-Type: application/json)")


async def _body(request: Request) -> dict[str, Any]:
    """The request's JSON object, read at most `MAX_BODY_BYTES`; anything else is a `BadRequest`."""
    _json_only(request)
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY_BYTES):
        raise BadRequest(413, f"request too large (at most {MAX_BODY_BYTES // 1024} KB)")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise BadRequest(413, f"request too large (at most {MAX_BODY_BYTES // 1024} KB)")
        chunks.append(chunk)
    try:
        data = json.loads(b"".join(chunks).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise BadRequest(400, "the request is not valid JSON") from None
    except ValueError:  # an integer of more digits than Python reads from text (sys.get_int_max_str_digits)
        raise BadRequest(400, "the request holds a number too long to read") from None
    if not isinstance(data, dict):
        raise BadRequest(400, "the request must be a JSON object")
    return data


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


def _scenario_report(names: list[str], model: str, folder: Path | None) -> str:
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


def _eval_report(names: list[str], runs: int, model: str) -> str:
    """Run the eval as `compare.py eval` does and render its pass^k page (blocking: in a worker)."""
    from comparison.eval.report import render_eval_report
    from comparison.eval.trials import DEFAULT_MODEL, EvalPlan, eval_document, run_eval

    plan = EvalPlan(
        model=DEFAULT_MODEL if model == "scripted" else model,
        scenarios=tuple(SCENARIOS_BY_NAME[n] for n in names),
        runs=runs,
    )
    return render_eval_report(eval_document(run_eval(plan)))


# --- serving from a thread (tests, benchmarks) ---------------------------------------------------------------


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def make_server(config: Any, app: Starlette, on_started: Callable[[], None] | None = None) -> Any:
    """A uvicorn server that ends the page's event streams when it is told to stop (Ctrl-C), so the stop is not
    held up by open pages until the graceful-shutdown timeout cancels them; `on_started` is called once it
    listens (so a URL printed there can be opened at once)."""
    import uvicorn

    class Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets=sockets)
            if self.started and on_started is not None:
                on_started()

        def handle_exit(self, sig: int, frame: Any) -> None:
            app.state.tabs.end_streams()
            super().handle_exit(sig, frame)

    return Server(config)


@contextlib.contextmanager
def running_server(app: Starlette, host: str = "127.0.0.1", port: int | None = None) -> Iterator[str]:
    """Serve `app` with uvicorn in a thread for the block; yields its base URL ("http://127.0.0.1:PORT")."""
    import uvicorn

    port = port or free_port(host)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=1, lifespan="on")
    server = make_server(config, app)
    thread = threading.Thread(target=server.run, name="webdemo-server", daemon=True)
    thread.start()
    try:
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError(f"the server did not start on {host}:{port}")
            threading.Event().wait(0.01)
        yield f"http://{host}:{port}"
    finally:
        app.state.tabs.end_streams()
        server.should_exit = True
        thread.join(10)
