"""One venue, however a record spells it: "JMLR" and "Journal of Machine Learning Research" are one venue.

Why: exports name a venue as their source did (BibTeX's ``journal``, RIS's ``JO`` or ``T2``, OpenAlex's source),
so one index holds "JMLR", "Journal of Machine Learning Research" and "Proceedings of the 40th International
Conference on Machine Learning" beside "ICML". A venue filter that offers each spelling finds a part of a
venue's papers under each. Here every spelling has a key (``venue_key``): the same for two spellings of one
venue, through the alias list ``rag_papers/words/venue_aliases.txt`` (data, not code: a venue is added there)
and a few spelling rules (case, spacing, a leading "Proceedings of the", an edition, a year, a trailing
"(ABBREVIATION)"). The name offered for a venue (``venue_name``) is the list's short name, else the spelling.

Standard library only (and ``paths`` for the data file), so any layer may use it: the UI offers and filters by
it; ``retrieve.Filters`` is the place for a venue filter to compare keys (see the UI's ``VenueFilters``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from importlib import resources

from rag_papers.paths import PACKAGE

_PROCEEDINGS = re.compile(r"^(?:proceedings|proc\.?)\s+of\s+(?:the\s+)?", re.IGNORECASE)
_EDITION = re.compile(r"\b\d+(?:st|nd|rd|th)\b|\b(?:19|20)\d\d\b|\s\d{1,3}$", re.IGNORECASE)
_ABBREVIATION = re.compile(r"\s*\([^()]*\)\s*$")


def _spelling(name: str) -> str:
    """A spelling with what does not tell venues apart taken out: case, spacing, "Proceedings of the", an edition
    or a year, a trailing "(ABBREVIATION)"."""
    text = " ".join(name.split())
    text = _ABBREVIATION.sub("", text) or text
    text = _PROCEEDINGS.sub("", text)
    text = " ".join(_EDITION.sub(" ", text).split())
    return text.casefold() or " ".join(name.split()).casefold()


@functools.cache
def aliases() -> dict[str, str]:
    """Every listed spelling's key -> the venue's short name (``venue_aliases.txt``: "SHORT = NAME | NAME")."""
    text = (resources.files(PACKAGE) / "words" / "venue_aliases.txt").read_text(encoding="utf-8")
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        short, _, rest = line.partition("=")
        short = " ".join(short.split())
        for name in [short, *rest.split("|")]:
            if name.strip():
                out[_spelling(name)] = short
    return out


def venue_name(name: str) -> str:
    """The name a venue is offered by: its short name in the alias list, else ``name`` as spelled (one line)."""
    return aliases().get(_spelling(name), " ".join(name.split()))


def venue_key(name: str) -> str:
    """What two spellings of one venue share (and two venues never do): compare these, not the spellings."""
    return _spelling(venue_name(name))


def same_venue(a: str | None, b: str | None) -> bool:
    return bool(a) and bool(b) and venue_key(str(a)) == venue_key(str(b))


def venue_groups(spellings: Iterable[str]) -> dict[str, list[str]]:
    """The venues of ``spellings`` (an index's distinct values), by the name each is offered under, in order
    of those names (any case), each with its spellings; a venue spelled only in other cases is named as its
    first spelling in sorted order ("ICLR" before "iclr")."""
    by_key: dict[str, list[str]] = {}
    for spelling in sorted({str(s) for s in spellings if s and str(s).strip()}):
        by_key.setdefault(venue_key(spelling), []).append(spelling)
    named = {}
    for group in by_key.values():
        listed = aliases().get(_spelling(group[0]))
        named[listed or " ".join(group[0].split())] = group
    return dict(sorted(named.items(), key=lambda kv: (kv[0].casefold(), kv[0])))
