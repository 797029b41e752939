"""References back out to a reference manager: papers as BibTeX, RIS or CSL-JSON.

One function per format over the corpus's ``Paper`` records. What a paper came with goes back out: title, authors,
year, venue, abstract, DOI and arXiv id (from its id or url), url. A title the corpus derived (the record had
none) is marked with ``corpus.DERIVED_TITLE_NOTE`` in the format's note field, so that it never passes as the
authors' title; the project's readers take the note back and derive the title again. Each output reads back into
the project's readers, bibtexparser and rispy as the same papers (tests/test_references.py).

Standard library only, beside the corpus package.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable, Sequence

from rag_papers.corpus import DERIVED_TITLE_NOTE, Paper, arxiv_id, doi_of

FORMATS = {"bibtex": ".bib", "ris": ".ris", "csl": ".json"}
FORMAT_NAMES = {"bibtex": "BibTeX", "ris": "RIS", "csl": "CSL-JSON"}
# A venue that names a meeting: the paper is written as a conference paper (BibTeX @inproceedings, RIS CONF).
_MEETING = re.compile(r"\b(?:proceedings|conference|workshop|symposium|meeting|congress|iclr|neurips|icml|acl)\b", re.I)
_BIBTEX_SPECIAL = {"\\": r"\textbackslash{}", "{": r"\{", "}": r"\}", "&": r"\&", "%": r"\%", "$": r"\$",
                   "#": r"\#", "_": r"\_", "~": r"\textasciitilde{}", "^": "{^}"}  # fmt: skip


def doi_and_arxiv(paper: Paper) -> tuple[str | None, str | None]:
    """The paper's DOI and arXiv id, from its id (``doi:...``, ``arXiv:...``) or its url."""
    pid = paper.id.split("-", 1)[0] if re.fullmatch(r"doi:.+-[0-9a-f]{8}", paper.id) else paper.id
    doi = doi_of(pid.removeprefix("doi:")) if pid.startswith("doi:") else doi_of(paper.url or "")
    arxiv = arxiv_id(pid.removeprefix("arXiv:")) if pid.startswith("arXiv:") else arxiv_id(paper.url or "")
    if doi and arxiv is None:
        arxiv = arxiv_id(f"https://doi.org/{doi}")
    return doi, arxiv


def _meeting(paper: Paper) -> bool:
    return bool(paper.venue and _MEETING.search(paper.venue))


def _split(name: str) -> tuple[str, str]:
    """(family, given) of a name stored as "Given Family": the last word is the family name. Joined back with a
    space (what every reader here does) it is the same name, whatever it was."""
    parts = name.rsplit(" ", 1)
    return (parts[1], parts[0]) if len(parts) == 2 else (name, "")


# ---------------------------------------------------------------------------------------------------- BibTeX
def _bib(text: str) -> str:
    """``text`` as a BibTeX value: LaTeX's special characters escaped and its ligatures (``--``, ``''``) broken, so
    that a LaTeX decoder gives the text back as it is (Unicode is written as it is, UTF-8)."""
    out = "".join(_BIBTEX_SPECIAL.get(c, c) for c in text)
    return re.sub(r"(?<=([-`'!?]))(?=\1)|(?<=[!?])(?=`)", "{}", out)


def _bib_name(name: str) -> str:
    if " and " in f" {name} " or "," in name:
        return "{" + _bib(name) + "}"  # one name, whatever its words: "DeepMind AlphaFold Team", "King, Jr."
    return _bib(name)


def _cite_key(paper: Paper, taken: set[str]) -> str:
    first = paper.authors[0] if paper.authors else ""
    surname = _split(first)[0] if first else ""
    word = next((w for w in re.findall(r"[A-Za-z0-9]+", paper.title) if len(w) > 3), "paper")
    base = "".join(
        c for c in unicodedata.normalize("NFKD", f"{surname}{paper.year or ''}{word}".lower()) if c.isascii()
    )
    base = re.sub(r"[^a-z0-9]", "", base) or "paper"
    key, n = base, 0
    while key in taken:
        n += 1
        key = f"{base}{chr(ord('a') + n - 1)}" if n <= 26 else f"{base}{n}"
    taken.add(key)
    return key


