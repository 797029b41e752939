"""Answer stage: prompt from ``prompts/``, context budgeting, streaming, citation checks, refusal.

Grounding is enforced here, not trusted to the model: when retrieval says nothing is
relevant no LLM is called, and a citation that does not point at a source in the
prompt is cut out of the stream before the user sees it (and reported).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from rag_papers.claims import CITE, Claim, check_claims
from rag_papers.config import Settings
from rag_papers.corpus import Paper, sentences
from rag_papers.judge import Judge, Question, Verdict
from rag_papers.llm import KEEPALIVE_SECONDS, Backend, Message, Thinking, estimate_tokens, reply
from rag_papers.prompting import SOURCE_CLOSE as SOURCE_CLOSE
from rag_papers.prompting import SOURCE_OPEN as SOURCE_OPEN
from rag_papers.prompting import as_data as as_data
from rag_papers.prompting import load_prompt, source_block
from rag_papers.retrieve import Hit, SearchResult

if TYPE_CHECKING:
    from rag_papers.embedding import TextEmbedder


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
    # The line said first when part of the question is not addressed ("The abstracts don't mention DoRA or
    # GLUE"), and those parts: what the quoted abstracts (or, for a model, what the model says) leave out.
    caveat: str | None = None
    uncovered: list[str] = field(default_factory=list)
    # A thinking model's reasoning, kept apart: never in ``answer``, its citations or claims, the export or --json.
    reasoning: str = ""
    judge: str = "rules"  # who judged which abstracts address the question (``rag_papers.judge``)
    judged: list[dict[str, Any]] = field(default_factory=list)  # its verdict on each paper it read

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
        d.pop("reasoning")  # the model's working, not its answer: the UI shows it folded, nothing else carries it
        d["sources"] = [s.source_dict() for s in self.sources]  # a source's keys, not a search result's
        return d


# ------------------------------------------------------------------ citations


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
        m = CITE.fullmatch(token)
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


def build_messages(
    question: str, papers: list[tuple[Hit, Paper]], settings: Settings, context_window: int, max_tokens: int
) -> tuple[list[Message], list[tuple[Hit, Paper]]]:
    """Fit as many of ``papers`` (the judge's, in order) as the model's window allows (the last one cut at a sentence).

    Each is fenced (``SOURCE_OPEN`` .. ``SOURCE_CLOSE``) and its text passed through ``as_data``, so an
    abstract cannot pose as another source or as the question.
    """
    system = load_prompt(settings, "answer_system")
    user_t = load_prompt(settings, "answer_user")
    source_t = load_prompt(settings, "source")
    budget = context_window - max_tokens - estimate_tokens(system + user_t + question) - 64
    blocks: list[str] = []
    used: list[tuple[Hit, Paper]] = []
    for hit, paper in papers:
        block = source_block(source_t, len(used) + 1, paper, paper.abstract)
        cost = estimate_tokens(block)
        if cost > budget:
            split = sentences(paper.abstract)  # the text as stored: what the model reads
            kept = list(split)
            while kept and estimate_tokens(" ".join(kept)) + 40 > budget:
                kept.pop()
            if used and (not kept or budget < 120):
                break
            if not kept:  # not even one sentence fits: give the model the first one anyway
                kept = split[:1]
            block = source_block(source_t, len(used) + 1, paper, " ".join(kept))
            cost = estimate_tokens(block)
        blocks.append(block)
        used.append((hit, paper))
        budget -= cost
        if budget <= 0:
            break
    user = user_t.format(sources="\n\n".join(blocks), question=question)
    return [{"role": "system", "content": system}, {"role": "user", "content": user}], used


def _inline(text: str) -> str:
    """Corpus text on one answer line: one line, and no brackets that could read as a citation."""
    return " ".join(text.split()).replace("[", "(").replace("]", ")")


_SELF_LINK = re.compile(r"\[(https?://[^\]\s]+)\]\(\1\)")  # a Markdown link whose text is its address


def extractive_text(verdict: Verdict, used: list[tuple[Hit, Paper]], settings: Settings) -> Iterator[str]:
    """The judge's quotes as the answer's text: a list of papers ("- Title — sentence [n]") or quotes.

    A coverage line comes first when part of the question is not addressed: "The abstracts don't
    mention DoRA or GLUE; closest (quoted, no LLM):".
    """
    if verdict.refused:
        yield load_prompt(settings, "refusal").strip()
        return
    intro = load_prompt(settings, "extractive_intro").strip()
    yield (f"{verdict.caveat}; closest (quoted, no LLM):" if verdict.caveat else intro) + "\n"
    number = {h.id: n for n, (h, _) in enumerate(used, 1)}
    for pid, sentence in verdict.quotes:
        n = number[pid]
        sentence = _SELF_LINK.sub(r"\1", sentence)  # "[https://x](https://x)": the address once
        if verdict.titled:
            yield f"- {_inline(used[n - 1][1].title)} — {sentence} [{n}]\n"
        else:
            yield f"- {sentence} [{n}]\n"  # as a reader sees it (``quotable_sentences``): LaTeX and Markdown rendered


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
    said = sentences(text)
    if not said:
        return False
    if _REFUSAL.search(said[0]) and not CITE.search(said[0]):
        return True
    return not cited and any(_REFUSAL.search(x) for x in said)


# The model's statement of what the abstracts don't answer (answer_system.txt asks for it on its own last line).
_MODEL_UNCOVERED = re.compile(r"^\W*not in the abstracts\W*:\s*(?P<what>.+?)\s*$", re.IGNORECASE | re.MULTILINE)
# The coverage line an answer starts with (ours, not the model's: never a claim).
_COVERAGE_LINE = re.compile(r"^(?:The abstracts don't|No indexed abstract)")


def model_uncovered(text: str) -> tuple[str, list[str]]:
    """(the answer without its "Not in the abstracts: ..." line, the parts that line names)."""
    m = _MODEL_UNCOVERED.search(text)
    if m is None:
        return text, []
    what = m.group("what").strip().rstrip(".")
    rest = (text[: m.start()] + text[m.end() :]).strip()
    if what.lower() in ("none", "nothing", "n/a", "-", ""):
        return rest, []
    parts = [p.strip(" .\"'") for p in re.split(r";|,|\band\b|\bor\b", what)]
    return rest, [p for p in parts if p and len(p) <= 80][:6]


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
JUDGE_TOLD_WITHIN = 1.0  # seconds an answer waits to learn whether its judge asks a model (to say so at once)
THINK_PIECE_CHARS = 16  # a reasoning piece this short is one token (Ollama and llama.cpp stream a token a piece)


class AnswerStream:
    """Iterate for checked text chunks; ``.answer`` holds the full ``Answer`` once done.

    What the answer may say is the judge's (``rag_papers.judge``): its ``Verdict`` says whether to refuse, which
    papers to read (or, with no LLM, which sentences to quote) and the line said first. This stage writes the
    answer from it: the prompt and its budget, the stream and its citations, the claims.
    """

    def __init__(
        self,
        question: Question,
        result: SearchResult,
        backend: Backend,
        settings: Settings,
        judge: Judge,
        embedder: TextEmbedder | None = None,
        backend_note: str = "",
    ) -> None:
        self.q = question
        self.question = question.text
        self.result = result
        self.backend = backend
        self.settings = settings
        self.judge = judge
        self.embedder = embedder
        self.backend_note = backend_note
        self.verdict: Verdict | None = None
        self.answer: Answer | None = None
        self.on_done: Callable[[Answer | None], None] | None = None
        self._writing = False
        self._judging = False
        self.cancelled = False  # stopped by the user: no Answer is recorded (see ``cancel``)
        self.reasoning = ""  # a thinking model's reasoning so far (``llm.Thinking``), shown apart from the answer
        self.thinking_since: float | None = None  # when the reasoning began (perf_counter)

    @property
    def phase(self) -> str:
        """What the answer waits for, for a UI to say: "judging" (the model reads the abstracts to judge which
        address the question; ``judging``), "waiting" (the model is busy with another answer), "loading" (the
        model), "reading" (the abstracts: before the first token), "thinking" (a thinking model reasons before it
        answers; ``thinking_seconds``), "writing"."""
        if self._judging:  # until the judge asks its model (loaded first: ``Backend.load``), nothing is judged yet
            return "judging" if self.judge.phase else "loading"
        if self.thinking_since is not None and not self._writing:
            return "thinking"
        return self.backend.phase or ("writing" if self._writing else "reading")

    @property
    def judging(self) -> str:
        """What the judge is doing, in words ("judging 5 abstracts"), while ``phase`` is "judging"."""
        return self.judge.phase or "judging the abstracts"

    @property
    def thinking_seconds(self) -> float:
        """How long the model has been reasoning (0 before it starts)."""
        return 0.0 if self.thinking_since is None else time.perf_counter() - self.thinking_since

    def cancel(self) -> None:
        """Stop generating (the UI's Stop): backends that can (llama.cpp) end at their next token.

        A stopped answer is not an answer: ``answer`` stays None, so ``on_done`` records no
        turn and a half-written reply never steers the next follow-up.
        """
        self.cancelled = True
        self.backend.cancel()

    def __iter__(self) -> Iterator[str]:
        try:
            yield from self._generate()
        finally:
            if self.on_done is not None:
                self.on_done(self.answer)

    def _judged(self) -> Generator[str, None, Verdict]:
        """The judge's verdict; a model judging runs aside while "" is yielded (a keepalive: the UI's clock runs)."""
        if self.judge.name == "rules":  # in-process and quick: no thread
            return self.judge.judge(self.q, self.result)
        box: dict[str, Any] = {}
        done = threading.Event()

        def run() -> None:
            try:
                box["verdict"] = self.judge.judge(self.q, self.result)
            except BaseException as exc:  # noqa: BLE001 - handed to the reader
                box["error"] = exc
            finally:
                done.set()

        self._judging = True
        threading.Thread(target=run, name="rag-papers-judge", daemon=True).start()
        try:
            # Once the judge asks its model (the rules' refusals before it ask none), the caller is told at once,
            # however quick the model is: "judging 5 abstracts".
            told = time.monotonic() + JUDGE_TOLD_WITHIN
            while not done.is_set() and not self.judge.phase and time.monotonic() < told:
                done.wait(0.005)
            if self.judge.phase:
                yield ""
            while not done.wait(KEEPALIVE_SECONDS):
                yield ""
        finally:
            self._judging = False
        if "error" in box:
            raise box["error"]
        verdict: Verdict = box["verdict"]
        return verdict

    def _refusal(self, verdict: Verdict) -> str:
        """A refusal's text: the judge's line first (names no abstract has), then the refusal prompt; the filters'
        own words when they excluded every paper, or kept only papers that don't cover the question."""
        if verdict.kind == "filtered":
            reason = self.result.filter_reason or "no paper passes them"
            return (
                f"The filters excluded every paper ({reason}), so there is nothing to answer from: widen or clear them."
            )
        if self.result.filters:  # not the abstracts: the papers the filters let through (the others were not read)
            text = (
                f"The filters ({self.result.filters}) keep only papers that don't cover this question: widen or clear "
                "them to search every paper."
            )
        else:
            text = load_prompt(self.settings, "refusal").strip()
        return f"{verdict.caveat}. {text}" if verdict.caveat else text

    def _generate(self) -> Iterator[str]:
        s = self.settings
        t0 = time.perf_counter()
        timings = {"retrieval_ms": self.result.timings.get("total_ms", 0.0)}
        verdict = self.verdict = yield from self._judged()
        if self.judge.name != "rules":
            timings["judge_ms"] = round((time.perf_counter() - t0) * 1000, 2)
        judge_name, judged = verdict.judge, verdict.papers_dict()
        papers = dict(self.result.papers)
        hits = {h.id: h for h in self.result.results}
        used = [(hits[pid], papers[pid]) for pid in verdict.read if pid in hits and pid in papers]
        if verdict.refused and (verdict.kind != "nothing-close" or not self.backend.extractive):
            text = self._refusal(verdict)
            yield text
            asked = verdict.kind == "judged"  # the model read the abstracts (as the judge) and found none
            self.answer = Answer(
                self.question,
                text,
                [],
                [],
                True,
                self.backend.name if asked else "none",
                self.backend.model if asked else None,
                timings,
                notice="; ".join([verdict.reason, *verdict.notes]),
                search=self.result.to_dict(),
                filtered_out=self.result.filtered_out,
                uncovered=[] if self.result.filtered_out else list(verdict.uncovered),
                judge=judge_name,
                judged=judged,
            )
            return
        chunks: Iterator[str]
        if self.backend.extractive:  # no LLM: quote the sentences the judge picked
            if verdict.refused:  # no sentence of any source matches the question: nothing to quote
                text = load_prompt(s, "refusal").strip()
                yield text
                timings["generation_ms"] = round((time.perf_counter() - t0) * 1000, 2)
                self.answer = Answer(
                    self.question,
                    text,
                    [],
                    [],
                    True,
                    self.backend.name,
                    None,
                    timings,
                    notice=verdict.reason,
                    search=self.result.to_dict(),
                    uncovered=list(verdict.uncovered),
                    judge=judge_name,
                    judged=judged,
                )
                return
            chunks = extractive_text(verdict, used, s)
        else:
            messages, used = build_messages(self.question, used, s, self.backend.context_window, s.max_answer_tokens)
            if verdict.caveat:
                yield f"{verdict.caveat}.\n\n"
            chunks = reply(self.backend, messages, s.max_answer_tokens)
        filt = CitationFilter(len(used))
        guard = RepeatGuard()
        looped = overthought = False
        parts: list[str] = []
        first: float | None = None
        thought = 0  # reasoning tokens: a piece a token (Ollama streams one a chunk), or more for a long one
        for chunk in chunks:
            if isinstance(chunk, Thinking):  # reasoning: kept apart, and the clock shown (``phase``)
                if self.thinking_since is None:
                    self.thinking_since = time.perf_counter()
                self.reasoning += chunk
                thought += 1 if len(chunk) <= THINK_PIECE_CHARS else estimate_tokens(chunk)
                overthought = first is None and thought > s.max_thinking_tokens
                yield ""
                if overthought or self.cancelled:
                    break
                continue
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
        if looped or overthought:  # stop the model now: closing its stream ends a llama.cpp generation or a request
            close = getattr(chunks, "close", None)
            if callable(close):
                close()
        if self.cancelled:
            return  # no Answer: see ``cancel``
        rest = filt.flush()
        if rest:
            parts.append(rest)
            yield rest
        # All reasoning and no answer: one line with the fix (not "cites no source"), said as the answer's text.
        spent = self._spent_note(overthought) if self.thinking_since is not None and not "".join(parts).strip() else ""
        if spent:
            yield spent
        timings["first_token_ms"] = round(((first or time.perf_counter()) - t0) * 1000, 2)
        timings["generation_ms"] = round((time.perf_counter() - t0) * 1000, 2)
        if self.thinking_since is not None:
            timings["thinking_ms"] = round(((first or time.perf_counter()) - self.thinking_since) * 1000, 2)
        sources = [h.numbered(n, n in filt.used) for n, (h, _) in enumerate(used, 1)]
        cited = [sources[i - 1].id for i in filt.used]
        text = tidy("".join(parts))
        uncovered = list(verdict.uncovered)
        caveat = verdict.caveat
        refused = False
        if not self.backend.extractive:
            text, said = model_uncovered(text)
            refused = declined(text, bool(cited))  # the model's own words, before our line goes first
            if said:
                uncovered = list(dict.fromkeys([*uncovered, *said]))
                caveat = f"The abstracts don't answer {', '.join(uncovered)}"
            if verdict.caveat:
                text = f"{verdict.caveat}.\n\n{text}"
        notes = [DECLINED_NOTE] if refused else []
        if spent:
            notes.append(spent)
            text = f"{verdict.caveat}.\n\n{spent}" if verdict.caveat else spent
        if looped:
            notes.append(f"cut: the model repeated the same text {REPEAT_LIMIT} times, so its generation was stopped")
        if filt.removed:
            notes.append(removed_note(filt.removed))
        elif not cited and not refused and not spent:
            notes.append("the answer cites no source; treat it with care")
        notes.extend(verdict.notes)
        notice = "; ".join(notes) or self.backend_note or None
        claims = [] if refused or spent else self._claims(text, used)
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
            caveat=caveat,
            uncovered=uncovered,
            reasoning=self.reasoning,
            judge=judge_name,
            judged=judged,
        )

    def _spent_note(self, overthought: bool) -> str:
        """The one line for a thinking model that wrote no answer, naming the fix."""
        s = self.settings
        why = (
            f"its reasoning ran past max_thinking_tokens ({s.max_thinking_tokens})"
            if overthought
            else "it spent its token budget reasoning"
        )
        return (
            f"The model wrote no answer: {why}. Raise max_thinking_tokens or max_answer_tokens "
            f"(now {s.max_answer_tokens}), or set think = off."
        )

    def _claims(self, text: str, used: list[tuple[Hit, Paper]]) -> list[Claim]:
        """The answer's claims, scored against the abstracts of the sources as the prompt numbered them."""
        if self.embedder is None:
            return []
        intro = load_prompt(self.settings, "extractive_intro").strip() if self.backend.extractive else ""
        return check_claims(
            text,
            [(h.id, p.abstract) for h, p in used],
            self.embedder,
            self.settings.claim_floor,
            skip=[intro, *(line for line in text.splitlines()[:1] if _COVERAGE_LINE.match(line))],
            titles=[_inline(p.title) for _, p in used],
        )

    def run(self) -> Answer:
        for _ in self:
            pass
        assert self.answer is not None
        return self.answer
