"""A chat UI researchers keep open all day (issue 16): filters, the status pill, small screens, names for
assistive technology. Driven in Chromium at a desktop size and a phone size, over a copy of the seeds index
(no Ollama server: extractive answers)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_ui import BOT, Served, _copy_home, _serve, ask, open_app

pytestmark = pytest.mark.filterwarnings(
    "ignore:.*no_silent_downcasting:DeprecationWarning",
    "ignore:The copy keyword is deprecated:DeprecationWarning",
)

VIEWPORTS = {"desktop": {"width": 1440, "height": 900}, "phone": {"width": 390, "height": 844}}


@pytest.fixture(scope="module")
def server(seeds_home: Path, embedder: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    served = _serve(
        _copy_home(seeds_home, tmp_path_factory, "everyday_home"), embedder, ollama_host="http://127.0.0.1:9"
    )
    yield served
    served.app.close()


@pytest.fixture(params=sorted(VIEWPORTS))
def screen(request: pytest.FixtureRequest, browser: Any) -> Iterator[Any]:
    """A fresh page (a fresh gradio session) at one of the two sizes."""
    context = browser.new_context(viewport=VIEWPORTS[request.param], accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(30_000)
    yield page
    context.close()


def keyword_box(page: Any) -> Any:
    return page.locator("#rp-keyword textarea, #rp-keyword input").first


@pytest.mark.browser
def test_active_filters_show_as_chips_by_the_input_and_one_click_clears_them(server: Served, screen: Any) -> None:
    """Reported: a filter that excludes everything read as "the abstracts don't cover this", and nothing near
    the input said a filter was on."""
    page = screen
    open_app(page, server.url)
    chips = page.locator("#rp-chips .rp-chip")
    clear = page.locator("#rp-clear-filters")
    assert chips.count() == 0 and not clear.is_visible()

    page.get_by_text("Answering and retrieval settings").click()
    keyword_box(page).fill("zzqx-no-such-word")
    page.wait_for_selector("#rp-chips .rp-chip")
    assert "zzqx-no-such-word" in chips.first.inner_text() and "keyword" in chips.first.inner_text().lower()
    assert clear.is_visible()
    # The chips sit by the input: just below it, not in the settings column.
    box, row = page.locator("#rp-input").bounding_box(), page.locator("#rp-chips").bounding_box()
    assert row["y"] >= box["y"] and row["y"] - (box["y"] + box["height"]) < 80, (box, row)

    reply = ask(page, "What does ABBA claim?")
    text = reply.inner_text()
    assert "filters excluded every paper" in text and "don't cover" not in text

    clear.click()
    page.wait_for_function("() => document.querySelectorAll('#rp-chips .rp-chip').length === 0")
    assert keyword_box(page).input_value() == ""
    assert not clear.is_visible()
    answered = ask(page, "What does ABBA claim?")
    assert "ABBA" in answered.inner_text() and answered.locator("a.rp-cite").count() >= 1
    assert page.locator(BOT).count() == 2


def test_a_refusal_under_active_filters_says_they_were_on() -> None:
    """Filters that let some papers through, none of them close: not covered, *with these filters*, said so."""
    from rag_papers.answer import Answer
    from rag_papers.ui.render import render_exchange
    from rag_papers.ui.state import Exchange

    ex = Exchange("What does ABBA claim?", "answer", done=True, refused=True)
    ex.answer = Answer("What does ABBA claim?", "The abstracts don't cover this.", [], [], True, "extractive", None)
    ex.text = ex.answer.answer
    ex.filters = "keyword 'diffusion'"
    html = render_exchange(0, ex, False)
    assert "keyword &#39;diffusion&#39;" in html or "keyword 'diffusion'" in html
    assert "Clear" in html and "every paper" in html
    ex.filters = ""
    assert "every paper" not in render_exchange(0, ex, False)