def to_bibtex(papers: Iterable[Paper]) -> str:
    """The papers as BibTeX entries: @inproceedings (booktitle) for a meeting's venue, else @article (journal), or
    @misc without a venue; UTF-8, LaTeX's specials escaped."""
    taken: set[str] = set()
    out: list[str] = []
    for p in papers:
        doi, arxiv = doi_and_arxiv(p)
        kind, venue_field = ("inproceedings", "booktitle") if _meeting(p) else ("article", "journal")
        if not p.venue:
            kind = "misc"
        fields: list[tuple[str, str]] = [("title", "{" + _bib(p.title) + "}")]
        if p.authors:
            fields.append(("author", " and ".join(_bib_name(a) for a in p.authors)))
        if p.year:
            fields.append(("year", str(p.year)))
        if p.venue:
            fields.append((venue_field, _bib(p.venue)))
        if doi:
            fields.append(("doi", _bib(doi)))
        if arxiv:
            fields += [("eprint", arxiv), ("archiveprefix", "arXiv")]
        if p.url:
            fields.append(("url", _bib(p.url)))
        fields.append(("abstract", _bib(p.abstract)))
        if p.title_derived:
            fields.append(("note", DERIVED_TITLE_NOTE))
        body = ",\n".join(f"  {k} = {{{v}}}" for k, v in fields)
        out.append(f"@{kind}{{{_cite_key(p, taken)},\n{body}\n}}\n")
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------------- RIS
def _ris_name(name: str) -> str:
    """ "Family, Given", as RIS writes names (the readers turn it back to "Given Family")."""
    if "," in name:
        return name
    family, given = _split(name)
    return f"{family}, {given}" if given else family


def to_ris(papers: Iterable[Paper]) -> str:
    """The papers as RIS records: CONF for a meeting's venue, JOUR with a venue, GEN without; the venue in T2."""
    out: list[str] = []
    for p in papers:
        doi, _ = doi_and_arxiv(p)
        kind = "CONF" if _meeting(p) else "JOUR" if p.venue else "GEN"
        lines = [f"TY  - {kind}", f"TI  - {p.title}"]
        lines += [f"AU  - {_ris_name(a)}" for a in p.authors or []]
        if p.year:
            lines.append(f"PY  - {p.year}")
        if p.venue:
            lines.append(f"T2  - {p.venue}")
        if doi:
            lines.append(f"DO  - {doi}")
        if p.url:
            lines.append(f"UR  - {p.url}")
        lines.append(f"AB  - {p.abstract}")
        if p.title_derived:
            lines.append(f"N1  - {DERIVED_TITLE_NOTE}")
        lines.append("ER  - ")
        out.append("\n".join(lines) + "\n")
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------------- CSL-JSON
def _csl_name(name: str) -> dict[str, str]:
    family, given = _split(name)
    return {"family": family, "given": given} if given else {"literal": name}


def to_csl_json(papers: Iterable[Paper]) -> str:
    """The papers as a CSL-JSON array (what Zotero, Mendeley and pandoc read)."""
    taken: set[str] = set()
    items: list[dict[str, object]] = []
    for p in papers:
        doi, arxiv = doi_and_arxiv(p)
        item: dict[str, object] = {
            "id": _cite_key(p, taken),
            "type": "paper-conference" if _meeting(p) else "article-journal" if p.venue else "article",
            "title": p.title,
        }
        if p.authors:
            item["author"] = [_csl_name(a) for a in p.authors]
        if p.year:
            item["issued"] = {"date-parts": [[p.year]]}
        if p.venue:
            item["container-title"] = p.venue
        if doi:
            item["DOI"] = doi
        if p.url:
            item["URL"] = p.url
        elif arxiv:
            item["URL"] = f"https://arxiv.org/abs/{arxiv}"
        item["abstract"] = p.abstract
        if p.title_derived:
            item["note"] = DERIVED_TITLE_NOTE
        items.append(item)
    return json.dumps(items, ensure_ascii=False, indent=2) + "\n"


WRITERS = {"bibtex": to_bibtex, "ris": to_ris, "csl": to_csl_json}


def export_references(papers: Sequence[Paper], fmt: str) -> str:
    """``papers`` in format ``fmt`` (a key of ``FORMATS``)."""
    if fmt not in WRITERS:
        raise ValueError(f"unknown reference format {fmt!r}; one of {', '.join(WRITERS)}")
    return WRITERS[fmt](papers)
