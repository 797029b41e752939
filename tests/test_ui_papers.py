"""The Papers tab, titles and references in the sources panel, and the chat's suggested questions.

Two in-process apps: one over the seeds (38 papers, every title derived), one over the seeds plus a few
papers with titles, years, venues and links (one with a hostile title and a ``javascript:`` "url"). Pages
hold ``PAGE`` papers here, so that 38 papers make three pages.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import VIEWPORTS
from test_ui import BOT, Served, _copy_home, _serve, app_over_seeds, ask, open_app
from test_ui_safety import Markup, _choose

from rag_papers.config import Settings

pytestmark = pytest.mark.filterwarnings(
    "ignore:.*no_silent_downcasting:DeprecationWarning",
    "ignore:The copy keyword is deprecated:DeprecationWarning",
)

PAGE = 15
HOSTILE_TITLE = "Tomato <img src=x onerror=alert(1)> gardening in cold frames"
EXTRA = [
    {
        "id": "sundial-2019",
        "title": "Sundial calibration with shadow transformers",
        "year": 2019,
        "venue": "Annual Horology Meeting",
        "url": "https://example.org/papers/sundial",
        "abstract": "We calibrate ancient sundials from photographs with shadow transformers, a model that reads "
        "the gnomon's shadow and the hour lines. It reaches a median error of four minutes on museum pieces.",
    },
    {
        "id": "tomato-2031",
        "title": HOSTILE_TITLE,
        "year": 2031,
        "venue": "Zorblax Workshop",
        "url": "javascript:alert(1)",
        "abstract": "Cold frames lengthen the tomato season by six weeks in northern gardens. We compare glass "
        "and polythene frames over three winters and find glass warmer at night.",
    },
    {
        "id": "bees-nd",
        "abstract": "Urban beekeeping raises pollination rates in city allotments. Hives on rooftops kept their "
        "colonies through winter as often as rural hives did, in a survey of forty beekeepers.",
    },
]


# ------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def small_pages() -> Iterator[None]:
    """Pages of ``PAGE`` papers in the in-process apps of this module (the default is 50)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("rag_papers.ui.papers.PAGE_SIZE", PAGE)
        yield


