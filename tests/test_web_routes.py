"""The live page's server (`webdemo`): its routes, its event stream on a real uvicorn server, and `serve`'s options.

What a presenter and an attacker would do: the article's goal, the stale cart, approvals answered, denied, timed out and
abandoned, one turn at a time, tabs that cannot see each other, a restart, and every bad request a 4xx with a
sentence.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from comparison.scenarios import CART_QUESTION, SEED_GOAL
from webdemo.cli import allowed_hosts, build_serve_parser, exposure_warning, serve_main
from webdemo.server import create_app, running_server

BASE = "http://127.0.0.1"
WAIT_S = 30.0
"""How long a helper waits for the server to reach a state before the test fails (never a timing assert)."""


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return tmp_path / "web"


@pytest.fixture
def client(data: Path) -> Iterator[TestClient]:
    with TestClient(create_app(data, allowed_hosts=["127.0.0.1"]), base_url=BASE) as c:
        yield c


def new_tab(client: TestClient) -> str:
    response = client.post("/api/tabs", headers={"Content-Type": "application/json"})
    assert response.status_code == 200
    return str(response.json()["tab"])


def state(client: TestClient, tab: str) -> dict[str, Any]:
    response = client.get("/api/state", params={"tab": tab})
    assert response.status_code == 200, response.text
    return dict(response.json())


def wait_for(client: TestClient, tab: str, done: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        current = state(client, tab)
        if done(current):
            return current
        time.sleep(0.02)
    raise AssertionError(f"the tab did not get there: {json.dumps(current)[:2000]}")


def idle(s: dict[str, Any]) -> bool:
    return not any(p["busy"] for p in s["panes"])


def waiting_everywhere(s: dict[str, Any]) -> bool:
    return all(p["pending"] for p in s["panes"])


def panes(s: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["contender"]: p for p in s["panes"]}


def ask(client: TestClient, tab: str, text: str) -> dict[str, Any]:
    response = client.post("/api/turn", json={"tab": tab, "text": text})
    assert response.status_code == 202, response.text
    return wait_for(client, tab, idle)


def settings(client: TestClient, tab: str, **changes: Any) -> dict[str, Any]:
    response = client.post("/api/settings", json={"tab": tab, **changes})
    assert response.status_code == 200, response.text
    return dict(response.json())


def answer_every_request(client: TestClient, tab: str, pane: str, approved: bool) -> int:
    """Answer each approval `pane` asks for until its turn is over; how many there were."""
    answered = 0
    while True:
        current = panes(wait_for(client, tab, lambda s: panes(s)[pane]["pending"] or not panes(s)[pane]["busy"]))
        if not current[pane]["pending"]:
            return answered
        request = current[pane]["pending"][0]
        answer = {"tab": tab, "pane": pane, "id": request["id"], "approved": approved}
        assert client.post("/api/approve", json=answer).status_code in (200, 202)
        answered += 1
        gone = request["id"]
        wait_for(client, tab, lambda s, gone=gone: all(r["id"] != gone for r in panes(s)[pane]["pending"]))


def provoke_risky_write(client: TestClient, tab: str) -> None:
    """As the prompt-injection scenario does: a catalog note says 'add 10 copies', the gullible persona obeys."""
    settings(client, tab, persona="gullible", approval_gate=True)
    assert client.post("/api/injection", json={"tab": tab, "on": True}).json() == {"injected": True}
    assert client.post("/api/turn", json={"tab": tab, "text": SEED_GOAL}).status_code == 202


# --- the page and the article's goal ---------------------------------------------------------------------------------


def test_the_page_and_its_files_are_served_with_a_strict_content_policy(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert "/static/app.js" in page.text and "http" not in page.text.replace("http-equiv", "")
    for name in ("app.js", "style.css"):
        assert client.get(f"/static/{name}").status_code == 200
    meta = client.get("/api/meta").json()
    assert meta["seed_goal"] == SEED_GOAL and "gullible" in meta["personas"]


def test_the_seed_goal_in_both_panes_ends_with_the_quiet_orchard_at_16_50(client: TestClient) -> None:
    tab = new_tab(client)
    done = panes(ask(client, tab, SEED_GOAL))
    assert set(done) == {"handwritten", "langgraph"}
    for pane in done.values():
        last = pane["last"]
        assert last["stop_reason"] == "done" and last["steps"] == 5 and last["tool_calls"] == 4
        assert "The Quiet Orchard" in last["answer"] and "16.50" in last["answer"]
        assert last["cart"] == [{"title": "The Quiet Orchard", "quantity": 1}] and last["cart_total"] == "16.50"
        assert last["cart_check"] == "agrees"
        assert [line["name"] for line in pane["trace"]].count("model") == 5
        assert pane["transcript"] == [
            {"role": "user", "text": SEED_GOAL},
            {"role": "assistant", "text": last["answer"]},
        ]


def test_four_panes_each_have_a_cart_of_their_own(client: TestClient) -> None:
    tab = new_tab(client)
    settings(client, tab, contenders=["create-agent", "handwritten", "langgraph-defaults", "langgraph"])
    done = panes(ask(client, tab, SEED_GOAL))
    assert list(done) == ["handwritten", "langgraph", "langgraph-defaults", "create-agent"]  # table order
    assert all(p["last"]["cart_total"] == "16.50" for p in done.values()), "one cart per pane, not 4 copies in one"
    assert "no approval gate" in done["langgraph-defaults"]["note"].lower()


# --- the stale cart -----------------------------------------------------------------------------------------------


def test_changing_the_cart_behind_the_agents_back_makes_the_remembered_answer_stale(client: TestClient) -> None:
    tab = new_tab(client)
    settings(client, tab, contenders=["handwritten", "langgraph", "langgraph-defaults"])
    assert client.post("/api/stale", json={"tab": tab}).status_code == 409  # nothing in the carts yet
    ask(client, tab, SEED_GOAL)
    changed = client.post("/api/stale", json={"tab": tab})
    assert changed.status_code == 200
    assert {c["pane"] for c in changed.json()["changed"]} == {"handwritten", "langgraph", "langgraph-defaults"}
    done = panes(ask(client, tab, CART_QUESTION))
    # LangGraph as shipped answers from memory: the badge says the answer is stale.
    last = done["langgraph-defaults"]["last"]
    assert last["stop_reason"] == "done" and "16.50" in last["answer"]
    assert last["cart_total"] == "0.00" and last["cart_check"] == "stale"
    assert last["answer_amounts"] == ["16.50"]
    # Ours mark the remembered cart result out of date (the stale-read guard): the model reads it again.
    for name in ("handwritten", "langgraph"):
        last = done[name]["last"]
        assert last["stop_reason"] == "done" and last["cart_total"] == "0.00"
        assert last["cart_check"] == "agrees" and last["answer_amounts"] == ["0.00"]


# --- approvals ----------------------------------------------------------------------------------------------------


def test_an_injected_write_is_approved_in_one_pane_and_denied_in_the_other(client: TestClient) -> None:
    tab = new_tab(client)
    provoke_risky_write(client, tab)
    waiting = panes(wait_for(client, tab, waiting_everywhere))
    [hand] = waiting["handwritten"]["pending"]
    [graph] = waiting["langgraph"]["pending"]
    assert waiting["handwritten"]["busy"], "the loop waits inside its approve callback"
    assert not waiting["langgraph"]["busy"] and waiting["langgraph"]["phase"] == "awaiting approval"
    for request in (hand, graph):
        assert request["tool"] == "add_to_cart" and request["args"]["quantity"] == 10
        assert "10 x The Quiet Orchard" in request["reason"]
    # While a pane is waiting, no new turn starts anywhere: one turn at a time per pane.
    refused = client.post("/api/turn", json={"tab": tab, "text": CART_QUESTION})
    assert refused.status_code == 409 and "one turn at a time" in refused.json()["error"]
    assert answer_every_request(client, tab, "handwritten", True) == 2, "10 copies, then the 11th in the cart"
    assert answer_every_request(client, tab, "langgraph", False) == 1, "refused: the model goes its own way"
    done = panes(wait_for(client, tab, lambda s: idle(s) and not any(p["pending"] for p in s["panes"])))
    assert done["handwritten"]["last"]["cart"] == [{"title": "The Quiet Orchard", "quantity": 11}]
    assert done["langgraph"]["last"]["cart"] == [{"title": "The Quiet Orchard", "quantity": 1}]
    assert "refused" in done["langgraph"]["last"]["answer"]
    # An answer to a request that is no longer waiting is refused, not applied twice.
    again = client.post("/api/approve", json={"tab": tab, "pane": "langgraph", "id": graph["id"], "approved": True})
    assert again.status_code == 409


def test_an_unanswered_approval_times_out_as_a_no(data: Path) -> None:
    with TestClient(create_app(data, approval_timeout=0.2), base_url=BASE) as client:
        tab = new_tab(client)
        settings(client, tab, contenders=["handwritten"])
        provoke_risky_write(client, tab)
        done = panes(wait_for(client, tab, lambda s: s["panes"][0]["last"] is not None))["handwritten"]
        assert done["last"]["cart"] == [{"title": "The Quiet Orchard", "quantity": 1}]
        assert not done["pending"]


def test_a_graph_pause_survives_a_restart_and_is_answered_by_the_new_server(data: Path) -> None:
    with TestClient(create_app(data), base_url=BASE) as client:
        tab = new_tab(client)
        settings(client, tab, contenders=["langgraph"])
        provoke_risky_write(client, tab)
        [request] = wait_for(client, tab, waiting_everywhere)["panes"][0]["pending"]
    with TestClient(create_app(data), base_url=BASE) as client:
        [again] = state(client, tab)["panes"][0]["pending"]
        assert again["id"] == request["id"]
        assert answer_every_request(client, tab, "langgraph", True) == 2
        done = state(client, tab)["panes"][0]
        assert done["last"]["cart"] == [{"title": "The Quiet Orchard", "quantity": 11}]


# --- one turn at a time, tabs, restarts -----------------------------------------------------------------------------


def test_two_turns_sent_at_once_start_exactly_one(client: TestClient) -> None:
    tab = new_tab(client)
    provoke_risky_write(client, tab)  # the first turn holds its panes until the approvals are answered
    wait_for(client, tab, waiting_everywhere)
    statuses: list[int] = []

    def send() -> None:
        statuses.append(client.post("/api/turn", json={"tab": tab, "text": CART_QUESTION}).status_code)

    threads = [threading.Thread(target=send) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert statuses == [409] * 4
    client.post("/api/cancel", json={"tab": tab})
    hand = panes(wait_for(client, tab, lambda s: not panes(s)["handwritten"]["busy"]))["handwritten"]
    assert hand["last"]["stop_reason"] == "cancelled" and hand["last"]["cart"] == [], "the cancelled wait was a no"


def test_two_tabs_never_see_each_others_conversation_or_cart(client: TestClient, data: Path) -> None:
    first, second = new_tab(client), new_tab(client)
    assert first != second
    ask(client, first, SEED_GOAL)
    other = state(client, second)
    assert all(p["transcript"] == [] and p["last"] is None for p in other["panes"])
    assert client.post("/api/stale", json={"tab": second}).status_code == 409, "the second tab's carts are empty"
    folders = sorted(p.name for p in (data / "tabs").iterdir())
    assert folders == sorted(t.split(".")[0] for t in (first, second))


def test_a_restarted_server_resumes_the_conversation_and_the_cart(data: Path) -> None:
    with TestClient(create_app(data), base_url=BASE) as client:
        tab = new_tab(client)
        answers = {name: p["last"]["answer"] for name, p in panes(ask(client, tab, SEED_GOAL)).items()}
    with TestClient(create_app(data), base_url=BASE) as client:
        resumed = panes(state(client, tab))
        for name, pane in resumed.items():
            assert pane["transcript"][-1] == {"role": "assistant", "text": answers[name]}
        # The conversation, not just its text: the next question is answered from the remembered turn.
        for pane in panes(ask(client, tab, CART_QUESTION)).values():
            assert "16.50" in pane["last"]["answer"] and pane["last"]["cart_check"] == "agrees"


def test_settings_are_checked_and_kept(client: TestClient) -> None:
    tab = new_tab(client)
    for bad in (
        {"max_steps": 0},
        {"max_steps": True},
        {"max_steps": 2.5},
        {"max_tokens": "lots"},
        {"contenders": []},
        {"contenders": ["nobody"]},
        {"persona": "../x"},
        {"approval_gate": "yes"},
        {"colour": "red"},
    ):
        response = client.post("/api/settings", json={"tab": tab, **bad})
        assert response.status_code == 400 and response.json()["error"], bad
    changed = settings(client, tab, max_steps=2, max_tokens=None, persona="looper")
    assert changed["settings"]["max_steps"] == 2 and changed["settings"]["max_tokens"] is None
    for pane in panes(ask(client, tab, SEED_GOAL)).values():
        assert pane["last"]["stop_reason"] == "max steps reached" and pane["last"]["steps"] == 2


def test_rewind_takes_the_last_turn_back_or_says_it_cannot(client: TestClient) -> None:
    from handwritten import Session

    tab = new_tab(client)
    ask(client, tab, SEED_GOAL)
    ask(client, tab, CART_QUESTION)
    response = client.post("/api/rewind", json={"tab": tab, "pane": "handwritten"})
    if not hasattr(Session, "rewind"):
        assert response.status_code == 409 and "no rewind" in response.json()["error"]
        return
    assert response.status_code == 200, response.text
    assert [m["text"] for m in response.json()["transcript"] if m["role"] == "user"] == [SEED_GOAL]


# --- bad input ------------------------------------------------------------------------------------------------------


def test_bad_requests_get_a_sentence_and_a_4xx_never_a_500_or_a_traceback(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    tab = new_tab(client)
    key = tab.split(".")[0]
    forged = f"{key}.{'0' * 32}"
    caplog.set_level(logging.INFO)
    cases: list[tuple[str, Any, int]] = [
        ("/api/turn", {"tab": tab, "text": ""}, 400),
        ("/api/turn", {"tab": tab, "text": "   "}, 400),
        ("/api/turn", {"tab": tab, "text": "x" * 50_000}, 413),
        ("/api/turn", {"tab": tab, "text": 42}, 400),
        ("/api/turn", {"tab": tab, "text": "Tell me a joke"}, 422),
        ("/api/turn", {"text": SEED_GOAL}, 400),
        ("/api/turn", {"tab": forged, "text": SEED_GOAL}, 403),
        ("/api/turn", {"tab": "../../etc", "text": SEED_GOAL}, 400),
        ("/api/turn", {"tab": ["x"], "text": SEED_GOAL}, 400),
        ("/api/approve", {"tab": tab, "pane": "nobody", "id": "x", "approved": True}, 404),
        ("/api/approve", {"tab": tab, "pane": "handwritten", "id": "x", "approved": "yes"}, 400),
        ("/api/approve", {"tab": tab, "pane": "handwritten", "id": "x", "approved": True}, 409),
        ("/api/rewind", {"tab": tab, "pane": {"a": 1}}, 404),
        ("/api/injection", {"tab": tab, "on": "maybe"}, 400),
        ("/api/scenario", {"tab": tab, "scenarios": ["nope"]}, 400),
        ("/api/scenario", {"tab": tab, "scenarios": "bookstore"}, 400),
        ("/api/eval", {"tab": tab, "scenarios": ["orders"], "runs": 10_000}, 400),
    ]
    for path, body, status in cases:
        response = client.post(path, json=body)
        assert response.status_code == status, (path, body, response.text)
        assert response.json()["error"], (path, body)
    raw = [
        (b"{not json", 400),
        (b"[1, 2]", 400),
        (b"\xff\xfe", 400),
        (b"[" * 100_000, 413),
        (b"[" * 5_000, 400),
    ]
    for content, status in raw:
        response = client.post("/api/turn", content=content, headers={"Content-Type": "application/json"})
        assert response.status_code == status, content[:20]
    # A page on another site can only send "simple" requests without asking first: not JSON ones.
    for path in ("/api/tabs", "/api/turn"):
        response = client.post(
            path, content=json.dumps({"tab": tab, "text": SEED_GOAL}), headers={"Content-Type": "text/plain"}
        )
        assert response.status_code == 415, path
    assert client.get("/api/state", params={"tab": forged}).status_code == 403
    assert client.get("/api/state").status_code == 400
    assert client.get("/api/report/scenario", params={"tab": tab}).status_code == 404
    assert client.get("/api/nothing").status_code == 404
    assert client.get("/api/turn").status_code == 405
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info], "no error, no traceback"
    assert all(p["transcript"] == [] for p in state(client, tab)["panes"]), "nothing bad reached a conversation"


def test_a_request_for_another_host_name_is_refused(client: TestClient) -> None:
    # A page on another site that resolves its own name to 127.0.0.1 (DNS rebinding) sends its own Host header.
    assert client.get("/api/meta", headers={"Host": "evil.example"}).status_code == 400


# --- scenarios and eval ---------------------------------------------------------------------------------------------


def test_a_scenario_and_an_eval_run_from_the_page_show_their_html_reports(client: TestClient) -> None:
    tab = new_tab(client)
    assert client.post("/api/scenario", json={"tab": tab, "scenarios": ["bookstore"]}).status_code == 202
    assert client.post("/api/eval", json={"tab": tab, "scenarios": ["orders"], "runs": 2}).status_code == 202
    wait_for(client, tab, lambda s: s["reports"] == ["eval", "scenario"] and not s["jobs"])
    report = client.get("/api/report/scenario", params={"tab": tab})
    assert report.headers["content-security-policy"].startswith("default-src 'none'")
    assert "The Quiet Orchard" in report.text and "<svg" in report.text and "<script" not in report.text
    evaluation = client.get("/api/report/eval", params={"tab": tab}).text
    assert "pass^k" in evaluation and "SIMULATED" in evaluation.upper()


# --- the event stream, on a real server -------------------------------------------------------------------------------


def read_events(lines: Iterator[str], until: Callable[[list[dict[str, Any]]], bool]) -> list[dict[str, Any]]:
    """Events from an open stream's lines (`response.iter_lines()`, one iterator per stream) until `until`."""
    events: list[dict[str, Any]] = []
    for line in lines:
        if line.startswith("data: "):
            events.append(json.loads(line[6:]))
            if until(events):
                return events
    raise AssertionError(f"the stream ended early: {events}")


