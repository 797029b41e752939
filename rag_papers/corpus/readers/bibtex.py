"""BibTeX (``.bib``) through bibtexparser 2: field names folded, LaTeX accents decoded, protective braces dropped,
names split, and a title's math (``Cu$_2$O``) written as text.

A reference manager's library is read as reference managers read it: an entry bibtexparser cannot parse (an
unbalanced brace) is one damaged record, skipped and reported (``on_damaged``), and a citation key used twice (a
Mendeley habit) names nothing here, so both entries are read. Without ``on_damaged`` (``--strict``) either refuses
the file, as it always did.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

from rag_papers.corpus.files import unknown_format
from rag_papers.corpus.ids import arxiv_id, doi_of
from rag_papers.corpus.readers.base import OnDamaged, OnSkip, checked, damaged, derived_note, first_of, record, year_in
from rag_papers.corpus.record import CorpusError, RawRecord

_SUB = str.maketrans("0123456789+-=()aeoxhklmnpst", "₀₁₂₃₄₅₆₇₈₉₊₋₌₍₎ₐₑₒₓₕₖₗₘₙₚₛₜ")
_SUP = str.maketrans("0123456789+-=()in", "⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁼⁽⁾ⁱⁿ")
_SCRIPT = re.compile(r"([_^])(?:\{([^{}]*)\}|(\\?\w))")
_MATH = re.compile(r"\$([^$]+)\$")
_BRACE_RUNS = re.compile(r"\{+|\}+")


def brace_depth(raw: str) -> int:
    """How deep ``raw``'s braces nest (runs counted at once: 50,000 ``{`` are one match)."""
    depth = deepest = 0
    for m in _BRACE_RUNS.finditer(raw):
        run = m.end() - m.start()
        depth = depth + run if raw[m.start()] == "{" else max(0, depth - run)
        deepest = max(deepest, depth)
    return deepest


def _failure(block: Any) -> str:
    """Why bibtexparser could not read ``block``, in BibTeX's terms. Its LaTeX decoding recurses once a brace
    level, so an entry nested a few hundred deep fails with Python's recursion limit: that is said as the depth
    of its braces, which is what the user can find and fix."""
    reason = " ".join(str(getattr(block.error, "abort_reason", None) or block.error).split())
    if "recursion" in reason:
        return f"braces nested {brace_depth(block.raw or ''):,} levels deep, too deep to decode (a field needs a few)"
    return f"an entry is not closed ({reason or 'syntax error'})"


def _parse(text: str) -> Any:
    import bibtexparser
    from bibtexparser.middlewares import (
        LatexDecodingMiddleware,
        NormalizeFieldKeys,
        SeparateCoAuthors,
        SplitNameParts,
    )

    # Field names first: JabRef 2.x writes ``Author = {...}``, and the name splitting looks for ``author``.
    middleware = [NormalizeFieldKeys(), LatexDecodingMiddleware(), SeparateCoAuthors(), SplitNameParts()]
    # bibtexparser logs each failed block as a warning (to stderr, through logging's last resort): the failure
    # is reported here instead, in one line.
    log = logging.getLogger("bibtexparser")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        return bibtexparser.parse_string(text, append_middleware=middleware)
    finally:
        log.setLevel(level)


def math_text(value: str) -> str:
    """A title's inline math as text: ``Cu$_2$O`` is ``Cu₂O``, ``$\\mathrm{CUS}$`` ``CUS``; what has no Unicode form
    keeps its letters (``x_ij``). Titles are shown and exported as text, and ``$`` is no part of a title."""
    from pylatexenc.latex2text import LatexNodes2Text

    def script(m: re.Match[str]) -> str:
        body = m.group(2) if m.group(2) is not None else m.group(3)
        body = str(LatexNodes2Text().latex_to_text(body)).strip()
        table = _SUB if m.group(1) == "_" else _SUP
        converted = body.translate(table)
        return converted if all(c != o or c.isspace() for c, o in zip(converted, body)) else m.group(1) + body

    def math(m: re.Match[str]) -> str:
        inner = re.sub(r"\\(?:mathrm|mathit|mathbf|text|textrm|mbox)\s*(\{[^{}]*\})", r"\1", m.group(1))
        inner = _SCRIPT.sub(script, inner)
        return str(LatexNodes2Text().latex_to_text(inner)).strip() if "\\" in inner else inner

    return _MATH.sub(math, value).replace("\u00ad", "")  # ``\-`` (a hyphenation point) decodes to a soft hyphen


def _names(authors: object) -> list[str]:
    if not isinstance(authors, list):
        return [str(authors)] if authors else []
    return [" ".join([*a.first, *a.von, *a.last, *a.jr]) if hasattr(a, "first") else str(a) for a in authors]


def read_bibtex(
    path: Path, text: str, on_skip: OnSkip | None, on_damaged: OnDamaged | None = None
) -> Iterator[RawRecord]:
    """BibTeX through bibtexparser 2; see the module's docstring for what a damaged entry does."""
    from bibtexparser.model import DuplicateBlockKeyBlock

    # ``{\\d}`` with nothing to put the dot under is how BibTeX files write ð (``\\dh``): "Ragnhei{\\d}ur".
    library = _parse(re.sub(r"\{\\d\}", r"{\\dh}", text))
    entries: list[tuple[int, Any]] = [((e.start_line or 0) + 1, e) for e in library.entries]
    errors: list[CorpusError] = []
    for block in library.failed_blocks:
        where = f"{path}:{(block.start_line or 0) + 1}"
        if isinstance(block, DuplicateBlockKeyBlock):
            if on_damaged is None:
                raise CorpusError(f"{where}: malformed BibTeX (the key {block.key!r} is used by two entries)")
            # Not transformed by the middleware (bibtexparser leaves failed blocks raw): parsed again on its own.
            again = _parse(block.raw or "").entries
            entries.extend(((block.start_line or 0) + 1, e) for e in again)
            continue
        errors.append(CorpusError(f"{where}: malformed BibTeX, {_failure(block)}"))
    if not entries:
        if errors:
            raise errors[0]  # nothing good to keep: the file is refused on its first damaged entry
        raise unknown_format(path, "a .bib file with no BibTeX entries")
    for error in errors:
        damaged(error, on_damaged)
    for line, entry in sorted(entries, key=lambda pair: pair[0]):
        f = {k.lower(): v.value for k, v in entry.fields_dict.items()}
        val = partial(first_of, f)
        eprint = val("eprint") if str(val("archiveprefix", "eprinttype") or "").lower() == "arxiv" else None
        url = val("url")
        title = val("title")
        # An article's venue is its journal, even beside a booktitle (a special issue's workshop name).
        article = str(entry.entry_type).lower() == "article"
        venue = val(
            *(("journal", "journaltitle", "booktitle") if article else ("booktitle", "journal", "journaltitle"))
        )
        try:
            rec = record(
                path,
                line,
                val("abstract"),
                None if derived_note(val("note")) else math_text(title) if isinstance(title, str) else title,
                year=year_in(val("year", "date")),
                authors=_names(f.get("author")),
                venue=math_text(venue) if isinstance(venue, str) else venue,
                url=url,
                doi=doi_of(val("doi")),
                arxiv=arxiv_id(eprint) or arxiv_id(url),
                on_skip=on_skip,
            )
        except CorpusError as exc:
            damaged(exc, on_damaged)
            continue
        rec = checked(rec, on_damaged)
        if rec is not None:
            yield rec
