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

from conftest import VIEWPORTS, one_size
from ollama_stub import OllamaStub
from test_ui import BOT, STUB_MODEL, STUB_REPLY, Served, app_over_seeds, ask, open_app

pytestmark = pytest.mark.filterwarnings(
    "ignore:.*no_silent_downcasting:DeprecationWarning",
    "ignore:The copy keyword is deprecated:DeprecationWarning",
)


@pytest.fixture(scope="module")
def server(seeds_home: Path, embedder: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with app_over_seeds(seeds_home, embedder, tmp_path_factory, "everyday_home", ollama_host="http://127.0.0.1:9") as s:
        yield s


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


PHONE = VIEWPORTS["phone"]


def phone_page(browser: Any, **extra: Any) -> Any:
    context = browser.new_context(viewport=PHONE, **extra)
    page = context.new_page()
    page.set_default_timeout(30_000)
    return page


@pytest.mark.browser
def test_on_a_phone_the_header_reads_and_the_input_is_on_the_first_screen(server: Served, browser: Any) -> None:
    """Reported at 390x844: the header squashed ("rag-/papers", one word per line) and the input was below
    the fold on first load."""
    page = phone_page(browser)
    try:
        open_app(page, server.url)
        page.evaluate("window.scrollTo(0, 0)")
        page.wait_for_timeout(200)
        h1 = page.locator(".rp-brand h1").bounding_box()
        sub = page.locator(".rp-brand .rp-sub").bounding_box()
        assert h1["height"] < 40, h1  # one line
        assert sub["width"] > 0.6 * PHONE["width"], sub  # a readable line length, not a word per line
        box = page.locator("#rp-input").bounding_box()
        assert box["y"] + box["height"] <= PHONE["height"], box  # typed into without scrolling
        send = page.locator("#rp-send").bounding_box()
        assert send["y"] + send["height"] <= PHONE["height"], send
    finally:
        page.context.close()


@pytest.mark.browser
def test_on_a_phone_a_citation_scrolls_to_its_source(server: Served, browser: Any) -> None:
    """Reported at 390x844: clicking a citation did not scroll to the source (the panel is below the chat)."""
    page = phone_page(browser)
    try:
        open_app(page, server.url)
        reply = ask(page, "What does ABBA claim?")
        cite = reply.locator("a.rp-cite").first
        cite.scroll_into_view_if_needed()
        page.wait_for_timeout(300)
        assert not in_view(page, "#rp-panel .rp-src.selected")  # below the chat: the premise of the report
        cite.click()
        page.wait_for_function(
            "() => { const s = document.querySelector('#rp-panel .rp-src.selected');"
            " if (!s) return false; const r = s.getBoundingClientRect();"
            " return r.top >= 0 && r.top < window.innerHeight - 40; }"
        )
        assert "ABBA" in page.locator("#rp-panel .rp-src.selected .rp-src-title").inner_text()
    finally:
        page.context.close()


def in_view(page: Any, selector: str) -> bool:
    return bool(
        page.evaluate(
            "s => { const e = document.querySelector(s); if (!e) return false; const r = e.getBoundingClientRect();"
            " return r.bottom > 0 && r.top < window.innerHeight; }",
            selector,
        )
    )


@pytest.mark.browser
def test_the_input_and_citations_have_names_and_a_citation_shows_a_card(server: Served, screen: Any) -> None:
    """Reported: the input's accessible name was "Textbox"; citation links had no label; a citation's only
    preview was a native tooltip."""
    import re

    page = screen
    open_app(page, server.url)
    assert page.get_by_role("textbox", name="Ask a question about the papers").count() == 1
    reply = ask(page, "What does ABBA claim?")
    link = reply.get_by_role("link", name=re.compile(r"^Source 1: ABBA"))
    assert link.count() >= 1
    cite = reply.locator("a.rp-cite").first
    assert cite.get_attribute("title") is None  # no native tooltip: the card below instead
    card = page.locator(".rp-hovercard")
    assert not card.is_visible()
    cite.hover()
    card.wait_for(state="visible")
    text = card.inner_text()
    assert "ABBA" in text and "score" in text.lower(), text
    page.mouse.move(0, 0)
    card.wait_for(state="hidden")
    cite.focus()  # the keyboard gets the same card
    card.wait_for(state="visible")
    page.keyboard.press("Escape")
    card.wait_for(state="hidden")


def _contrast(fg: str, bg: str) -> float:
    """WCAG contrast ratio of two computed CSS colours ("rgb(r, g, b)" or "rgba(...)")."""
    import re

    def lum(css: str) -> float:
        r, g, b = (int(v) / 255 for v in re.findall(r"[\d.]+", css)[:3])
        lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in (r, g, b)]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    a, b = sorted((lum(fg), lum(bg)), reverse=True)
    return (a + 0.05) / (b + 0.05)


