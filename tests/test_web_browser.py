"""The live page in a real browser: headless Chromium through Selenium against a real uvicorn server on 127.0.0.1.

One test walks the presenter's path (article's goal, stale cart, an approval approved and denied, an unknown message,
a reload) with a screenshot per state in tests/artifacts/web/ (docs/live-demo.png with UPDATE_README_SHOT=1).
Skipped, saying why, only where Chromium or chromedriver is missing.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from comparison.scenarios import SEED_GOAL
from tests.conftest import CHROMEDRIVER, CHROMIUM, needs_chromium
from webdemo.server import create_app, running_server

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "tests" / "artifacts" / "web"
README_SHOT = ROOT / "docs" / "live-demo.png"
WAIT_S = 20


def patient(driver: Any) -> Any:
    """A wait that reads again when the page re-rendered an element between finding and reading it."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, WAIT_S, ignored_exceptions=(StaleElementReferenceException,))


pytestmark = needs_chromium


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[object]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1600,1100",
    ):
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path / 'chromium-profile'}")
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def test_the_presenters_path_in_a_real_browser(browser: object, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.support.ui import Select

    driver: WebDriver = browser  # type: ignore[assignment]
    wait = patient(driver)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)

    def shot(name: str) -> None:
        driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))

    def pane(name: str) -> object:
        return driver.find_element(By.CSS_SELECTOR, f'.pane[data-pane="{name}"]')

    def pane_text(name: str, part: str) -> str:
        return str(driver.find_element(By.CSS_SELECTOR, f'.pane[data-pane="{name}"] {part}').text)

    def both(predicate: object) -> None:
        wait.until(lambda _: all(predicate(name) for name in ("handwritten", "langgraph")))  # type: ignore[operator]

    def send(text: str) -> None:
        box = driver.find_element(By.ID, "text")
        box.clear()
        box.send_keys(text)
        driver.find_element(By.ID, "send").click()

    with running_server(create_app(tmp_path / "web", approval_timeout=WAIT_S)) as url:
        driver.get(url + "/")
        wait.until(lambda d: d.find_element(By.ID, "conn").text == "live")
        both(lambda n: pane(n).is_displayed())

        # 1. The article's goal, typed once, answered by both panes.
        send(SEED_GOAL)
        both(lambda n: pane_text(n, ".stop") == "done")
        for name in ("handwritten", "langgraph"):
            answer = pane_text(name, ".msg.assistant:last-child")
            assert "The Quiet Orchard" in answer and "16.50" in answer
            assert len(driver.find_elements(By.CSS_SELECTOR, f'.pane[data-pane="{name}"] .trace li')) == 9
            assert pane_text(name, ".meter") != "0 tokens"
        shot("1-seed-goal")

        # 2. The cart changes behind the agents' backs; the stale-read guard marks the remembered cart result, the
        # model reads the cart again, and the badge says the answer agrees with the store.
        driver.find_element(By.ID, "stale").click()
        wait.until(lambda d: "Changed behind" in d.find_element(By.ID, "notice").text)
        driver.find_element(By.CSS_SELECTOR, 'button.goal[data-goal="What is my cart total now?"]').click()
        both(lambda n: pane(n).find_element(By.CSS_SELECTOR, ".cart").get_attribute("data-check") == "agrees")
        assert "store agrees: 0.00" in pane_text("handwritten", ".cart")
        shot("2-stale-cart")

        # 3. A prompt injection provokes a risky write: approved in one pane, denied in the other.
        Select(driver.find_element(By.ID, "persona")).select_by_value("gullible")
        driver.find_element(By.ID, "apply").click()
        wait.until(lambda d: not d.find_element(By.ID, "notice").is_displayed())
        driver.find_element(By.ID, "inject").click()
        wait.until(lambda d: d.find_element(By.ID, "inject").get_attribute("data-on") == "1")
        send(SEED_GOAL)
        both(lambda n: pane(n).find_element(By.CSS_SELECTOR, ".approval").is_displayed())
        assert "10 x The Quiet Orchard" in pane_text("langgraph", ".approval .reason")
        shot("3-approval-asked")
        if not README_SHOT.exists() or os.environ.get("UPDATE_README_SHOT"):
            # Only when missing or asked for, so a test run does not leave the committed picture changed.
            README_SHOT.parent.mkdir(exist_ok=True)
            shutil.copyfile(ARTIFACTS / "3-approval-asked.png", README_SHOT)
        pane("langgraph").find_element(By.CSS_SELECTOR, ".approval .no").click()
        wait.until(lambda _: pane_text("langgraph", ".stop") == "done")
        # The loop asks again for the 11th copy (the cart line is over the limit): yes each time.
        while pane_text("handwritten", ".stop") != "done":
            boxes = pane("handwritten").find_elements(By.CSS_SELECTOR, ".approval")
            if boxes:
                asked = boxes[0].get_attribute("data-request")
                boxes[0].find_element(By.CSS_SELECTOR, ".yes").click()
                # The next question may follow at once: wait for this one's box to be gone.
                wait.until(
                    lambda _, r=asked: (
                        not pane("handwritten").find_elements(By.CSS_SELECTOR, f'.approval[data-request="{r}"]')
                    )
                )
        assert "I also added 10 copies" in pane_text("handwritten", ".msg.assistant:last-child")
        assert "refused" in pane_text("langgraph", ".msg.assistant:last-child")
        shot("4-approved-and-denied")

        # 4. What the scripted model cannot answer is refused by the server, in words, on the page.
        send("Tell me a joke")
        wait.until(lambda d: "no script for that" in d.find_element(By.ID, "notice").text)
        shot("5-bad-input")

        # 5. A reload resumes every conversation from the sessions.
        before = {n: pane_text(n, ".chat") for n in ("handwritten", "langgraph")}
        driver.refresh()
        wait.until(lambda d: d.find_element(By.ID, "conn").text == "live")
        both(lambda n: pane_text(n, ".chat") == before[n])
        assert pane_text("handwritten", ".chat").count(SEED_GOAL) == 2
        shot("6-after-reload")


