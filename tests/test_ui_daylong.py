"""The chat UI for a researcher who keeps it open all day (issue 28): a clean new conversation from the trash
icon, whole-word filters, long tokens on a phone, LaTeX leftovers, screen readers and contrast, asking during
an answer, settings across a reload, the first screen. Driven in Chromium at a desktop size and a phone size
(the ``screen`` fixture), over a copy of the seeds index with no Ollama server (extractive answers)."""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import one_size, run_main
from ollama_stub import OllamaStub
from test_ui import BOT, Served, app_over_seeds, ask, open_app
from test_ui_everyday import llm_server, llm_stub  # noqa: F401 - the Ollama stand-in and an app over it
from test_ui_history import past_chats, reload, saved

from rag_papers.config import PRESETS, Settings
from rag_papers.llm import BackendDefaults, register_backend
from rag_papers.retrieve import Filters

pytestmark = pytest.mark.filterwarnings(
    "ignore:.*no_silent_downcasting:DeprecationWarning",
    "ignore:The copy keyword is deprecated:DeprecationWarning",
)

ABBA_Q = "what does ABBA claim?"
USER = "#rp-chat [data-testid='user']"


@pytest.fixture(scope="module")
def server(seeds_home: Path, embedder: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with app_over_seeds(seeds_home, embedder, tmp_path_factory, "daylong_home", ollama_host="http://127.0.0.1:9") as s:
        yield s


def open_settings(page: Any) -> None:
    if not page.locator("#rp-topk").is_visible():
        page.get_by_text("Answering and retrieval settings").click()
        page.locator("#rp-topk").wait_for(state="visible")


def bot_count(page: Any, n: int) -> None:
    page.wait_for_function(f'() => document.querySelectorAll("{BOT}").length === {n}')


# ------------------------------------------------------------------ 1. the trash icon
@pytest.mark.browser
@one_size
def test_the_trash_icon_starts_a_clean_conversation(server: Served, screen: Any) -> None:
    """Reported: the trash icon cleared the screen only; the next answer brought the cleared exchange back, the
    follow-up was still rewritten against ABBA, and the old sources stayed in the panel."""
    page = screen
    open_app(page, server.url)
    page.locator("#rp-show-rewrite input").check()
    ask(page, ABBA_Q)
    page.wait_for_selector("#rp-panel .rp-src")
    page.locator("#rp-chat button[aria-label='Clear']").click()
    bot_count(page, 0)
    page.wait_for_selector("#rp-panel .rp-empty")  # the old sources are gone
    follow = ask(page, "how does it compare to LoRA?")
    assert page.locator(BOT).count() == 1  # the cleared exchange stays cleared
    assert [u.strip() for u in page.locator(USER).all_inner_texts()] == ["how does it compare to LoRA?"]
    assert follow.locator(".rp-searched").count() == 0  # a first question: not rewritten against ABBA


# ------------------------------------------------------------------ 2. whole-word filters
@pytest.mark.browser
@one_size
def test_the_keyword_filter_matches_whole_words_in_the_browser(server: Served, screen: Any) -> None:
    """Reported: with keyword "RNA", "what does ABBA claim?" answered from ABBA ("learnable" holds "rna")."""
    page = screen
    open_app(page, server.url)
    open_settings(page)
    page.locator("#rp-keyword textarea, #rp-keyword input").first.fill("RNA")
    page.wait_for_selector("#rp-chips .rp-chip")
    reply = ask(page, ABBA_Q)
    # The panel is a separate output from the chat: its sources can arrive just after the reply's footer.
    page.wait_for_selector("#rp-panel .rp-src-title")
    titles = page.locator("#rp-panel .rp-src-title").all_inner_texts()
    assert titles and not any("ABBA" in t for t in titles), titles
    assert "ABBA:" not in reply.inner_text()


def _whole_word(word: str, text: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(word)}(?!\w)", text, re.IGNORECASE) is not None


@pytest.mark.parametrize("retrieval", ["dense", "bm25", "hybrid"])
def test_filters_match_whole_words_and_any_venue_case_on_every_path(
    seeded: Settings, embedder: object, retrieval: str
) -> None:
    """The keyword filter matches whole words, case-insensitively; the venue filter ignores case in the vector
    store's ``where`` (dense) as in the Python check (bm25) and in both (hybrid)."""
    from rag_papers.chat import Engine
    from rag_papers.index import Index

    settings = seeded.model_copy(update={"retrieval": retrieval})
    engine = Engine(settings, Index(settings, embedder=embedder))  # type: ignore[arg-type]
    for word in ("RNA", "rna"):
        result = engine.search("de novo design with diffusion", 5, Filters(keyword=word))
        assert result.results, (retrieval, word)
        for hit in result.results:
            paper = result.papers[hit.id]
            assert _whole_word("rna", f"{paper.title} {paper.abstract}"), (retrieval, hit.title)
    upper = engine.search(ABBA_Q, 5, Filters(venue="ICLR")).results
    lower = engine.search(ABBA_Q, 5, Filters(venue="iclr")).results
    assert upper and [h.id for h in lower] == [h.id for h in upper], retrieval


def test_the_keyword_filter_is_whole_words_in_the_cli_and_the_api(seeded: Settings, engine: Any) -> None:
    from rag_papers.ui.chat_app import ChatApp

    out = run_main("search", ABBA_Q, "--keyword", "RNA", "--json")
    assert out.returncode == 0, out.stderr
    results = json.loads(out.stdout)["results"]
    assert results and not any("ABBA" in r["title"] for r in results), results
    api = ChatApp(seeded, engine).api_search(ABBA_Q, 5, keyword="rna")
    assert api["results"] and not any("ABBA" in r["title"] for r in api["results"]), api
    learnable = Filters(keyword="RNA")
    from rag_papers.corpus import Paper

    assert not learnable.accepts(Paper("x", "Two learnable matrices", "We learn two learnable low-rank matrices."))
    assert learnable.accepts(Paper("y", "RNA design", "De novo rna design."))
    assert Filters(keyword="low-rank").accepts(Paper("z", "t", "A low-rank update."))
    assert not Filters(keyword="rank").accepts(Paper("w", "t", "Ranking papers."))


# ------------------------------------------------------------------ 6. long tokens on a phone
@pytest.mark.browser
def test_a_long_unbroken_token_wraps_instead_of_widening_the_page(server: Served, screen: Any) -> None:
    """Reported at 390 px: a question holding a URL widened the page to 895-922 px."""
    page = screen
    open_app(page, server.url)
    url = "https://example.org/papers/" + "abbalowrankadaptation" * 8 + "?q=hadamard&product=true"
    ask(page, f"what does ABBA claim in {url}")
    width = page.viewport_size["width"]
    page.wait_for_timeout(200)
    scroll = page.evaluate("() => document.documentElement.scrollWidth")
    wide = page.evaluate(
        "w => [...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > w + 1"
        " && ![...e.children].some(c => c.getBoundingClientRect().right > w + 1))"
        ".map(e => e.tagName + '.' + String(e.className).slice(0, 40) + '#' + e.id)",
        width,
    )
    assert scroll <= width, (scroll, width, wide)


# ------------------------------------------------------------------ 7. LaTeX leftovers
def test_plain_text_drops_grouping_braces_and_writes_subscripts() -> None:
    from rag_papers.corpus import plain_text

    assert plain_text("We then introduce {FlashLLA}, a kernel.") == "We then introduce FlashLLA, a kernel."
    assert plain_text(r"the maximum delay $\tau_{\max}$.") == "the maximum delay τₘₐₓ."
    assert plain_text(r"a set \{0, 1\} and {{nested}}") == "a set {0, 1} and nested"
    assert plain_text("snake_case_name stays") == "snake_case_name stays"


@pytest.mark.browser
@one_size
def test_latex_leftovers_are_gone_from_answers_and_the_panel(server: Served, screen: Any) -> None:
    """Reported: "{FlashLLA}" kept its braces and "τ_max" its underscore, in answers and in the panel."""
    page = screen
    open_app(page, server.url)
    reply = ask(page, "What is FlashLLA in Local Linear Attention?")
    page.wait_for_selector("#rp-panel .rp-src.selected .rp-abstract")
    seen = reply.inner_text() + page.locator("#rp-panel").inner_text()
    assert "FlashLLA" in seen and "{FlashLLA}" not in seen, seen
    ask(page, "Lipschitz bandits with delayed feedback: how does regret scale with the maximum delay?")
    page.wait_for_selector("#rp-panel .rp-src.selected .rp-abstract")
    seen = page.locator(BOT).last.inner_text() + page.locator("#rp-panel").inner_text()
    assert "τₘₐₓ" in seen and "τ_max" not in seen and "_max" not in seen


# ------------------------------------------------------------------ 3. screen readers and contrast
# Every visible piece of text on the page (and each empty box's placeholder) with its colour and the colour
# behind it (the backgrounds under it composited, its ancestors' opacity applied): the WCAG contrast ratio.
# Disabled controls are exempt (WCAG 1.4.3), as is text on a background image (none is measured here).
CONTRAST_JS = """
() => {
  const parse = (c) => { const m = c && c.match(/rgba?\\(([^)]+)\\)/); if (!m) return null;
    const p = m[1].split(/[\\s,\\/]+/).filter(Boolean).map(Number); return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1]; };
  const over = (top, bottom) => [0, 1, 2].map(i => top[i] * top[3] + bottom[i] * (1 - top[3])).concat([1]);
  const lum = (c) => { const l = c.slice(0, 3).map(v => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
    return 0.2126 * l[0] + 0.7152 * l[1] + 0.0722 * l[2]; };
  const ratio = (a, b) => { const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p); return (x + 0.05) / (y + 0.05); };
  const behind = (el) => { const layers = []; let image = false;
    for (let e = el; e; e = e.parentElement) { const s = getComputedStyle(e);
      if (s.backgroundImage !== 'none') image = true;
      const c = parse(s.backgroundColor); if (c && c[3] > 0) { layers.push(c); if (c[3] >= 1) break; } }
    let bg = [255, 255, 255, 1]; for (const l of layers.reverse()) bg = over(l, bg); return [bg, image]; };
  const opacity = (el) => { let o = 1; for (let e = el; e; e = e.parentElement) o *= Number(getComputedStyle(e).opacity); return o; };
  const shown = (el) => { const r = el.getBoundingClientRect(); const s = getComputedStyle(el);
    return r.width > 1 && r.height > 1 && s.visibility === 'visible' && !el.closest('[hidden], [aria-hidden="true"]'); };
  const bad = []; const seen = new Set();
  const check = (el, fgCss, text) => {
    if (el.closest(':disabled, [aria-disabled="true"]')) return;
    const fg = parse(fgCss); const [bg, image] = behind(el); if (!fg || image) return;
    fg[3] *= opacity(el); const r = ratio(over(fg, bg), bg);
    if (r < 4.5) bad.push({text: text.trim().slice(0, 60), ratio: Math.round(r * 100) / 100, fg: fgCss,
      bg: 'rgb(' + bg.slice(0, 3).map(Math.round).join(',') + ')', cls: el.className && String(el.className).slice(0, 60)});
  };
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const el = n.parentElement; if (!el || seen.has(el) || !n.textContent.trim()) continue;
    if (['SCRIPT', 'STYLE', 'NOSCRIPT', 'TEXTAREA', 'OPTION'].includes(el.tagName)) continue;
    seen.add(el); if (shown(el)) check(el, getComputedStyle(el).color, n.textContent);
  }
  for (const el of document.querySelectorAll('textarea[placeholder], input[placeholder]')) {
    if (shown(el) && !el.value && el.placeholder) check(el, getComputedStyle(el, '::placeholder').color, el.placeholder);
  }
  return bad;
}
"""


def low_contrast(page: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = page.evaluate(CONTRAST_JS)
    return found


@pytest.mark.browser
def test_screen_readers_get_plain_text_and_all_text_has_aa_contrast(server: Served, screen: Any) -> None:
    """Reported: an answer's accessible name was its raw HTML, a question's entity-escaped; secondary text was
    2.45-2.56:1 and citation links 3.99:1; checkboxes showed no focus ring. WCAG AA: 4.5:1 for text."""
    page = screen
    open_app(page, server.url)
    assert low_contrast(page) == []  # the first screen, suggested questions and all
    reply = ask(page, "what does BAM claim?")
    question = page.locator(USER).last
    for message, words in ((question, "what does BAM claim?"), (reply, "From the abstracts")):
        name = message.get_attribute("aria-label") or ""
        assert words in name and not re.search(r"<|&#|&amp;", name), name
    assert reply.inner_text().split()[0] in (reply.get_attribute("aria-label") or "")
    open_settings(page)
    page.locator("#rp-panel .rp-src").first.wait_for()
    assert low_contrast(page) == []  # the answer, its timings and claims, the panel's ids and labels, the settings

    box = page.locator("#rp-retrieval-only input")
    box.focus()  # then reached with the keyboard, as a keyboard user does (a focus ring shows for the keyboard)
    page.keyboard.press("Shift+Tab")
    page.keyboard.press("Tab")
    ring = box.evaluate(
        "e => { const s = getComputedStyle(e); return [document.activeElement === e, e.matches(':focus-visible'),"
        " s.outlineStyle, parseFloat(s.outlineWidth)]; }"
    )
    assert ring[0] and ring[1] and ring[2] != "none" and ring[3] >= 2, ring


@pytest.mark.browser
def test_the_heading_never_fades_while_the_page_loads(
    seeds_home: Path, embedder: object, tmp_path_factory: pytest.TempPathFactory, screen: Any, monkeypatch: Any
) -> None:
    """Read in CI: the heading's subtitle measured 4.47:1 (under AA's 4.5) on the first screen. The page's load
    event refreshes the heading with the index's size, and while it ran gradio faded its outputs as pending; on a
    loaded machine the contrast check caught the fade. A refresh of a line already shown is no progress to show."""
    from rag_papers.index import Index

    real = Index.count

    def slow_count(self: Index) -> int:
        time.sleep(3)
        return real(self)

    with app_over_seeds(seeds_home, embedder, tmp_path_factory, "fade_home") as served:
        monkeypatch.setattr(Index, "count", slow_count)  # after the build: only the load event's refresh is slow
        page = screen
        page.goto(served.url)
        sub = page.locator("#rp-brand .rp-sub")
        sub.wait_for()
        seen = []
        t0 = time.monotonic()
        while time.monotonic() - t0 < 2.5:
            seen.append(
                sub.evaluate(
                    "el => { let o = 1; for (let e = el; e; e = e.parentElement) o *= Number(getComputedStyle(e).opacity);"
                    " return o; }"
                )
            )
            page.wait_for_timeout(100)
        assert seen and min(seen) == 1, seen


# ------------------------------------------------------------------ 5. asking during an answer
@pytest.mark.browser
@one_size
def test_ask_is_off_with_a_reason_while_an_answer_runs(
    llm_server: Served,  # noqa: F811 - test_ui_everyday's fixtures, imported above
    llm_stub: OllamaStub,  # noqa: F811
    screen: Any,
) -> None:
    """Reported: Ask during an answer did nothing: the text stayed in the box, a warning went to the server log
    and no toast appeared. Now Ask is disabled while an answer runs, and the reason shows by the input."""
    page = screen
    open_app(page, llm_server.url)
    send, note = page.locator("#rp-send"), page.locator("#rp-busy-note")
    assert send.is_enabled() and not note.is_visible()
    llm_stub.token_delay = 0.12
    try:
        page.fill("#rp-input textarea", ABBA_Q)
        page.press("#rp-input textarea", "Enter")
        page.wait_for_selector(f"{BOT} .rp-caret, {BOT} .rp-thinking")
        assert send.is_disabled()
        assert note.is_visible() and "Stop" in note.inner_text()
        page.fill("#rp-input textarea", "and its limitations?")
        page.press("#rp-input textarea", "Enter")
        page.wait_for_selector("#rp-busy-note .rp-again")
        assert "your text stays" in note.inner_text()
        assert page.locator("#rp-input textarea").input_value() == "and its limitations?"
        assert page.locator(BOT).count() == 1
    finally:
        llm_stub.token_delay = 0.0
    page.wait_for_selector(f"{BOT} .rp-meta", timeout=60_000)
    page.wait_for_function("() => !document.querySelector('#rp-send').disabled")
    assert not note.is_visible()
    page.click("#rp-send")  # the kept text is asked now
    page.wait_for_function(f'() => document.querySelectorAll("{BOT}").length === 2')


# ------------------------------------------------------------------ 4. settings across a reload
def choose(page: Any, elem_id: str, value: str) -> None:
    """Pick ``value`` in a gradio Dropdown by its visible option."""
    page.locator(f"#{elem_id} input").click()
    page.locator("ul[role='listbox'] li", has_text=value).first.click()
    page.wait_for_function("([id, v]) => document.querySelector('#' + id + ' input').value === v", arg=[elem_id, value])


@pytest.mark.browser
@one_size
def test_settings_survive_a_reload_with_the_chat(server: Served, screen: Any) -> None:
    """Reported: the chat survived a reload, the chosen backend, model, top k and filters did not."""
    page = screen
    open_app(page, server.url)
    open_settings(page)
    key = "rag-papers-settings"
    before = page.evaluate("k => localStorage.getItem(k)", key)
    choose(page, "rp-backend", "extractive")
    page.locator("#rp-topk input[type='number']").fill("3")
    page.locator("#rp-topk input[type='number']").press("Enter")
    choose(page, "rp-venue", "ICLR")
    page.locator("#rp-keyword textarea, #rp-keyword input").first.fill("diffusion")
    page.locator("#rp-keyword textarea, #rp-keyword input").first.press("Tab")
    page.wait_for_selector("#rp-chips .rp-chip")
    ask(page, "Which papers design molecules with diffusion?")
    page.wait_for_function("([k, b]) => localStorage.getItem(k) !== b", arg=[key, before])
    page.wait_for_timeout(300)  # the last change's save

    page.reload()
    page.wait_for_selector("#rp-input textarea")
    bot_count(page, 1)  # the chat, as before
    page.wait_for_function("() => document.querySelector('#rp-backend input').value === 'extractive'")
    open_settings(page)
    assert page.locator("#rp-topk input[type='number']").input_value() == "3"
    assert page.locator("#rp-venue input").input_value() == "ICLR"
    assert page.locator("#rp-keyword textarea, #rp-keyword input").first.input_value() == "diffusion"
    # The chips follow the restored values (each restored value redraws them): wait for both.
    page.wait_for_function(
        "() => { const t = [...document.querySelectorAll('#rp-chips .rp-chip')].map(c => c.innerText).join(' ');"
        " return t.includes('diffusion') && t.includes('ICLR'); }"
    )
    chips = " ".join(page.locator("#rp-chips .rp-chip").all_inner_texts())
    assert "diffusion" in chips and "ICLR" in chips, chips
    reply = ask(page, "What does ABBA claim?")  # the kept filters are the ones in force
    assert "ABBA:" not in reply.inner_text()
    assert len(page.locator("#rp-panel .rp-src").all()) <= 3


# ------------------------------------------------------------------ 8. the first screen
@pytest.mark.browser
def test_the_first_screen_is_calm_puts_the_llm_by_the_input_and_suggests_this_corpus(
    server: Served, screen: Any
) -> None:
    """Reported: the default pill read like an error; the backend and model picker hid in the collapsed
    settings; the suggested questions were generic ("Which papers study neural networks?")."""
    page = screen
    open_app(page, server.url)
    pill = page.locator("#rp-status-wrap .rp-status")
    text = pill.inner_text()
    assert "Quoting the abstracts, no LLM" in text and "ollama serve" in text, text
    assert "No Ollama server" not in text
    assert pill.locator(".rp-dot.rp-warn, .rp-dot.rp-bad").count() == 0  # calm, not amber or red
    assert not page.locator("#rp-topk").is_visible()  # the settings are still folded...
    backend, box = page.locator("#rp-backend"), page.locator("#rp-input").bounding_box()
    assert backend.is_visible() and page.locator("#rp-model").is_visible()  # ...the LLM picker is not
    near = backend.bounding_box()
    assert abs(near["y"] - (box["y"] + box["height"])) < 160, (near, box)
    shown = [e.strip() for e in page.locator("#rp-chat .examples button, #rp-chat button.example").all_inner_texts()]
    assert shown and all(s in suggestions_for(server) for s in shown), shown


def suggestions_for(server: Served) -> list[str]:
    from rag_papers.index import Index
    from rag_papers.ui.suggest import suggested_questions

    index = Index(server.settings)
    try:
        return suggested_questions(index)
    finally:
        index.close()


def test_suggested_questions_name_what_only_this_corpus_holds(seeded: Settings) -> None:
    """Each suggestion names a method, a title or a phrase that a few papers of this corpus use, not a topic
    half of any corpus shares."""
    from rag_papers.index import Index
    from rag_papers.ui.suggest import specific_enough, suggested_questions

    index = Index(seeded)
    try:
        questions = suggested_questions(index)
        assert len(questions) == 3, questions
        assert "neural networks" not in " ".join(questions).lower()
        which = next(q for q in questions if q.startswith("Which papers"))
        phrase = which.removeprefix("Which papers study ").rstrip("?")
        assert specific_enough(index, phrase), phrase
        assert not specific_enough(index, "neural networks")
        assert not specific_enough(index, "language models")
    finally:
        index.close()


# ------------------------------------------------------------------ 9. regenerate, edit, past chats, export
def users(page: Any) -> list[str]:
    return [u.strip() for u in page.locator(USER).all_inner_texts()]


@pytest.mark.browser
def test_regenerate_edit_and_resend_and_past_chats_renamed_searched_deleted(server: Served, screen: Any) -> None:
    """Reported missing: regenerate an answer, edit and resend the last question; rename, search and delete
    past chats (deleting really deletes)."""
    page = screen
    open_app(page, server.url)
    ask(page, ABBA_Q)
    ask(page, "and what is its code availability?")
    page.locator("#rp-chat button[aria-label='Retry']").last.click()  # regenerate
    page.wait_for_function(
        "() => { const m = document.querySelectorAll(\"#rp-chat [data-testid='bot']\");"
        " return m.length === 2 && /regenerated/.test((m[1].querySelector('.rp-meta') || {}).innerText); }"
    )
    assert users(page) == [ABBA_Q, "and what is its code availability?"]

    page.click("#rp-edit")  # the last question back in the box, its answer gone
    bot_count(page, 1)
    box = page.locator("#rp-input textarea")
    assert box.input_value() == "and what is its code availability?"
    page.locator("#rp-show-rewrite input").check()
    edited = ask(page, "and what are its limitations?")
    assert users(page) == [ABBA_Q, "and what are its limitations?"]
    assert "ABBA" in edited.locator(".rp-searched").inner_text()  # still a follow-up of the first question
    saved(page, "2 questions")

    page.locator("#rp-past label", has_text=ABBA_Q[:20]).click()
    page.locator("#rp-rename-box input, #rp-rename-box textarea").first.fill("ABBA reading notes")
    page.click("#rp-rename")
    page.wait_for_function("() => document.querySelector('#rp-past').innerText.includes('ABBA reading notes')")
    page.click("#rp-new")
    bot_count(page, 0)
    ask(page, "What is the Bayesian Attention Mechanism?")
    saved(page, "Bayesian Attention")
    assert any("ABBA reading notes" in c for c in past_chats(page))  # the name stays as chats go on

    search = page.locator("#rp-past-search input, #rp-past-search textarea").first
    search.fill("limitations")  # a word of a question of the renamed chat only
    page.wait_for_function("() => document.querySelectorAll('#rp-past label').length === 1")
    assert "ABBA reading notes" in past_chats(page)[0]
    search.fill("")
    page.wait_for_function("() => document.querySelectorAll('#rp-past label').length === 2")

    page.locator("#rp-past label", has_text="ABBA reading notes").click()
    page.wait_for_function(f'() => document.querySelectorAll("{BOT}").length === 2')
    page.click("#rp-forget")
    page.wait_for_function("() => document.querySelectorAll('#rp-past label').length === 1")
    reload(page)
    saved(page, "Bayesian")  # the list is refilled from the browser's store after the page loads: wait for it
    listed = past_chats(page)
    assert len(listed) == 1 and "Bayesian" in listed[0], listed
    assert "ABBA" not in page.locator("#rp-chat").inner_text()


@pytest.mark.browser
@one_size
def test_the_export_carries_claim_marks_venues_and_years(server: Served, screen: Any) -> None:
    page = screen
    open_app(page, server.url)
    ask(page, ABBA_Q)
    with page.expect_download() as dl:
        page.locator("#rp-export").click()
    exported = Path(dl.value.path()).read_text(encoding="utf-8")
    assert "**Claims**" in exported and "✓ supported" in exported, exported
    refs = exported.split("**References**", 1)[1]
    assert re.search(r"- \[1\] ABBA.*\(ICLR 2026, id ", refs), refs
    assert "don't mention" not in exported  # no uncovered line where the answer has none


def test_the_export_says_what_the_abstracts_do_not_mention() -> None:
    """``Answer.uncovered`` (issue 25): the export says it in one line where there is one."""
    from rag_papers.answer import Answer
    from rag_papers.claims import Claim
    from rag_papers.retrieve import Hit
    from rag_papers.ui.export import export_markdown
    from rag_papers.ui.state import Exchange, UIState

    hit = Hit("p1", "ABBA: adapters", 0.8, 0.8, 0.0, "text", year=2026, venue="ICLR", n=1, cited=True)
    answer = Answer(
        "q",
        "ABBA uses a Hadamard product [1].",
        ["p1"],
        [hit],
        False,
        "fake",
        "fake-1",
        uncovered=["phones", "latency"],
    )
    answer.claims = [
        Claim("ABBA uses a Hadamard product.", ["p1"], 0.91, True),
        Claim("It runs on phones.", ["p1"], 0.12, False),
    ]
    ex = Exchange("q", "answer", text=answer.answer, items=[hit], answer=answer, done=True)
    state = UIState(session=None)  # type: ignore[arg-type]
    state.exchanges.append(ex)
    out = export_markdown(state)
    assert "The abstracts don't mention: phones, latency" in out
    assert "- ✓ supported (0.91): ABBA uses a Hadamard product. [1]" in out
    assert "- ⚠ unsupported (0.12): It runs on phones. [1]" in out
    assert "- [1] ABBA: adapters (ICLR 2026, id `p1`)" in out


@pytest.mark.browser
def test_what_the_abstracts_do_not_address_is_said_above_the_answer_and_in_the_export(
    server: Served, screen: Any
) -> None:
    """Issue 25, reported: after "what does ABBA claim?", "and what about its limitations?" quoted the same two
    sentences with every claim supported, and said nothing of limitations, which the abstract never states."""
    page = screen
    open_app(page, server.url)
    ask(page, ABBA_Q)
    follow = ask(page, "and what about its limitations?")
    caveat = follow.locator(".rp-caveat")
    caveat.wait_for()
    assert "don't mention limitations" in caveat.inner_text()
    box = caveat.bounding_box()
    answer = follow.locator(".rp-answer").bounding_box()
    assert box is not None and answer is not None and box["y"] < answer["y"]  # said first, above the answer
    with page.expect_download() as dl:
        page.locator("#rp-export").click()
    exported = Path(dl.value.path()).read_text(encoding="utf-8")
    assert "The abstracts don't mention: limitations" in exported


# ------------------------------------------------------------------ 10. queue wait apart from the first token
GATED_REPLY = "ABBA reparameterizes the update as a Hadamard product of two learnable low-rank matrices [1]."


class GatedBackend(BackendDefaults):
    """An LLM that writes one answer at a time, as llama.cpp does (its gate): a second answer waits, in the
    "waiting" phase, until the first is done. In-process, so the tests control its pace."""

    name = "gated"
    model = "gated-1"
    context_window = 4096
    extractive = False
    gate = threading.Lock()

    def __init__(self) -> None:
        self.phase = ""

    def available(self) -> tuple[bool, str]:
        return True, "gated test backend"

    def stream(self, messages: list[Any], max_tokens: int) -> Iterator[str]:
        self.phase = "waiting"
        while not self.gate.acquire(timeout=0.1):
            yield ""  # a keepalive, as llama.cpp's while it waits
        try:
            self.phase = "writing"
            for word in GATED_REPLY.split(" "):
                # Slow enough that the other session still waits a second or more once its own steps are done
                # (only the wait for the model counts as waiting: issue 45).
                time.sleep(0.35)
                yield word + " "
        finally:
            self.gate.release()
            self.phase = ""


register_backend("gated", lambda settings, model: GatedBackend())


@pytest.fixture(scope="module")
def gated_server(seeds_home: Path, embedder: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with app_over_seeds(
        seeds_home, embedder, tmp_path_factory, "daylong_gated_home", ollama_host="http://127.0.0.1:9", llm="gated"
    ) as served:
        yield served


def _seconds(text: str) -> float:
    value, unit = re.fullmatch(r"([\d.]+) (ms|s)", text).groups()  # type: ignore[union-attr]
    return float(value) / 1000 if unit == "ms" else float(value)


@pytest.mark.browser
@one_size
def test_the_wait_behind_another_session_is_shown_apart_from_the_first_token(
    gated_server: Served, browser: Any, screen: Any
) -> None:
    """Reported: the "first token" time counted the time spent waiting behind another session's answer."""
    other = browser.new_context(viewport=screen.viewport_size).new_page()
    try:
        open_app(other, gated_server.url)
        open_app(screen, gated_server.url)
        other.fill("#rp-input textarea", ABBA_Q)
        other.press("#rp-input textarea", "Enter")
        other.wait_for_selector(f"{BOT} .rp-caret")  # the other session holds the model
        mine = ask(screen, ABBA_Q)
        meta = mine.locator(".rp-meta").inner_text()
        waited = re.search(r"waited ([\d.]+ m?s) behind other answers", meta)
        first = re.search(r"first token ([\d.]+ m?s)", meta)
        assert waited and first, meta
        assert _seconds(waited.group(1)) >= 1.0 and _seconds(first.group(1)) < 1.0, meta
    finally:
        other.context.close()


def test_search_api_without_top_k_returns_the_servers_top_k(engine: object, seeded: Settings) -> None:
    """Issue 29: ``/search`` without ``top_k`` follows the server's setting (the quality preset's 6), not a 5
    written in the API."""
    from rag_papers.ui.chat_app import ChatApp

    quality = seeded.model_copy(update={"top_k": PRESETS["quality"]["top_k"]})
    out = ChatApp(quality, engine).api_search("low-rank adaptation of language models")  # type: ignore[arg-type]
    assert len(out["results"]) == PRESETS["quality"]["top_k"] != Settings().top_k