@pytest.fixture(scope="module")
def seeds_app(
    small_pages: None, seeds_home: Path, embedder: object, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    with app_over_seeds(seeds_home, embedder, tmp_path_factory, "papers_home", ollama_host="http://127.0.0.1:9") as s:
        yield s


def _ingest_extra(home: Path, embedder: object) -> None:
    from rag_papers.index import Index
    from rag_papers.ingest import Ingester

    corpus = home / "extra.jsonl"
    corpus.write_text("".join(json.dumps(p) + "\n" for p in EXTRA), encoding="utf-8")
    index = Index(Settings(home=home), embedder=embedder)  # type: ignore[arg-type]
    Ingester(index.store).ingest([corpus], show_progress=False)
    index.close()


@pytest.fixture(scope="module")
def mixed_app(
    small_pages: None, seeds_home: Path, embedder: object, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    """The seeds plus ``EXTRA``: years, venues, a link, a title that is HTML, a record without a title."""
    home = _copy_home(seeds_home, tmp_path_factory, "papers_mixed_home")
    _ingest_extra(home, embedder)
    served = _serve(home, embedder, ollama_host="http://127.0.0.1:9", source_min_ratio=0.0)
    yield served
    served.app.close()


@pytest.fixture
def mixed_index(seeded: Settings, embedder: object) -> Iterator[Any]:
    from rag_papers.index import Index

    _ingest_extra(seeded.home, embedder)
    index = Index(seeded, embedder=embedder)  # type: ignore[arg-type]
    yield index
    index.close()


def _context(browser: Any, size: str, **kw: Any) -> Any:
    context = browser.new_context(viewport=VIEWPORTS[size], **kw)
    context.set_default_timeout(30_000)
    return context


# ------------------------------------------------------------------ browser helpers
HEAD = "#rp-papers .rp-papers-head"


def open_papers(page: Any, url: str) -> None:
    open_app(page, url)
    page.get_by_role("tab", name="Papers").click()
    page.wait_for_selector("#rp-papers .rp-paper")


def head(page: Any) -> str:
    return str(page.locator(HEAD).inner_text())


def wait_head(page: Any, needle: str) -> None:
    page.wait_for_function(
        "([sel, s]) => (document.querySelector(sel) || {}).innerText?.includes(s)", arg=[HEAD, needle]
    )


def titles(page: Any) -> list[str]:
    return [str(t) for t in page.locator("#rp-papers .rp-ptitle").all_inner_texts()]


def search(page: Any, text: str, expect: str) -> None:
    page.locator("#rp-papers-q input, #rp-papers-q textarea").first.fill(text)
    wait_head(page, expect)


def row(page: Any, title: str) -> Any:
    return page.locator("#rp-papers .rp-paper", has=page.locator(".rp-ptitle", has_text=title)).first


def open_row(page: Any, title: str) -> Any:
    r = row(page, title)
    r.locator("summary").click()
    r.locator(".rp-abstract").wait_for(state="visible")
    return r


# ------------------------------------------------------------------ browser tests
@pytest.mark.browser
@pytest.mark.parametrize("size", sorted(VIEWPORTS))
def test_papers_tab_lists_searches_opens_and_asks(seeds_app: Served, browser: Any, size: str, seeded: Settings) -> None:
    """Every seed paper a page at a time, a search that narrows, an abstract opened, then asked about in the chat."""
    from rag_papers.index import Index

    index = Index(seeded)
    every = {p.title: p for p in index.papers()}
    index.close()
    assert len(every) == 38

    context = _context(browser, size)
    page = context.new_page()
    open_papers(page, seeds_app.url)
    assert "38 papers" in head(page) and f"1–{PAGE} shown" in head(page)
    assert "Page 1 of 3" in page.locator("#rp-papers .rp-pager").inner_text()
    seen = titles(page)
    assert len(seen) == PAGE
    page.locator("#rp-papers .rp-pager button", has_text="Next").click()
    wait_head(page, f"{PAGE + 1}–{2 * PAGE} shown")
    seen += titles(page)
    page.locator("#rp-papers .rp-pager button[aria-label='Last page']").click()
    wait_head(page, "31–38 shown")
    seen += titles(page)
    assert page.locator("#rp-papers .rp-pager button", has_text="Next").is_disabled()
    assert seen == sorted(every)  # every paper once, by title (nothing to rank by without a search)

    # A search narrows the list to the papers with every word; an id finds its paper.
    search(page, "softmax attention", "2 papers match")
    assert sorted(titles(page)) == sorted(t for t in every if t.startswith(("SWAX", "FlashLLA")))
    assert page.locator("#rp-papers .rp-pager").count() == 0
    search(page, "softmax sliding windows", "1 paper match")
    assert titles(page) == [next(t for t in every if t.startswith("SWAX"))]
    abba = next(p for p in every.values() if p.title.startswith("ABBA"))
    search(page, abba.id, "The paper with id")
    assert titles(page) == [abba.title]
    search(page, "quokka zeppelin", "0 papers match")
    assert "No paper's title or abstract has every word" in page.locator("#rp-papers").inner_text()
    search(page, "Hadamard", "match")

    # Opening a paper shows its whole abstract; asking about it fills the chat's input, ready to send.
    opened = open_row(page, abba.title)
    abstract = opened.locator(".rp-abstract").inner_text()
    assert "Hadamard product of two independently learnable low-rank matrices" in abstract
    assert abstract.rstrip().endswith(abba.abstract.rstrip()[-30:])
    opened.get_by_role("button", name="Ask about this paper").click()
    page.wait_for_function("() => document.querySelector('#rp-input textarea')?.value.includes('claim')")
    assert page.locator("#rp-input textarea").is_visible()
    question = page.locator("#rp-input textarea").input_value()
    assert question == f"What does “{abba.title}” claim?"
    assert not page.locator("#rp-papers").is_visible()

    page.locator("#rp-send").click()
    page.wait_for_selector(f"{BOT} .rp-meta")
    reply = page.locator(BOT).last
    # Each citation link is named "Source N: title" (app.js, from the panel's card store).
    reply.locator("a.rp-cite[aria-label]").first.wait_for(state="attached")
    cited = {(c.get_attribute("aria-label") or "").split(": ", 1)[-1] for c in reply.locator("a.rp-cite").all()}
    assert abba.title in cited, (cited, reply.inner_text())
    assert "ABBA" in reply.inner_text()  # quoted from its abstract
    context.close()


@pytest.mark.browser
@pytest.mark.parametrize("size", ["desktop"])  # behaviour, not layout (conftest.one_size)
def test_papers_sort_links_and_hostile_titles(mixed_app: Served, browser: Any, size: str) -> None:
    """Sorting by title, year and venue; a link only for an http(s) url; a title that is HTML shows as text."""
    context = _context(browser, size)
    page = context.new_page()
    dialogs: list[str] = []

    def on_dialog(dialog: Any) -> None:  # an alert() from a title would be corpus text run as code
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    open_papers(page, mixed_app.url)
    assert "41 papers" in head(page)
    by_title = titles(page)
    assert by_title[0].startswith("ABBA") and by_title == sorted(by_title)

    _choose(page, "rp-papers-sort", "Year (newest first)")
    wait_head(page, "newest first")
    assert titles(page)[0] == HOSTILE_TITLE  # 2031, then the seeds (2026), 2019, and no year last
    page.locator("#rp-papers .rp-pager button[aria-label='Last page']").click()
    wait_head(page, "31–41 shown")
    assert titles(page)[-2] == "Sundial calibration with shadow transformers"
    last = page.locator("#rp-papers .rp-paper").last
    assert last.locator(".rp-pmeta").inner_text() == "bees-nd"  # no year (nor venue): last

    _choose(page, "rp-papers-sort", "Venue (A–Z)")
    wait_head(page, "sorted by venue")
    assert "1–15 shown" in head(page)  # a new sort starts at the first page
    assert titles(page)[0] == "Sundial calibration with shadow transformers"  # Annual Horology Meeting < ICLR

    # The hostile title: text in the list and the opened row, never an element; its javascript: url no link.
    search(page, "tomato cold frames", "1 paper match")
    hostile = open_row(page, "Tomato")
    assert hostile.locator(".rp-ptitle").inner_text() == HOSTILE_TITLE
    assert page.locator("#rp-papers img").count() == 0
    assert hostile.locator("a").count() == 0
    assert "Zorblax Workshop 2031" in hostile.inner_text()

    # A paper with an http(s) url links to it, in a new tab that cannot reach this page.
    search(page, "sundial", "1 paper match")
    sundial = open_row(page, "Sundial")
    link = sundial.locator("a.rp-url")
    assert link.get_attribute("href") == "https://example.org/papers/sundial"
    assert link.get_attribute("target") == "_blank" and "noopener" in (link.get_attribute("rel") or "")
    page.wait_for_timeout(300)
    assert dialogs == []
    context.close()


@pytest.mark.browser
def test_derived_titles_and_copy_reference(mixed_app: Served, browser: Any) -> None:
    """A derived title is labelled, with its first sentence; "Copy reference" copies one line, with either clipboard way."""
    context = _context(browser, "desktop")
    origin = re.match(r"https?://[^/]+", mixed_app.url)
    assert origin is not None
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=origin.group())
    page = context.new_page()
    open_papers(page, mixed_app.url)

    search(page, "beekeeping", "1 paper match")
    bees = page.locator("#rp-papers .rp-paper").first
    assert bees.locator(".rp-derived").inner_text() == "derived title"
    assert bees.locator(".rp-first").inner_text().startswith("Urban beekeeping raises pollination rates")
    search(page, "sundial", "1 paper match")
    assert row(page, "Sundial").locator(".rp-derived").count() == 0  # the record's own title

    sundial = open_row(page, "Sundial")
    sundial.get_by_role("button", name=re.compile("Copy a one-line reference")).click()
    expected = (
        "Sundial calibration with shadow transformers. Annual Horology Meeting 2019. id: sundial-2019. "
        "https://example.org/papers/sundial"
    )
    page.wait_for_function("() => document.querySelector('#rp-papers .rp-copy-ref').innerText.includes('Copied')")
    assert page.evaluate("navigator.clipboard.readText()") == expected

    # Where navigator.clipboard fails (no secure context): the textarea fallback copies the same line.
    page.evaluate(
        """() => {
        navigator.clipboard.writeText = () => Promise.reject(new Error('not allowed'));
        window.__copied = null;
        document.addEventListener('copy', () => {
          const t = document.activeElement;
          window.__copied = t && t.tagName === 'TEXTAREA' ? t.value.slice(t.selectionStart, t.selectionEnd) : null;
        });
    }"""
    )
    search(page, "tomato cold frames", "1 paper match")
    hostile = open_row(page, "Tomato")
    hostile.locator("button.rp-copy-ref").click()
    page.wait_for_function("() => window.__copied !== null")
    assert page.evaluate("window.__copied") == (
        f"{HOSTILE_TITLE}. Zorblax Workshop 2031. id: tomato-2031. javascript:alert(1)"
    )

    # In the chat's sources panel: the derived label, the first sentence, the link and the reference.
    page.get_by_role("tab", name="Chat").click()
    page.locator("#rp-retrieval-only input").check()
    ask(page, "how do you calibrate a sundial from a photo?")
    card = page.locator("#rp-panel .rp-src", has=page.locator(".rp-src-title", has_text="Sundial"))
    assert card.locator("a.rp-url").get_attribute("href") == "https://example.org/papers/sundial"
    assert card.locator("button.rp-copy-ref").get_attribute("data-ref") == expected
    derived = page.locator("#rp-panel .rp-src:not(.selected)", has=page.locator(".rp-derived")).first
    assert derived.locator(".rp-derived").inner_text() == "derived title"
    assert len(derived.locator(".rp-first").inner_text()) > 20
    context.close()


@pytest.mark.browser
def test_suggested_questions_in_the_chat(seeds_app: Served, browser: Any) -> None:
    """Three suggestions of three kinds; one sent from the chat answers with citations."""
    context = _context(browser, "desktop")
    page = context.new_page()
    open_app(page, seeds_app.url)
    chat = page.locator("#rp-chat")
    shown = [chat.get_by_text(q, exact=True) for q in SEED_SUGGESTIONS]
    assert all(s.count() == 1 for s in shown), chat.inner_text()
    shown[1].click()
    page.wait_for_selector(f"{BOT} .rp-meta")
    assert page.locator(BOT).last.locator("a.rp-cite").count() >= 1
    # The panel is a separate output from the chat: wait for its final sources, not the provisional ones.
    both = "() => { const t = [...document.querySelectorAll('#rp-panel .rp-src-title')].map(e => e.innerText);"
    both += " return t.some(x => x.includes('SWAX')) && t.some(x => x.includes('FlashLLA')); }"
    try:
        page.wait_for_function(both, timeout=30_000)
    except PlaywrightTimeout:
        pass  # the assertion below names what the panel held
    sources = page.locator("#rp-panel .rp-src-title").all_inner_texts()
    assert any("SWAX" in t for t in sources) and any("FlashLLA" in t for t in sources), sources  # both compared
    context.close()


# ------------------------------------------------------------------ without a browser
SEED_SUGGESTIONS = [
    "What does BAM claim?",
    "How does SWAX compare with FlashLLA?",
    "Which papers study softmax attention?",  # SWAX and FlashLLA; not "neural networks" (issue 28 item 8)
]


def test_suggested_questions_are_of_three_kinds(engine: Any) -> None:
    from rag_papers.ui.suggest import suggested_questions

    questions = suggested_questions(engine.index)
    assert questions == SEED_SUGGESTIONS
    assert suggested_questions(engine.index) == questions  # the same for the same index
    claim, compare, which = questions
    assert re.fullmatch(r"What does \S+ claim\?", claim)
    m = re.fullmatch(r"How does (\S+) compare with (\S+)\?", compare)
    assert m and m.group(1) != m.group(2) and m.group(1) not in claim and m.group(2) not in claim
    titles = [p.title for p in engine.index.papers()]
    assert all(any(t.startswith(f"{name}:") for t in titles) for name in m.groups())
    assert which.startswith("Which papers ")
    phrase = which.removeprefix("Which papers study ").rstrip("?")
    assert sum(phrase in p.abstract.lower() for p in engine.index.papers()) >= 2


def test_suggestions_without_method_names_still_vary(mixed_index: Any) -> None:
    """Titles that name no method: the questions quote titles, and are still of three kinds; an empty index has none."""
    from rag_papers.index import Index
    from rag_papers.ui.suggest import suggested_questions

    with mixed_index.store.db:
        mixed_index.store.db.execute("UPDATE papers SET title = 'The ' || title")  # "The ABBA: ..." names nothing
    claim, compare, which = suggested_questions(mixed_index)
    titles = {p.title for p in mixed_index.papers()}
    assert re.fullmatch(r"What does “(.+)” claim\?", claim) and claim[11:-8] in titles
    m = re.fullmatch(r"How does “(.+)” compare with “(.+)”\?", compare)
    assert m and m.group(1) != m.group(2) and {m.group(1), m.group(2)} <= titles
    assert which.startswith("Which papers study ")
    empty = Index(Settings(home=mixed_index.settings.home / "empty"))
    assert suggested_questions(empty) == []
    empty.close()


def test_browse_pages_every_paper_once_in_each_sort(mixed_index: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from rag_papers.ui.papers import browse

    monkeypatch.setattr("rag_papers.ui.papers.PAGE_SIZE", 7)
    everyone = {p.id: p for p in mixed_index.papers()}
    keys = {
        "title": lambda p: p.title,
        "year": lambda p: (p.year is None, -(p.year or 0), p.title),
        "venue": lambda p: (p.venue is None, p.venue or "", p.title),
    }
    for sort, key in keys.items():
        first = browse(mixed_index, "", sort, 1)
        assert (first.total, first.pages, first.kind) == (41, 6, "all")
        listed = [p for n in range(1, first.pages + 1) for p in browse(mixed_index, "", sort, n).papers]
        assert [p.id for p in listed] == [p.id for p in sorted(everyone.values(), key=key)], sort
    assert browse(mixed_index, "", "title", 99).page == 6  # past the end: the last page
    assert browse(mixed_index, "", "relevance", 1).sort == "title"  # nothing to rank by


def test_search_needs_every_word_and_ranks_or_sorts_the_matches(mixed_index: Any) -> None:
    from rag_papers.ui.papers import browse

    found = browse(mixed_index, "softmax attention", "relevance")
    assert found.kind == "words" and found.total == found.ranked == 2
    assert {p.title.split(":")[0] for p in found.papers} == {"SWAX", "FlashLLA"}
    by_title = browse(mixed_index, "softmax attention", "title")
    assert [p.title for p in by_title.papers] == sorted(p.title for p in found.papers)
    assert browse(mixed_index, "softmax sliding", "relevance").total == 1
    assert browse(mixed_index, "  sundial-2019 ", "year").kind == "id"
    nowords = browse(mixed_index, "the of and", "relevance")  # stop words only: every paper, said so
    assert (nowords.kind, nowords.total) == ("nowords", 41)


def test_search_counts_every_match_and_lists_the_best(mixed_index: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """More matches than are ranked: the count is of all of them, the list of the best ``MATCH_CAP``."""
    from rag_papers.ui.papers import browse, papers_html

    monkeypatch.setattr("rag_papers.ui.papers.MATCH_CAP", 3)
    pg = browse(mixed_index, "model", "relevance")
    assert pg.total > 3 and pg.ranked == 3 and len(pg.papers) == 3
    text = Markup(papers_html(pg)).plain
    assert f"{pg.total} papers match" in text and "the 3 best matches are listed" in text


def test_each_sort_walks_an_index_not_every_row(mixed_index: Any) -> None:
    """At a million papers a page must not sort them all: each sort reads an index of the registry in order."""
    from rag_papers.index import BROWSE_ORDER

    for sort, order in BROWSE_ORDER.items():
        plan = " ".join(
            str(r[3])
            for r in mixed_index.store.db.execute(
                f"EXPLAIN QUERY PLAN SELECT rowid FROM papers ORDER BY {order} LIMIT 5"
            )
        )
        assert "COVERING INDEX" in plan and "TEMP B-TREE" not in plan, (sort, plan)


def test_title_derived_is_recorded_and_older_registries_read_without_it(seeded: Settings, embedder: Any) -> None:
    import sqlite3

    from rag_papers.index import Index
    from rag_papers.registry import row_to_paper

    _ingest_extra(seeded.home, embedder)
    index = Index(seeded, embedder=embedder)
    papers = {p.id: p for p in index.papers()}
    assert papers["sundial-2019"].title_derived is False and papers["bees-nd"].title_derived is True
    assert sum(p.title_derived for p in papers.values()) == 39  # the seeds have no titles
    index.close()

    # A registry written before the column existed: opened, it gains the column, and shows no label.
    with sqlite3.connect(seeded.in_home("papers.sqlite")) as db:
        db.execute("DROP INDEX papers_year_title")
        db.execute("ALTER TABLE papers DROP COLUMN title_derived")
    index = Index(seeded, embedder=embedder)
    assert not any(p.title_derived for p in index.papers())
    first_2026 = min((p for p in papers.values() if p.year == 2026), key=lambda p: p.title)
    assert [p.id for p in index.browse("year", 0, 2)] == ["tomato-2031", first_2026.id]
    index.close()
    # One that could not be upgraded (read-only) is read as it is.
    db = sqlite3.connect(":memory:")
    db.row_factory = sqlite3.Row
    db.execute("CREATE TABLE papers (id, title, abstract, year, venue, authors, url)")
    db.execute("INSERT INTO papers VALUES ('a', 'T', 'An abstract.', NULL, NULL, NULL, NULL)")
    assert row_to_paper(db.execute("SELECT * FROM papers").fetchone(), []).title_derived is False


def test_references_and_links_are_text() -> None:
    from rag_papers.corpus import Paper
    from rag_papers.retrieve import Hit
    from rag_papers.ui.refs import first_sentence, reference_line, safe_url

    assert safe_url("https://arxiv.org/abs/2501.00001") == "https://arxiv.org/abs/2501.00001"
    for bad in ("javascript:alert(1)", "JAVASCRIPT:alert(1)", "data:text/html,x", "//evil.example/x", "http://", None):
        assert safe_url(bad) is None, bad
    assert (
        reference_line(Paper("x1", "A title.", "An abstract.", year=2026, venue="ICLR", title_derived=True))
        == "A title [derived title]. ICLR 2026. id: x1"
    )
    assert reference_line(Paper("x2", "T\nU", "An abstract.")) == "T U. id: x2"
    hit = Hit("x3", "Only a hit.", 0.5, 0.5, 0.0, "p", year=2025, venue="V")
    assert reference_line(hit) == "Only a hit. V 2025. id: x3"  # the paper gone: no url, no derived flag
    assert first_sentence("We study $\\alpha$-nets. They work. Really.") == "We study α-nets."


PAPERS_TAGS = {"div", "span", "b", "ol", "li", "details", "summary", "p", "button", "nav", "a", "code"}
PAPERS_ATTRS = {"class", "type", "aria-label", "role", "start", "disabled", "data-page", "href", "target", "rel"}
PAPERS_TEXT_ATTRS = {"title", "data-ref", "data-id"}  # their values are corpus text, as text


def test_papers_html_shows_hostile_fields_as_text() -> None:
    """Every field of a paper in the Papers tab is text: no element, link or attribute comes from the corpus."""
    from test_ui_safety import hostile_forms

    from rag_papers.corpus import Paper
    from rag_papers.ui.papers import PapersPage, papers_html
    from rag_papers.ui.refs import reference_line

    forms = hostile_forms("http://evil.example:81")
    papers = [
        Paper(f"id{n}{f}", f"Title {f}", f"Abstract {f}. More.", year=2024, venue=f"V {f}", url=f, title_derived=True)
        for n, f in enumerate(forms)
    ]
    papers.append(Paper("ok", "Fine", "A fine abstract here.", url="https://example.org/ok"))
    pg = PapersPage(forms[0], "title", "words", 2, 3, 99, 99, papers)
    html = papers_html(pg)
    m = Markup(html)
    for tag, attrs in m.tags:
        assert tag in PAPERS_TAGS, f"<{tag}> from corpus markup"
        for k, v in attrs.items():
            assert k in PAPERS_ATTRS | PAPERS_TEXT_ATTRS, f"attribute {k}={v!r} from corpus markup"
            if k not in PAPERS_TEXT_ATTRS and k != "href":
                assert "evil" not in v and "//" not in v, f"attribute {k}={v!r} carries corpus markup"
    assert [a["href"] for t, a in m.tags if t == "a"] == ["https://example.org/ok"]  # the one http(s) url
    for p in papers:
        assert " ".join(p.title.split()) in m.plain
    ids = [a["data-id"] for t, a in m.tags if t == "button" and "data-id" in a]
    assert ids == [p.id for p in papers]  # decoded: exactly the ids the server looks up
    refs = [a["data-ref"] for t, a in m.tags if t == "button" and "data-ref" in a]
    assert refs == [reference_line(p) for p in papers]
    assert m.plain.count("derived title") == len(forms)