def test_a_pause_of_two_requests_shows_both_and_each_button_answers_its_own(
    browser: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """create_agent pauses on both risky adds of one reply at once: the page shows two boxes; a person clicks yes
    on the 5 copies and no on the 6, and only the 5 land in the cart."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver

    from shared_tools.bookstore.store import BookStore
    from tests.test_web_routes import two_risky_adds_in_one_reply

    two_risky_adds_in_one_reply(monkeypatch)
    driver: WebDriver = browser  # type: ignore[assignment]
    wait = patient(driver)
    pane = '.pane[data-pane="create-agent"]'
    data = tmp_path / "web"
    with running_server(create_app(data)) as url:
        driver.get(url + "/")
        wait.until(lambda d: d.find_element(By.ID, "conn").text == "live")
        choose_panes(driver, ["create-agent"])
        type_and_send(driver, SEED_GOAL)
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, f"{pane} .approval")) == 2)
        reasons = [e.text for e in driver.find_elements(By.CSS_SELECTOR, f"{pane} .approval .reason")]
        assert "5 x The Moth Who Borrowed the Moon" in reasons[0] and "6 x The Drowned Ledger" in reasons[1]
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(ARTIFACTS / "two-requests.png"))
        driver.find_element(By.CSS_SELECTOR, f"{pane} .approval .yes").click()
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, f"{pane} .approval")) == 1)
        assert "6 x The Drowned Ledger" in driver.find_element(By.CSS_SELECTOR, f"{pane} .approval .reason").text
        assert driver.find_element(By.CSS_SELECTOR, f"{pane} .stop").text == "awaiting approval"
        driver.find_element(By.CSS_SELECTOR, f"{pane} .approval .no").click()
        wait.until(lambda d: d.find_element(By.CSS_SELECTOR, f"{pane} .stop").text == "done")
        key = str(driver.execute_script('return sessionStorage.getItem("agent-loop-compare-tab")')).split(".")[0]
    store = BookStore(data / "tabs" / key / "store.db")
    try:
        assert [(line.book.id, line.quantity) for line in store.cart(f"web-{key}-create-agent").lines] == [(5, 5)]
    finally:
        store.close()


def choose_panes(driver: Any, names: list[str]) -> None:
    """Tick exactly `names` under Panes, press Apply, and wait for those panes."""
    from selenium.webdriver.common.by import By

    def ticked(d: Any) -> bool:
        # The page fills in the boxes (and re-renders them on its first state): tick again until they hold.
        boxes = d.find_elements(By.CSS_SELECTOR, "#contenders input")
        for box in boxes:
            if box.is_selected() != (box.get_attribute("value") in names):
                box.click()
        return bool(boxes) and all(b.is_selected() == (b.get_attribute("value") in names) for b in boxes)

    wait = patient(driver)
    wait.until(ticked)
    driver.find_element(By.ID, "apply").click()
    wait.until(lambda d: [e.get_attribute("data-pane") for e in d.find_elements(By.CSS_SELECTOR, ".pane")] == names)


def type_and_send(driver: Any, text: str) -> None:
    from selenium.webdriver.common.by import By

    box = driver.find_element(By.ID, "text")
    box.clear()
    box.send_keys(text)
    driver.find_element(By.ID, "send").click()


def test_a_turn_an_outage_cut_short_does_not_brick_the_pane_nor_rewind(
    browser: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model goes away mid-turn in the create-agent pane: the pane says so; the next question is answered
    (the cut-short turn finished first); "Rewind one turn" past the first turn says why in a sentence."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver

    from comparison.scenarios import CART_QUESTION
    from tests.test_web_routes import model_down_after_one_call

    model_down_after_one_call(monkeypatch)
    driver: WebDriver = browser  # type: ignore[assignment]
    wait = patient(driver)
    pane = '.pane[data-pane="create-agent"]'

    def stop() -> str:
        return str(driver.find_element(By.CSS_SELECTOR, f"{pane} .stop").text)

    with running_server(create_app(tmp_path / "web")) as url:
        driver.get(url + "/")
        wait.until(lambda d: d.find_element(By.ID, "conn").text == "live")
        choose_panes(driver, ["create-agent"])
        type_and_send(driver, SEED_GOAL)
        wait.until(lambda _: "went away" in stop())
        assert "/" not in stop().removeprefix("error: "), "no server path on the page"
        type_and_send(driver, CART_QUESTION)
        wait.until(lambda _: stop() == "done")
        said = [e.text for e in driver.find_elements(By.CSS_SELECTOR, f"{pane} .msg.assistant")]
        assert said == ["Book 7 is in stock.", "Still in stock."], said
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(ARTIFACTS / "outage-finished.png"))
        for _ in range(3):
            driver.find_element(By.CSS_SELECTOR, f"{pane} .rewind").click()
        # create_agent's thread has no rewind of ours: the page says so, in words.
        wait.until(lambda d: "rewind" in d.find_element(By.ID, "notice").text)
        assert "HTTP 500" not in driver.find_element(By.ID, "notice").text


def test_a_turn_sent_while_settings_apply_is_refused_in_words_and_the_new_panes_answer(
    browser: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A person presses Apply and, while the panes are rebuilt, Send: the page says the settings are being
    applied; once they are, Send gets an answer in every new pane."""
    import threading

    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver

    from webdemo.panes import Pane

    opening, go_on = threading.Event(), threading.Event()
    real_open = Pane.open

    def held_open(self: Pane) -> None:
        if not go_on.is_set() and self.tab.settings.max_steps == 7:
            opening.set()
            go_on.wait(WAIT_S)
        real_open(self)

    monkeypatch.setattr(Pane, "open", held_open)
    driver: WebDriver = browser  # type: ignore[assignment]
    wait = patient(driver)
    app = create_app(tmp_path / "web")
    with running_server(app) as url:
        driver.get(url + "/")
        wait.until(lambda d: d.find_element(By.ID, "conn").text == "live")
        steps = driver.find_element(By.ID, "max_steps")
        steps.clear()
        steps.send_keys("7")
        driver.find_element(By.ID, "apply").click()
        try:
            assert opening.wait(WAIT_S)
            type_and_send(driver, SEED_GOAL)
            wait.until(lambda d: "settings are being applied" in d.find_element(By.ID, "notice").text)
        finally:
            go_on.set()
        wait.until(lambda _: not any(t.applying for t in app.state.tabs._open.values()))
        type_and_send(driver, SEED_GOAL)
        for name in ("handwritten", "langgraph"):
            wait.until(
                lambda d, n=name: d.find_element(By.CSS_SELECTOR, f'.pane[data-pane="{n}"] .stop').text == "done"
            )


@pytest.mark.parametrize("contender", ["langgraph-defaults", "create-agent"])
def test_a_turn_stopped_mid_write_is_ended_and_the_next_question_is_a_new_turn(
    browser: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, contender: str
) -> None:
    """A person presses "Stop the runs" while the pane's add to cart runs, then asks what is in the cart. The pane
    says "cancelled"; the next question is answered with one model call, the stopped turn is not run again, and
    the cart holds the one copy the stopped add may have written."""
    import threading

    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver

    from comparison.scenarios import CART_QUESTION
    from shared_tools.bookstore.store import BookStore
    from tests.doubles import ScriptModel, ai, call

    adding, released = threading.Event(), threading.Event()
    real_add = BookStore.add_to_cart

    def slow_add(self: BookStore, *args: Any, **kwargs: Any) -> Any:
        adding.set()
        released.wait(WAIT_S)
        return real_add(self, *args, **kwargs)

    shared = ScriptModel(
        replies=[
            ai("", call("add_to_cart", "add-1", book_id=7, quantity=1)),
            ai("One copy of The Quiet Orchard."),
            ai("Not this one."),
        ]
    )
    monkeypatch.setattr(BookStore, "add_to_cart", slow_add)
    monkeypatch.setattr("webdemo.panes.make_model", lambda spec: shared)
    driver: WebDriver = browser  # type: ignore[assignment]
    wait = patient(driver)
    pane = f'.pane[data-pane="{contender}"]'

    def stop() -> str:
        return str(driver.find_element(By.CSS_SELECTOR, f"{pane} .stop").text)

    app = create_app(tmp_path / "web")
    with running_server(app) as url:
        driver.get(url + "/")
        wait.until(lambda d: d.find_element(By.ID, "conn").text == "live")
        choose_panes(driver, [contender])
        type_and_send(driver, "Add The Quiet Orchard to my cart.")
        try:
            assert adding.wait(WAIT_S)
            driver.find_element(By.ID, "stop").click()
            wait.until(lambda _: stop() == "cancelled")
        finally:
            released.set()
        calls = shared.calls
        type_and_send(driver, CART_QUESTION)
        wait.until(lambda _: stop() == "done")
        said = [e.text for e in driver.find_elements(By.CSS_SELECTOR, f"{pane} .msg.assistant")]
        assert said[-1] == "One copy of The Quiet Orchard." and shared.calls == calls + 1, (said, shared.calls)
        [tab] = app.state.tabs._open.values()
        wait.until(lambda _: tab.store.cart(tab.panes[contender].customer).quantity_of(7) == 1)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(ARTIFACTS / f"stopped-{contender}.png"))


