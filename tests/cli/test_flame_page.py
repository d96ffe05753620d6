"""The flame graph page in a real browser: Chromium and chromedriver from
Debian, driven headless by selenium, open the page samprof flame writes
from a file:// URL; what it draws, search, zoom and the pickers are
checked in the page itself, and the browser's console must stay free of
errors. Screenshots go to build/test-artifacts/."""

from __future__ import annotations

import os
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest
from support import SANITIZED

from samprof.cli import main
from samprof.pprof import Frame, Profile, ValueType, write

# Python-level code: the oldest and the newest Python (tests/support/scope.py).
pytestmark = pytest.mark.bounds

MS = 1_000_000
ARTIFACTS = Path(__file__).resolve().parents[2] / "build" / "test-artifacts"
PAGE_SECONDS = 30  # how long a page may take to draw before the test gives up


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium. Missing browser or driver fail the test: `make
    deps` (run by .ci/run) installs Debian's chromium and chromium-driver."""
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver is None:
        pytest.fail("chromium or chromedriver is missing: run `make deps`")
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,900"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)  # the sanitizer runtime stays out of the browser
    service = Service(driver, env=env)
    chrome = webdriver.Chrome(service=service, options=options)
    chrome.set_page_load_timeout(PAGE_SECONDS)
    try:
        yield chrome
    finally:
        chrome.quit()


def routes_profile() -> Profile:
    p = Profile(
        sample_types=[ValueType("samples", "count"), ValueType("cpu", "nanoseconds")],
        period_type=ValueType("cpu", "nanoseconds"),
        period=10 * MS,
    )
    main_, handle = Frame("main", "app.py", 1), Frame("handle", "app.py", 10)
    p.add_sample([Frame("render", "tpl.py", 5), handle, main_], [4, 40 * MS], {"route": "/a"})
    p.add_sample([Frame("query", "db.py", 7), handle, main_], [2, 20 * MS], {"route": "/b"})
    p.add_sample([Frame("odd;name", "x.py", 3), main_], [1, 10 * MS], {})
    return p


def open_page(browser: Any, tmp_path: Path, profile: Profile, name: str, *args: str) -> float:
    """Write the profile's page and open it; the seconds until it drew."""
    source = tmp_path / f"{name}.pb.gz"
    source.write_bytes(write(profile))
    page = tmp_path / f"{name}.html"
    assert main(["flame", str(source), "-o", str(page), *args]) == 0
    started = time.monotonic()
    browser.get(page.as_uri())
    wait_for(browser, lambda: browser.find_element("id", "total").text != "")
    return time.monotonic() - started


def wait_for(browser: Any, condition: Any) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, PAGE_SECONDS).until(lambda _: condition())


def frames(browser: Any) -> Dict[str, Any]:
    return {el.text: el for el in browser.find_elements("css selector", "#graph .f")}


def console_errors(browser: Any) -> List[Dict[str, Any]]:
    return [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]


def screenshot(browser: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / f"{name}.png"))