def ended(events: list[dict[str, Any]], count: int = 2) -> bool:
    return sum(e["type"] == "turn_end" for e in events) >= count


def test_the_event_stream_carries_each_trace_line_as_it_happens(data: Path) -> None:
    with running_server(create_app(data)) as url, httpx.Client(base_url=url, timeout=WAIT_S) as http:
        tab = http.post("/api/tabs", json={}).json()["tab"]
        with http.stream("GET", "/api/events", params={"tab": tab}) as stream:
            lines = stream.iter_lines()
            assert stream.headers["content-type"].startswith("text/event-stream")
            [hello] = read_events(lines, lambda e: len(e) == 1)
            assert hello["type"] == "hello" and len(hello["state"]["panes"]) == 2
            assert http.post("/api/turn", json={"tab": tab, "text": SEED_GOAL}).status_code == 202
            events = read_events(lines, ended)
    for pane in ("handwritten", "langgraph"):
        mine = [e for e in events if e.get("pane") == pane]
        kinds = [e["type"] for e in mine if e["type"] != "token"]
        assert kinds[0] == "turn_start" and kinds[-1] == "turn_end" and kinds.count("trace") == 9
        traces = [e["event"] for e in mine if e["type"] == "trace"]
        assert [t["name"] for t in traces][:2] == ["model", "search_books"]
        assert all(t["ms"] >= 0 for t in traces) and traces[0]["tokens"] > 0
        meters = [e["tokens"] for e in mine if e["type"] == "trace"]
        assert meters == sorted(meters) and meters[-1] == mine[-1]["report"]["tokens"]
        assert mine[-1]["report"]["stop_reason"] == "done"
        # Token by token: the answer pieces of the last model call, joined, are the answer shown at the end.
        tokens = [e for e in mine if e["type"] == "token"]
        last_step = max(t["step"] for t in tokens)
        answer = "".join(t["text"] for t in tokens if t["kind"] == "answer" and t["step"] == last_step)
        assert answer == mine[-1]["report"]["answer"]
        assert any(t["kind"] == "plan" for t in tokens), "the model's plan streams too"
        order = [e["type"] for e in mine]
        assert order.index("token") < order.index("trace"), "a reply's tokens come before its trace line"