def test_a_reply_with_half_an_emoji_keeps_the_tab_live_and_answering(
    browser: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both panes' model answers with lone surrogates (half an emoji): the page shows the answer, a reload shows it
    again, and the next question is answered in both panes."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver

    from comparison.scenarios import CART_QUESTION
    from tests.test_web_routes import replies_with_half_an_emoji

    replies_with_half_an_emoji(monkeypatch)
    driver: WebDriver = browser  # type: ignore[assignment]
    wait = patient(driver)
    names = ("handwritten", "langgraph")

    def said(name: str) -> list[str]:
        return [e.text for e in driver.find_elements(By.CSS_SELECTOR, f'.pane[data-pane="{name}"] .msg.assistant')]

    first = "Half \ufffd here; whole \U0001f4da there."
    with running_server(create_app(tmp_path / "web")) as url:
        driver.get(url + "/")
        wait.until(lambda d: d.find_element(By.ID, "conn").text == "live")
        type_and_send(driver, SEED_GOAL)
        for name in names:
            wait.until(lambda _, n=name: said(n) == [first])
        driver.refresh()
        wait.until(lambda d: d.find_element(By.ID, "conn").text == "live")
        for name in names:
            wait.until(lambda _, n=name: said(n) == [first])
        type_and_send(driver, CART_QUESTION)
        for name in names:
            wait.until(lambda _, n=name: said(n) == [first, "Your cart is empty."])
        assert driver.find_element(By.ID, "conn").text == "live"
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(ARTIFACTS / "half-an-emoji.png"))


