"""Identifiers and dedupe keys: the DOI or arXiv id of a record, and the keys under which two sources of one
paper meet (ingest merges records that share one, and the registry keeps them for the next ingest).

A DOI, an arXiv id, or else the normalised title with the first author's surname: what two exports of one
paper (a BibTeX file and an OpenAlex page, say) agree on however each writes it.
"""

from __future__ import annotations

import re

from rag_papers.corpus.record import normalise

_DOI = re.compile(r"10\.\d{4,9}/\S+")
_ARXIV_DOI = re.compile(r"^10\.48550/arxiv\.(.+)$", re.I)
_ARXIV_URL = re.compile(r"arxiv\.org/(?:abs|pdf)/([^\s?#]+?)(?:v\d+)?(?:\.pdf)?$", re.I)


def doi_of(value: object) -> str | None:
    """A DOI as written (DOIs are case-insensitive: ids and keys fold it), from a bare DOI, ``doi:...`` or a doi.org URL."""
    if not isinstance(value, str):
        return None
    m = _DOI.search(value.strip())
    return m.group(0).rstrip(".,;") if m else None


def arxiv_of_doi(doi: str) -> str | None:
    """The arXiv id an arXiv DOI (``10.48550/arXiv.1706.03762``) names; None for any other DOI."""
    m = _ARXIV_DOI.match(doi)
    return m.group(1) if m else None


def arxiv_id(value: object) -> str | None:
    """The arXiv id without version, from an id (``1706.03762v2``, ``cs/0501001``), an abs/pdf URL or an arXiv DOI."""
    if not isinstance(value, str) or not value.strip():
        return None
    value = value.strip()
    m = _ARXIV_DOI.match(doi_of(value) or "") or _ARXIV_URL.search(value)
    text = m.group(1) if m else value
    text = re.sub(r"^arxiv:", "", text, flags=re.I)
    m2 = re.fullmatch(r"(\d{4}\.\d{4,5}|[a-z-]+(?:\.[A-Z]{2})?/\d{7})(?:v\d+)?", text)
    return m2.group(1) if m2 else None


def first_author_key(authors: list[str] | None) -> str:
    """The first author's surname, folded: what two sources agree on ("Vaswani, A." and "Ashish Vaswani")."""
    if not authors:
        return ""
    name = authors[0]
    surname = name.split(",")[0] if "," in name else name.split()[-1] if name.split() else ""
    return re.sub(r"\W+", "", surname.casefold())


def title_key(title: str) -> str:
    return re.sub(r"\W+", " ", title.casefold()).strip()


def registry_keys(pid: str, title: str, authors: list[str] | None) -> list[str]:
    """The keys of an indexed paper, from what the registry keeps (its id and title and authors)."""
    return ([pid] if pid.startswith(("doi:", "arXiv:")) else []) + _title_keys(title, authors)


def dedupe_keys(doi: str | None, arxiv: str | None, title: str | None, authors: list[str] | None) -> list[str]:
    """The keys under which two sources of one paper meet (ingest merges records that share one)."""
    keys = []
    if doi:
        keys.append(f"doi:{doi.lower()}")
    if arxiv:
        keys.append(f"arXiv:{arxiv}")
    keys.extend(_title_keys(title, authors) or _title_only(title))
    return keys


def _title_only(title: str | None) -> list[str]:
    """``title:<normalised title>|`` for a record with a title and no author (an edited book): an identity of its
    own, so that it is not taken for another record that repeats its abstract (its chapters)."""
    t = title_key(title or "")
    return [f"title:{t}|"] if t else []


def _title_keys(title: str | None, authors: list[str] | None) -> list[str]:
    """``title:<normalised title>|<first author's surname>``, when both have letters to compare."""
    t, a = title_key(title or ""), first_author_key(authors)
    return [f"title:{t}|{a}"] if t and a else []


def person(name: str) -> str:
    """ "Last, First" -> "First Last" (RIS and CSL write names both ways)."""
    if name.count(",") == 1:
        last, first = (part.strip() for part in name.split(","))
        name = f"{first} {last}" if first else last
    return normalise(name)