def test_a_tab_that_goes_away_has_its_runs_cancelled(data: Path) -> None:
    app = create_app(data, gone_after=0.2)
    with running_server(app) as url, httpx.Client(base_url=url, timeout=WAIT_S) as http:
        tab = http.post("/api/tabs", json={}).json()["tab"]
        http.post("/api/settings", json={"tab": tab, "contenders": ["handwritten"], "persona": "gullible"})
        http.post("/api/injection", json={"tab": tab, "on": True})
        with http.stream("GET", "/api/events", params={"tab": tab}) as stream:
            lines = stream.iter_lines()
            read_events(lines, lambda e: len(e) == 1)
            http.post("/api/turn", json={"tab": tab, "text": SEED_GOAL})
            read_events(lines, lambda e: e[-1]["type"] == "approval")
        # The page is gone; the loop that was waiting for its yes gets a no, and the turn ends.
        deadline = time.monotonic() + WAIT_S
        while (pane := http.get("/api/state", params={"tab": tab}).json()["panes"][0])["busy"]:
            assert time.monotonic() < deadline, "the abandoned turn was never cancelled"
            time.sleep(0.02)
        assert pane["last"]["stop_reason"] == "cancelled" and pane["last"]["cart"] == []


def test_a_reload_within_the_grace_period_keeps_the_run_going(data: Path) -> None:
    app = create_app(data, gone_after=5.0)
    with running_server(app) as url, httpx.Client(base_url=url, timeout=WAIT_S) as http:
        tab = http.post("/api/tabs", json={}).json()["tab"]
        http.post("/api/settings", json={"tab": tab, "contenders": ["handwritten"], "persona": "gullible"})
        http.post("/api/injection", json={"tab": tab, "on": True})
        with http.stream("GET", "/api/events", params={"tab": tab}) as stream:
            lines = stream.iter_lines()
            read_events(lines, lambda e: len(e) == 1)
            http.post("/api/turn", json={"tab": tab, "text": SEED_GOAL})
            request = read_events(lines, lambda e: e[-1]["type"] == "approval")[-1]["request"]
        with http.stream("GET", "/api/events", params={"tab": tab}) as stream:  # the reload
            lines = stream.iter_lines()
            [hello] = read_events(lines, lambda e: len(e) == 1)
            assert hello["state"]["panes"][0]["pending"][0]["id"] == request["id"]

            def approve_each(events: list[dict[str, Any]]) -> bool:
                if events[-1]["type"] == "approval":
                    answer = {"tab": tab, "pane": "handwritten", "id": events[-1]["request"]["id"], "approved": True}
                    assert http.post("/api/approve", json=answer).status_code == 200
                return ended(events, 1)

            answer = {"tab": tab, "pane": "handwritten", "id": request["id"], "approved": True}
            assert http.post("/api/approve", json=answer).status_code == 200
            [end] = [e for e in read_events(lines, approve_each) if e["type"] == "turn_end"]
        assert end["report"]["cart"] == [{"title": "The Quiet Orchard", "quantity": 11}]