def test_flame_page_draws_searches_zooms_and_filters(browser: Any, tmp_path: Path) -> None:
    open_page(browser, tmp_path, routes_profile(), "routes")
    drawn = frames(browser)
    assert set(drawn) == {"main", "handle", "render", "query", "odd;name"}
    total = browser.find_element("id", "total")
    assert total.text == "70.00ms"
    graph_width = browser.find_element("id", "graph").size["width"]
    assert drawn["main"].size["width"] == pytest.approx(graph_width, abs=2)
    assert drawn["handle"].size["width"] == pytest.approx(graph_width * 6 / 7, abs=2)

    # Hover: the status line gives the frame's figures and place.
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(browser).move_to_element(drawn["render"]).perform()
    status = browser.find_element("id", "status").text
    assert "render  tpl.py:5  total 40.00ms (57.14%), self 40.00ms (57.14%)" in status

    # Search highlights the matching frames and says what share they cover.
    box = browser.find_element("id", "search")
    box.send_keys("rend|quer")
    wait_for(browser, lambda: "Matched" in browser.find_element("id", "matched").text)
    marked = {el.text for el in browser.find_elements("css selector", "#graph .f.m")}
    assert marked == {"render", "query"}
    assert browser.find_element("id", "matched").text == (
        "Matched: 60.00ms (85.71% of the total) in 2 frames"
    )
    screenshot(browser, "flame-page")

    # A click zooms: handle takes the whole width, what it does not hold
    # goes, and main stays above it.
    frames(browser)["handle"].click()
    wait_for(browser, lambda: "odd;name" not in frames(browser))
    drawn = frames(browser)
    assert drawn["handle"].size["width"] == pytest.approx(graph_width, abs=2)
    assert drawn["render"].size["width"] == pytest.approx(graph_width * 4 / 6, abs=2)
    assert "up" in drawn["main"].get_attribute("class")
    browser.find_element("id", "reset").click()
    wait_for(browser, lambda: "odd;name" in frames(browser))

    # The pickers change what is counted.
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element("id", "type")).select_by_visible_text("samples (count)")
    wait_for(browser, lambda: total.text == "7")
    Select(browser.find_element("id", "label")).select_by_visible_text("route=/a")
    wait_for(browser, lambda: total.text == "4")
    assert set(frames(browser)) == {"main", "handle", "render"}
    Select(browser.find_element("id", "type")).select_by_visible_text("cpu (nanoseconds)")
    wait_for(browser, lambda: total.text == "40.00ms")

    # The icicle view puts the root at the top.
    def main_above_render() -> bool:
        drawn = frames(browser)
        return bool(drawn["main"].location["y"] < drawn["render"].location["y"])

    assert not main_above_render()
    browser.find_element("id", "icicle").click()
    wait_for(browser, main_above_render)
    assert console_errors(browser) == []


def test_differential_page_colours_growth_and_shrinkage(browser: Any, tmp_path: Path) -> None:
    base, new = routes_profile(), routes_profile()
    new.samples[0].values = [8, 80 * MS]  # render doubled
    new.samples[1].values = [1, 10 * MS]  # query halved
    base_path, new_path = tmp_path / "base.pb.gz", tmp_path / "new.pb.gz"
    base_path.write_bytes(write(base))
    new_path.write_bytes(write(new))
    page = tmp_path / "diff.html"
    assert main(["diff", str(base_path), str(new_path), "--html", str(page)]) == 0
    browser.get(page.as_uri())
    wait_for(browser, lambda: browser.find_element("id", "total").text != "")
    assert browser.find_element("id", "total").text == "100.00ms (base 70.00ms)"
    drawn = frames(browser)

    def rgb(name: str) -> List[int]:
        text = drawn[name].value_of_css_property("background-color")
        return [int(x) for x in text[text.index("(") + 1 : text.index(")")].split(",")[:3]]

    red, green, blue = rgb("render")
    assert red == 255 and green < 200 and blue < 200
    red, green, blue = rgb("query")
    assert blue == 255 and red < 255
    screenshot(browser, "flame-diff")
    assert console_errors(browser) == []


def test_a_profile_of_100k_stacks_opens(browser: Any, tmp_path: Path) -> None:
    """100,000 distinct stacks: the page draws, and leaves out (and says
    so) what is narrower than a pixel. The page does not depend on the
    Python that wrote it: this runs on 3.13 and later only."""
    if SANITIZED or sys.version_info < (3, 13):
        pytest.skip("the 100k-stack page is checked on 3.13 and later only")
    rng = random.Random(7)
    names = [f"fn_{i}" for i in range(400)]
    p = Profile(
        sample_types=[ValueType("samples", "count"), ValueType("cpu", "nanoseconds")],
        period_type=ValueType("cpu", "nanoseconds"),
        period=10 * MS,
    )
    seen = set()
    while len(seen) < 100_000:
        depth = rng.randint(5, 25)
        stack = tuple(rng.choice(names) for _ in range(depth)) + ("main",)
        if stack in seen:
            continue
        seen.add(stack)
        count = rng.randint(1, 20)
        p.add_sample([Frame(name, f"{name}.py", 1) for name in stack], [count, count * 10 * MS])
    seconds = open_page(browser, tmp_path, p, "big")
    print(f"100k-stack page drawn {seconds:.2f} s after the browser was asked to open it")
    assert "frames narrower than a pixel are not drawn" in browser.find_element("id", "note").text
    drawn = frames(browser)
    assert "main" in drawn and len(drawn) > 100
    screenshot(browser, "flame-100k")
    assert console_errors(browser) == []
