"""`python compare.py serve`: the command line of the live page (parsing, the checks made first, exit codes).

It checks everything it is given before it serves (the model, the data folder, the port), prints the URL and,
when asked to listen beyond 127.0.0.1, what that means; then uvicorn serves `webdemo.server.create_app` until
Ctrl-C. Exit codes as for `compare.py chat`: 0 ok, 2 bad usage (a bad option, a port in use or not ours to
bind), 3 model unavailable, 4 the data folder cannot be used, 130 interrupted. Every failure is one line on
stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import logging
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from webdemo.panes import default_data_dir

EXIT_OK, EXIT_USAGE, EXIT_UNAVAILABLE, EXIT_FILE, EXIT_INTERRUPTED = 0, 2, 3, 4, 130
DEFAULT_PORT = 8765
LOOPBACK = ("127.0.0.1", "localhost", "::1")


class UsageError(Exception):
    """A bad command line: one line on stderr, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")


def build_serve_parser(prog: str = "compare.py serve") -> argparse.ArgumentParser:
    parser = _Parser(
        prog=prog,
        description="Serve the live side-by-side page: every pane a real session, the lessons as buttons.",
        epilog="exit codes: 0 ok, 2 bad usage, 3 model unavailable, 4 the data folder cannot be used, "
        "130 interrupted",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1, this "
                        "machine only; 0.0.0.0 exposes the page to your network)")  # fmt: skip
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default: {DEFAULT_PORT}; 0: any free)")
    parser.add_argument(
        "--data", type=Path, default=None, metavar="DIR",
        help=f"folder of the tabs' stores and sessions, kept across restarts (default: {default_data_dir()})",
    )  # fmt: skip
    parser.add_argument("--model", default="scripted", help="'scripted' (the persona is chosen on the page) or "
                        "'ollama:<model>'")  # fmt: skip
    parser.add_argument("--approval-timeout", type=float, default=120.0, metavar="S",
                        help="seconds the hand-written loop waits for the page's yes before it takes a no")  # fmt: skip
    parser.add_argument("-v", "--verbose", action="count", default=0)
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


def allowed_hosts(host: str) -> list[str] | None:
    """Host headers the server accepts (a page on another site cannot reach it through DNS rebinding); None
    (any) when listening on every address, since its names are not known here."""
    if host in ("0.0.0.0", "::", ""):
        return None
    return list(dict.fromkeys([host, f"[{host}]" if ":" in host else host, *LOOPBACK, "[::1]"]))


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


def _check_data(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / ".write-test"
        probe.write_text("", encoding="utf-8")
        probe.unlink()
    except OSError as exc:
        raise OSError(f"the data folder {folder} cannot be used: {exc.strerror or exc}") from None


def serve_main(argv: Sequence[str], *, prog: str = "compare.py serve") -> int:
    """`python compare.py serve [--host H] [--port P] [--data DIR] [--model SPEC]`; returns the exit code."""
    try:
        return _serve(argv, prog)
    except KeyboardInterrupt:
        _say(prog, "interrupted")
        return EXIT_INTERRUPTED


def _serve(argv: Sequence[str], prog: str) -> int:
    from shared_tools.comparison.sanitize import SafeLogFormatter
    from shared_tools.models import ModelSpecError, ModelUnavailable, make_model

    try:
        args = build_serve_parser(prog).parse_args(argv)
        if args.approval_timeout <= 0:
            raise UsageError(f"--approval-timeout must be above 0, got {args.approval_timeout:g}")
        port = _check_port(args.host, args.port)
    except UsageError as exc:
        _say(prog, str(exc))
        return EXIT_USAGE
    level = logging.WARNING if args.verbose == 0 else logging.INFO if args.verbose == 1 else logging.DEBUG
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(SafeLogFormatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level, handlers=[handler])
    try:
        make_model(args.model)
    except ModelSpecError as exc:
        _say(prog, str(exc))
        return EXIT_USAGE
    except ModelUnavailable as exc:
        _say(prog, str(exc))
        return EXIT_UNAVAILABLE
    data = args.data if args.data is not None else default_data_dir()
    try:
        _check_data(data)
    except OSError as exc:
        _say(prog, str(exc))
        return EXIT_FILE

    import uvicorn

    from webdemo.server import create_app, make_server

    app = create_app(data, model=args.model, allowed_hosts=allowed_hosts(args.host),
                     approval_timeout=args.approval_timeout)  # fmt: skip
    shown = f"[{args.host}]" if ":" in args.host else args.host
    print(f"Serving the live page at http://{shown}:{port}/  (tabs kept in {data}; Ctrl-C stops it)")
    if warning := exposure_warning(args.host, port):
        print(warning, file=sys.stderr)
    config = uvicorn.Config(app, host=args.host, port=port, log_level="warning", timeout_graceful_shutdown=2)
    make_server(config, app).run()
    return EXIT_OK