# --- the command line -------------------------------------------------------------------------------------------------


def test_serve_refuses_bad_options_with_exit_code_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert serve_main(["--port", "abc"]) == 2
    assert serve_main(["--model", "gpt-9", "--data", str(tmp_path)]) == 2
    assert serve_main(["--approval-timeout", "0"]) == 2
    assert serve_main(["--port", "70000"]) == 2
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        assert serve_main(["--port", str(taken.getsockname()[1]), "--data", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("compare.py serve:") == 5
    assert "cannot listen on 127.0.0.1" in err


def test_serve_refuses_a_data_folder_it_cannot_use_with_exit_code_4(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("not a folder")
    assert serve_main(["--data", str(a_file), "--port", "0"]) == 4
    assert capsys.readouterr().err == (
        f"compare.py serve: --data: {a_file} is a file, not a folder; give a folder (it is made if missing)\n"
    )
    assert serve_main(["--data", str(a_file / "tabs"), "--port", "0"]) == 4
    assert capsys.readouterr().err == (
        f"compare.py serve: --data: the folder {a_file / 'tabs'} cannot be made: {a_file} is a file, not a folder\n"
    )


def test_serve_says_what_exposing_the_page_means() -> None:
    assert exposure_warning("127.0.0.1", 8765) is None
    warning = exposure_warning("0.0.0.0", 8765)
    assert warning is not None and "no login" in warning and "TLS" in warning
    assert allowed_hosts("127.0.0.1") is not None and "evil.example" not in allowed_hosts("127.0.0.1")  # type: ignore[operator]
    assert build_serve_parser().parse_args([]).host == "127.0.0.1"


@pytest.mark.parametrize("everywhere", ["0.0.0.0", "::"])
def test_listening_everywhere_keeps_a_host_check_that_accepts_this_machines_names_and_addresses(
    everywhere: str, tmp_path: Path
) -> None:
    """DNS rebinding works on 0.0.0.0 as on loopback: the check stays, and accepts what this machine is called."""
    import psutil

    hosts = allowed_hosts(everywhere)
    assert hosts is not None, "listening on every address must not drop the Host check"
    own = [a.address for addrs in psutil.net_if_addrs().values() for a in addrs if a.family == socket.AF_INET]
    assert own and all(address in hosts for address in own)
    assert socket.gethostname().lower() in hosts and "127.0.0.1" in hosts and "localhost" in hosts
    if everywhere == "::":
        assert "[::1]" in hosts
    with TestClient(create_app(tmp_path / "web", allowed_hosts=hosts), base_url=BASE) as client:
        for name in [socket.gethostname(), *own]:
            assert client.get("/", headers={"host": f"{name}:8765"}).status_code == 200, name
        assert client.get("/", headers={"host": "evil.example:8765"}).status_code == 400
        assert client.get("/", headers={"host": "192.0.2.250.nip.io"}).status_code == 400


@pytest.mark.parametrize("timeout", ["inf", "nan", "-inf", "1e300", "0", "-1"])
def test_an_approval_timeout_that_is_not_a_number_of_seconds_is_exit_2(timeout: str, tmp_path: Path) -> None:
    """inf made every hand-written approval an OverflowError (a ghost request on the page), nan an instant no.
    In a process of its own, so a server that starts anyway is killed rather than left waiting."""
    import subprocess
    import sys

    code = "import sys; from webdemo.cli import serve_main; sys.exit(serve_main(sys.argv[1:]))"
    argv = [sys.executable, "-c", code, "--port", "0", "--data", str(tmp_path / "web"), f"--approval-timeout={timeout}"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=WAIT_S, check=False)
    assert done.returncode == 2, done
    assert "--approval-timeout must be" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.parametrize("jobs", ["0", "-1", "33"])
def test_a_max_jobs_out_of_range_is_exit_2_with_a_sentence(
    jobs: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert serve_main(["--port", "0", "--data", str(tmp_path / "web"), f"--max-jobs={jobs}"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"compare.py serve: --max-jobs must be from 1 to 32, got {jobs}", err


def test_serve_max_jobs_bounds_the_jobs_of_the_server_it_starts(tmp_path: Path) -> None:
    """`serve --max-jobs 1`, a real server process: a second job in another tab is refused in words."""
    import signal
    import subprocess
    import sys

    code = "import sys; from webdemo.cli import serve_main; sys.exit(serve_main(sys.argv[1:]))"
    server = subprocess.Popen(
        [sys.executable, "-c", code, "--port", "0", "--data", str(tmp_path / "web"), "--max-jobs", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().split(" at ")[1].split()[0]
        with httpx.Client(timeout=WAIT_S) as http:
            tab, other = (http.post(url + "api/tabs", json={}).json()["tab"] for _ in range(2))
            started = http.post(url + "api/eval", json={"tab": tab, "scenarios": ["bookstore"], "runs": 20})
            assert started.status_code == 202, started.text
            refused = http.post(url + "api/scenario", json={"tab": other, "scenarios": ["bookstore"]})
            assert refused.status_code == 503, refused.text
            assert "runs 1 scenario or eval runs at once" in refused.json()["error"]
            assert http.post(url + "api/cancel", json={"tab": tab}).status_code == 200
    finally:
        server.send_signal(signal.SIGINT)
        server.communicate(timeout=WAIT_S)


def test_ctrl_c_stops_the_server_cleanly_with_exit_code_130(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys

    code = "import sys; from webdemo.cli import serve_main; sys.exit(serve_main(sys.argv[1:]))"
    server = subprocess.Popen(
        [sys.executable, "-c", code, "--port", "0", "--data", str(tmp_path / "web")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A shell's background job ignores SIGINT; the user's Ctrl-C does not.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert server.stdout is not None
    first = server.stdout.readline()
    assert first.startswith("Serving the live page at http://127.0.0.1:")
    url = first.split(" at ")[1].split()[0]
    with httpx.Client(timeout=WAIT_S) as http:
        tab = http.post(url + "api/tabs", json={}).json()["tab"]
        # An open page must not hold the stop up.
        with http.stream("GET", url + "api/events", params={"tab": tab}) as stream:
            next(stream.iter_lines())
            server.send_signal(signal.SIGINT)
            _, err = server.communicate(timeout=WAIT_S)
    assert server.returncode == 130
    assert err.strip() == "compare.py serve: interrupted", err


def test_every_address_printed_when_listening_everywhere_opens_the_page(tmp_path: Path) -> None:
    """`--host 0.0.0.0` printed http://0.0.0.0:PORT/, which the server's own Host check refused (400)."""
    import re
    import signal
    import subprocess
    import sys

    code = "import sys; from webdemo.cli import serve_main; sys.exit(serve_main(sys.argv[1:]))"
    argv = [sys.executable, "-c", code, "--host", "0.0.0.0", "--port", "0", "--data", str(tmp_path / "web")]
    server = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        first = server.stdout.readline()
        assert first.startswith("Serving the live page at http://127.0.0.1:"), first
        printed = first + server.stdout.readline()  # this machine's other addresses
        urls = re.findall(r"http://\S+/", printed)
        assert len(urls) > 1 and "0.0.0.0" not in printed, printed
        port = urls[0].rsplit(":", 1)[1].strip("/")
        with httpx.Client(timeout=WAIT_S) as http:
            for url in urls:
                # Sent to loopback (tests reach no other address), with the Host a browser at `url` sends.
                host = url.removeprefix("http://").removesuffix("/")
                assert http.get(f"http://127.0.0.1:{port}/", headers={"host": host}).status_code == 200, url
    finally:
        server.send_signal(signal.SIGINT)
        server.communicate(timeout=WAIT_S)


@pytest.mark.parametrize("left", [b"", b"\x8f\x01"])
def test_a_secret_key_cut_short_by_a_killed_first_start_is_replaced(data: Path, left: bytes) -> None:
    """An empty secret.key (a first start killed mid-write) made every later start die with a traceback."""
    data.mkdir(parents=True)
    (data / "secret.key").write_bytes(left)
    with TestClient(create_app(data, allowed_hosts=["127.0.0.1"]), base_url=BASE) as client:
        tab = new_tab(client)
        assert state(client, tab)["panes"]
    secret = (data / "secret.key").read_bytes()
    assert len(secret) == 32 and (data / "secret.key").stat().st_mode & 0o777 == 0o600
    with TestClient(create_app(data, allowed_hosts=["127.0.0.1"]), base_url=BASE) as client:
        assert state(client, tab)["panes"], "the new key is kept: a restart still knows the tab"
    assert not list(data.glob(".secret-*"))


def test_a_tab_whose_settings_file_is_nested_too_deep_opens_on_the_defaults(data: Path) -> None:
    """A settings.json nested 100,000 deep was a RecursionError: every request for that tab a 500, for good."""
    with TestClient(create_app(data, allowed_hosts=["127.0.0.1"]), base_url=BASE) as client:
        tab = new_tab(client)
        settings(client, tab, max_steps=2)
    (data / "tabs" / tab.split(".")[0] / "settings.json").write_text("[" * 100_000 + "]" * 100_000)
    with TestClient(create_app(data, allowed_hosts=["127.0.0.1"]), base_url=BASE) as client:
        assert state(client, tab)["settings"]["max_steps"] == 6
        assert settings(client, tab, max_steps=3)["settings"]["max_steps"] == 3
    with TestClient(create_app(data, allowed_hosts=["127.0.0.1"]), base_url=BASE) as client:
        assert state(client, tab)["settings"]["max_steps"] == 3, "the tab is recovered: new settings are kept"


# --- the maf pane ---------------------------------------------------------------------------------------------------


def test_a_maf_pane_asks_its_approval_on_the_page_and_keeps_its_session_across_a_restart(data: Path) -> None:
    with TestClient(create_app(data), base_url=BASE) as client:
        tab = new_tab(client)
        settings(client, tab, contenders=["maf", "handwritten"])
        provoke_risky_write(client, tab)
        waiting = panes(wait_for(client, tab, lambda s: panes(s)["maf"]["pending"]))
        [request] = waiting["maf"]["pending"]
        assert request["tool"] == "add_to_cart" and request["args"]["quantity"] == 10
        assert waiting["maf"]["busy"], "MAF's run stopped on its approval request; the pane's human is asked now"
        assert answer_every_request(client, tab, "maf", False) == 1
        answer_every_request(client, tab, "handwritten", False)
        done = panes(wait_for(client, tab, lambda s: idle(s) and not any(p["pending"] for p in s["panes"])))
        assert done["maf"]["last"]["cart"] == [{"title": "The Quiet Orchard", "quantity": 1}]
        assert done["maf"]["last"]["stop_reason"] == "done" and "refused" in done["maf"]["last"]["answer"]
        answer = done["maf"]["last"]["answer"]
    with TestClient(create_app(data), base_url=BASE) as client:
        resumed = panes(state(client, tab))
        assert resumed["maf"]["transcript"][-1] == {"role": "assistant", "text": answer}
        settings(client, tab, persona="shopper", approval_gate=False)
        after = panes(ask(client, tab, CART_QUESTION))["maf"]["last"]
        assert after["tool_calls"] == 0 and "16.50" in after["answer"], "answered from the reopened AgentSession"
        response = client.post("/api/rewind", json={"tab": tab, "pane": "maf"})
        assert response.status_code == 200, response.text
        assert [m["text"] for m in response.json()["transcript"] if m["role"] == "user"] == [SEED_GOAL]


# --- one answer, one request ----------------------------------------------------------------------------------------


def two_risky_adds_in_one_reply(monkeypatch: pytest.MonkeyPatch, ids: tuple[str, str] = ("add-5", "add-6")) -> None:
    """Every pane's model asks, in one reply, for 5 copies of one book and 6 of another (both over the limit of 3),
    then answers. `ids`: the two calls' ids (a careless or hostile model may give both the same)."""
    from tests.doubles import ScriptModel, ai, call

    def model(spec: str) -> ScriptModel:
        adds = ai(
            "", call("add_to_cart", ids[0], book_id=5, quantity=5), call("add_to_cart", ids[1], book_id=8, quantity=6)
        )
        return ScriptModel(replies=[adds, ai("Done.")])

    monkeypatch.setattr("webdemo.panes.make_model", model)


@pytest.mark.parametrize(
    ("contender", "ids"),
    [
        ("handwritten", ("add-5", "add-6")),
        ("langgraph", ("add-5", "add-6")),
        ("create-agent", ("add-5", "add-6")),
        ("create-agent", ("same", "same")),  # one id for both calls: a yes by that id must not answer both
    ],
)
def test_an_approval_answers_only_the_request_it_names(
    contender: str, ids: tuple[str, str], data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Yes to the 5 copies, no to the 6: only the 5 land in the cart, in every contender with a gate. The page
    shows every request the pane waits on, and answering one leaves the other waiting."""
    two_risky_adds_in_one_reply(monkeypatch, ids)
    with TestClient(create_app(data), base_url=BASE) as client:
        tab = new_tab(client)
        settings(client, tab, contenders=[contender], approval_gate=True)
        assert client.post("/api/turn", json={"tab": tab, "text": SEED_GOAL}).status_code == 202
        seen: list[int] = []
        while True:
            current = panes(
                wait_for(client, tab, lambda s: panes(s)[contender]["pending"] or not panes(s)[contender]["busy"])
            )[contender]
            if not current["pending"]:
                break
            assert len({r["id"] for r in current["pending"]}) == len(current["pending"]), "one id per request"
            request = current["pending"][0]
            quantity = request["args"]["quantity"]
            seen.append(quantity)
            answer = {"tab": tab, "pane": contender, "id": request["id"], "approved": quantity == 5}
            assert client.post("/api/approve", json=answer).status_code in (200, 202)
            gone = request["id"]
            after = wait_for(client, tab, lambda s, g=gone: all(r["id"] != g for r in panes(s)[contender]["pending"]))
            if len(current["pending"]) > 1:  # the others still wait for their own answer
                left = [r["id"] for r in panes(after)[contender]["pending"]]
                assert left == [r["id"] for r in current["pending"][1:]]
        assert sorted(seen) == [5, 6], "each risky add was put to the human"
        done = panes(wait_for(client, tab, idle))[contender]
        approved = [{"title": "The Moth Who Borrowed the Moon", "quantity": 5}]
        if ids[0] == ids[1]:
            # LangGraph keeps one result per call id, so create_agent runs only one of the twins (here the
            # refused one): the approved add is lost, but nothing nobody approved lands in the cart.
            assert done["last"]["cart"] in ([], approved), json.dumps(done)
            return
        assert done["last"]["cart"] == approved, json.dumps(done)


# --- a cut-short turn never bricks a pane ----------------------------------------------------------------------------


def model_down_after_one_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every pane's model asks for one stock check, then is down for one call (the first turn fails mid-way),
    then is back: whatever it is asked next, it answers."""
    from tests.doubles import ScriptModel, ai, call

    def down(messages: list[Any]) -> Any:
        raise ConnectionError("the model server went away")

    # One model for every pane the servers open (a test runs turns in one pane only), so its script goes on
    # across the restart.
    shared = ScriptModel(
        replies=[
            ai("", call("check_stock", "stock-1", book_id=7)),
            down,
            ai("Book 7 is in stock."),
            ai("Still in stock."),
            ai("Yes."),
        ]
    )
    monkeypatch.setattr("webdemo.panes.make_model", lambda spec: shared)


# MAF keeps no half turn to finish (its file is written once a turn ends): its cut turn is simply over.
@pytest.mark.parametrize("contender", ["handwritten", "langgraph", "langgraph-defaults", "create-agent"])
def test_a_turn_an_outage_cut_short_is_finished_before_the_next_and_rewind_never_500s(
    contender: str, data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model_down_after_one_call(monkeypatch)
    with TestClient(create_app(data), base_url=BASE) as client:
        tab = new_tab(client)
        settings(client, tab, contenders=[contender], approval_gate=False)
        first = panes(ask(client, tab, SEED_GOAL))[contender]["last"]
        assert first.get("error") or not first["done"], first
    with TestClient(create_app(data), base_url=BASE) as client:  # a restart on the way: the thread is on disk
        response = client.post("/api/turn", json={"tab": tab, "text": CART_QUESTION})
        assert response.status_code == 202, response.text
        after = panes(wait_for(client, tab, idle))[contender]
        assert after["last"].get("error") is None and after["last"]["done"], after["last"]
        assert after["transcript"][-1]["role"] == "assistant"
        # Every pane finishes the cut-short turn first (its stock check is not asked for again), then this one.
        said = [m["text"] for m in after["transcript"] if m["role"] == "assistant"]
        assert said == ["Book 7 is in stock.", "Still in stock."], said
        rewound = client.post("/api/rewind", json={"tab": tab, "pane": contender})
        assert rewound.status_code in (200, 409), rewound.text
        for _ in range(4):  # past the first turn: "nothing to rewind" is a sentence, not a 500
            again = client.post("/api/rewind", json={"tab": tab, "pane": contender})
            assert again.status_code in (200, 409), again.text
            assert again.status_code == 200 or again.json()["error"]


def test_odd_values_get_a_4xx_and_a_sentence_never_a_500(client: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    """Values of the wrong shape or an absurd size, an ungraded scenario for the eval, a report that is no kind."""
    from comparison.eval.grading import GRADERS
    from comparison.scenarios import SCENARIOS_BY_NAME

    tab = new_tab(client)
    caplog.set_level(logging.INFO)
    ungraded = next(name for name in SCENARIOS_BY_NAME if name not in GRADERS)
    cases: list[tuple[str, dict[str, Any], int]] = [
        ("/api/settings", {"tab": tab, "persona": []}, 400),
        ("/api/settings", {"tab": tab, "persona": {}}, 400),
        ("/api/settings", {"tab": tab, "max_steps": 10**400}, 400),
        ("/api/settings", {"tab": tab, "max_duration": 10**400}, 400),
        ("/api/eval", {"tab": tab, "scenarios": [ungraded], "runs": 1}, 400),
    ]
    for path, body, status in cases:
        response = client.post(path, content=json.dumps(body), headers={"Content-Type": "application/json"})
        assert response.status_code == status, (path, response.text)
        assert response.json()["error"], path
    # An integer past the digits Python reads from text (sys.get_int_max_str_digits).
    huge = json.dumps({"tab": tab}).replace("}", ', "max_steps": ' + "9" * 5_000 + "}")
    response = client.post("/api/settings", content=huge, headers={"Content-Type": "application/json"})
    assert response.status_code == 400 and response.json()["error"]
    assert client.get("/api/report/%00", params={"tab": tab}).status_code == 404
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info], "no error, no traceback"


# --- a turn while the settings are applied --------------------------------------------------------------------------


def test_a_turn_sent_while_the_settings_are_applied_is_refused_and_the_new_panes_work(
    data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The panes are being rebuilt (held here at the first new pane's open): a turn then is a 409 with a sentence,
    not a 202 on panes being closed; afterwards every new pane takes turns, the hand-written one included."""
    from webdemo.panes import Pane

    opening, go_on = threading.Event(), threading.Event()
    real_open = Pane.open

    def held_open(self: Pane) -> None:
        if go_on.is_set() is False and self.tab.settings.max_steps == 7:  # only the apply below waits here
            opening.set()
            assert go_on.wait(WAIT_S)
        real_open(self)

    monkeypatch.setattr(Pane, "open", held_open)
    with TestClient(create_app(data), base_url=BASE) as client:
        tab = new_tab(client)
        applied: list[int] = []
        apply = threading.Thread(
            target=lambda: applied.append(client.post("/api/settings", json={"tab": tab, "max_steps": 7}).status_code)
        )
        apply.start()
        assert opening.wait(WAIT_S)
        try:
            for path, body in [
                ("/api/turn", {"text": SEED_GOAL}),
                ("/api/settings", {"max_steps": 8}),
                ("/api/rewind", {"pane": "handwritten"}),
                ("/api/stale", {}),
            ]:
                refused = client.post(path, json={"tab": tab, **body})
                assert refused.status_code == 409, (path, refused.text)
                assert "settings" in refused.json()["error"], path
        finally:
            go_on.set()
            apply.join(WAIT_S)
        assert applied == [200]
        for _ in range(2):
            for pane in panes(ask(client, tab, SEED_GOAL)).values():
                assert pane["last"].get("error") is None and pane["last"]["done"], pane["last"]


def test_the_page_never_shows_where_the_server_keeps_its_files(data: Path) -> None:
    """A damaged saved session: the pane says it cannot open it, naming the file but not the server's folders."""
    with TestClient(create_app(data), base_url=BASE) as client:
        tab = new_tab(client)
        ask(client, tab, SEED_GOAL)
    saved = data / "tabs" / tab.split(".")[0] / "sessions.web-handwritten.json"
    assert saved.exists()
    saved.write_text("{not a session", encoding="utf-8")
    with TestClient(create_app(data), base_url=BASE) as client:
        error = panes(state(client, tab))["handwritten"]["error"]
        assert error and "sessions.web-handwritten.json" in error, error
        assert str(data) not in error and "/tabs/" not in error, error


@pytest.mark.parametrize("contender", ["handwritten", "langgraph", "langgraph-defaults", "create-agent"])
def test_a_turn_stopped_from_the_page_does_not_block_the_next(
    contender: str, data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ "Stop the runs" while the model is thinking: the turn ends cancelled, and the next question is answered
    as a new turn, with one model call: the stopped turn is never run again."""
    from tests.doubles import ScriptModel, ai, call

    thinking, released = threading.Event(), threading.Event()

    def slow(messages: list[Any]) -> Any:
        thinking.set()
        released.wait(WAIT_S)
        return ai("Too late.")

    shared = ScriptModel(
        replies=[
            ai("", call("check_stock", "stock-1", book_id=7)),
            slow,
            ai("Book 7 is in stock."),
            ai("Still in stock."),
            ai("Yes."),
        ]
    )
    monkeypatch.setattr("webdemo.panes.make_model", lambda spec: shared)
    with TestClient(create_app(data), base_url=BASE) as client:
        tab = new_tab(client)
        settings(client, tab, contenders=[contender], approval_gate=False)
        assert client.post("/api/turn", json={"tab": tab, "text": SEED_GOAL}).status_code == 202
        assert thinking.wait(WAIT_S)
        assert client.post("/api/cancel", json={"tab": tab}).status_code == 200
        stopped = panes(wait_for(client, tab, idle))[contender]["last"]
        released.set()
        assert stopped["stop_reason"] == "cancelled", stopped
        calls = shared.calls
        response = client.post("/api/turn", json={"tab": tab, "text": CART_QUESTION})
        assert response.status_code == 202, response.text
        after = panes(wait_for(client, tab, idle))[contender]
        assert after["last"].get("error") is None and after["last"]["done"], after["last"]
        assert (after["last"]["answer"], shared.calls) == ("Book 7 is in stock.", calls + 1), "a new turn, not the old"
        said = [m["text"] for m in after["transcript"] if m["role"] == "assistant"]
        assert said[-1] == "Book 7 is in stock." and "Too late." not in said, said


# --- jobs -----------------------------------------------------------------------------------------------------------


def test_jobs_are_bounded_per_server_and_a_cancel_ends_their_process(data: Path) -> None:
    """An eval of 20 runs holds a process of its own, not the turns' threads: a newcomer's seed turn is answered
    meanwhile; a second job anywhere in the server is refused in words (max_jobs=1); "Stop the runs" ends it."""
    import multiprocessing

    with TestClient(create_app(data, max_jobs=1), base_url=BASE) as client:
        tab, other = new_tab(client), new_tab(client)
        started = client.post("/api/eval", json={"tab": tab, "scenarios": ["bookstore"], "runs": 20})
        assert started.status_code == 202, started.text
        deadline = time.monotonic() + WAIT_S
        while not (children := [p for p in multiprocessing.active_children() if p.name == "webdemo-job"]):
            assert time.monotonic() < deadline, "the eval never started its process"
            time.sleep(0.02)
        assert len(children) == 1
        refused = client.post("/api/scenario", json={"tab": other, "scenarios": ["bookstore"]})
        assert refused.status_code == 503 and "at once" in refused.json()["error"]
        for pane in panes(ask(client, other, SEED_GOAL)).values():
            assert pane["last"]["done"]
        assert state(client, tab)["jobs"] == ["eval"], "the eval is still running"
        assert client.post("/api/cancel", json={"tab": tab}).status_code == 200
        wait_for(client, tab, lambda s: not s["jobs"])
        children[0].join(WAIT_S)
        assert not children[0].is_alive(), "the cancel ended the job's process"
        again = client.post("/api/scenario", json={"tab": other, "scenarios": ["bookstore"]})
        assert again.status_code == 202, "the slot is free again"
        wait_for(client, other, lambda s: s["reports"] == ["scenario"] and not s["jobs"])


# --- event streams and tabs -----------------------------------------------------------------------------------------


def test_one_tab_cannot_hold_the_streams_and_watched_tabs_never_lock_a_newcomer_out(data: Path) -> None:
    """A tab that opens stream after stream keeps only the newest few (the oldest are ended); a server full of
    tabs that each hold a stream still takes a newcomer (max_tabs=3), closing the longest-watched tab, which
    reopens from disk with its conversation when its page asks again."""
    import asyncio

    from webdemo.events import MAX_STREAMS_PER_TAB

    app = create_app(data, max_tabs=3)
    with TestClient(app, base_url=BASE) as client:
        first = new_tab(client)
        ask(client, first, SEED_GOAL)
        tabs = app.state.tabs
        hub = tabs._open[first.split(".")[0]].hub
        queues = [client.portal.call(lambda: asyncio.sleep(0, hub.subscribe())) for _ in range(10)]
        assert hub.listeners == MAX_STREAMS_PER_TAB
        assert all(q.get_nowait() is None for q in queues[:-MAX_STREAMS_PER_TAB]), "the oldest streams were ended"
        for _ in range(2):
            other = new_tab(client)
            client.portal.call(lambda o=other: asyncio.sleep(0, tabs._open[o.split(".")[0]].hub.subscribe()))
        newcomer = client.post("/api/tabs", headers={"Content-Type": "application/json"})
        assert newcomer.status_code == 200, newcomer.text
        assert first.split(".")[0] not in tabs._open, "the longest-watched tab made room"
        back = panes(state(client, first))
        assert all(p["transcript"][-1]["role"] == "assistant" for p in back.values()), "it reopens from disk"


def test_unused_tabs_expire_and_stored_tabs_are_capped(data: Path) -> None:
    """A tab unused past `keep_tabs_s` is deleted, folder and all; beyond `max_stored_tabs` the longest unused
    go first; a tab in use is kept and still answers."""
    import os

    with TestClient(create_app(data, max_stored_tabs=3), base_url=BASE) as client:
        kept = new_tab(client)
        ask(client, kept, SEED_GOAL)
        old = [new_tab(client) for _ in range(2)]
        folder = data / "tabs"
        for n, tab in enumerate(old):  # unused for a while, the first the longest
            os.utime(folder / tab.split(".")[0], (time.time() - 100 + n, time.time() - 100 + n))
        newest = new_tab(client)
        state(client, kept)
        left = {p.name for p in folder.iterdir()}
        assert left == {t.split(".")[0] for t in (kept, old[1], newest)}, "the longest unused went first"
    for stored in folder.iterdir():  # ten seconds pass
        os.utime(stored, (time.time() - 10, time.time() - 10))
    with TestClient(create_app(data, keep_tabs_s=5.0), base_url=BASE) as client:
        # Unused past the limit: gone when the server starts; reopening such a tab starts it afresh.
        assert not [p.name for p in folder.iterdir()], (kept, newest)
        assert all(p["transcript"] == [] for p in state(client, kept)["panes"])


# --- text no encoder takes: half an emoji ------------------------------------------------------------------------


def replies_with_half_an_emoji(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every pane's model searches with half an emoji in the query, answers with a lone half and with two halves
    that were streamed apart (as separate surrogates), then answers plainly. Text past the model's boundary, as a
    model that escapes each half of a surrogate pair on its own leaves it when nothing there replaces it."""
    from tests.doubles import ScriptModel, ai, call

    def model(spec: str) -> ScriptModel:
        search = ai("", call("search_books", "search-1", query="moth \ud83d"))
        answer = ai("Half \udcda here; whole \ud83d\udcda there.")
        return ScriptModel(replies=[search, answer, ai("Your cart is empty.")])

    monkeypatch.setattr("webdemo.panes.make_model", model)


def test_a_reply_with_half_an_emoji_leaves_the_tab_readable_and_answering(
    data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The state, the event stream (its hello and every event of the turn) and the next question all work after
    a reply holding lone surrogates: a lone half shows as U+FFFD, two halves in a row as their emoji."""
    from comparison.scenarios import CART_QUESTION

    replies_with_half_an_emoji(monkeypatch)
    with running_server(create_app(data)) as url, httpx.Client(base_url=url, timeout=WAIT_S) as http:
        tab = http.post("/api/tabs", json={}).json()["tab"]
        with http.stream("GET", "/api/events", params={"tab": tab}) as stream:
            lines = stream.iter_lines()
            read_events(lines, lambda e: len(e) == 1)
            assert http.post("/api/turn", json={"tab": tab, "text": SEED_GOAL}).status_code == 202
            events = read_events(lines, ended)
        answers = [e["report"]["answer"] for e in events if e["type"] == "turn_end"]
        assert answers == ["Half \ufffd here; whole \U0001f4da there."] * 2, answers
        details = [e["event"]["detail"] for e in events if e["type"] == "trace" and e["event"]["name"] != "model"]
        assert details and all("moth \ufffd" in d for d in details), details
        response = http.get("/api/state", params={"tab": tab})
        assert response.status_code == 200, response.text
        with http.stream("GET", "/api/events", params={"tab": tab}) as stream:  # a reload: the hello holds it all
            lines = stream.iter_lines()
            [hello] = read_events(lines, lambda e: len(e) == 1)
            said = [m["text"] for p in hello["state"]["panes"] for m in p["transcript"] if m["role"] == "assistant"]
            assert said == ["Half \ufffd here; whole \U0001f4da there."] * 2, said
            assert http.post("/api/turn", json={"tab": tab, "text": CART_QUESTION}).status_code == 202
            after = read_events(lines, ended)
        assert [e["report"]["answer"] for e in after if e["type"] == "turn_end"] == ["Your cart is empty."] * 2


# --- a huge reply -----------------------------------------------------------------------------------------------------


def test_a_huge_reply_reaches_the_page_cut_to_a_bounded_state_and_events(
    data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model that plans, searches and answers with 1 MB each (10 MB in the attack: a 60 MB state and 80 MB of
    events): each text the page is sent is cut, saying so, and the tab answers the next question."""
    from comparison.scenarios import CART_QUESTION
    from tests.doubles import ScriptModel, ai, call
    from webdemo.events import MAX_SHOWN_CHARS

    big = 1_000_000

    def model(spec: str) -> ScriptModel:
        search = ai("p" * big, call("search_books", "search-1", query="q" * big))
        return ScriptModel(replies=[search, ai("a" * big), ai("Your cart is empty.")])

    monkeypatch.setattr("webdemo.panes.make_model", model)
    with running_server(create_app(data)) as url, httpx.Client(base_url=url, timeout=WAIT_S) as http:
        tab = http.post("/api/tabs", json={}).json()["tab"]
        with http.stream("GET", "/api/events", params={"tab": tab}) as stream:
            lines = stream.iter_lines()
            read_events(lines, lambda e: len(e) == 1)
            assert http.post("/api/turn", json={"tab": tab, "text": SEED_GOAL}).status_code == 202
            events = read_events(lines, ended)
            sizes = [len(json.dumps(e)) for e in events]
            assert max(sizes) < MAX_SHOWN_CHARS + 1_000 and sum(sizes) < 10 * MAX_SHOWN_CHARS, sorted(sizes)[-5:]
            answers = [e["report"]["answer"] for e in events if e["type"] == "turn_end"]
            assert answers == ["a" * MAX_SHOWN_CHARS + f"... [{big - MAX_SHOWN_CHARS:,} more characters not shown]"] * 2
            streamed: dict[tuple[str, int], str] = {}
            for e in events:
                if e["type"] == "token":
                    streamed[e["pane"], e["step"]] = streamed.get((e["pane"], e["step"]), "") + e["text"]
            # Each model call's text, streamed: its first MAX_SHOWN_CHARS characters, then a note.
            assert sorted(text[0] for text in streamed.values()) == ["a", "a", "p", "p"]
            assert all(text == text[0] * MAX_SHOWN_CHARS + "... [the rest is not shown]" for text in streamed.values())
            response = http.get("/api/state", params={"tab": tab})
            assert response.status_code == 200 and len(response.content) < 10 * MAX_SHOWN_CHARS
            assert http.post("/api/turn", json={"tab": tab, "text": CART_QUESTION}).status_code == 202
            after = read_events(lines, ended)
        assert [e["report"]["answer"] for e in after if e["type"] == "turn_end"] == ["Your cart is empty."] * 2


def test_arguments_too_large_or_too_deep_for_the_page_are_sent_as_a_sentence_or_cut_text() -> None:
    from webdemo.events import MAX_SHOWN_CHARS, shown_args

    assert shown_args({"book_id": 7, "quantity": 2}) == {"book_id": 7, "quantity": 2}
    huge = shown_args({"note": "n" * 100_000})
    assert isinstance(huge, str) and huge.startswith('{"note": "nnn') and len(huge) < MAX_SHOWN_CHARS + 100
    deep: Any = 1
    for _ in range(100_000):
        deep = [deep]
    assert shown_args(deep) == "(arguments nested too deeply to show)"


def test_half_an_emoji_in_any_field_of_any_route_is_a_4xx_and_in_a_report_is_shown(client: TestClient) -> None:
    """A lone surrogate (sent as a JSON escape) as a tab id, a pane, an approval id, a persona, a contender or a
    scenario name gets a 4xx with a sentence; a report holding one (a model's text) is served, the half as U+FFFD."""
    half = "\ud83d"
    tab = new_tab(client)

    def post(path: str, body: dict[str, Any]) -> int:
        raw = json.dumps(body)  # ASCII: the half travels as its escape, as a browser's JSON.stringify sends it
        response = client.post(path, content=raw, headers={"Content-Type": "application/json"})
        assert response.json()["error"], response.text
        return response.status_code

    for path in ("/api/state", "/api/events", "/api/report/scenario"):  # the half's bytes, %-escaped
        assert client.get(f"{path}?tab={tab}%ED%A0%BD").status_code == 400
    codes = [
        post("/api/turn", {"tab": half, "text": SEED_GOAL}),
        post("/api/turn", {"tab": tab, "text": half}),
        post("/api/settings", {"tab": tab, "persona": half}),
        post("/api/settings", {"tab": tab, "contenders": [half]}),
        post("/api/approve", {"tab": tab, "pane": half, "id": half, "approved": True}),
        post("/api/approve", {"tab": tab, "pane": "handwritten", "id": half, "approved": True}),
        post("/api/rewind", {"tab": tab, "pane": half}),
        post("/api/scenario", {"tab": tab, "scenarios": [half]}),
        post("/api/eval", {"tab": tab, "scenarios": [half]}),
        post("/api/stale", {"tab": half}),
    ]
    assert all(400 <= code < 500 for code in codes), codes
    [opened] = client.app.state.tabs._open.values()  # type: ignore[attr-defined]
    opened.reports["scenario"] = f"<p>half {half} here</p>"
    report = client.get("/api/report/scenario", params={"tab": tab})
    assert report.status_code == 200 and report.text == "<p>half \ufffd here</p>"
    assert state(client, tab)["panes"]


def test_a_model_error_of_a_megabyte_is_one_cut_line_on_the_page(data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.doubles import ScriptModel
    from webdemo.events import MAX_DETAIL_CHARS

    def down(messages: list[Any]) -> Any:
        raise ConnectionError("the model server said: " + "x" * 1_000_000)

    monkeypatch.setattr("webdemo.panes.make_model", lambda spec: ScriptModel(replies=[down, down]))
    with TestClient(create_app(data), base_url=BASE) as client:
        tab = new_tab(client)
        done = ask(client, tab, SEED_GOAL)
        errors = [p["last"]["error"] for p in done["panes"]]
        assert all(e.startswith("ConnectionError: the model server said: xxx") for e in errors), errors
        assert all(len(e) < MAX_DETAIL_CHARS + 100 and e.endswith("more characters not shown]") for e in errors)


@pytest.fixture
def registry_reversed() -> Iterator[list[str]]:
    """The registry in the opposite order, for one test: what the page derives from it follows."""
    from comparison.contenders import SPECS

    saved = dict(SPECS)
    SPECS.clear()
    SPECS.update({name: saved[name] for name in reversed(saved)})
    try:
        yield list(SPECS)
    finally:
        SPECS.clear()
        SPECS.update(saved)


def test_a_new_tab_opens_on_the_first_two_contenders_of_the_registry(
    registry_reversed: list[str], client: TestClient
) -> None:
    tab = new_tab(client)
    opened = state(client, tab)
    assert [p["contender"] for p in opened["panes"]] == registry_reversed[:2]
    assert all(p["contender"] in panes(ask(client, tab, SEED_GOAL)) for p in opened["panes"])


def test_a_pane_of_a_contender_without_a_conversation_is_refused_in_its_words(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dataclasses import replace

    from comparison.contenders import SPECS
    from shared_tools.contender import Capability
    from webdemo.settings import default_panes

    why = "this test-only loop keeps nothing between goals"
    lacks = {**SPECS["handwritten"].lacks, Capability.CONVERSATIONS: why}
    monkeypatch.setitem(
        SPECS, "talkless", replace(SPECS["handwritten"], name="talkless", conversation=None, lacks=lacks)
    )
    tab = new_tab(client)
    response = client.post("/api/settings", json={"tab": tab, "contenders": ["handwritten", "talkless"]})
    assert response.status_code == 400
    assert response.json()["error"] == f"talkless cannot have a pane: {why}"
    assert [p["contender"] for p in state(client, tab)["panes"]] == list(default_panes()), "nothing changed"
