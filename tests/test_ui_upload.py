"""The Papers tab's "Add papers" and "Remove" (rag_papers/ui/library.py), driven in Chromium as a user does.

One in-process app over a copy of the seeds index (no LLM: extractive answers), with a small upload limit so
that an over-limit file is cheap to make. Each browser test reads the paper count it starts from, so their
order does not matter. Without a browser: the one-writer rule, the size check, who may write, the upload
route behind a login, and the selection boxes' escaping.
"""

from __future__ import annotations

import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_ui import Served, _copy_home, _serve, app_over_seeds, ask, open_app
from test_ui_safety import Markup

from rag_papers.config import Settings

pytestmark = pytest.mark.filterwarnings(
    "ignore:.*no_silent_downcasting:DeprecationWarning",
    "ignore:The copy keyword is deprecated:DeprecationWarning",
)

LIMIT_MB = 0.05  # about 52 KB: the test files are 1 KB, the over-limit one 80 KB
HOSTILE_TITLE = "Tomato <img src=x onerror=alert(1)> gardening in cold frames"
SUNDIAL = "Sundial calibration with shadow transformers"
LIBRARY_BIB = f"""@inproceedings{{sundial2019,
  title = {{{SUNDIAL}}},
  author = {{Gnomon, Ada and Hour, Ben}},
  booktitle = {{Annual Horology Meeting}},
  year = {{2019}},
  abstract = {{We calibrate ancient sundials from photographs with shadow transformers, a model that reads the
    gnomon's shadow and the hour lines. It reaches a median error of four minutes on museum pieces.}},
}}

@article{{tomato2031,
  title = {{{HOSTILE_TITLE}}},
  author = {{Frame, Cold}},
  journal = {{Zorblax Workshop}},
  year = {{2031}},
  abstract = {{Cold frames lengthen the tomato season by six weeks in northern gardens. We compare glass and
    polythene frames over three winters and find glass warmer at night.}},
}}

@misc{{noabstract2020,
  title = {{A survey that came without its abstract}},
  author = {{Nobody, N.}},
  year = {{2020}},
}}
"""
BROKEN_BIB = """@article{broken2024,
  title = {Unbalanced braces {never closed},
  abstract = {This entry's braces do not balance, so this entry is skipped and named.},
  year = {2024},

@article{fine2024,
  title = {A fine entry after the broken one},
  abstract = {Tide gauges in three harbours recorded the same surge within minutes of each other.},
}
"""
BEES_RIS = """TY  - JOUR
TI  - Rooftop beekeeping through the winter
AU  - Keeper, Bea
PY  - 2022
T2  - Urban Ecology Letters
AB  - Urban beekeeping raises pollination rates in city allotments. Hives on rooftops kept their colonies through
AB  - winter as often as rural hives did, in a survey of forty beekeepers.
ER  -
"""


