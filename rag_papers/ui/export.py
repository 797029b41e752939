"""The conversation as a Markdown file (the "Export .md" button), and an answer's sources or the Papers tab's
ticked papers as a reference file (BibTeX, RIS or CSL-JSON) for a reference manager.

Plain Python, not a template: Markdown has no autoescape to lean on, so every piece of corpus
and model text is escaped here, explicitly, with ``md_inert``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from rag_papers import __version__
from rag_papers.corpus import Paper, clip, plain_text
from rag_papers.retrieve import Hit
from rag_papers.ui import files
from rag_papers.ui.refs import safe_url
from rag_papers.ui.render import doubt, md_inert
from rag_papers.ui.state import UIState

AUTHORS_SHOWN = 6  # a reference names this many authors, then "et al."

_MD_CITE_RE = re.compile(r"\[(\d+)\](?!:)")  # "[n]:" would define a link, so it is escaped


def _md_line(text: str) -> str:
    return md_inert(" ".join(text.split()))


def _md_id(pid: str) -> str:
    return f"`{pid}`" if re.fullmatch(r"[\w.:-]+", pid) else _md_line(pid)


def _md_text(text: str) -> str:
    """Answer text for the export: inert except its ``[n]`` citations, which stay readable."""
    out: list[str] = []
    pos = 0
    for m in _MD_CITE_RE.finditer(text):
        out += [md_inert(text[pos : m.start()]), m.group(0)]
        pos = m.end()
    out.append(md_inert(text[pos:]))
    return "".join(out)


def _where(venue: str | None, year: int | None) -> str:
    """A reference's venue and year ("ICLR 2026, "), or "" when the record has neither."""
    said = " ".join(x for x in (_md_line(venue or ""), str(year) if year else "") if x)
    return f"{said}, " if said else ""


def _link(url: str | None) -> str:
    """A paper's address as a Markdown autolink, as the sources panel links it: only an http(s) one (``safe_url``)
    with nothing an autolink cannot hold; any other is written as text."""
    safe = safe_url(url)
    if safe and not re.search(r"[<>\x00-\x20\x7f]", safe):
        return f"<{safe}>"
    return _md_line(url or "")


def _reference(it: Hit, paper: Paper | None) -> str:
    """One entry of an answer's References: number, title, venue and year, id; then the authors and the link of
    its paper (the registry's record, which the hit does not carry)."""
    line = f"- [{it.n}] {_md_line(it.title)} ({_where(it.venue, it.year)}id {_md_id(it.id)})"
    authors = [a for a in (paper.authors or []) if a.strip()] if paper is not None else []
    if authors:
        named = ", ".join(authors[:AUTHORS_SHOWN]) + (" et al." if len(authors) > AUTHORS_SHOWN else "")
        line += f" · {_md_line(named)}"
    if paper is not None and paper.url and paper.url.strip():
        line += f" · {_link(paper.url.strip())}"
    return line


def _claim_line(text: str, supported: bool, support: float, cited: list[str], numbers: dict[str, int]) -> str:
    """One claim and its support mark, as the chat shows it: supported, unsupported, or citing nothing."""
    refs = "".join(f"[{numbers[c]}]" for c in cited if c in numbers)
    mark = "✓ supported" if supported else "⚠ unsupported" if cited else "⚠ cites nothing"
    return f"- {mark} ({support:.2f}): {_md_line(text)}{' ' + refs if refs else ''}"


def export_markdown(state: UIState) -> str:
    """The conversation as Markdown: each question, its answer and a References list.

    Corpus and model text is escaped (``md_inert``), so a Markdown viewer shows it as written.
    """
    lines = [
        "# rag-papers conversation",
        "",
        f"_Exported {datetime.now():%Y-%m-%d %H:%M} · rag-papers {__version__}_",
        "",
    ]
    for i, ex in enumerate(state.exchanges, 1):
        if not ex.done:
            continue
        lines += [f"## {i}. {_md_line(ex.question)}", ""]
        if ex.standalone and ex.standalone != ex.question:
            lines += [f"*Searched for: {_md_line(ex.standalone)}*", ""]
        if ex.mode == "search" and not ex.error:
            lines += ["Retrieval only (no answer generated). Matching papers:", ""]
            lines += [
                f"{it.n}. **{_md_line(it.title)}** ({_md_id(it.id)}, score {it.score:.3f}): "
                f"{_md_line(clip(plain_text(it.passage), 300))}"
                for it in ex.items
            ]
            lines.append("")
        else:
            warning = doubt(ex.answer) if not ex.error else None
            if ex.refused:
                lines += [f"**Not covered.** {_md_text(ex.text)}", ""]
            elif ex.text:
                if warning:  # said before the text, as the chat says it
                    lines += [f"> {_md_line(warning)}.", ""]
                lines += [_md_text(ex.text.strip()), ""]
            answer = ex.answer
            if answer is not None and not ex.refused:
                # What the question asks that the quoted abstracts (or the model) say they leave out.
                uncovered = [str(u) for u in answer.uncovered]
                if uncovered:
                    lines += [f"*The abstracts don't mention: {_md_line(', '.join(uncovered))}*", ""]
                if answer.claims:
                    numbers = {it.id: it.n for it in ex.items}
                    lines += ["**Claims**", ""]
                    lines += [_claim_line(c.text, c.supported, c.support, c.citations, numbers) for c in answer.claims]
                    lines.append("")
            if ex.error:
                lines += [f"> ⚠ {_md_line(ex.error)}", ""]
            if ex.footer:
                lines += [f"*{_md_line(ex.footer)}*", ""]
            refs = [it for it in ex.items if it.cited] or ([] if ex.refused else ex.items)
            if refs and not ex.refused:
                lines += ["**References**", ""]
                lines += [_reference(it, ex.papers.get(it.id)) for it in refs]
                lines.append("")
    return "\n".join(lines).rstrip() + "\n"


# ------------------------------------------------------------------ references for a reference manager
# The formats the UI offers (its dropdown's labels) -> ``rag_papers.references``' keys.
REFERENCE_CHOICES = {"BibTeX": "bibtex", "RIS": "ris", "CSL-JSON": "csl"}


def answer_source_ids(state: UIState) -> list[str]:
    """The last answer's sources, as the Markdown export's References lists them: the cited ones, else all."""
    for ex in reversed(state.exchanges):
        if ex.done and ex.mode == "answer" and not ex.refused and not ex.error:
            return [it.id for it in ex.items if it.cited] or [it.id for it in ex.items]
    return []


def write_references(folder: Path, papers: Sequence[Paper], choice: str) -> Path:
    """``papers`` as a reference file in the dropdown's format ``choice``: written as the Markdown export is
    (``files.write_export``: 0600, in a 0700 folder of its own, removed by the same sweep), named for its format."""
    from rag_papers.references import FORMATS, export_references

    fmt = REFERENCE_CHOICES.get(choice, "bibtex")
    path = files.write_export(folder, export_references(papers, fmt))
    named = path.with_name(f"rag-papers-references-{datetime.now():%Y%m%d-%H%M%S}{FORMATS[fmt]}")
    path.rename(named)
    return named
