"""Claim-level support: each sentence of an answer, scored against the sentences of the sources it cites.

The answer stage checks that a citation points at a source that was given; this checks
that the cited source says it. Each claim (a sentence or a list line, with its ``[n]``
citations) is compared with every sentence of every abstract it cites, by meaning (the
index's own embedding model, cosine) and by wording (the share of the claim's content
words, stemmed as the keyword index stems them, found in that sentence and the next).
The best match is the claim's evidence and its score the claim's support; below
``Settings.claim_floor``, or citing nothing, the claim is unsupported.

Why our own and not llama-index's ``FaithfulnessEvaluator``: that asks an LLM to judge,
and the point here is a check that runs without one (on every answer, in the CLI and the
UI, offline), against the exact sentence a reader can look at. The floor is fitted on the
dev questions' answers and their sentence-swapped copies (``evaluate.claim_study``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from rag_papers.corpus import plain_text, sentences
from rag_papers.keyword import keyword_tokens

if TYPE_CHECKING:
    from rag_papers.embedding import TextEmbedder

# A citation, "[2]" or "[1, 3]": the one pattern, also the answer stage's streaming citation filter's.
CITE = re.compile(r"\[(\s*\d+\s*(?:[,;]\s*\d+\s*)*)\]")
_CITES_AFTER_STOP = re.compile(r"([.!?])((?:\s*\[\s*\d+(?:\s*[,;]\s*\d+)*\s*\])+)")
_LEAD = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")  # a list line's bullet or number
_TITLE_LEAD = re.compile(r"^\*\*[^*]{1,300}\*\*\s*[:\-–—]\s*")  # "**Title**: sentence" (an answer's list line)
_MEANING_WEIGHT = 0.5  # support = this x cosine + the rest x word overlap


@dataclass
class Claim:
    """One sentence of an answer, the sources it cites, and how well the best of them backs it."""

    text: str
    citations: list[str]  # paper ids, in the order the sentence cites them
    support: float
    supported: bool
    evidence: dict[str, str] | None = None  # {"id": cited paper, "sentence": its best-matching sentence}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def split_claims(answer: str, skip: Sequence[str] = (), titles: Sequence[str] = ()) -> list[tuple[str, list[int]]]:
    """(claim text without its citations, the source numbers it cites) for each claim of ``answer``.

    A claim is a sentence; a list line is one claim, however many stops it holds. Citations
    written after the sentence's stop ("... works. [2]") belong to it. Lines that only
    introduce what follows (end in ":" and cite nothing) and the ``skip`` texts (a caveat the
    answer stage wrote, not the model) are not claims. A list line that starts with one of
    ``titles`` ("- Title — sentence [1]") is claimed without it: the title names the paper.
    """
    leads = sorted({" ".join(t.split()) for t in titles if t.strip()}, key=len, reverse=True)
    skipped = {" ".join(s.split()) for s in skip if s}
    out: list[tuple[str, list[int]]] = []
    for line in answer.splitlines():
        line = line.strip()
        if not line:
            continue
        bullet = bool(_LEAD.match(line))
        body = _TITLE_LEAD.sub("", _LEAD.sub("", line))
        if bullet:
            for lead in leads:
                if body.startswith(lead) and body[len(lead) :].lstrip()[:1] in ("—", "–", ":", "-"):
                    body = body[len(lead) :].lstrip()[1:].lstrip()
                    break
        body = _CITES_AFTER_STOP.sub(lambda m: m.group(2) + m.group(1), body)  # "works. [2] Next" -> "works [2]. Next"
        parts = [body.strip()] if bullet else sentences(body)
        for part in parts:
            nums: list[int] = []
            for m in CITE.finditer(part):
                for x in re.split(r"[,;]", m.group(1)):
                    if int(x) not in nums:
                        nums.append(int(x))
            text = " ".join(CITE.sub(" ", part).split())
            text = re.sub(r"\s+([.,;:!?])", r"\1", text)
            if not re.search(r"\w", text) or " ".join(text.split()) in skipped:
                continue
            if not nums and text.endswith(":"):
                continue
            out.append((text, nums))
    return out


def _unit(vectors: list[list[float]]) -> Any:
    import numpy as np

    v = np.asarray(vectors, dtype=np.float32).reshape(len(vectors), -1)
    return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-9)


def embed_cached(texts: Sequence[str], embedder: TextEmbedder, cache: dict[str, Any]) -> None:
    """Put the unit vectors of ``texts`` not yet in ``cache`` there, in one batch."""
    todo = [t for t in dict.fromkeys(texts) if t not in cache]
    if todo:
        cache.update(zip(todo, _unit(embedder.embed_documents(todo))))


def _overlap(claim: set[str], evidence: set[str]) -> float:
    return len(claim & evidence) / len(claim) if claim else 0.0


def check_claims(
    answer: str,
    sources: Sequence[tuple[str, str]],
    embedder: TextEmbedder,
    floor: float,
    skip: Sequence[str] = (),
    cache: dict[str, Any] | None = None,
    titles: Sequence[str] = (),
) -> list[Claim]:
    """Score every claim of ``answer`` against the abstracts of ``sources`` (id, abstract), numbered from 1.

    A citation to a number outside ``sources`` counts as citing nothing (the answer stage
    already cut those from what the user sees). ``cache`` (sentence -> vector) saves
    embedding the same abstracts again when many answers are checked (``eval``).
    """
    parts = [(plain_text(t), nums) for t, nums in split_claims(answer, skip, titles)]
    if not parts:
        return []
    cited = sorted({n for _, nums in parts for n in nums if 1 <= n <= len(sources)})
    # Both sides as a reader sees them: an extractive quote is shown with its LaTeX rendered (corpus.plain_text).
    sents: dict[int, list[str]] = {n: sentences(plain_text(sources[n - 1][1])) for n in cited}
    flat = [(n, i) for n in cited for i in range(len(sents[n]))]
    cache = {} if cache is None else cache
    claim_vecs = _unit(embedder.embed_documents([t for t, _ in parts]))
    embed_cached([sents[n][i] for n, i in flat], embedder, cache)
    sent_vecs = [cache[sents[n][i]] for n, i in flat]
    row = {key: j for j, key in enumerate(flat)}
    tokens = {key: set(keyword_tokens(sents[key[0]][key[1]])) for key in flat}
    claims: list[Claim] = []
    for c, (text, nums) in enumerate(parts):
        valid = [n for n in nums if 1 <= n <= len(sources)]
        words = set(keyword_tokens(text))
        best, best_key = 0.0, None
        for n in valid:
            for i in range(len(sents[n])):
                cos = float(claim_vecs[c] @ sent_vecs[row[n, i]])
                # The sentence and the next: a claim often joins a method to its result.
                nxt = tokens.get((n, i + 1), set())
                lex = max(_overlap(words, tokens[n, i]), _overlap(words, tokens[n, i] | nxt))
                score = _MEANING_WEIGHT * cos + (1 - _MEANING_WEIGHT) * lex
                if score > best:
                    best, best_key = score, (n, i)
        evidence = None
        if best_key is not None:
            evidence = {"id": sources[best_key[0] - 1][0], "sentence": sents[best_key[0]][best_key[1]]}
        claims.append(
            Claim(
                text=text,
                citations=[sources[n - 1][0] for n in valid],
                support=round(best, 4),
                supported=bool(valid) and best >= floor,
                evidence=evidence,
            )
        )
    return claims