# ------------------------------------------------------------------ fixtures and helpers
@pytest.fixture(scope="module")
def upload_app(seeds_home: Path, embedder: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with app_over_seeds(
        seeds_home,
        embedder,
        tmp_path_factory,
        "upload_home",
        ollama_host="http://127.0.0.1:9",
        upload_max_mb=LIMIT_MB,
    ) as served:
        yield served


HEAD = "#rp-papers .rp-papers-head"
NOTICE = "#rp-papers-notice .rp-notice"


def open_papers(page: Any, url: str) -> list[str]:
    """The app on its Papers tab; the dialogs (an alert() would be corpus text run as code) are collected."""
    dialogs: list[str] = []

    def on_dialog(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    open_app(page, url)
    page.get_by_role("tab", name="Papers").click()
    page.wait_for_selector("#rp-papers .rp-paper")
    return dialogs


def count(page: Any) -> int:
    """The number of papers the list's head says are indexed (no search on)."""
    text = page.locator(HEAD).inner_text()
    assert "indexed" in text, text
    return int(text.split(" paper")[0].replace(",", ""))


def wait_head(page: Any, needle: str) -> None:
    page.wait_for_function(
        "([sel, s]) => (document.querySelector(sel) || {}).innerText?.includes(s)", arg=[HEAD, needle]
    )


def search(page: Any, text: str, expect: str) -> None:
    """Search the list; wait for the head that says ``expect`` of this search (not of the one before)."""
    page.locator("#rp-papers-q input, #rp-papers-q textarea").first.fill(text)
    wait_head(page, f"{expect} “{text}”" if text else expect)


def upload(page: Any, *files: Path) -> str:
    """Add ``files`` through the file input, as a user picking them does; the notice line at the end."""
    if not page.locator("#rp-upload").is_visible():
        page.get_by_text("Add papers").click()
    page.locator("#rp-papers-notice").evaluate("e => { e.dataset.before = e.innerText; }")
    page.locator("#rp-upload input[type=file]").set_input_files([str(f) for f in files])
    page.wait_for_function(
        """() => { const n = document.querySelector('#rp-papers-notice .rp-notice');
                   return n && !n.classList.contains('rp-notice-busy'); }""",
        timeout=120_000,
    )
    return str(page.locator(NOTICE).inner_text())


def cited_titles(reply: Any) -> set[str]:
    """The titles of the papers an answer cites (each citation is named "Source N: title", app.js)."""
    reply.locator("a.rp-cite[aria-label]").first.wait_for(state="attached")
    return {(c.get_attribute("aria-label") or "").split(": ", 1)[-1] for c in reply.locator("a.rp-cite").all()}


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def uploads(home: Path) -> list[str]:
    """The files kept under HOME/uploads (the uploaded files the index's papers come from)."""
    return sorted(p.name for p in (home / "uploads").rglob("*") if p.is_file())


# ------------------------------------------------------------------ browser tests
@pytest.mark.browser
def test_upload_adds_papers_the_open_chat_cites(upload_app: Served, page: Any, tmp_path: Path) -> None:
    """A BibTeX export (2 entries with abstracts, 1 without): the CLI's report line, 2 more papers, the
    hostile title shown as text, and a question only one of them answers cites it, without a restart."""
    dialogs = open_papers(page, upload_app.url)
    before = count(page)
    line = upload(page, write(tmp_path, "library.bib", LIBRARY_BIB))
    assert "2 added" in line and "1 record skipped: no abstract" in line, line
    assert line.startswith("2 abstracts read from 1 file(s): 2 added, 0 unchanged") and "\n" not in line, line
    assert "rp-notice-ok" in (page.locator(NOTICE).get_attribute("class") or "")
    wait_head(page, f"{before + 2} papers indexed")
    assert f"{before + 2} research-paper abstracts" in page.locator(".rp-brand").inner_text()
    assert "library.bib" in uploads(upload_app.settings.home)
    assert page.locator("#rp-upload .file-preview, #rp-upload table").count() == 0  # the box is emptied

    # The hostile title: text in the list, never an element, and nothing ran.
    search(page, "tomato cold frames", "1 paper match")
    assert page.locator("#rp-papers .rp-ptitle").first.inner_text() == HOSTILE_TITLE
    assert page.locator("#rp-papers img").count() == 0
    search(page, "sundial", "1 paper match")
    assert page.locator("#rp-papers .rp-ptitle").first.inner_text() == SUNDIAL
    assert "Annual Horology Meeting 2019" in page.locator("#rp-papers .rp-pmeta").first.inner_text()

    # The chat open in this page answers from the new paper, and cites it.
    page.get_by_role("tab", name="Chat").click()
    reply = ask(page, "How accurately can ancient sundials be calibrated from photographs?")
    assert SUNDIAL in cited_titles(reply), reply.inner_text()
    assert "shadow transformers" in reply.inner_text()  # quoted from its abstract
    page.wait_for_timeout(300)
    assert dialogs == []


@pytest.mark.browser
def test_a_damaged_record_is_skipped_and_named_and_the_good_ones_go_in(
    upload_app: Served, page: Any, tmp_path: Path
) -> None:
    """Unbalanced BibTeX braces in one entry, uploaded with a good file: as `rag-papers ingest` takes a reference
    manager's library (issue 44), the good records of both go in, and the damaged one is named by its file (as the
    user named it, not a server path) and line."""
    open_papers(page, upload_app.url)
    before = count(page)
    # Its own words (no "rooftop" nor "beekeeping"): the module's app is shared, and other tests search for those.
    coastal = (
        "TY  - JOUR\nTI  - Salt spray on coastal lighthouse lenses\nAU  - Gull, Ada\nPY  - 2021\n"
        "T2  - Marine Optics Letters\nAB  - Salt spray clouds the lenses of coastal lighthouses within weeks. A\n"
        "AB  - hydrophobic coating kept twelve lenses clear for a year of winter storms.\nER  -\n"
    )
    good = write(tmp_path, "coastal.ris", coastal)
    line = upload(page, write(tmp_path, "broken.bib", BROKEN_BIB), good)
    assert "broken.bib:1" in line and "malformed BibTeX" in line and "1 damaged record skipped" in line, line
    assert str(tmp_path) not in line and "uploads" not in line
    wait_head(page, f"{before + 2} papers indexed")  # the fine entry of broken.bib and the RIS record


@pytest.mark.browser
def test_an_over_limit_file_is_refused(upload_app: Served, page: Any, tmp_path: Path) -> None:
    """A file over upload_max_mb never reaches the index: the page says so, and the count stays."""
    open_papers(page, upload_app.url)
    before = count(page)
    entry = "@misc{{big{n}, title = {{Padding entry {n}}}, abstract = {{{text}}}, year = {{2020}}}}\n"
    big = "".join(entry.format(n=n, text="Long abstract about rivers and bridges. " * 20) for n in range(100))
    path = write(tmp_path, "big.bib", big)
    assert path.stat().st_size > LIMIT_MB * 1024 * 1024
    page.get_by_text("Add papers").click()
    page.locator("#rp-upload input[type=file]").set_input_files(str(path))
    # gradio refuses it in the page before uploading (an error toast), and its route would refuse it too.
    toast = page.locator("[data-testid=toast-body]", has_text="exceed the maximum allowed size")
    toast.first.wait_for(timeout=30_000)
    assert "big.bib" in toast.first.inner_text()
    page.wait_for_timeout(1000)
    assert count(page) == before
    assert "big.bib" not in uploads(upload_app.settings.home)


@pytest.mark.browser
def test_remove_selected_papers_after_a_confirmation(upload_app: Served, page: Any, tmp_path: Path) -> None:
    """An RIS paper added, selected by its box, removed after the confirmation that names it: the count drops,
    the list and a later search no longer have it, and the chat no longer cites it."""
    open_papers(page, upload_app.url)
    before = count(page)
    line = upload(page, write(tmp_path, "bees.ris", BEES_RIS))
    assert "1 added" in line, line
    wait_head(page, f"{before + 1} papers indexed")
    title = "Rooftop beekeeping through the winter"
    question = "Do rooftop hives keep their colonies through winter as often as rural hives?"
    page.get_by_role("tab", name="Chat").click()
    assert title in cited_titles(ask(page, question))
    page.get_by_role("tab", name="Papers").click()

    search(page, "rooftop beekeeping", "1 paper match")
    assert page.locator("#rp-remove").is_disabled()
    page.locator("#rp-papers .rp-paper").first.locator("input.rp-pick-box").check()
    page.wait_for_function("() => document.querySelector('#rp-remove')?.innerText.includes('(1)')")
    assert page.locator("#rp-remove").is_enabled()
    page.locator("#rp-remove").click()

    # Cancel keeps everything; Remove again, then confirm.
    confirm = page.locator("#rp-remove-confirm")
    confirm.locator(".rp-confirm").wait_for(state="visible")
    assert title in confirm.inner_text() and "Remove 1 paper from the index?" in confirm.inner_text()
    page.locator("#rp-cancel").click()
    confirm.wait_for(state="hidden")
    page.wait_for_timeout(300)
    assert f"{before + 1} research-paper" in page.locator(".rp-brand").inner_text()
    page.locator("#rp-remove").click()
    confirm.locator(".rp-confirm").wait_for(state="visible")
    page.locator("#rp-confirm").click()
    page.wait_for_function(
        "() => (document.querySelector('#rp-papers-notice') || {}).innerText?.includes('removed 1 paper(s)')"
    )
    assert page.locator(NOTICE).inner_text() == f"removed 1 paper(s); {before} left"
    confirm.wait_for(state="hidden")
    wait_head(page, "0 papers match")
    assert page.locator("#rp-remove").is_disabled()
    search(page, "", f"{before} papers indexed")
    assert f"{before} research-paper abstracts" in page.locator(".rp-brand").inner_text()
    assert title not in page.locator("#rp-papers").inner_text()

    page.get_by_role("tab", name="Chat").click()
    again = ask(page, question)
    cited = cited_titles(again) if again.locator("a.rp-cite").count() else set()
    assert title not in cited and title not in again.inner_text(), again.inner_text()


@pytest.mark.browser
def test_the_selection_lasts_across_pages_and_searches(upload_app: Served, page: Any) -> None:
    """A box ticked, then another search and back: still ticked, and the button counts both; untick clears."""
    open_papers(page, upload_app.url)
    page.locator("#rp-papers .rp-paper").first.locator("input.rp-pick-box").check()
    search(page, "softmax attention", "2 papers match")
    other = page.locator("#rp-papers .rp-paper").first.locator("input.rp-pick-box")
    assert not other.is_checked()  # a redraw shows the selection, not the box that was at this place before
    other.check()
    page.wait_for_function("() => document.querySelector('#rp-remove')?.innerText.includes('(2)')")
    search(page, "", "papers indexed")
    first = page.locator("#rp-papers .rp-paper").first.locator("input.rp-pick-box")
    assert first.is_checked()
    first.uncheck()
    page.wait_for_function("() => document.querySelector('#rp-remove')?.innerText.includes('(1)')")


# ------------------------------------------------------------------ without a browser
@pytest.fixture
def library(seeded: Settings, embedder: object) -> Iterator[Any]:
    from rag_papers.index import Index
    from rag_papers.ui.library import Library
    from rag_papers.ui.papers import PapersTab

    settings = seeded.model_copy(update={"upload_max_mb": LIMIT_MB})
    index = Index(settings, embedder=embedder)  # type: ignore[arg-type]
    yield Library(settings, index, PapersTab(index, removable=True), lambda: ("", ""), writable=True)
    index.close()


def _last_notice(outputs: list[tuple[Any, ...]]) -> str:
    return Markup(outputs[-1][0]).plain


def test_one_writer_at_a_time(library: Any, seeded: Settings, embedder: object, tmp_path: Path) -> None:
    """Another process's ingest holds the index: refused in its one line, before anything is written; this
    app's own upload under way: refused at once, in its line. Then it goes through."""
    from rag_papers.index import Index
    from rag_papers.ui.library import BUSY

    bees = write(tmp_path, "bees.ris", BEES_RIS)
    n = library.index.count()
    holder = Index(seeded, embedder=embedder)  # type: ignore[arg-type]
    holder.store.kw_store.lock()  # what an ingest or removal in another process holds
    out = list(library.add([str(bees)], None, None))
    assert "another ingest or removal is writing this index" in _last_notice(out)
    holder.close()
    assert library.index.count() == n and uploads(seeded.home) == []

    with library._lock:  # an upload or removal of this app in progress
        out = list(library.add([str(bees)], None, None))
        assert _last_notice(out) == BUSY
        removed = library.remove(None, [next(iter(library.index.papers())).id])
        assert Markup(removed[0]).plain == BUSY
    assert library.index.count() == n

    out = list(library.add([str(bees)], None, None))
    assert "1 added" in _last_notice(out) and library.index.count() == n + 1
    assert uploads(seeded.home) == ["bees.ris"]


def test_the_limits_are_checked_on_the_server(library: Any, tmp_path: Path) -> None:
    """Whatever gradio's route let through: a file over upload_max_mb, or of a type no reader takes, is refused
    before anything is copied or read."""
    big = write(tmp_path, "big.bib", "x" * int(LIMIT_MB * 1024 * 1024 + 10))
    out = list(library.add([str(big)], None, None))
    assert _last_notice(out).startswith("big.bib is 0.1 MB: the app takes files of up to 0.05 MB (upload_max_mb)")
    pdf = write(tmp_path, "paper.pdf", "%PDF-1.4")
    out = list(library.add([str(pdf)], None, None))
    assert _last_notice(out).startswith("paper.pdf: not a supported file type; supported formats: seeds text")
    assert not (library.settings.home / "uploads").exists()


def test_only_a_login_or_this_machine_may_write(seeded: Settings, tmp_path: Path) -> None:
    """An open public server (--insecure-no-auth) only reads: no writes through the handlers either."""
    from rag_papers.ui.library import READ_ONLY, Library, writes_allowed

    assert writes_allowed(Settings(home=tmp_path, host="127.0.0.1"))
    assert writes_allowed(Settings(home=tmp_path, host="0.0.0.0", auth="u:p"))
    assert not writes_allowed(Settings(home=tmp_path, host="0.0.0.0"))
    reader = Library(seeded, object(), object(), lambda: ("", ""), writable=False)  # type: ignore[arg-type]
    bees = write(tmp_path, "bees.ris", BEES_RIS)
    assert _last_notice(list(reader.add([str(bees)], None, None))) == READ_ONLY
    assert Markup(reader.remove(None, ["x"])[0]).plain == READ_ONLY


def test_the_upload_route_needs_the_login(
    seeds_home: Path, embedder: object, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Behind a login, gradio's upload route refuses a client that has not signed in (the files never arrive)."""
    served = _serve(_copy_home(seeds_home, tmp_path_factory, "upload_auth_home"), embedder, auth="reader:secret-pw")
    try:
        body = b'--b\r\nContent-Disposition: form-data; name="files"; filename="a.bib"\r\n\r\n@misc{a}\r\n--b--\r\n'
        request = urllib.request.Request(
            served.url.rstrip("/") + "/gradio_api/upload",
            data=body,
            headers={"Content-Type": "multipart/form-data; boundary=b"},
            method="POST",
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 401
    finally:
        served.app.close()


def test_selection_boxes_are_text() -> None:
    """A row's box carries the id as an attribute value and the title as text: neither becomes markup."""
    from rag_papers.corpus import Paper
    from rag_papers.ui.papers import PapersPage, papers_html

    hostile = Paper('x"><img src=x onerror=alert(1)>', HOSTILE_TITLE, "An abstract. More.")
    plain = Paper("ok-1", "Fine", "A fine abstract here.")
    pg = PapersPage("", "title", "all", 1, 1, 2, 2, [hostile, plain])
    m = Markup(papers_html(pg, [hostile.id]))
    boxes = [a for t, a in m.tags if t == "input"]
    assert [b["data-id"] for b in boxes] == [hostile.id, plain.id]
    assert ["checked" in b for b in boxes] == [True, False]
    assert all(t != "img" for t, _ in m.tags)
    assert f"Select “{HOSTILE_TITLE}” to remove it" in m.plain
    assert not [a for t, a in Markup(papers_html(pg)).tags if t == "input"]  # no removals: no boxes
