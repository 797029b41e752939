"""Issue 44: the UI's reference exports, beside "Export .md" (the answer's sources) and in the Papers tab (the
ticked papers): files written private (0600, in 0700 folders of the server's own), removed as the Markdown export is.

The handlers are tested on a built app without a browser; one browser test clicks the chat's button.
"""

from __future__ import annotations

import stat
import time
from pathlib import Path
from typing import Any

import pytest
from test_ui import app_over_seeds, ask, open_app

from rag_papers.corpus import DERIVED_TITLE_NOTE, read_file
from rag_papers.ui import files


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.browser
def test_the_answers_sources_download_as_references(
    seeds_home: Path,
    embedder: object,
    tmp_path_factory: pytest.TempPathFactory,
    page: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(files, "EXPORT_KEEP_S", 10)  # old exports removed while it runs: seconds here
    monkeypatch.setattr(files, "EXPORT_SWEEP_S", 1)
    with app_over_seeds(seeds_home, embedder, tmp_path_factory, "refs_home", llm="extractive") as served:
        root = Path(served.app.GRADIO_CACHE)
        open_app(page, served.url)
        ask(page, "What does ABBA claim?")
        cards = page.locator("#rp-panel .rp-src-title").all_inner_texts()
        with page.expect_download() as dl:
            page.locator("#rp-export-refs").click()
        assert dl.value.suggested_filename.endswith(".bib")
        saved = Path(dl.value.path())
        back = list(read_file(saved.rename(saved.with_suffix(".bib"))))
        assert back and {r.abstract for r in back} and all(r.title is None for r in back)  # the seeds' derived titles
        assert DERIVED_TITLE_NOTE in saved.with_suffix(".bib").read_text(encoding="utf-8")
        assert len(back) <= len(cards)
        written = list(root.rglob("rag-papers-references-*.bib"))
        assert written and all(_mode(p) == 0o600 and _mode(p.parent) == 0o700 for p in written)
        page.locator("#rp-refs-format input").click()
        page.get_by_role("option", name="RIS").click()
        # The file follows the dropdown once its change event has run: the next download is the RIS one.
        deadline = time.monotonic() + 30
        while True:
            with page.expect_download() as dl:
                page.locator("#rp-export-refs").click()
            if dl.value.suggested_filename.endswith(".ris") or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert dl.value.suggested_filename.endswith(".ris")
        assert Path(dl.value.path()).read_text(encoding="utf-8").startswith("TY  - ")
        deadline = time.monotonic() + 40
        while any(p.exists() for p in written) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not any(p.exists() for p in written), "an old reference export was kept while the server ran"
    assert not root.exists()  # the server stopped: its folder is gone, the exports with it


def test_the_handlers_write_private_files_of_the_chosen_format(engine: Any, tmp_path: Path) -> None:
    """``ChatApp``'s handlers over a real index: the answer's sources and the ticked papers, in each format."""
    from rag_papers.ui.chat_app import ChatApp
    from rag_papers.ui.state import Exchange

    app = ChatApp(engine.settings, engine)
    state = app.new_state()
    assert app._export_references(state, "BibTeX")["interactive"] is False  # nothing answered yet
    result = engine.search("What does ABBA claim?", 3)
    items = [h.numbered(n, cited=n == 1) for n, h in enumerate(result.results, 1)]
    state.exchanges.append(Exchange("What does ABBA claim?", "answer", items=items, done=True))
    out = app._export_references(state, "CSL-JSON")
    path = Path(out["value"])
    assert path.suffix == ".json" and _mode(path) == 0o600 and _mode(path.parent) == 0o700
    assert path.parent in state.export_dirs  # deleted with the chat, as the Markdown export
    (rec,) = read_file(path)  # the cited one only
    assert engine.index.get([items[0].id])[items[0].id].abstract == rec.abstract
    ids = [h.id for h in result.results]
    picked = Path(app._export_picked(ids[::-1], "RIS")["value"])
    assert picked.suffix == ".ris" and _mode(picked) == 0o600
    assert [r.abstract for r in read_file(picked)] == [engine.index.get([i])[i].abstract for i in ids[::-1]]
    assert app._export_picked([], "RIS")["interactive"] is False
