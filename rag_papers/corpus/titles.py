"""Derived titles: a record without a title gets one from its abstract, the name it coins and its topic.

Deterministic and offline (no model): the same abstract always gets the same title, so a re-ingest keeps it,
and two papers whose titles tie are told apart by more topic phrases (``derive_title``'s ``extra``).
"""

from __future__ import annotations

import re
from collections import Counter

from rag_papers.corpus.text import STOPWORDS, sentences
from rag_papers.paths import load_words

# Words that are everywhere in abstracts and say nothing about the topic (rag_papers/words/generic_words.txt).
GENERIC_WORDS = load_words("generic_words")
# Acronyms of the field or of common techniques, never a coined name (rag_papers/words/generic_acronyms.txt).
GENERIC_ACRONYMS = load_words("generic_acronyms")

_INTRO = re.compile(
    r"\b(?:we|this (?:work|paper)|our)\b[^.]*?\b(?:propose|introduce|present|develop|design|call|name|dub|term|coin)\w*",
    re.IGNORECASE,
)
_NAME_TOKEN = re.compile(r"(?<![\w$\\])([A-Za-z][A-Za-z0-9]*(?:-[A-Za-z0-9]+)*)")


def _is_coinable(tok: str) -> bool:
    if tok in GENERIC_ACRONYMS or tok.rstrip("s") in GENERIC_ACRONYMS or len(tok) < 3:
        return False
    if any(part.islower() for part in tok.split("-")[1:]) and "-" in tok and not re.search(r"[a-z][A-Z]", tok):
        return False  # LLM-based, PAC-style: a qualifier, not a name
    upper = sum(c.isupper() for c in tok)
    # SWAX, DirMoE, TemGX, K-Flow, CreatiDesign: two capitals, or a capital after the first letter.
    return upper >= 2 and not re.fullmatch(r"[A-Z][a-z]+-[A-Z][a-z]+", tok)


_NAMING_WORDS = (
    r"(?:called|named|dubbed|termed|coined|algorithm|framework|method|model|benchmark|dataset|approach|system)"
)


def coined_name(abstract: str) -> str | None:
    """The method/benchmark name an abstract introduces (ABBA, SWAX, TemGX), if any.

    Only tokens after an introducing verb ("we propose") count, and only ones that were
    not used earlier (those are background, like TGNN or LoRA). A token set off as a
    name ("X, a ...", "(X)" after a Capitalised expansion, "called X") beats a bare one.
    """
    text = re.sub(r"\\text\w*\{([^}]*)\}|[{}*]", lambda m: m.group(1) or "", abstract)
    seen: set[str] = set()
    weak: str | None = None
    for sentence in sentences(text):
        intro = _INTRO.search(sentence)
        ours = re.match(r"\s*our\s+\w+,\s*([A-Za-z][\w-]*)\s*,", sentence, re.IGNORECASE)
        if ours and _is_coinable(ours.group(1)) and ours.group(1) not in seen:
            return ours.group(1)
        lead = re.match(r"\s*([A-Za-z][\w-]*)\s*(?:\([^)]*\))?\s*,\s+(?:a|an)\b", sentence)
        if lead and _is_coinable(lead.group(1)) and lead.group(1) not in seen:
            return lead.group(1)
        for m in _NAME_TOKEN.finditer(sentence):
            tok = m.group(1)
            if intro and m.start() >= intro.end() and _is_coinable(tok) and tok not in seen:
                before, after = sentence[: m.start()], sentence[m.end() :]
                paren = before.endswith("(") and after.startswith(")")
                expansion = re.search(r"([A-Za-z][\w-]*)\s*\($", before)
                if paren and expansion and expansion.group(1).islower():
                    seen.add(tok)
                    continue  # "neural tangent kernel (NTK)": an established term
                set_off = paren or re.match(r"\s*[,:]", after) or re.search(_NAMING_WORDS + r"\s+$", before)
                if set_off:
                    return tok
                words_since_verb = len(sentence[intro.end() : m.start()].split())
                if weak is None and words_since_verb <= 4:
                    weak = tok
            seen.add(tok)
    return weak


def _clean_for_topic(abstract: str) -> str:
    """Drop URLs, LaTeX commands and markup so they never become 'topic words'.

    A math token that is a plain name (``$k$`` in "Top-$k$", ``$K$``) is kept as its letters, so
    "Top-$k$+Softmax" stays "Top-k+Softmax" rather than "Top-+Softmax"; other math goes.
    """
    text = re.sub(r"\(?https?://\S+|\[[^\]]*\]\([^)]*\)|\S+\.(?:com|org|io)/\S*", " ", abstract)
    text = re.sub(r"\$([A-Za-z][A-Za-z0-9]{0,2})\$", r"\1", text)
    text = re.sub(r"\\[A-Za-z]+|\$[^$]*\$|[{}*_`]", " ", text)
    return text


def topic_phrases(abstract: str, n: int = 2, exclude: str | None = None) -> list[str]:
    """The most repeated two-word phrases (first appearance breaks ties): the abstract's topic."""
    abstract = _clean_for_topic(abstract)
    if exclude:
        abstract = abstract.replace(exclude, ".")
    counts: Counter[tuple[str, str]] = Counter()
    first: dict[tuple[str, str], int] = {}
    surface: dict[tuple[str, str], str] = {}
    pos = 0
    for sentence in re.split(r"[.;:!?()\[\],]", abstract):
        found = list(re.finditer(r"[A-Za-z][A-Za-z0-9'-]*", sentence))
        for ma, mb in zip(found, found[1:]):
            a, b = ma.group(), mb.group()
            ka, kb = a.lower(), b.lower()
            if any(w in STOPWORDS or w in GENERIC_WORDS or len(w) < 3 for w in (ka, kb)):
                continue
            key = (ka, kb)
            counts[key] += 1
            first.setdefault(key, pos)
            plus = sentence[ma.end() : mb.start()].strip() == "+"  # "Top-k+Softmax": one name, kept whole
            surface.setdefault(key, f"{a} + {b}" if plus else f"{a} {b}")
            pos += 1
    freq = Counter(w.lower() for w in re.findall(r"[A-Za-z][A-Za-z0-9'-]*", abstract))
    # Repeated phrases first, then phrases made of the abstract's most repeated words.
    ranked = sorted(counts, key=lambda k: (-counts[k], -(freq[k[0]] + freq[k[1]]), first[k]))
    chosen: list[str] = []
    used: set[str] = set()
    for key in ranked:
        if used & set(key):
            continue
        chosen.append(surface[key])
        used |= set(key)
        if len(chosen) == n:
            break
    if not chosen:  # very short abstract: fall back to its first content words
        words = [w for w in re.findall(r"[A-Za-z][\w-]*", abstract) if w.lower() not in STOPWORDS]
        chosen = [" ".join(words[:4])]
    return chosen


def derive_title(abstract: str, extra: int = 0) -> str:
    """Deterministic display title: coined name plus topic words, e.g. 'SWAX: sliding window, hybrid architectures'.

    ``extra`` adds more topic phrases, used to break a tie with another paper's title.
    """
    name = coined_name(abstract)
    phrases = topic_phrases(abstract, 2 + extra, exclude=name)
    topic = ", ".join(phrases)
    if name:
        return f"{name}: {topic}"
    return topic[:1].upper() + topic[1:]