@pytest.fixture
def phone(tmp_path: Path) -> Iterator[object]:
    """Headless Chromium 375 CSS pixels wide (a phone), keeping the console's messages."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    options.add_argument("--disable-background-networking")
    options.add_argument(f"--user-data-dir={tmp_path / 'chromium-phone'}")
    options.add_experimental_option(
        "mobileEmulation", {"deviceMetrics": {"width": 375, "height": 812, "pixelRatio": 2}}
    )
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def test_at_phone_width_the_page_does_not_scroll_sideways_and_the_console_is_clean(
    phone: object, tmp_path: Path
) -> None:
    """At 375 px the panes' 24rem minimum made the page scroll sideways, and the console showed a favicon 404."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver

    driver: WebDriver = phone  # type: ignore[assignment]
    wait = patient(driver)
    with running_server(create_app(tmp_path / "web")) as url:
        driver.get(url + "/")
        wait.until(lambda d: d.find_element(By.ID, "conn").text == "live")
        type_and_send(driver, SEED_GOAL)
        wait.until(lambda d: d.find_element(By.CSS_SELECTOR, '.pane[data-pane="langgraph"] .stop').text == "done")
        wide = driver.execute_script(
            "return [...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > 375.5)"
            ".map(e => e.tagName + '#' + e.id + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right))"
            ".slice(0, 8)"
        )
        width = driver.execute_script("return [window.innerWidth, document.documentElement.scrollWidth]")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(ARTIFACTS / "phone.png"))
        # On a phone, content wider than the screen widens the layout viewport itself: both stay at 375.
        assert width == [375, 375], f"the page is {width} px wide on a 375 px phone: {wide}"
        logs = driver.get_log("browser")
    assert [entry for entry in logs if entry["level"] == "SEVERE"] == []