@pytest.mark.browser
def test_the_passage_legend_is_readable_in_dark_mode(server: Served, browser: Any) -> None:
    """Reported: the "retrieved passage" legend had low contrast in dark mode."""
    context = browser.new_context(viewport=VIEWPORTS["desktop"], color_scheme="dark")
    page = context.new_page()
    page.set_default_timeout(30_000)
    try:
        page.goto(server.url.rstrip("/") + "/?__theme=dark")
        page.wait_for_selector("#rp-input textarea")
        ask(page, "What does ABBA claim?")
        marks = page.locator("#rp-panel .rp-legend mark")
        assert marks.count() == 2
        for i in range(2):
            fg, bg = marks.nth(i).evaluate("e => [getComputedStyle(e).color, getComputedStyle(e).backgroundColor]")
            assert _contrast(fg, bg) >= 4.5, (marks.nth(i).inner_text(), fg, bg, _contrast(fg, bg))
    finally:
        context.close()


@pytest.fixture(scope="module")
def llm_stub() -> Iterator[OllamaStub]:
    with OllamaStub(models=[STUB_MODEL], reply=STUB_REPLY) as s:
        yield s


@pytest.fixture(scope="module")
def llm_server(
    llm_stub: OllamaStub, seeds_home: Path, embedder: object, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    """The app answering through the Ollama stand-in (``--llm ollama``)."""
    with app_over_seeds(
        seeds_home, embedder, tmp_path_factory, "everyday_llm_home", ollama_host=llm_stub.url, llm="ollama"
    ) as served:
        yield served


@pytest.mark.browser
def test_waiting_says_what_is_happening_with_a_running_clock(llm_server: Served, llm_stub: Any, page: Any) -> None:
    """Reported: "Searching the abstracts..." stayed up while the LLM was busy, with no sense of time. A follow-up
    is first rewritten by the model (the condense prompt), then the model reads and writes: each step is named,
    and a clock runs throughout."""
    import re

    open_app(page, llm_server.url)
    ask(page, "What does ABBA claim?")
    llm_stub.token_delay = 0.15  # the condense call and the answer each take several seconds
    page.fill("#rp-input textarea", "and what are its limitations?")
    page.press("#rp-input textarea", "Enter")
    thinking = page.locator(f"{BOT} .rp-thinking").last
    thinking.wait_for()
    page.wait_for_function(
        "() => { const t = [...document.querySelectorAll('.rp-thinking')].pop();"
        " return t && /rewriting/i.test(t.innerText) && /\\d+ s/.test(t.innerText); }",
        timeout=20_000,
    )
    first = thinking.inner_text()
    assert "Searching the abstracts" not in first, first
    seconds = int(re.search(r"(\d+) s", first).group(1))  # type: ignore[union-attr]
    page.wait_for_function(
        "n => { const t = [...document.querySelectorAll('.rp-thinking')].pop();"
        " const m = t && t.innerText.match(/(\\d+) s/); return m && +m[1] > n; }",
        arg=seconds,
        timeout=10_000,
    )
    page.wait_for_selector(f"{BOT} .rp-caret", timeout=30_000)  # then the answer streams
    page.wait_for_function(
        "() => { const m = document.querySelectorAll(\"#rp-chat [data-testid='bot']\");"
        " return m.length === 2 && m[1].querySelector('.rp-meta') !== null; }",
        timeout=60_000,
    )
    llm_stub.token_delay = 0.0
    assert STUB_REPLY.split()[0] in page.locator(BOT).last.inner_text()


@pytest.fixture(scope="module")
def demo_server(seeds_home: Path, embedder: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The app started with ``--llm llamacpp`` and no model named: the packaged SmolLM2 answers."""
    with app_over_seeds(
        seeds_home, embedder, tmp_path_factory, "everyday_demo_home", ollama_host="http://127.0.0.1:9", llm="llamacpp"
    ) as served:
        yield served


@pytest.mark.browser
@one_size
def test_the_pill_is_amber_for_the_demo_model_and_the_model_box_names_defaults(
    demo_server: Served, screen: Any
) -> None:
    """Reported: the status pill was green for SmolLM2, which invents facts."""
    page = screen
    open_app(page, demo_server.url)
    pill = page.locator("#rp-status-wrap .rp-status")
    assert "demo model: answers are unreliable" in pill.inner_text()
    assert pill.locator(".rp-dot.rp-warn").count() == 1
    page.get_by_text("Answering and retrieval settings").click()
    assert "default: SmolLM2" in page.locator("#rp-model").inner_text()
