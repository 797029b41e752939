"""The Papers tab: the indexed papers a page at a time, searchable and sortable, each opening on its abstract.

Built for indexes of millions of papers: nothing here reads every paper.

* A page is one query of the registry (``Index.browse``): LIMIT/OFFSET over an index of the sort's columns.
* Search runs on the keyword index (tantivy, ``Index.keyword_matches``), not a scan of the registry: a paper
  matches when its title or abstract has every word of the query (stemmed, as the chat's keyword side
  matches them), and tantivy finds those from its postings, at a cost that follows the matches, not the
  corpus (a ``LIKE '%word%'`` over titles reads every row for every keystroke). It counts every match and
  ranks the ``MATCH_CAP`` best by BM25; those are the ones listed, in that order or sorted. A query that is
  exactly a paper's id finds that paper (a primary-key lookup).
* "Ask about this paper" goes back to the Chat tab with a question about it in the input box, built here
  from the registry's title for the paper's id (the page sends an id, never text to put in the box).
* Where the server takes removals (``library.py``), each row has a box that selects it; the selection (ids)
  is a session's own ``gr.State``, apart from the view, so it lasts across pages and searches (a box comes
  back ticked) and a page drawn meanwhile never undoes a tick.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import gradio as gr

from rag_papers.corpus import Paper
from rag_papers.index import Index
from rag_papers.ui.refs import paper_info
from rag_papers.ui.render import _macro

PAGE_SIZE = 50
MATCH_CAP = 5000  # keyword matches ranked and listed; a query matching more says how many in all
SORTS: dict[str, str] = {  # value -> the sort box's label
    "relevance": "Best match",
    "title": "Title (A–Z)",
    "year": "Year (newest first)",
    "venue": "Venue (A–Z)",
}
_SORT_WORDS = {
    "relevance": "best matches first",
    "title": "sorted by title",
    "year": "newest first",
    "venue": "sorted by venue",
}


@dataclass
class PapersPage:
    """One page of the list, and what it is a page of."""

    query: str
    sort: str  # the sort applied: "relevance" only with words to rank by, else as chosen ("title" for none)
    kind: str  # "all" (every paper), "words" (keyword matches), "id" (the paper with that id), "nowords"
    page: int
    pages: int
    total: int  # papers listed in all: every paper, or every match
    ranked: int  # matches listed (at most MATCH_CAP) when searching; total otherwise
    papers: list[Paper] = field(default_factory=list)

    @property
    def first(self) -> int:
        return (self.page - 1) * PAGE_SIZE + 1

    @property
    def last(self) -> int:
        return self.first + len(self.papers) - 1

    @property
    def sort_words(self) -> str:
        return _SORT_WORDS.get(self.sort, self.sort)


def browse(index: Index, query: str = "", sort: str = "relevance", page: int = 1) -> PapersPage:
    """Page ``page`` (from 1, clamped to the pages there are) of the papers matching ``query`` (all for ""), sorted."""
    query = " ".join((query or "").split())[:300]
    sort = sort if sort in SORTS else "relevance"
    if query:
        exact = index.get([query])
        if exact:
            papers = list(exact.values())
            return PapersPage(query, sort, "id", 1, 1, 1, 1, papers)
        found = index.keyword_matches(query, MATCH_CAP)
        if found is not None:
            total, seqs = found
            ranked = min(len(seqs), MATCH_CAP)
            seqs = seqs[:ranked]
            pages = max(1, math.ceil(ranked / PAGE_SIZE))
            page = min(max(1, int(page)), pages)
            listed = index.browse(sort, (page - 1) * PAGE_SIZE, PAGE_SIZE, seqs)
            return PapersPage(query, sort, "words", page, pages, max(total, ranked), ranked, listed)
    kind = "nowords" if query else "all"
    sort = "title" if sort == "relevance" else sort
    total = index.count()
    pages = max(1, math.ceil(total / PAGE_SIZE))
    page = min(max(1, int(page)), pages)
    listed = index.browse(sort, (page - 1) * PAGE_SIZE, PAGE_SIZE)
    return PapersPage(query, sort, kind, page, pages, total, total, listed)


def papers_html(pg: PapersPage, picked: Collection[str] | None = None) -> str:
    """The page as the Papers tab's HTML (templates/papers.html); ``picked``: the ids selected for removal,
    or None for a list without the boxes (a server that takes no removals)."""
    chosen = None if picked is None else frozenset(picked)
    return _macro("papers.html", "listing", pg, {p.id: paper_info(p) for p in pg.papers}, chosen)


def ask_question(paper: Paper) -> str:
    """The question "Ask about this paper" puts in the chat's input box."""
    return f"What does “{paper.title}” claim?"


