"""A newcomer's seed turn on the live page while one client floods it with scenario and eval jobs, side by side.

The article turn is timed on a quiet server, while 16 tabs ask for 32 jobs, and after every job was cancelled, each
with its ratio to the quiet one. Run from the project root: ``python benchmarks/web_jobs.py``.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import common  # noqa: F401 - also puts the project root on sys.path (the job processes import the project as we do)
from starlette.testclient import TestClient

from comparison.scenarios import SEED_GOAL
from webdemo.server import create_app

JSON = {"Content-Type": "application/json"}
BASE = "http://127.0.0.1"


def new_tab(client: TestClient) -> str:
    return str(client.post("/api/tabs", headers=JSON).json()["tab"])


def seed_turn(client: TestClient) -> float:
    """Seconds from the POST to both panes idle, in a fresh tab."""
    tab = new_tab(client)
    start = time.perf_counter()
    assert client.post("/api/turn", json={"tab": tab, "text": SEED_GOAL}).status_code == 202
    while any(p["busy"] for p in client.get("/api/state", params={"tab": tab}).json()["panes"]):
        time.sleep(0.01)
    return time.perf_counter() - start


def main(repeats: int = 3) -> None:
    with tempfile.TemporaryDirectory() as folder, TestClient(create_app(Path(folder)), base_url=BASE) as c:
        quiet = min(seed_turn(c) for _ in range(repeats))
        tabs = [new_tab(c) for _ in range(16)]
        codes = [c.post("/api/eval", json={"tab": t, "runs": 20}).status_code for t in tabs]
        codes += [c.post("/api/scenario", json={"tab": t}).status_code for t in tabs]
        time.sleep(2.0)  # the accepted jobs are under way
        during = min(seed_turn(c) for _ in range(repeats))
        for t in tabs:
            c.post("/api/cancel", json={"tab": t})
        time.sleep(1.0)
        after = min(seed_turn(c) for _ in range(repeats))
    print("job requests answered:", ", ".join(f"{codes.count(k)} x {k}" for k in sorted(set(codes))))
    print(
        f"seed turn (best of {repeats}): quiet {quiet:.2f} s | during jobs {during:.2f} s ({during / quiet:.1f}x)"
        f" | after cancel {after:.2f} s ({after / quiet:.1f}x)"
    )


if __name__ == "__main__":
    main()
