"""What the UI shows about a paper beside its title: the "derived title" label, its first sentence, a safe link
and the one-line reference the copy button puts on the clipboard. Shared by the sources panel and the Papers tab.

Everything here is text: the templates print it through ``render.inert`` (data attributes included), and a
link is offered only for an http(s) address, so a ``javascript:`` or ``data:`` "url" in a corpus stays text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from rag_papers.corpus import Paper, plain_text, sentences

if TYPE_CHECKING:
    from rag_papers.retrieve import Hit

FIRST_SENTENCE_CHARS = 240


def first_sentence(abstract: str, limit: int = FIRST_SENTENCE_CHARS) -> str:
    """The abstract's first sentence as it reads (LaTeX rendered), cut to ``limit`` characters."""
    head = next(iter(sentences(plain_text(abstract))), "")
    return head if len(head) <= limit else head[: limit - 1].rstrip() + "…"


def safe_url(url: str | None) -> str | None:
    """``url`` if a browser may follow it from our page (an http or https address with a host), else None."""
    if not url:
        return None
    url = url.strip()
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname or any(c.isspace() for c in url):
        return None
    return url


def reference_line(source: Paper | Hit) -> str:
    """One line naming the paper: "Title [derived title]. Venue Year. id: X. https://…" (missing parts left out).

    A derived title says so, so that nobody cites our words as the authors'. A search hit without its paper
    (the registry row gone) has no url and no derived flag, so it gives the line without them.
    """
    derived, url = (source.title_derived, source.url) if isinstance(source, Paper) else (False, None)
    title = source.title.rstrip(". ")
    parts = [f"{title} [derived title]" if derived else title]
    where = " ".join(str(v) for v in (source.venue, source.year) if v)
    if where:
        parts.append(where)
    parts.append(f"id: {source.id}")
    line = ". ".join(parts)
    if url and url.strip():
        line += f". {url.strip()}"
    return " ".join(line.split())  # one line whatever the fields hold


@dataclass(frozen=True)
class PaperInfo:
    """The sources panel's and the Papers tab's extras for one paper."""

    derived: bool
    first: str  # the abstract's first sentence
    url: str | None  # a followable address, or None
    reference: str  # what "Copy reference" copies


def paper_info(paper: Paper) -> PaperInfo:
    url = safe_url(paper.url)
    return PaperInfo(
        derived=paper.title_derived,
        first=first_sentence(paper.abstract),
        url=url,
        reference=reference_line(paper),
    )
