"""Answer stage: prompt from ``prompts/``, context budgeting, streaming, citation checks, refusal.

Grounding is enforced here, not trusted to the model: when retrieval says nothing is
relevant no LLM is called, and a citation that does not point at a source in the
prompt is cut out of the stream before the user sees it (and reported).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from rag_papers.claims import Claim, check_claims
from rag_papers.config import Settings
from rag_papers.corpus import Paper, plain_text
from rag_papers.llm import Backend, Message, estimate_tokens
from rag_papers.retrieve import Hit, SearchResult


@lru_cache(maxsize=32)
def _read_prompt(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def load_prompt(settings: Settings, name: str) -> str:
    path = settings.prompts_dir / f"{name}.txt"
    if not path.is_file():
        from rag_papers import RagPapersError

        raise RagPapersError(f"prompt template {path} is missing (prompts_dir={settings.prompts_dir})")
    return _read_prompt(path)


@dataclass
class Answer:
    question: str
    answer: str
    citations: list[str]
    sources: list[Hit]  # the hits given to the model, numbered [1]..[n] as the prompt numbered them
    refused: bool
    backend: str
    model: str | None
    timings: dict[str, float] = field(default_factory=dict)
    removed_citations: list[str] = field(default_factory=list)
    notice: str | None = None
    search: dict[str, Any] | None = None
    filtered_out: bool = False  # refused because the filters excluded every paper (``notice`` says how)
    claims: list[Claim] = field(default_factory=list)  # each sentence, scored against what it cites (claims.py)

    @property
    def unsupported(self) -> list[Claim]:
        return [c for c in self.claims if not c.supported]

    @property
    def model_refused(self) -> bool:
        """A refusal the model wrote after reading the sources (``declined``), not one made before any LLM was asked."""
        return self.refused and self.backend != "none"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("search")
        d["sources"] = [s.source_dict() for s in self.sources]  # a source's keys, not a search result's
        return d


# ------------------------------------------------------------------ citations
_CITE = re.compile(r"\[(\s*\d+\s*(?:[,;]\s*\d+\s*)*)\]")


class CitationFilter:
    """Streaming filter: holds back text from '[' until the bracket closes, then keeps only valid numbers.

    Spaces are held back too, so a removed citation leaves no stray space before the
    punctuation after it: what the user sees while streaming is exactly the final answer.
    """

    def __init__(self, n_sources: int) -> None:
        self.n = n_sources
        self.pending = ""
        self.space = ""
        self.dropped = False
        self.used: list[int] = []
        self.removed: list[str] = []

    def _check(self, token: str) -> str:
        m = _CITE.fullmatch(token)
        if not m:
            return token
        nums = [int(x) for x in re.split(r"[,;]", m.group(1))]
        good = [x for x in nums if 1 <= x <= self.n]
        self.removed.extend(f"[{x}]" for x in nums if not 1 <= x <= self.n)
        for x in good:
            if x not in self.used:
                self.used.append(x)
        return "".join(f"[{x}]" for x in good)

    def _emit(self, text: str, out: list[str]) -> None:
        if text[:1] in ".,;:!?" and self.dropped:
            self.space = ""  # "LoRA [9]." -> "LoRA."
        out.append(self.space + text)
        self.space = ""
        self.dropped = False

    def feed(self, text: str) -> str:
        out: list[str] = []
        for ch in text:
            if self.pending:
                self.pending += ch
                if ch == "]":
                    kept = self._check(self.pending)
                    self.pending = ""
                    if kept:
                        self._emit(kept, out)
                    else:
                        self.dropped = True
                elif len(self.pending) > 16 or ch == "\n" or (ch == "[" and len(self.pending) > 1):
                    held, self.pending = self.pending[:-1], ch if ch == "[" else ""
                    self._emit(held, out)
                    if ch != "[":
                        self._emit(ch, out)
            elif ch == "[":
                self.pending = ch
            elif ch in " \t":
                if not (self.dropped and self.space):
                    self.space += ch
            else:
                self._emit(ch, out)
        return "".join(out)

    def flush(self) -> str:
        rest = self.pending
        self.pending = ""
        return rest if not rest else self.space + rest


def tidy(text: str) -> str:
    """Spaces left where citations were removed."""
    text = re.sub(r"[ \t]+([.,;:!?])", r"\1", text)
    return re.sub(r"[ \t]{2,}", " ", text).strip()


# ------------------------------------------------------------------- prompting
# Each source goes into the prompt inside its own fence, made here and not by ``source.txt``, so
# an edited template cannot lose it; the system prompt says what is inside a fence is data.
SOURCE_OPEN = '<source n="{n}">'
SOURCE_CLOSE = "</source>"
# Corpus text is data, never prompt structure: in a title or an abstract, whatever the prompt itself
# uses to mark where a source, the question or a chat turn begins is rendered harmless, in this order.
_AS_DATA: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"<\|[^|<>\n]{0,40}\|>|<\||\|>"), " "),  # chat-template tokens: <|im_start|>, <|eot_id|>
    (re.compile(r"<\s*/?\s*source\b[^<>]*>?", re.IGNORECASE), " "),  # the fence's own tags
    # Source numbers, [2] or [1, 3]: in fullwidth brackets they read the same and are no citation.
    (re.compile(r"\[(\s*\d+\s*(?:[,;\u2013-]\s*\d+\s*)*)\]"), "\uff3b\\1\uff3d"),
    # The prompt's labels ("Question:", "Answer (with [n] citations):", "Abstracts:") and chat roles.
    (
        re.compile(
            r"\b(question|answer|abstracts?|system|assistant|instructions?)(\s*(?:\([^()\n]{0,60}\))?)\s*:", re.I
        ),
        r"\1\2 -",
    ),
]


def as_data(text: str) -> str:
    """Corpus text for the prompt: on one line, with nothing that could pose as another source, the question
    or a chat turn (``_AS_DATA``). For the model only; readers see the text as stored."""
    for pattern, repl in _AS_DATA:
        text = pattern.sub(repl, text)
    return " ".join(text.split())


def _source_block(template: str, n: int, paper: Paper, abstract: str) -> str:
    body = template.format(n=n, title=as_data(paper.title), id=as_data(paper.id), abstract=as_data(abstract))
    return f"{SOURCE_OPEN.format(n=n)}\n{body.strip()}\n{SOURCE_CLOSE}"


def _sources(result: SearchResult, limit: int, min_ratio: float = 0.0) -> list[tuple[Hit, Paper]]:
    """The first ``limit`` (``context_papers``) retrieved papers worth showing the model.

    The search already stopped at ``top_k``, so at most min(top_k, context_papers) come back; weak
    matches far below the best are left out, as they only invite bad citations.
    """
    top = result.results[0].score if result.results else 0.0
    return [
        (h, result.papers[h.id])
        for h in result.results[:limit]
        if h.id in result.papers and (h is result.results[0] or h.score >= min_ratio * top)
    ]


def build_messages(
    question: str, result: SearchResult, settings: Settings, context_window: int, max_tokens: int
) -> tuple[list[Message], list[tuple[Hit, Paper]]]:
    """Fit as many top papers as the model's window allows (the last one cut at a sentence).

    Each is fenced (``SOURCE_OPEN`` .. ``SOURCE_CLOSE``) and its text passed through ``as_data``, so an
    abstract cannot pose as another source or as the question.
    """
    system = load_prompt(settings, "answer_system")
    user_t = load_prompt(settings, "answer_user")
    source_t = load_prompt(settings, "source")
    budget = context_window - max_tokens - estimate_tokens(system + user_t + question) - 64
    blocks: list[str] = []
    used: list[tuple[Hit, Paper]] = []
    for hit, paper in _sources(result, settings.context_papers, settings.source_min_ratio):
        block = _source_block(source_t, len(used) + 1, paper, paper.abstract)
        cost = estimate_tokens(block)
        if cost > budget:
            sentences = re.split(r"(?<=[.!?])\s+", paper.abstract)
            while sentences and estimate_tokens(" ".join(sentences)) + 40 > budget:
                sentences.pop()
            if used and (not sentences or budget < 120):
                break
            if not sentences:  # not even one sentence fits: give the model the first one anyway
                sentences = re.split(r"(?<=[.!?])\s+", paper.abstract)[:1]
            block = _source_block(source_t, len(used) + 1, paper, " ".join(sentences))
            cost = estimate_tokens(block)
        blocks.append(block)
        used.append((hit, paper))
        budget -= cost
        if budget <= 0:
            break
    user = user_t.format(sources="\n\n".join(blocks), question=question)
    return [{"role": "system", "content": system}, {"role": "user", "content": user}], used


# ------------------------------------------------------------------ extractive
def _sentences(text: str) -> list[str]:
    """Quotable sentences: links to code or data answer nothing, so they are left out."""
    parts = [s.strip() for s in re.split(r"(?<=[.!?])\s+(?=[A-Z$\\(])", text)]
    return [s for s in parts if len(s.split()) >= 4 and not re.search(r"https?://|github\.com|\bwww\.", s)]


def extractive(question: str, used: list[tuple[Hit, Paper]], embedder: Any, settings: Settings) -> Iterator[str]:
    """No LLM: quote the sentences of the top papers closest to the question, each cited.

    Papers far below the best one are left out so a quote never cites an unrelated paper.
    """
    import numpy as np

    if not used:
        return
    top = used[0][0].score
    keep = [(h, p) for h, p in used[:3] if h.score >= top * 0.8] or used[:1]
    cands: list[tuple[int, str]] = []
    for n, (_, paper) in enumerate(keep, 1):
        cands.extend((n, s) for s in _sentences(paper.abstract))
    if not cands:
        cands = [(1, keep[0][1].abstract)]
    q = np.asarray(embedder.embed_query(question))
    m = np.asarray(embedder.embed_documents([s for _, s in cands]))
    sims = m @ q
    yield load_prompt(settings, "extractive_intro").strip() + "\n"
    for n in range(1, len(keep) + 1):
        idx = [i for i, (k, _) in enumerate(cands) if k == n]
        best = sorted(idx, key=lambda i: -sims[i])[: 2 if n == 1 else 1]
        for i in sorted(best):
            yield f"- {plain_text(cands[i][1])} [{n}]\n"  # shown to a reader: LaTeX and Markdown rendered


# ------------------------------------------------------------------ what a model's answer says
# How models say that the abstracts do not answer the question (the system prompt asks them to say
# so in one sentence). The one list of such sentences, matched case-insensitively; see ``declined``.
MODEL_REFUSALS = [
    # "The abstracts do not contain ...", "The provided abstracts don't say ...", "These abstracts did not ..."
    r"\b(?:the|these|those|provided|given|above)\s+(?:\w+\s+)?abstracts?\s+(?:do|does|did)\s*(?:not|n't)\b",
    r"\bnone of the\s+(?:\w+\s+)?(?:abstracts|sources|papers)\b",  # "None of the abstracts mention ..."
    # "I cannot answer this from the abstracts", "I am unable to determine ... from the given sources"
    r"\b(?:I|we)\s+(?:cannot|can't|can not|could not|couldn't|am unable to|are unable to)\s+"
    r"(?:answer|find|determine|tell|say)\b.*\b(?:abstracts?|sources?|papers?|information|context)\b",
    # "... is not mentioned in the provided abstracts", "not discussed in any of the abstracts"
    r"\bnot\s+(?:mentioned|discussed|described|covered|addressed|stated|provided|specified|found|given|included)\s+"
    r"in\s+(?:the|these|any of the|any)\s+(?:\w+\s+)?(?:abstracts?|sources?|papers?)\b",
    r"\b(?:abstracts?|sources?)\s+(?:\w+\s+){0,3}no\s+information\b",  # "the abstracts provide no information"
    r"\bthere is no (?:information|mention)\b.*\b(?:abstracts?|sources?)\b",  # "There is no information in the abstracts"
]
_REFUSAL = re.compile("|".join(f"(?:{p})" for p in MODEL_REFUSALS), re.IGNORECASE)
DECLINED_NOTE = "the model declined: it says the abstracts do not answer the question"


def declined(text: str, cited: bool) -> bool:
    """Whether a model's answer says the abstracts do not answer the question (``MODEL_REFUSALS``).

    Such a sentence counts when it opens the answer without a citation of its own, or anywhere in
    an answer that cites nothing; a cited answer that notes one missing detail later is an answer.
    """
    sentences = [x for x in re.split(r"(?<=[.!?])\s+", text.strip()) if x]
    if not sentences:
        return False
    if _REFUSAL.search(sentences[0]) and not _CITE.search(sentences[0]):
        return True
    return not cited and any(_REFUSAL.search(x) for x in sentences)


REPEAT_LIMIT = 3  # the same line or sentence this many times in a row ends the generation
REPEAT_ANYWHERE_WORDS = 6  # a sentence this long ends it on its REPEAT_LIMIT-th copy anywhere
_UNIT_END = re.compile(r"\n|(?<=[.!?:])[ \t]")


class RepeatGuard:
    """Spots a runaway generation: a small model (SmolLM2) can print one line until the token cap.

    Fed the answer as it streams; says stop once the same unit (a line, or a sentence or label ending
    in ``.!?:`` and a space) has come ``REPEAT_LIMIT`` times in a row, or a sentence of at least
    ``REPEAT_ANYWHERE_WORDS`` words that many times anywhere. Units are compared by their words,
    without case, spacing, punctuation or citations, so "The answer is:" and "the answer is: " match.
    """

    def __init__(self) -> None:
        self.buf = ""
        self.last = ""
        self.run = 0
        self.seen: dict[str, int] = {}

    def feed(self, text: str) -> bool:
        """Whether the text so far ends a runaway repetition."""
        self.buf += text
        while m := _UNIT_END.search(self.buf):
            unit, self.buf = self.buf[: m.start()], self.buf[m.end() :]
            words = re.sub(r"\[[^\]]*\]|[^\w]+", " ", unit).lower().split()
            if not any(c.isalpha() for w in words for c in w):
                continue  # a blank line or lone punctuation between copies
            key = " ".join(words)
            self.run = self.run + 1 if key == self.last else 1
            self.last = key
            if len(words) >= REPEAT_ANYWHERE_WORDS:
                self.seen[key] = self.seen.get(key, 0) + 1
            if self.run >= REPEAT_LIMIT or self.seen.get(key, 0) >= REPEAT_LIMIT:
                return True
        return False


REMOVED_SHOWN = 5  # the notice names this many removed citations; ``removed_citations`` has them all


def removed_note(removed: list[str]) -> str:
    """The notice for citations cut from an answer: the first few distinct ones, then how many more."""
    distinct = list(dict.fromkeys(removed))
    more = f" and {len(distinct) - REMOVED_SHOWN} more" if len(distinct) > REMOVED_SHOWN else ""
    return f"removed citations to sources that were not given: {', '.join(distinct[:REMOVED_SHOWN])}{more}"


# ---------------------------------------------------------------------- answer
class AnswerStream:
    """Iterate for checked text chunks; ``.answer`` holds the full ``Answer`` once done."""

    def __init__(
        self,
        question: str,
        result: SearchResult,
        backend: Backend,
        settings: Settings,
        embedder: Any = None,
        backend_note: str = "",
    ) -> None:
        self.question = question
        self.result = result
        self.backend = backend
        self.settings = settings
        self.embedder = embedder
        self.backend_note = backend_note
        self.answer: Answer | None = None
        self.on_done: Callable[[Answer | None], None] | None = None
        self._writing = False
        self.cancelled = False  # stopped by the user: no Answer is recorded (see ``cancel``)

    @property
    def phase(self) -> str:
        """What the answer waits for, for a UI to say: "waiting" (the model is busy with another
        answer), "loading" (the model), "reading" (the abstracts: before the first token), "writing"."""
        reported = str(getattr(self.backend, "phase", "") or "")
        return reported or ("writing" if self._writing else "reading")

    def cancel(self) -> None:
        """Stop generating (the UI's Stop): backends that can (llama.cpp) end at their next token.

        A stopped answer is not an answer: ``answer`` stays None, so ``on_done`` records no
        turn and a half-written reply never steers the next follow-up.
        """
        self.cancelled = True
        cancel = getattr(self.backend, "cancel", None)
        if callable(cancel):
            cancel()

    def __iter__(self) -> Iterator[str]:
        try:
            yield from self._generate()
        finally:
            if self.on_done is not None:
                self.on_done(self.answer)

    def _generate(self) -> Iterator[str]:
        s = self.settings
        t0 = time.perf_counter()
        timings = {"retrieval_ms": self.result.timings.get("total_ms", 0.0)}
        if not self.result.relevant:
            if self.result.filtered_out:
                # Not "the abstracts don't cover this": the filters left nothing to answer from.
                reason = self.result.filter_reason or "no paper passes them"
                text = f"The filters excluded every paper ({reason}), so there is nothing to answer from: widen or clear them."
                refusal = f"the filters excluded every paper: {reason}; no LLM called"
            else:
                text = load_prompt(s, "refusal").strip()
                refusal = "not relevant: no LLM called"
            yield text
            self.answer = Answer(
                self.question,
                text,
                [],
                [],
                True,
                "none",
                None,
                timings,
                notice=refusal,
                search=self.result.to_dict(),
                filtered_out=self.result.filtered_out,
            )
            return
        if self.backend.extractive:  # no LLM: quote the papers the prompt would have held
            used = _sources(self.result, s.context_papers, s.source_min_ratio)
            chunks: Iterator[str] = extractive(self.question, used, self.embedder, s)
        else:
            messages, used = build_messages(
                self.question, self.result, s, self.backend.context_window, s.max_answer_tokens
            )
            chunks = self.backend.stream(messages, s.max_answer_tokens)
        filt = CitationFilter(len(used))
        guard = RepeatGuard()
        looped = False
        parts: list[str] = []
        first: float | None = None
        for chunk in chunks:
            if not chunk:
                yield ""  # a backend's keepalive while it waits or reads: lets the caller show why
                continue
            out = filt.feed(chunk)
            if out:
                if first is None:
                    first = time.perf_counter()
                    self._writing = True
                parts.append(out)
                yield out
                looped = guard.feed(out)
            if self.cancelled or looped:
                break
        if looped:  # stop the model now: closing its stream ends a llama.cpp generation or an Ollama request
            close = getattr(chunks, "close", None)
            if callable(close):
                close()
        if self.cancelled:
            return  # no Answer: see ``cancel``
        rest = filt.flush()
        if rest:
            parts.append(rest)
            yield rest
        timings["first_token_ms"] = round(((first or time.perf_counter()) - t0) * 1000, 2)
        timings["generation_ms"] = round((time.perf_counter() - t0) * 1000, 2)
        sources = [h.numbered(n, n in filt.used) for n, (h, _) in enumerate(used, 1)]
        cited = [sources[i - 1].id for i in filt.used]
        text = tidy("".join(parts))
        refused = not self.backend.extractive and declined(text, bool(cited))
        notes = [DECLINED_NOTE] if refused else []
        if looped:
            notes.append(f"cut: the model repeated the same text {REPEAT_LIMIT} times, so its generation was stopped")
        if filt.removed:
            notes.append(removed_note(filt.removed))
        elif not cited and not refused:
            notes.append("the answer cites no source; treat it with care")
        notice = "; ".join(notes) or self.backend_note or None
        claims = [] if refused else self._claims(text, used)
        timings["claims_ms"] = round((time.perf_counter() - t0) * 1000 - timings["generation_ms"], 2)
        self.answer = Answer(
            self.question,
            text,
            cited,
            sources,
            refused,
            self.backend.name,
            self.backend.model,
            timings,
            filt.removed,
            notice,
            search=self.result.to_dict(),
            claims=claims,
        )

    def _claims(self, text: str, used: list[tuple[Hit, Paper]]) -> list[Claim]:
        """The answer's claims, scored against the abstracts of the sources as the prompt numbered them."""
        if self.embedder is None:
            return []
        intro = load_prompt(self.settings, "extractive_intro").strip() if self.backend.extractive else ""
        return check_claims(
            text, [(h.id, p.abstract) for h, p in used], self.embedder, self.settings.claim_floor, skip=[intro]
        )

    def run(self) -> Answer:
        for _ in self:
            pass
        assert self.answer is not None
        return self.answer
