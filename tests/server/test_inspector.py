"""The web inspector in a real headless Chromium (Debian's, driven by selenium): sign in with a
key, the pages load, search finds a message with its evidence, the thread graph renders, and
screenshots have content (their pixels vary)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from io import BytesIO

import pytest

from tests.server.conftest import Served

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.wait import WebDriverWait  # noqa: E402

CHROMEDRIVER = shutil.which("chromedriver")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMEDRIVER is None or CHROMIUM is None,
    reason="needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)",
)


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    profile = tempfile.mkdtemp(prefix="harombe-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM  # type: ignore[assignment]
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1280,900",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    service = webdriver.ChromeService(executable_path=CHROMEDRIVER)
    driver = webdriver.Chrome(options=options, service=service)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _pixel_variance(png: bytes) -> float:
    """Variance of the screenshot's grey levels: 0 for a blank page."""
    import numpy as np
    from PIL import Image

    grey = np.asarray(Image.open(BytesIO(png)).convert("L"), dtype=float)
    return float(grey.var())


@pytest.fixture(scope="module")
def session_id(served: Served) -> str:
    """A threaded session of ann's: two threads under the first answer."""
    with served.http(served.ann) as http:
        sid = "inspect-me"
        first = http.post(
            f"/api/sessions/{sid}/messages",
            json={
                "messages": [
                    {"role": "user", "content": "Plan a trip to Kyoto in April."},
                    {"role": "assistant", "content": "Cherry blossoms peak early April."},
                    {"role": "user", "content": "Which temples should I see?"},
                    {"role": "assistant", "content": "Kinkaku-ji and Fushimi Inari."},
                ]
            },
        )
        assert first.status_code == 201
        return sid


def _arrive(browser: object, part: str) -> None:
    """Wait until a click's navigation has loaded a page whose URL holds ``part``."""
    WebDriverWait(browser, 60).until(
        lambda d: (
            part in d.current_url and d.execute_script("return document.readyState") == "complete"
        )
    )


def _sign_in(browser: object, served: Served, key: str) -> None:
    browser.get(served.url + "/login")  # type: ignore[attr-defined]
    browser.find_element(By.ID, "key").send_keys(key)  # type: ignore[attr-defined]
    browser.find_element(By.ID, "sign-in").click()  # type: ignore[attr-defined]
    WebDriverWait(browser, 60).until(lambda d: d.find_elements(By.ID, "sessions"))


def test_pages_search_and_graph(browser: object, served: Served, session_id: str) -> None:
    b: object = browser
    b.get(served.url + "/")  # type: ignore[attr-defined]
    assert "/login" in b.current_url  # type: ignore[attr-defined]
    _sign_in(b, served, served.ann)
    table = b.find_element(By.ID, "sessions")  # type: ignore[attr-defined]
    assert session_id in table.text
    assert _pixel_variance(b.get_screenshot_as_png()) > 10  # type: ignore[attr-defined]

    b.find_element(By.LINK_TEXT, session_id).click()  # type: ignore[attr-defined]
    _arrive(b, f"/sessions/{session_id}")
    graph = b.find_element(By.ID, "graph")  # type: ignore[attr-defined]
    assert len(graph.find_elements(By.TAG_NAME, "circle")) == 4
    assert len(graph.find_elements(By.TAG_NAME, "line")) == 3
    assert graph.size["height"] > 50
    assert "Kinkaku-ji" in b.find_element(By.ID, "context").text  # type: ignore[attr-defined]
    assert _pixel_variance(graph.screenshot_as_png) > 10
    assert _pixel_variance(b.get_screenshot_as_png()) > 10  # type: ignore[attr-defined]

    b.get(served.url + "/search")  # type: ignore[attr-defined]
    box = b.find_element(By.ID, "q")  # type: ignore[attr-defined]
    box.send_keys("temples")
    b.find_element(By.ID, "go").click()  # type: ignore[attr-defined]
    _arrive(b, "q=temples")
    hits = b.find_elements(By.CSS_SELECTOR, "#hits tr.hit")  # type: ignore[attr-defined]
    assert hits
    # the question says "temples"; the answer beside it may rank first (it tells, and its
    # neighbour matches), so the question is looked for among the hits
    assert any("Which temples should I see?" in hit.text for hit in hits)
    assert _pixel_variance(b.get_screenshot_as_png()) > 10  # type: ignore[attr-defined]

    b.get(served.url + "/users/ann")  # type: ignore[attr-defined]
    assert session_id in b.find_element(By.ID, "profile").text  # type: ignore[attr-defined]