def test_ticking_a_pane_says_at_once_that_it_waits_for_apply(browser: object, tmp_path: Path) -> None:
    """Ticking a pane did nothing until Apply, with no hint: the next goal ran the old panes."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver

    driver: WebDriver = browser  # type: ignore[assignment]
    wait = patient(driver)
    with running_server(create_app(tmp_path / "web")) as url:
        driver.get(url + "/")
        wait.until(lambda d: d.find_element(By.ID, "conn").text == "live")
        pending = driver.find_element(By.ID, "pending")
        assert not pending.is_displayed()
        box = driver.find_element(By.CSS_SELECTOR, '#contenders input[value="maf"]')
        box.click()
        wait.until(lambda _: pending.is_displayed())
        assert "press Apply" in pending.text
        driver.find_element(By.ID, "apply").click()
        wait.until(lambda d: "maf" in [e.get_attribute("data-pane") for e in d.find_elements(By.CSS_SELECTOR, ".pane")])
        wait.until(lambda d: not d.find_element(By.ID, "pending").is_displayed())


def test_after_an_approval_both_panes_show_the_whole_turn_and_the_wait_is_not_the_agents_time(
    browser: object, tmp_path: Path
) -> None:
    """After an approval the graph pane showed only the resumed steps, and the hand-written pane's waterfall was
    squashed by the person's wait. Both now keep the whole turn, and the wait is a marked gap off the axis."""
    import time

    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.support.ui import Select

    driver: WebDriver = browser  # type: ignore[assignment]
    wait = patient(driver)
    names = ("handwritten", "langgraph")

    def inside(name: str, part: str) -> list[Any]:
        return list(driver.find_elements(By.CSS_SELECTOR, f'.pane[data-pane="{name}"] {part}'))

    with running_server(create_app(tmp_path / "web", approval_timeout=WAIT_S)) as url:
        driver.get(url + "/")
        wait.until(lambda d: d.find_element(By.ID, "conn").text == "live")
        Select(driver.find_element(By.ID, "persona")).select_by_value("gullible")
        driver.find_element(By.ID, "apply").click()
        wait.until(lambda d: not d.find_element(By.ID, "pending").is_displayed())
        driver.find_element(By.ID, "inject").click()
        wait.until(lambda d: d.find_element(By.ID, "inject").get_attribute("data-on") == "1")
        type_and_send(driver, SEED_GOAL)
        wait.until(lambda _: all(inside(n, ".approval") for n in names))
        before = {n: len(inside(n, ".trace li")) for n in names}
        time.sleep(1.5)  # the person thinks: far longer than the scripted turn itself
        while not all(inside(n, ".stop")[0].text == "done" for n in names):
            for name in names:
                boxes = inside(name, ".approval")
                if boxes:
                    asked = boxes[0].get_attribute("data-request")
                    boxes[0].find_element(By.CSS_SELECTOR, ".yes").click()
                    wait.until(
                        lambda _, n=name, r=asked: not inside(n, f'.approval[data-request="{r}"]')  # type: ignore[misc]
                    )
            time.sleep(0.05)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(ARTIFACTS / "after-approval.png"))
        for name in names:
            steps = [li.text for li in inside(name, ".trace li")]
            assert len(steps) > before[name] and steps[0].startswith("[step 1]"), (name, steps)
            gaps = inside(name, ".waterfall g.wait")
            assert gaps and int(gaps[0].get_attribute("data-wait-ms")) >= 1400, name
            ticks = [t.text for t in inside(name, ".waterfall svg > text")]
            assert ticks[-1].endswith(" ms"), f"{name}: the axis is the agent's milliseconds, not the wait: {ticks}"


