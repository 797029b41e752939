"""The chat's suggested questions: three kinds, drawn from the corpus.

* "What does <method> claim?" about a paper whose title names its method ("ABBA: ..."), else about a
  paper whose title it quotes.
* "How does <A> compare with <B>?" for two papers on one topic: each is the other's best keyword match
  (BM25 on the specific words of its title), the keyword index's nearest neighbours, found without
  touching the vector store. Papers are named by their method, else by their title in quotes.
* "Which papers study <phrase>?" for a topic phrase of one paper that other papers' abstracts use too,
  made of words specific enough to be evidence (in at most ``keyword_max_df`` of the papers, ``useful_terms``), the
  rarest of them in few papers (``specific_enough``): a topic of this corpus, not "neural networks".

Cheap at any size and the same for the same index: it reads ``SAMPLE`` papers spread over the registry
(``Index.sample``) and asks the keyword index a bounded number of questions.
"""

from __future__ import annotations

import re
from collections import Counter

from rag_papers.corpus import GENERIC_WORDS, Paper, topic_phrases
from rag_papers.index import Index
from rag_papers.keyword import useful_terms

SAMPLE = 300  # papers read
# A "which papers" phrase names a topic of this corpus when its rarest word is in few papers: at most this
# share of them (3 at least). "neural networks" is in far more, in any corpus of papers (issue 28).
SPECIFIC_SHARE = 0.05
PAIR_TRIES = 40  # papers tried as one side of the comparison (two keyword queries each)
_WORD = re.compile(r"[a-z][a-z-]*")
_NAMED = re.compile(r"^([A-Z][\w-]{1,15}):")  # "ABBA: ...", "IG-FWI: ...": a title that names its method


def method_name(paper: Paper) -> str | None:
    m = _NAMED.match(paper.title)
    return m.group(1) if m else None


def _label(paper: Paper) -> str:
    """How a question names a paper: its method, else its title in quotes."""
    name = method_name(paper)
    return name or f"“{paper.title.rstrip('.')}”"


def _best_match(index: Index, paper: Paper) -> str | None:
    """The id of the other paper that best matches this one's title words (BM25), if any."""
    n_docs, stats = index.term_stats(paper.title.split(":", 1)[-1])
    terms = useful_terms(stats, n_docs, index.settings.keyword_max_df)
    return next((pid for pid, _ in index.keyword_terms(terms, 3) if pid != paper.id), None) if terms else None


def comparison(index: Index, papers: list[Paper]) -> tuple[Paper, Paper] | None:
    """Two papers on one topic, each the other's best match, papers named after their method first.

    Else the first paper tried and its best match. ``PAIR_TRIES`` papers are tried at most.
    """
    tries = sorted(papers, key=lambda p: method_name(p) is None)[:PAIR_TRIES]  # stable: sample order within
    mutual: tuple[Paper, Paper] | None = None
    fallback: tuple[Paper, Paper] | None = None
    for a in tries:
        bid = _best_match(index, a)
        b = index.get([bid]).get(bid) if bid else None
        if b is None:
            continue
        fallback = fallback or (a, b)
        if _best_match(index, b) == a.id:
            if method_name(a) and method_name(b):
                return a, b
            mutual = mutual or (a, b)
    return mutual or fallback


def topic_phrase(index: Index, papers: list[Paper]) -> str | None:
    """A topic phrase of one sampled paper found in the most sampled abstracts (two at least), specific words only."""
    in_papers: Counter[str] = Counter()  # two-word phrase -> sampled abstracts using it
    for p in papers:
        pairs: set[str] = set()
        for part in re.split(r"[.;:!?()\[\],]", p.abstract.lower()):
            words = _WORD.findall(part)
            pairs.update(f"{a} {b}" for a, b in zip(words, words[1:]))
        in_papers.update(pairs)
    counts: dict[str, int] = {}
    for p in papers:
        for phrase in topic_phrases(p.abstract, 2):
            low = phrase.lower()
            if re.fullmatch(r"[a-z][a-z-]+ [a-z][a-z-]+", low):
                counts[low] = in_papers[low]
    for phrase, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        if n < 2:
            break
        if specific_enough(index, phrase):
            return phrase
    return None


def specific_enough(index: Index, phrase: str) -> bool:
    """Whether ``phrase`` names something of this corpus: no word generic, every word specific enough to be
    evidence (``useful_terms``), and the rarest in at most ``SPECIFIC_SHARE`` of the papers."""
    if any(w in GENERIC_WORDS for w in phrase.lower().split()):
        return False
    n_docs, stats = index.term_stats(phrase)
    if not stats or len(useful_terms(stats, n_docs, index.settings.keyword_max_df)) != len(stats):
        return False
    return min(df for _, df in stats) <= max(3.0, SPECIFIC_SHARE * n_docs)


def suggested_questions(index: Index, limit: int = 3) -> list[str]:
    """Up to ``limit`` questions of different kinds (a method's claim, a comparison, "which papers")."""
    papers = index.sample(SAMPLE)
    out: list[str] = []
    pair = comparison(index, papers)
    taken = {p.id for p in pair} if pair else set()
    # A paper named after its method; else one whose title is short enough to quote.
    rest = [p for p in papers if p.id not in taken]
    claim = next((p for p in rest if method_name(p)), None) or next((p for p in rest if len(p.title) <= 80), None)
    if claim is not None:
        out.append(f"What does {_label(claim)} claim?")
    if pair is not None:
        out.append(f"How does {_label(pair[0])} compare with {_label(pair[1])}?")
    phrase = topic_phrase(index, papers)
    if phrase is not None:
        out.append(f"Which papers study {phrase}?")
    return out[:limit]