def test_another_users_page_shows_the_error_not_the_memory(
    browser: object, served: Served, session_id: str
) -> None:
    b: object = browser
    b.get(served.url + "/logout")  # type: ignore[attr-defined]
    _sign_in(b, served, served.bob)
    b.get(served.url + f"/sessions/{session_id}")  # type: ignore[attr-defined]
    page = b.find_element(By.TAG_NAME, "body").text  # type: ignore[attr-defined]
    assert "SessionNotFoundError" in page  # as a missing session: nothing says it exists
    assert "Kyoto" not in page


def test_every_message_of_a_long_session_is_reached_page_by_page(
    browser: object, served: Served
) -> None:
    """A session longer than a page is paged: following "next" from the first page reaches
    every message once, in order (a session of 10,000 messages showed its first 2,000 and
    no way to the rest)."""
    sid = "paged-session"
    with served.http(served.ann) as http:
        appended = http.post(
            f"/api/sessions/{sid}/messages",
            json={"messages": [{"role": "user", "content": f"line {i}"} for i in range(5)]},
        )
        ids = appended.json()["ids"]
    b: object = browser
    b.get(served.url + "/logout")  # type: ignore[attr-defined]
    _sign_in(b, served, served.ann)
    b.get(served.url + f"/sessions/{sid}?limit=2")  # type: ignore[attr-defined]
    seen: list[int] = []
    for _ in range(len(ids)):
        shown = b.find_elements(By.CSS_SELECTOR, "div.msg[id^=m]")  # type: ignore[attr-defined]
        seen += [int(m.get_attribute("id")[1:]) for m in shown]
        following = b.find_elements(By.ID, "next-page")  # type: ignore[attr-defined]
        if not following:
            break
        following[0].click()
        _arrive(b, f"after={seen[-1]}")
    assert seen == ids
    assert "of 5" in b.find_element(By.CSS_SELECTOR, ".pager").text  # type: ignore[attr-defined]
    b.find_element(By.ID, "first-page").click()  # type: ignore[attr-defined]
    WebDriverWait(b, 60).until(
        lambda d: (
            "after=" not in d.current_url
            and d.execute_script("return document.readyState") == "complete"
        )
    )
    shown = b.find_elements(By.CSS_SELECTOR, "div.msg[id^=m]")  # type: ignore[attr-defined]
    assert [int(m.get_attribute("id")[1:]) for m in shown] == ids[:2]


def test_graph_svg_lays_out_branches_side_by_side() -> None:
    """Two threads under one answer: the branches sit side by side, their parent between them,
    each edge runs parent to child; a long linear session is one column (no recursion)."""
    import re

    from harombe_core.server.inspector import graph_svg

    def m(mid: int, role: str, parent: int | None) -> dict[str, object]:
        return {"id": mid, "role": role, "content": f"m{mid}", "parent_id": parent}

    svg = graph_svg(
        [
            m(1, "user", None),
            m(2, "assistant", 1),
            m(3, "user", 2),
            m(4, "assistant", 3),
            m(5, "user", 2),
            m(6, "assistant", 5),
        ]
    )
    circles = {
        int(mid): (int(x), int(y))
        for mid, x, y in re.findall(r'href="#m(\d+)"><circle cx="(\d+)" cy="(\d+)"', svg)
    }
    assert len(circles) == 6
    assert svg.count("<line") == 5
    assert circles[3][0] < circles[5][0]  # the two threads side by side
    assert circles[3][1] == circles[5][1]  # at the same depth
    assert circles[2][0] == (circles[3][0] + circles[5][0]) // 2  # parent centred above
    assert circles[1][1] < circles[2][1] < circles[3][1]
    linear = graph_svg([m(i, "user" if i % 2 else "assistant", None) for i in range(1, 5001)])
    assert linear.count("<circle") == 5000
    assert linear.count("<line") == 4999
