"""The live page's web server: the Starlette app (`create_app`), one per uvicorn worker (`app_from_env`).

`create_app` builds the page's shared state (`webdemo.page.Page`) and serves `/` and `/api/...` (`webdemo.routes`)
and the static files, over a data folder or a Postgres URL, which several workers share (`webdemo.pgstore`); the
tabs' store (`webdemo.tabstore`) is chosen here, once. `running_server`
serves an app from a thread (tests, benchmarks).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

from shared_tools.telemetry_setup import setup_tracing
from webdemo.jobs import JobSlots
from webdemo.page import Page
from webdemo.routes import EXCEPTION_HANDLERS, ROUTES, STATIC
from webdemo.shared import LEASE_S
from webdemo.tabs import Tabs
from webdemo.tabstore import FolderStore, TabStore

ENV_CONFIG = "WEBDEMO_CONFIG"
"""The environment variable `app_from_env` reads: the JSON of `create_app`'s arguments (set by `compare.py serve`)."""


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
    executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="webdemo")
    tabs = Tabs(
        open_store(data_dir, executor, lease_s),
        model_spec=model,
        executor=executor,
        approval_timeout=approval_timeout,
        gone_after=gone_after,
        max_tabs=max_tabs,
        keep_tabs_s=keep_tabs_s,
        max_stored_tabs=max_stored_tabs,
    )
    middleware = [] if allowed_hosts is None else [Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts)]
    app = Starlette(
        routes=[*ROUTES, Mount("/static", StaticFiles(directory=STATIC), name="static")],
        middleware=middleware,
        exception_handlers=EXCEPTION_HANDLERS,
        lifespan=_lifespan,
    )
    app.state.page = Page(tabs, executor, model, JobSlots(max_jobs))
    app.state.tabs = tabs
    return app


@contextlib.asynccontextmanager
async def _lifespan(app: Starlette) -> AsyncIterator[None]:
    """This worker's listener for the tabs' events (`Tabs.start`); at the end, every run cancelled, every file
    closed."""
    page: Page = app.state.page
    await page.tabs.start()
    try:
        yield
    finally:
        await page.tabs.aclose()
        await page.tabs.store.aclose()
        page.executor.shutdown(wait=False, cancel_futures=True)


def open_store(data: Path | str, executor: ThreadPoolExecutor, lease_s: float = LEASE_S) -> TabStore:
    """The tabs' store: Postgres for a postgresql:// URL (several workers share it), else a data folder."""
    from shared_tools.bookstore.store import is_postgres_url

    if is_postgres_url(data):
        from webdemo.pgstore import PostgresStore
        from webdemo.shared import SharedState

        return PostgresStore(SharedState(str(data), lease_s=lease_s), executor)
    return FolderStore(Path(data))


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