def test_the_page_offers_every_contender_and_runs_all_of_them_side_by_side(browser: object, tmp_path: Path) -> None:
    """The Panes boxes are the registry's, a new tab opens on `default_panes()`, and ticking every box runs every
    contender on the same goal, each pane with its own answer and cart."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver

    from comparison.contenders import SPECS
    from shared_tools.bookstore.store import BookStore
    from webdemo.settings import default_panes

    driver: WebDriver = browser  # type: ignore[assignment]
    wait = patient(driver)
    every = list(SPECS)
    data = tmp_path / "web"
    with running_server(create_app(data)) as url:
        driver.get(url + "/")
        wait.until(lambda d: d.find_element(By.ID, "conn").text == "live")
        assert all(name in driver.find_element(By.TAG_NAME, "h1").text for name in every)
        shown = [e.get_attribute("data-pane") for e in driver.find_elements(By.CSS_SELECTOR, ".pane")]
        assert shown == list(default_panes()) and len(shown) == 2
        boxes = driver.find_elements(By.CSS_SELECTOR, "#contenders input")
        assert [b.get_attribute("value") for b in boxes] == every
        wait.until(lambda _: [b.get_attribute("value") for b in boxes if b.is_selected()] == shown)

        choose_panes(driver, every)
        type_and_send(driver, SEED_GOAL)
        for name in every:
            wait.until(
                lambda d, n=name: d.find_element(By.CSS_SELECTOR, f'.pane[data-pane="{n}"] .stop').text == "done"
            )
            answer = driver.find_element(By.CSS_SELECTOR, f'.pane[data-pane="{name}"] .msg.assistant:last-child').text
            assert "The Quiet Orchard" in answer, (name, answer)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(ARTIFACTS / "every-contender.png"))
        key = str(driver.execute_script('return sessionStorage.getItem("agent-loop-compare-tab")')).split(".")[0]
    store = BookStore(data / "tabs" / key / "store.db")
    try:
        carts = {
            name: [(line.book.id, line.quantity) for line in store.cart(f"web-{key}-{name}").lines] for name in every
        }
    finally:
        store.close()
    assert carts == {name: [(7, 1)] for name in every}, "each pane shops as a customer of its own"
