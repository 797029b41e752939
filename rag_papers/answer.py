"""Answer stage: prompt from ``prompts/``, context budgeting, streaming, citation checks, refusal.

Grounding is enforced here, not trusted to the model: when retrieval says nothing is
relevant no LLM is called, and a citation that does not point at a source in the
prompt is cut out of the stream before the user sees it (and reported).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rag_papers import RagPapersError
from rag_papers.claims import CITE, Claim, check_claims
from rag_papers.config import Settings
from rag_papers.corpus import Paper, plain_text, quotable_sentences, sentences
from rag_papers.coverage import (
    CODE,
    DESCRIPTION,
    LISTED_BY_FACET,
    NAME,
    Analysis,
    Coverage,
    CoverageRules,
    addresses,
    analyse,
    asks_for_papers,
    decide,
    facet_topic,
    ignored_name,
    listed_by_facet,
    name_found,
    split_question,
    technical_question,
    topic_text,
)
from rag_papers.keyword import paper_text
from rag_papers.llm import Backend, Message, Thinking, estimate_tokens, reply
from rag_papers.retrieve import Hit, SearchResult

if TYPE_CHECKING:
    from rag_papers.embedding import TextEmbedder


@lru_cache(maxsize=32)
def _read_prompt(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def load_prompt(settings: Settings, name: str) -> str:
    path = settings.prompts_dir / f"{name}.txt"
    if not path.is_file():
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
    # The line said first when part of the question is not addressed ("The abstracts don't mention DoRA or
    # GLUE"), and those parts: what the quoted abstracts (or, for a model, what the model says) leave out.
    caveat: str | None = None
    uncovered: list[str] = field(default_factory=list)
    # A thinking model's reasoning, kept apart: never in ``answer``, its citations or claims, the export or --json.
    reasoning: str = ""

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


# ------------------------------------------------------------------- prompting
# Each source goes into the prompt inside its own fence, made here and not by ``source.txt``, so
# an edited template cannot lose it; the system prompt says what is inside a fence is data.
SOURCE_OPEN = '<source n="{n}">'
SOURCE_CLOSE = "</source>"
# Corpus text is data, never prompt structure: in a title or an abstract, whatever the prompt itself
# uses to mark where a source, the question or a chat turn begins is rendered harmless, in this order.
_AS_DATA: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"<\|[^|<>\n]{0,40}\|>|<\||\|>"), " "),  # chat-template tokens: <|im_start|>, <|eot_id|>
    # Other families' turn markers, which llama.cpp reads as special tokens in a prompt (Gemma's, Llama 2 and
    # Mistral's [INST], Mistral v7's [SYSTEM_PROMPT]), and the reasoning blocks (``llm.THINK_TAGS``).
    (
        re.compile(
            r"<\s*/?\s*(?:start_of_turn|end_of_turn|bos|eos|s|think|thinking)\s*>"
            r"|\[\s*/?\s*(?:INST|SYSTEM_PROMPT|THINK|AVAILABLE_TOOLS|TOOL_CALLS)\s*\]",
            re.IGNORECASE,
        ),
        " ",
    ),
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


def _sources(result: SearchResult, limit: int, min_ratio: float = 0.0, question: str = "") -> list[tuple[Hit, Paper]]:
    """The first ``limit`` (``context_papers``) retrieved papers worth showing the model.

    The search already stopped at ``top_k``, so at most min(top_k, context_papers) come back; weak
    matches far below the best are left out, as they only invite bad citations, unless ``question`` names
    them ("... the same kind of thing as K-Flow?": K-Flow's paper, ranked second, is what it asks about).
    """
    top = result.results[0].score if result.results else 0.0
    if question and listed_by_facet(question):
        min_ratio = 0.0  # "which papers link their code?": a paper's property, not how close its topic is
    named = named_papers(question, result) if question else set()
    return [
        (h, result.papers[h.id])
        for h in result.results[:limit]
        if h.id in result.papers and (h is result.results[0] or h.score >= min_ratio * top or h.id in named)
    ]


NAMED_AT_MOST = 2  # a name more retrieved papers have ("Transformer") names none of them in particular


def named_papers(question: str, result: SearchResult) -> set[str]:
    """The retrieved papers that have a name the question uses (not the field's, not a likeness), for a name
    that at most ``NAMED_AT_MOST`` of them have."""
    names = [n for n in split_question(question)[0] if not ignored_name(n, question)]
    hits = [h for h in result.results if h.id in result.papers]
    if not names or not hits:
        return set()
    srcs = [(result.papers[h.id].title, result.papers[h.id].abstract) for h in hits]
    toks = [set(paper_text(t, a).split()) for t, a in srcs]
    out: set[str] = set()
    for name in names:
        found = name_found(name, srcs, toks, question)
        if 0 < len(found) <= NAMED_AT_MOST:
            out.update(hits[n - 1].id for n in found)
    return out


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
    for hit, paper in _sources(result, settings.context_papers, settings.source_min_ratio, question):
        block = _source_block(source_t, len(used) + 1, paper, paper.abstract)
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
            block = _source_block(source_t, len(used) + 1, paper, " ".join(kept))
            cost = estimate_tokens(block)
        blocks.append(block)
        used.append((hit, paper))
        budget -= cost
        if budget <= 0:
            break
    user = user_t.format(sources="\n\n".join(blocks), question=question)
    return [{"role": "system", "content": system}, {"role": "user", "content": user}], used


# ------------------------------------------------------------------ extractive
@dataclass(frozen=True)
class QuoteRules:
    """What the no-LLM answer may quote. The defaults were fitted on eval/qa.jsonl's dev part
    (eval/coverage_study.py; docs/design-notes.md)."""

    paper_ratio: float = 0.8  # a quoted paper's retrieval score is at least this share of the best paper's
    papers: int = 4  # papers quoted at most, except in a "which papers" list (every close one)
    # A quoted sentence's cosine to the question reaches this... (0.3 on dev alone; 0.27 once the blind rounds 4-11
    # had been read: a lay question whose first-ranked paper is right can have no sentence at 0.3, "can someone hide
    # a secret trigger in an AI picture generator?", and no near-miss of those rounds was answered plainly for it.)
    floor: float = 0.27
    ratio: float = 0.8  # ...and this share of the best sentence's
    prior: float = 0.03  # added to a contribution or result sentence's cosine when ranking, taken off background
    # A "which papers" list: each paper above the retrieval floor whose best sentence reaches this (fitted on dev;
    # 0.4 lists fewer papers but drops gold ones, such as CryoNet.Refine for "which papers refine or design 3D
    # molecular structures with diffusion?").
    list_floor: float = 0.3


# Contribution or result ("we propose", "outperforms", "12% faster") versus background ("X has become",
# "However, existing methods ..."): a prior on which sentence of a paper to quote, never a filter.
_CONTRIBUTION = re.compile(
    r"\b(?:we|this (?:paper|work)|our (?:work|method|approach|results?|experiments?))\s+(?:\w+\s+)?"
    r"(?:propose|introduce|present|show|find|demonstrate|develop|design|establish|prove|achieve)s?\b"
    r"|\b(?:achiev|outperform|improv|surpass|reduc|accelerat)\w*\b|\d(?:\.\d+)?\s*(?:%|×|x\b)|\bstate-of-the-art\b",
    re.IGNORECASE,
)
_BACKGROUND = re.compile(
    r"^(?:However|Recently|Recent|Despite|Although|While|Yet)\b"
    r"|\b(?:has|have) (?:become|emerged|attracted|gained|shown)\b|\bare emerging\b|\bremains? (?:a |an )?\w*\s*(?:challenge|open|unclear)"
    r"|\bexisting (?:methods|approaches|work|techniques)\b|\bprior work\b",
    re.IGNORECASE,
)


def sentence_prior(sentence: str) -> int:
    """+1 for a sentence that states a contribution or a result, -1 for background, else 0."""
    if _CONTRIBUTION.search(sentence):
        return 1
    return -1 if _BACKGROUND.search(sentence) else 0


TermStats = Callable[[list[str]], tuple[int, list[tuple[str, int]]]]  # ``Index.stem_stats``


@dataclass
class Candidate:
    n: int  # the source it is from, numbered as ``used``
    text: str
    cos: float  # to the question, by the embedder the index searches with
    prior: int  # ``sentence_prior``


@dataclass
class QuotePlan:
    lines: list[tuple[int, str]]  # (source n, sentence), in answer order
    listing: bool
    coverage: Coverage = field(default_factory=Coverage)  # what the quoted abstracts address
    refused: bool = False
    # A list picked by the property asked of it ("which papers link their code?"): every line states it, so a
    # loose topical match is no caveat.
    by_facet: bool = False

    @property
    def caveat(self) -> str | None:
        """The line said first when part of the question is not addressed (``Coverage.line``)."""
        return None if self.refused else self.coverage.line()


def quote_candidates(
    question: str,
    used: list[tuple[Hit, Paper]],
    embedder: TextEmbedder,
    min_score: float = 0.0,
    keep: Sequence[int] = (),
    links: bool = False,
) -> list[Candidate]:
    """Every quotable sentence of the sources (the first, ``keep`` and those scoring ``min_score`` or more: no
    other can be quoted, so their sentences are not embedded), with its cosine to the question and its prior;
    with ``links``, the sentences that link code too."""
    import numpy as np

    cands = [
        (n, s)
        for n, (h, p) in enumerate(used, 1)
        if n == 1 or n in keep or h.score >= min_score
        for s in quotable_sentences(p.abstract, links)
    ]
    if not cands and used:
        cands = [(1, " ".join(plain_text(used[0][1].abstract).split()))]
    if not cands:
        return []
    q = np.asarray(embedder.embed_query(question))
    sims = np.asarray(embedder.embed_documents([s for _, s in cands])) @ q
    return [Candidate(n, s, float(cos), sentence_prior(s)) for (n, s), cos in zip(cands, sims)]


def plan_quotes(
    question: str,
    used: list[tuple[Hit, Paper]],
    cands: list[Candidate],
    analysis: Analysis,
    rules: QuoteRules,
    coverage_rules: CoverageRules | None = None,
    above_floor: Sequence[str] | None = None,
    closest_only: bool = False,
) -> QuotePlan:
    """Which sentences to quote, what of the question they leave unaddressed, and whether to refuse.

    A paper is quoted only when its retrieval score is close to the best paper's and its best
    sentence itself matches the question (a cosine floor, and a share of the best sentence's
    cosine): a paper retrieved on one shared phrase is otherwise quoted with a sentence about
    something else; the paper retrieval ranks first is always quoted, with its best sentence. The question's
    shape changes that:

    - "which papers ..." lists every paper above the retrieval floor (``above_floor``) with a
      sentence that matches, one line each;
    - a comparison quotes the paper of each compared side;
    - a question about limitations, data or results quotes a sentence that states it, where a
      quoted paper has one (else the coverage line says the abstracts don't).

    Nothing matching at all is a refusal, and so is a question whose central aspect (its rarest
    name, else its main description) the quoted papers do not address while nothing is close.
    Within a paper, the prior breaks near ties towards what the paper does or finds.
    """
    listing = asks_for_papers(question)
    every = listing and not closest_only  # a list of every paper above the floor, not only the closest few
    coverage_rules = coverage_rules or CoverageRules()
    if not used or not cands:
        return QuotePlan([], listing, refused=True)
    if listing and analysis.facet in LISTED_BY_FACET:  # ``listed_by_facet``, on the facet analysed once
        plan = _listed_by_facet(cands, analysis, coverage_rules)
        if plan is not None:
            return plan
    top_score = used[0][0].score
    # The papers the question names, a comparison's sides first (Engine.ask retrieved each side on its own): each
    # is quoted, however close its sentence is.
    named = named_sources(analysis)
    if every and above_floor is not None:
        floor_ids = set(above_floor)
        close = [n for n, (h, _) in enumerate(used, 1) if n == 1 or h.id in floor_ids]
    else:
        close = [n for n, (h, _) in enumerate(used, 1) if n == 1 or h.score >= rules.paper_ratio * top_score]
    close = list(dict.fromkeys([*named, *close]))
    best = max((c.cos for c in cands if c.n in close), default=0.0)
    if best < rules.floor:
        return QuotePlan([], listing, refused=True)
    bar = rules.list_floor if every else max(rules.floor, rules.ratio * best)
    states = analysis.facet_test()
    lines: list[tuple[int, str]] = []
    quoted: list[int] = []
    for n in close:
        if not every and n not in named and len(quoted) >= rules.papers:
            continue
        own = [c for c in cands if c.n == n]
        ranked = sorted(own, key=lambda c: -(c.cos + rules.prior * c.prior))
        stated = [c for c in ranked if states(c.text)]
        if n in named:
            take = ranked[:1]  # each compared paper speaks for itself, however close its sentence is
        elif listing:  # one line a paper
            take = [c for c in ranked[:1] if c.cos >= bar]
        else:
            take = [c for c in ranked if c.cos >= bar][: 2 if not quoted else 1]
        if n == 1 and not take:
            # The paper retrieval ranks first is always quoted: the fused ranking judges the paper better than one
            # sentence's cosine does (lay questions: their best sentence is far from the question's words).
            take = ranked[:1]
        if stated and take and stated[0] not in take:
            take = [stated[0], *take][:2]  # the facet asked for, stated, comes first
        if not take:
            continue
        order = {c.text: i for i, c in enumerate(own)}
        lines.extend((n, c.text) for c in sorted(take, key=lambda c: order[c.text]))
        quoted.append(n)
    coverage = decide(analysis, quoted, coverage_rules)
    if every and coverage.central is not None and not coverage.central.covered:
        # A list of papers on what no abstract is about is only the closest few (as for any question),
        # not every paper above the floor that shares a word with it.
        return plan_quotes(question, used, cands, analysis, rules, coverage_rules, above_floor, closest_only=True)
    coverage.listing = listing
    closest = max((c.cos for c in cands if (c.n, c.text) in set(lines)), default=0.0)
    central = coverage.central
    if central is not None and not central.covered and closest < coverage_rules.refuse_below:
        return QuotePlan([], listing, coverage, refused=True)
    return QuotePlan(lines, listing, coverage)


def _listed_by_facet(cands: list[Candidate], analysis: Analysis, coverage_rules: CoverageRules) -> QuotePlan | None:
    """ "Which papers link their code?": every retrieved paper with a sentence that states it, one line each, in
    retrieval order; None when no paper does (then the list is planned as any other, and the coverage line says
    the facet is missing).

    A topic asked with it ("papers on speech recognition that release code") is asked too: only the papers that
    address it are listed, and when none does, those stating the facet are the closest, after a line saying the
    topic is missing."""
    states = analysis.facet_test()
    stated: dict[int, str] = {}
    for c in sorted(cands, key=lambda c: -c.cos):
        if c.n not in stated and states(c.text):
            stated[c.n] = c.text
    if not stated:
        return None
    # the stated papers that address each topic aspect, read once
    addressed = {
        ev.aspect.text: {n for n in stated if addresses(ev, n, coverage_rules)} for ev in facet_topic(analysis)
    }
    on_topic = [n for n in sorted(stated) if all(n in ns for ns in addressed.values())]
    quoted = on_topic or sorted(stated)
    coverage = decide(analysis, quoted, coverage_rules)
    if not on_topic:
        missing = {text for text, ns in addressed.items() if not ns}
        for a in coverage.aspects:
            if a.text in missing:
                a.covered, a.text = False, topic_text(a.text, analysis.facet)
    coverage.listing = True
    return QuotePlan([(n, stated[n]) for n in quoted], True, coverage, by_facet=True)


def _inline(text: str) -> str:
    """Corpus text on one answer line: one line, and no brackets that could read as a citation."""
    return " ".join(text.split()).replace("[", "(").replace("]", ")")


_SELF_LINK = re.compile(r"\[(https?://[^\]\s]+)\]\(\1\)")  # a Markdown link whose text is its address


def extractive_text(plan: QuotePlan, used: list[tuple[Hit, Paper]], settings: Settings) -> Iterator[str]:
    """The planned quotes as the answer's text: a list of papers ("- Title — sentence [n]") or quotes.

    A coverage line comes first when part of the question is not addressed: "The abstracts don't
    mention DoRA or GLUE; closest (quoted, no LLM):".
    """
    if plan.refused:
        yield load_prompt(settings, "refusal").strip()
        return
    intro = load_prompt(settings, "extractive_intro").strip()
    yield (f"{plan.caveat}; closest (quoted, no LLM):" if plan.caveat else intro) + "\n"
    for n, sentence in plan.lines:
        sentence = _SELF_LINK.sub(r"\1", sentence)  # "[https://x](https://x)": the address once
        if plan.listing or plan.coverage.sides:
            yield f"- {_inline(used[n - 1][1].title)} — {sentence} [{n}]\n"
        else:
            yield f"- {sentence} [{n}]\n"  # as a reader sees it (``quotable_sentences``): LaTeX and Markdown rendered


def analyse_sources(
    question: str, used: list[tuple[Hit, Paper]], embedder: TextEmbedder | None, names_df: Callable[[str], int] | None
) -> Analysis:
    """``coverage.analyse`` over the answer's sources."""
    return analyse(question, [(p.title, p.abstract) for _, p in used], embedder, names_df)


def named_sources(analysis: Analysis) -> list[int]:
    """The sources (1-based) quoted because the question names them: for each name it uses (not the field's, not
    a likeness, unless a comparison's side), the first retrieved source that has it; a comparison's sides first."""
    names = [e for e in analysis.evidence if e.aspect.kind == NAME and e.found]
    names.sort(key=lambda e: e.aspect.text not in analysis.sides)
    picked = [
        min(e.found)
        for e in names
        if e.aspect.text in analysis.sides or not ignored_name(e.aspect.text, analysis.question)
    ]
    return list(dict.fromkeys(picked))


def prepare_quotes(
    question: str,
    used: list[tuple[Hit, Paper]],
    embedder: TextEmbedder,
    names_df: Callable[[str], int] | None,
    min_score: float,
    above_floor: Sequence[str] | None = None,
) -> tuple[Analysis, list[Candidate]]:
    """What ``plan_quotes`` decides on: the question's aspects in the sources, and the quotable sentences
    (of the sources scoring ``min_score`` or more, the papers the question names, a comparison's sides among them,
    and a list's papers above the floor)."""
    analysis = analyse_sources(question, used, embedder, names_df)
    sides = named_sources(analysis)
    floor_ids = set(above_floor or ())
    listing = asks_for_papers(question)
    if listing and analysis.facet in LISTED_BY_FACET:  # every retrieved paper may state it
        return analysis, quote_candidates(question, used, embedder, keep=range(1, len(used) + 1), links=True)
    listed = [n for n, (h, _) in enumerate(used, 1) if h.id in floor_ids] if listing else []
    return analysis, quote_candidates(question, used, embedder, min_score, [*sides, *listed], analysis.facet == CODE)


def extractive(
    question: str,
    used: list[tuple[Hit, Paper]],
    embedder: TextEmbedder,
    settings: Settings,
    names_df: Callable[[str], int] | None = None,
    rules: QuoteRules | None = None,
    above_floor: Sequence[str] | None = None,
) -> tuple[QuotePlan, Iterator[str]]:
    """No LLM: quote the sentences of the top papers that match the question, each cited (``plan_quotes``)."""
    rules = rules or QuoteRules()
    top = used[0][0].score if used else 0.0
    analysis, cands = prepare_quotes(question, used, embedder, names_df, rules.paper_ratio * top, above_floor)
    plan = plan_quotes(question, used, cands, analysis, rules, None, above_floor)
    return plan, extractive_text(plan, used, settings)


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
THINK_PIECE_CHARS = 16  # a reasoning piece this short is one token (Ollama and llama.cpp stream a token a piece)


class AnswerStream:
    """Iterate for checked text chunks; ``.answer`` holds the full ``Answer`` once done."""

    def __init__(
        self,
        question: str,
        result: SearchResult,
        backend: Backend,
        settings: Settings,
        embedder: TextEmbedder | None = None,
        backend_note: str = "",
        names_df: Callable[[str], int] | None = None,
        lift: float | None = None,
    ) -> None:
        self.question = question
        self.lift = lift  # ``Engine.lift``: how far the best paper stands above the index's field
        self.result = result
        self.backend = backend
        self.settings = settings
        self.embedder = embedder
        self.backend_note = backend_note
        self.names_df = names_df  # papers of the index holding a name (``Index.name_df``): question coverage
        self.answer: Answer | None = None
        self.on_done: Callable[[Answer | None], None] | None = None
        self._writing = False
        self.cancelled = False  # stopped by the user: no Answer is recorded (see ``cancel``)
        self.reasoning = ""  # a thinking model's reasoning so far (``llm.Thinking``), shown apart from the answer
        self.thinking_since: float | None = None  # when the reasoning began (perf_counter)

    @property
    def phase(self) -> str:
        """What the answer waits for, for a UI to say: "waiting" (the model is busy with another
        answer), "loading" (the model), "reading" (the abstracts: before the first token), "thinking"
        (a thinking model reasons before it answers; ``thinking_seconds``), "writing"."""
        if self.thinking_since is not None and not self._writing:
            return "thinking"
        return self.backend.phase or ("writing" if self._writing else "reading")

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

    def _generate(self) -> Iterator[str]:
        s = self.settings
        t0 = time.perf_counter()
        timings = {"retrieval_ms": self.result.timings.get("total_ms", 0.0)}
        # A loose match to a question whose every name is in no indexed abstract ("winning at Monopoly", "DoRA on
        # GLUE") is a match on its everyday words alone: refused like an irrelevant one, and before any LLM is asked.
        # Read rounds 1 to 24: 50 near-misses and 2 unrelated questions, no answerable one (docs/design-notes.md).
        unknown = self._unknown_names(every=True) if self.result.relevant and self._loose() else None
        if not self.result.relevant or unknown is not None:
            nowhere: Coverage | None = unknown
            if unknown is not None:
                unknown.loose = True
                text = f"{unknown.line()}. {load_prompt(s, 'refusal').strip()}"
                refusal = "a loose match, and no indexed abstract has the question's names: no LLM called"
            elif self.result.filtered_out:
                # Not "the abstracts don't cover this": the filters left nothing to answer from.
                reason = self.result.filter_reason or "no paper passes them"
                text = f"The filters excluded every paper ({reason}), so there is nothing to answer from: widen or clear them."
                refusal = f"the filters excluded every paper: {reason}; no LLM called"
            else:
                text = load_prompt(s, "refusal").strip()
                refusal = "not relevant: no LLM called"
                # Names no indexed abstract contains say why, and say it first: "No indexed abstract mentions DoRA".
                nowhere = self._unknown_names()
                if nowhere:
                    text = f"{nowhere.line()}. {text}"
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
                uncovered=[a.text for a in nowhere.uncovered] if not self.result.filtered_out and nowhere else [],
            )
            return
        plan: QuotePlan | None = None
        coverage: Coverage | None = None
        chunks: Iterator[str]
        if self.backend.extractive:  # no LLM: quote the papers the prompt would have held
            used = _sources(self.result, self.source_limit(), s.source_min_ratio, self.question)
            if self.embedder is None:  # quoting ranks sentences by meaning: Engine always passes the index's model
                raise RagPapersError("extractive answers need the index's embedding model")
            plan, chunks = extractive(
                self.question, used, self.embedder, s, self.names_df, above_floor=self.result.above_floor
            )
            coverage = plan.coverage
            # before the text is read: its first line says it
            coverage.loose = self._loose() and not plan.refused and not plan.by_facet
            if plan.refused:  # no sentence of any source matches the question: nothing to quote
                text = "".join(chunks)
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
                    notice=(
                        f"{plan.coverage.line()} and nothing in the retrieved abstracts is close"
                        if plan.coverage.line()
                        else "no sentence of the retrieved abstracts matches the question closely enough"
                    ),
                    search=self.result.to_dict(),
                    uncovered=[a.text for a in plan.coverage.uncovered],
                )
                return
        else:
            messages, used = build_messages(
                self.question, self.result, s, self.backend.context_window, s.max_answer_tokens
            )
            # What the abstracts the model reads leave out, by names and facets (descriptions are the
            # model's to judge: the prompt asks it to say which parts the abstracts don't answer).
            coverage = self._llm_coverage(used)
            coverage.loose = self._loose()
            line = coverage.line()
            if line:
                yield f"{line}.\n\n"
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
        uncovered = [a.text for a in coverage.uncovered] if coverage is not None else []
        caveat = coverage.line() if coverage is not None else None
        refused = False
        if not self.backend.extractive:
            text, said = model_uncovered(text)
            refused = declined(text, bool(cited))  # the model's own words, before our line goes first
            if said:
                uncovered = list(dict.fromkeys([*uncovered, *said]))
                caveat = f"The abstracts don't answer {', '.join(uncovered)}"
            if coverage is not None and coverage.line():
                text = f"{coverage.line()}.\n\n{text}"
        notes = [DECLINED_NOTE] if refused else []
        if spent:
            notes.append(spent)
            text = f"{coverage.line()}.\n\n{spent}" if coverage is not None and coverage.line() else spent
        if looped:
            notes.append(f"cut: the model repeated the same text {REPEAT_LIMIT} times, so its generation was stopped")
        if filt.removed:
            notes.append(removed_note(filt.removed))
        elif not cited and not refused and not spent:
            notes.append("the answer cites no source; treat it with care")
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

    def _loose(self) -> bool:
        """Whether the papers were found relevant only just: hybrid relevance under ``loose_match``, and no sentence
        of the first papers as close to the question as ``loose_sentence`` (the claim asked about, in other words)."""
        s = self.settings
        if not s.fused_relevance:
            return False  # another scale: the floor is the only call
        close = s.loose_sentence and (self.result.sentence_match or 0.0) >= s.loose_sentence
        loose = self.result.relevance < s.loose_match and not close
        # A topic no abstract is about, asked in technical words: its nearest papers stand barely above the field
        # ("Which papers tackle over-smoothing in deep graph neural networks?"), however high its relevance.
        flat = self.lift is not None and self.lift < s.flat_lift and technical_question(self.question)
        return self.result.relevant and (loose or (flat and not self._anchored()))

    def _anchored(self) -> bool:
        """Whether the question names something an indexed abstract has ("what does ABBA claim?"): it asks about that
        paper, not about a topic, however far its words are from the abstract's."""
        if self.names_df is None:
            return False
        names, _ = split_question(self.question)
        return any(not ignored_name(n, self.question) and self.names_df(n) > 0 for n in names)

    def source_limit(self) -> int:
        """The papers an answer may read: ``context_papers``, or for a "which papers" list every retrieved one."""
        if asks_for_papers(self.question):
            return max(self.settings.context_papers, len(self.result.results))
        return self.settings.context_papers

    def _unknown_names(self, every: bool = False) -> Coverage | None:
        """The question's names that no indexed abstract contains (document frequency 0), if any. With ``every``,
        only when none of its names is in an indexed abstract: one that is anchors the question in the corpus ("a
        LoRA alternative named like a Swedish band")."""
        if self.names_df is None:
            return None
        analysis = analyse(self.question, [], None, self.names_df)
        analysis.evidence = [ev for ev in analysis.evidence if ev.aspect.kind == NAME]
        cov = decide(analysis, [])  # without the names asked only as a likeness ("Mamba-style")
        if every and any(a.df != 0 for a in cov.aspects):
            return None
        cov.aspects = [a for a in cov.aspects if a.df == 0]
        return cov if cov.uncovered else None

    def _llm_coverage(self, used: list[tuple[Hit, Paper]]) -> Coverage:
        analysis = analyse(
            self.question, [(p.title, p.abstract) for _, p in used], None, self.names_df
        )  # no embedder: descriptions are the model's to judge
        analysis.evidence = [ev for ev in analysis.evidence if ev.aspect.kind != DESCRIPTION]
        return decide(analysis, list(range(1, len(used) + 1)))

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