class PapersTab:
    """The tab's handlers; one per built app, shared by every session (each session's view is a gr.State)."""

    def __init__(self, index: Index, removable: bool = False) -> None:
        self.index = index
        self.removable = removable  # rows get a box to select them for "Remove" (library.py)

    def show(
        self, query: str, sort: str, page: int = 1, picked: Any = None, wanted: str | None = None
    ) -> tuple[str, dict[str, Any]]:
        """(the list's HTML, the view to keep: query, sort applied, sort wanted and page as shown); ``picked``: the
        selection; ``wanted``: the sort the user chose, when ``sort`` is one applied for them."""
        pg = browse(self.index, query, sort, page)
        html = papers_html(pg, picks(picked) if self.removable else None)
        return html, {"query": pg.query, "sort": pg.sort, "wanted": wanted or sort, "page": pg.page}

    def redraw(self, view: dict[str, Any] | None, picked: Any = None) -> tuple[str, dict[str, Any]]:
        """The page on show again, after papers came or went (it may now be past the last page)."""
        view = view or {}
        try:
            page = int(view.get("page", 1))
        except (TypeError, ValueError):
            page = 1
        return self.show(str(view.get("query", "")), str(view.get("sort", "relevance")), page, picked, _wanted(view))

    def search(self, query: str, sort: str, picked: Any = None, view: Any = None) -> tuple[str, dict[str, Any], Any]:
        """The search box changed (or the page loaded): the first page (the selection stays), in the sort the user
        chose last, and the sort box showing the sort applied: "Best match" needs words to rank by, so without
        them the list is by title and the box says so; words typed again bring "Best match" back (issue 45: the
        box said "Best match" over a list "sorted by title"). (list, view, sort box)"""
        wanted = _wanted(view) if isinstance(view, dict) else None
        return self._sorted(query, wanted or sort, picked)

    def sort_by(self, query: str, sort: str, picked: Any = None) -> tuple[str, dict[str, Any], Any]:
        """The user chose a sort: the first page in it (as far as the query allows: ``search``)."""
        return self._sorted(query, sort, picked)

    def _sorted(self, query: str, wanted: str, picked: Any) -> tuple[str, dict[str, Any], Any]:
        html, view = self.show(query, wanted, 1, picked)
        return html, view, gr.update(value=view["sort"])

    def go(self, view: dict[str, Any] | None, picked: Any, evt: gr.EventData) -> tuple[str, dict[str, Any]]:
        """A page button: that page of the list on show (the query applied, not one half typed)."""
        view = view or {}
        data = evt._data if isinstance(evt._data, dict) else {}
        try:
            page = int(data.get("page", 1))
        except (TypeError, ValueError):
            page = 1
        return self.show(str(view.get("query", "")), str(view.get("sort", "relevance")), page, picked, _wanted(view))

    def ask(self, evt: gr.EventData) -> tuple[Any, Any]:
        """ "Ask about this paper": the Chat tab, with a question about the paper in the input box."""
        data = evt._data if isinstance(evt._data, dict) else {}
        pid = str(data.get("id", ""))
        paper = self.index.get([pid]).get(pid) if pid else None
        if paper is None:  # removed since the page was drawn
            gr.Warning("That paper is no longer in the index.")
            return gr.skip(), gr.skip()
        return gr.Tabs(selected="chat"), gr.update(value=ask_question(paper))


def _wanted(view: dict[str, Any]) -> str | None:
    """The sort a user chose, as a view keeps it (None when it holds none)."""
    wanted = view.get("wanted")
    return wanted if wanted in SORTS else None


def picked_papers(index: Index, picked: Any) -> list[Paper]:
    """The selected papers still indexed, in the order they were ticked (for "Export selected")."""
    ids = picks(picked)
    found = index.get(ids) if ids else {}
    return [found[i] for i in ids if i in found]


def picks(picked: Any) -> list[str]:
    """The ids a session has selected for removal (its ``gr.State``: a list of ids, or None before any)."""
    return [str(i) for i in picked] if isinstance(picked, list) else []
