"""Chat stage: conversation state and follow-up condensing, on top of retrieve and answer.

Why not llama-index's ``CondensePlusContextChatEngine``: it retrieves and generates in
one call, so there is no place to refuse without calling the LLM or to check citations
against the retrieved sources before they are shown. We keep llama-index for the LLM
and vector-store layers and do the orchestration here.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, TypedDict, Unpack

from rag_papers.answer import Answer, AnswerStream
from rag_papers.config import Settings
from rag_papers.corpus import STOPWORDS, clip
from rag_papers.index import Index
from rag_papers.judge import Judge, Question, pick_judge
from rag_papers.keyword import QUERY_BOILERPLATE, keyword_tokens, paper_text
from rag_papers.llm import Backend, LLMError, generate_text, get_backend
from rag_papers.prompting import as_data, load_prompt
from rag_papers.retrieve import Filters, Hit, Retriever, SearchResult

TermStats = Callable[[list[str]], tuple[int, list[tuple[str, int]]]]  # ``Index.stem_stats``
LIST_TOP_K = 10  # papers a "which papers ..." question retrieves at least, to list every one above the floor
SIDE_TOP_K = 3  # hits searched for each side of a comparison, for the first that names it


class AskOptions(TypedDict, total=False):
    """``Engine.ask``'s options after the question and the backend, which a chat passes on unchanged."""

    backend_note: str
    top_k: int | None
    filters: Filters | None


class Engine:
    """One loaded index + retriever, shared by the CLI, the UI and the evaluation."""

    def __init__(self, settings: Settings, index: Index | None = None) -> None:
        self.settings = settings
        self.index = index or Index(settings)
        self.index.store.check_model()
        t0 = time.perf_counter()
        # Open the vector store now (one line if it cannot serve this registry: `rag-papers repair`
        # fixes that) and load the model, so query timings measure queries only.
        self.index.store.check_vectors()
        self.index.embedder  # noqa: B018
        self.index.embedder2  # noqa: B018 - the second model (embed_model_2), if any
        self.load_ms = round((time.perf_counter() - t0) * 1000, 1)
        self.retriever = Retriever(self.index, settings)
        self._background_of: int | None = None  # the index size the background sample was drawn at (``lift``)
        self._background_vecs: Any = None

    def search(self, query: str, top_k: int | None = None, filters: Filters | None = None) -> SearchResult:
        """The papers for ``query`` (``Retriever.search``); a filtered search gets the query's names, parsed here."""
        names = Question.parse(query, self.settings.coverage).names if filters and filters.active() else ()
        return self.retriever.search(query, top_k, filters, names)

    def backend(self, name: str | None = None, model: str | None = None) -> tuple[Backend, str]:
        return get_backend(self.settings, name, model)

    def ask(
        self,
        question: str | Question,
        backend: Backend,
        backend_note: str = "",
        top_k: int | None = None,
        filters: Filters | None = None,
    ) -> AnswerStream:
        """Retrieve ``top_k`` papers (default ``settings.top_k``) and answer from them, as the judge decides.

        One meaning for ``top_k`` everywhere (``search``, ``ask --top-k``, the UI's slider, ``/ask``):
        the papers retrieved. At most ``context_papers`` of them go into the prompt, so an answer
        has at most min(top_k, context_papers) sources; the answer's ``search`` holds all top_k.
        The question is parsed here, once (``Question``), and handed on to retrieval and the judge.
        """
        q = question if isinstance(question, Question) else Question.parse(question, self.settings.coverage)
        result = self.retrieve(q, top_k, filters)
        judge = self.judge(backend)
        return AnswerStream(q, result, backend, self.settings, judge, self.index.embedder, backend_note)

    def retrieve(self, q: Question, top_k: int | None = None, filters: Filters | None = None) -> SearchResult:
        """What an answer to ``q`` is judged on: ``top_k`` papers (at least ``LIST_TOP_K`` for a list), a
        comparison's sides each retrieved on its own, and how far the first papers stand above the field."""
        k = top_k or self.settings.top_k
        if q.listing:
            k = max(k, LIST_TOP_K)  # "which papers ...": every paper above the floor, not the top few
        result = self.retriever.search(q.text, k, filters, q.names)
        if q.sides and not result.filtered_out:
            result = self._with_sides(result, list(q.sides), filters)
        result.lift = self.lift(q.text, result)
        return result

    def judge(self, backend: Backend) -> Judge:
        """The judge of an answer by ``backend`` (``Settings.judge``): the rules, or the model itself."""
        return pick_judge(self.settings, backend, self.index.embedder, self.index.name_df)

    def lift(self, query: str, result: SearchResult) -> float | None:
        """How far the best paper's cosine to ``query`` stands above the query's mean cosine over a fixed sample of
        the index (``coverage.background_papers``): small when no paper is about the query's topic and the nearest are
        only the field's neighbours (``coverage.flat_lift``). None when it is off, nothing was found, or relevance is not
        hybrid retrieval's (``fused_relevance``, the only scale the rule reads): under ``bm25`` no cosine was
        computed at all (every ``dense_score`` is 0), and the sample need not be embedded.

        Why against a sample, not the next hits: in a large index a well-covered topic has many close papers, so
        the gap to the second hit says nothing; the sample stands for the field the index is about."""
        s = self.settings
        if not s.coverage.flat_lift or not s.fused_relevance or not result.relevant or not result.results:
            return None
        import numpy as np

        background = self._background()
        if background is None:
            return None
        best = max(h.dense_score for h in result.results[:5])
        vec = result.query_vec if result.query_vec is not None else self.index.embedder.embed_query(query)
        return float(best - float(np.mean(background @ np.asarray(vec))))

    def _background(self) -> Any:
        """The sample's vectors, read once per index size (an ingest or removal redraws it).

        The head vectors ingest stored, not the abstracts embedded again: that took seconds on the first question
        after every ingest. A head is the title and the opening ``chunk_tokens``, close to the title and abstract
        the model reads whole (256 tokens), on which ``flat_lift`` was chosen; a paper without one is embedded."""
        count = self.index.count()
        if self._background_of != count:
            import numpy as np

            papers = self.index.sample(self.settings.coverage.background_papers)
            stored = self.index.head_vectors([p.id for p in papers])
            missing = [f"{p.title or ''} {p.abstract}" for p in papers if p.id not in stored]
            vecs = [stored[p.id] for p in papers if p.id in stored]
            vecs += list(self.index.embedder.embed_documents(missing)) if missing else []
            self._background_vecs = np.asarray(vecs) if vecs else None
            self._background_of = count
        return self._background_vecs

    def _with_sides(self, result: SearchResult, sides: list[str], filters: Filters | None) -> SearchResult:
        """A comparison's result with each compared paper first: each side retrieved on its own.

        Searched together, "How does SWAX compare with FlashLLA?" finds the paper whose abstract
        names both words best, and the other may fall below the answer's cut. Each side's best hit
        that names it (as words) goes first, in the question's order; the rest keep their order.
        """
        first: list[Hit] = []
        papers = dict(result.papers)
        for side in sides:
            stems = keyword_tokens(side)
            found = self.search(side, SIDE_TOP_K, filters)
            for hit in found.results:
                paper = found.papers.get(hit.id)
                toks = set(paper_text(paper.title, paper.abstract).split()) if paper else set()
                if paper is not None and stems and all(t in toks for t in stems):
                    if hit.id not in {h.id for h in first}:
                        first.append(next((h for h in result.results if h.id == hit.id), hit))
                        papers[hit.id] = paper
                    break
        if not first:
            return result
        rest = [h for h in result.results if h.id not in {f.id for f in first}]
        # Every side found makes the comparison answerable, whatever the joint search's score said.
        relevant = result.relevant or len(first) == len(sides)
        return replace(result, results=first + rest, papers=papers, relevant=relevant)


# ------------------------------------------------------------------ follow-ups
# A question past these lengths carries its own context: it is rewritten only for an explicit
# back-reference ("long"), or never ("never"): a pasted abstract is not a follow-up, whatever it says.
LONG_WORDS = 40
LONG_CHARS = 300
NEVER_CHARS = 1000
SHORT_WORDS = 10  # a question this short that names nothing of its own can only be about the conversation
CARRY_TITLES = 4  # the previous answer's cited papers carried into a rewrite, in citation order
TITLE_CHARS = 120
PREVIOUS_CHARS = 200  # the previous question, as carried into a rewrite
# An LLM's rewrite longer than this is a runaway or an answer, not a question: the no-LLM rewrite is used.
REWRITE_WORDS = 60
REWRITE_CHARS = 400
HISTORY_TURNS = 3  # the turns an LLM condenses against
HISTORY_ANSWER_CHARS = 600
# The history's fence in the condense prompt, made here (not by condense.txt) so an edited template cannot lose it.
HISTORY_OPEN = "<conversation>"
HISTORY_CLOSE = "</conversation>"

_TOKEN = re.compile(r"\[\d{1,2}\]|#\d{1,2}\b|\w+(?:'\w+)?")


def _set(words: str) -> frozenset[str]:
    return frozenset(words.split())


_PRONOUNS = _set("it it's its itself they they're their theirs them themselves")
_DEMONSTRATIVES = _set("this these those")
# After these (or first), "that" points back ("why is that?", "in that setting"); elsewhere it starts a clause.
_THAT_AFTER = _set(
    "is are was were does do did about of in on for to with like than from and but or beyond behind after before "
    "by into against explain mean means why how what where when isn't doesn't"
)
_NOT_BACK = _set("year years month week decade time")  # "this year"
# Nouns for the papers themselves: "the paper", "the method", "the authors" point back like a pronoun.
_PAPER_NOUNS = _set(
    "paper papers method methods model models approach approaches work works study studies framework frameworks "
    "technique techniques algorithm algorithms architecture architectures system systems author authors article "
    "articles abstract abstracts answer answers proposal one ones"
)
# Nouns for what a paper has: "the code", "the limitations" point back when nothing else in the question is named.
_ASPECT_NOUNS = _set(
    "code results result findings limitations limitation datasets dataset data experiments experiment evaluation "
    "benchmarks benchmark baselines baseline metrics metric contribution contributions performance accuracy "
    "training inference setup settings ablations ablation assumptions applications weaknesses drawbacks "
    "strengths advantages novelty complexity cost speed implementation"
)
# After "the paper", these name which paper ("the paper on RNA design"): then it points nowhere back.
_QUALIFIERS = _set("on about by called named titled that which where from in of for with using")
_ORDINALS = {"first": 1, "1st": 1, "second": 2, "2nd": 2, "third": 3, "3rd": 3, "fourth": 4, "4th": 4, "last": -1}
_EXPLETIVE = _set("true possible known case fair correct feasible necessary common hard easy clear likely")
_CLAUSE = _set("that to whether if for")
_CONNECTIVES = _set("and or but also plus so then now ok okay")
# Words that make "and ..." a question of its own rather than a fragment ("and the limitations?").
_ASKING = _set(
    "what which who whom whose how why when where is are was were does do did can could will would should has have "
    "had may might must shall tell give list show explain compare describe summarize find"
)
_ELLIPSIS = re.compile(
    r"^\W*(?:(?:and|or|but|also|plus|so|then|now|ok(?:ay)?)\W+)?"
    r"(?:(?:what|how)\s+about|what\s+of|(?:the\s+)?same\s+(?:for|with|question|thing|here)|similarly|likewise"
    r"|why\s+(?:not|so)|how\s+so|in\s+what\s+way|for\s+(?:example|instance)|such\s+as|like\s+what"
    r"|what\s+else|anything\s+else|any\s+others?)\b",
    re.IGNORECASE,
)
# What a question asks about a paper, or how a conversation goes on: naming these names nothing of one's own
# ("what datasets?", "can you explain the main contribution?"). Stemmed as the keyword side stems.
_CHAT_WORDS = (
    _PAPER_NOUNS
    | _ASPECT_NOUNS
    | _set(
        """
question questions idea ideas proposals first second third fourth fifth last former latter other previous earlier
above mentioned finding github available availability open source release released experimental evaluate evaluates
evaluated evaluating measure measured test tested testing weakness drawback downside downsides strength advantage
disadvantage disadvantages pros cons novel main key core central perform performs accurate efficient efficiency
costs expensive cheap cheaper fast faster slow slower better best worse worst good bad improve improves improvement
improvements outperform outperforms compare compared comparison comparisons difference differences differ similar
similarity versus train trained hyperparameter hyperparameters setting assumption application future problem
problems goal goals motivation task tasks scale scalability scalable memory size large small larger smaller tell
explain elaborate detail details more else example examples mean means meaning summary summarize summarise describe
say says said mention mentions cite cited please thanks thank ok okay really sure exactly yes further again briefly
simply simple terms way ways year years published publish venue conference journal me new newer
"""
    )
)
MIN_DOCS_FOR_STATS = 10  # below this, document frequencies say nothing about which words are common


@lru_cache(maxsize=1)
def _chat_stems() -> frozenset[str]:
    words = sorted(_CHAT_WORDS | QUERY_BOILERPLATE)
    return frozenset(t for w in words for t in keyword_tokens(w))


@dataclass(frozen=True)
class FollowUp:
    """How a question depends on the conversation (``follow_up``)."""

    papers: bool = True  # about the previous answer's papers (False: an ellipsis with a subject of its own)
    pick: int | None = None  # "the second one", "[2]": that one of the cited papers (1-based; -1 the last)


def specific_words(question: str, stats: TermStats | None = None) -> list[tuple[int, int]]:
    """(start, end) of the words in ``question`` that name something of its own.

    A word names something unless it is a stop word, a word for asking about a paper or going on
    with a conversation (``_CHAT_WORDS``: "datasets", "limitations", "explain"), or, by the corpus's own
    document frequencies (``stats``, ``Index.stem_stats``), a word in more than half of its papers
    ("model", "learning" in a machine-learning corpus): such a word is as good as a stop word for
    telling which papers are meant. A word no paper has (a new name) names something.
    """
    chat = _chat_stems()
    words = [(m, [t for t in keyword_tokens(m.group()) if t not in chat]) for m in re.finditer(r"[\w'-]+", question)]
    stems = list(dict.fromkeys(t for _, ts in words for t in ts))
    common: set[str] = set()
    if stats is not None and stems:
        n_docs, dfs = stats(stems)
        if n_docs >= MIN_DOCS_FOR_STATS:
            common = {t for t, df in dfs if df > n_docs / 2}
    return [m.span() for m, ts in words if any(t not in common for t in ts)]


def _expletive(words: list[str], i: int) -> bool:
    """ "it" standing for a clause to come ("is it true that ...", "it is possible to ..."), not for a paper."""
    after = words[i + 1 : i + 6]
    if words[i] == "it" and (i == 0 or words[i - 1] not in ("is", "was", "isn't", "wasn't")):
        if not after or after[0] not in ("is", "was"):
            return False
        after = after[1:]
    return any(w in _EXPLETIVE and after[j + 1 : j + 2] and after[j + 1] in _CLAUSE for j, w in enumerate(after[:3]))


# How a word refers back (``_reference``): explicitly, to the papers, or to what they have ("the code").
EXPLICIT, PAPERS, ASPECT = "explicit", "papers", "aspect"


def _reference(words: list[str], i: int) -> tuple[str, int | None] | None:
    """Whether ``words[i]`` refers back, and how: (EXPLICIT | PAPERS | ASPECT, the cited paper it picks)."""
    w = words[i]
    prev = words[i - 1] if i else ""
    nxt, after = (words[i + 1 : i + 3] + ["", ""])[:2]
    if w.startswith(("[", "#")):  # "[2]", "#2"
        return EXPLICIT, int(w.strip("[]#"))
    if w in ("paper", "source", "reference", "number") and nxt.isdigit() and len(nxt) <= 2:  # "paper 2"
        return EXPLICIT, int(nxt)
    if prev == "the" and w in ("former", "latter"):
        return EXPLICIT, 1 if w == "former" else -1
    if prev == "the" and w in _ORDINALS and (not nxt or nxt in _PAPER_NOUNS or nxt in STOPWORDS):  # "the second one"
        return EXPLICIT, _ORDINALS[w]
    if (
        (w == "you" and nxt in ("mentioned", "said", "cited", "listed", "quoted", "found", "described"))
        or (w == "your" and nxt in ("answer", "reply", "list"))
        or (prev == "the" and w in ("previous", "earlier", "above"))
        or (prev in ("as", "mentioned") and w == "above")
    ):
        return EXPLICIT, None
    if (
        (w in _PRONOUNS and not (w.startswith("it") and _expletive(words, i)))
        or (w in _DEMONSTRATIVES and nxt not in _NOT_BACK)
        or (w == "that" and (not prev or prev in _THAT_AFTER or nxt in _PAPER_NOUNS) and nxt not in _NOT_BACK)
        or (w in ("both", "either", "neither") and not {"and", "or", "nor"} & set(words[i + 1 :]))  # "both X and Y"
        or (w == "which" and nxt in ("one", "ones"))
        or (w == "the" and nxt in _PAPER_NOUNS and after not in _QUALIFIERS)  # not "the paper on X"
    ):
        return PAPERS, None
    if w == "the" and nxt in _ASPECT_NOUNS and after not in _QUALIFIERS:  # not "the limitations of X"
        return ASPECT, None
    return None


def follow_up(question: str, stats: TermStats | None = None) -> FollowUp | None:
    """Whether ``question`` depends on the conversation, and on what; None for a question of its own.

    A question is a follow-up when it refers back (a pronoun, "this", "the paper", "the second one",
    "[2]"), is elliptical ("and for X?", "what about Y?", "why not?", "and the limitations?"), or is
    short and names nothing of its own ("why?", "which is faster?", "what datasets?"). Searched as
    typed, such a question finds papers at random; anchored to the previous turn it finds the papers
    the user means.

    Everything else is searched as typed, however it starts: condensing a self-contained question
    steers its search towards the previous papers, which is worse than not condensing a follow-up
    (the user sees the wrong papers and cannot tell why). So: a pronoun after a word the question
    names itself refers to that word ("How does ABBA compare to LoRA, and is it more expressive?");
    "and ..." with a question of its own is no fragment ("And what is BAM?"); "that" opening a clause
    is no reference ("papers that show that ..."); "the limitations of X" says whose. A long question
    (over ``LONG_WORDS`` words or ``LONG_CHARS`` characters) brings its own context and is a
    follow-up only by a back-reference, and one over ``NEVER_CHARS`` (a pasted abstract) never is.
    Which words name something is ``specific_words``'s call, with the corpus's document frequencies.
    """
    q = " ".join(question.split())
    if not q or len(q) > NEVER_CHARS:
        return None
    named = specific_words(q, stats)
    tokens = list(_TOKEN.finditer(q))
    words = [m.group().lower() for m in tokens]
    picks: list[int | None] = []
    for i, m in enumerate(tokens):
        ref = _reference(words, i)
        # A pronoun after a word the question names refers to that word; "the code" to what the question names.
        if ref is not None and (
            ref[0] == EXPLICIT
            or (ref[0] == PAPERS and not any(end <= m.start() for _, end in named))
            or (ref[0] == ASPECT and not named)
        ):
            picks.append(ref[1])
    if picks:
        return FollowUp(pick=next((p for p in picks if p is not None), None))
    if len(q.split()) > LONG_WORDS or len(q) > LONG_CHARS:
        return None
    fragment = bool(words) and words[0] in _CONNECTIVES and not _ASKING & set(words[1:])
    if _ELLIPSIS.search(q) or fragment:
        # "what about LoRA?" asks the previous question of something new: the previous papers are not it.
        return FollowUp(papers=not named)
    if len(words) <= SHORT_WORDS and not named:
        return FollowUp()
    return None


def _cited(answer: Answer | None) -> list[tuple[int, str]]:
    """(source number, title) of each paper ``answer`` cites, in citation order."""
    if answer is None:
        return []
    by_id = {s.id: (n, s.title) for n, s in enumerate(answer.sources, 1)}
    return [by_id[c] for c in dict.fromkeys(answer.citations) if c in by_id and by_id[c][1]]


def _cited_titles(answer: Answer | None) -> list[str]:
    return [title for _, title in _cited(answer)]


# History text is data: besides what ``as_data`` renders harmless, the history's own fence and labels.
_HISTORY_DATA = [
    (re.compile(r"<\s*/?\s*conversation\b[^<>]*>?", re.IGNORECASE), " "),
    (re.compile(r"\b(user|papers cited|follow-up question|standalone question)\s*:", re.IGNORECASE), r"\1 -"),
]


def history_data(text: str) -> str:
    """A question, answer or title for the condense prompt's history: one line that cannot end the fence,
    pose as another turn, or carry chat-template tokens (``answer.as_data``)."""
    text = as_data(text)
    for pattern, repl in _HISTORY_DATA:
        text = pattern.sub(repl, text)
    return " ".join(text.split())


# A rewrite that starts like an answer or a chat turn is no question ("The answer -", "User: ...", "Sure, ...").
_ANSWER_START = re.compile(
    r"^\W*(?:the answer|answer\b|user\b|assistant\b|system\b|sure\b|certainly\b|of course\b|here(?:'s| is| are)\b|"
    r"yes\b|no\b|based on\b|according to\b|the (?:abstracts?|papers?|sources?|conversation|follow-up)\b|"
    r"i\b|i'm\b|as an\b|in (?:the|this) conversation\b|\[\d)",
    re.IGNORECASE,
)
REWRITE_TIMES = 3  # a rewrite may be this many times the question's words (names replace pronouns)...
REWRITE_EXTRA_WORDS = 15  # ...or this many words longer, whichever is more


def _content_stems(text: str) -> set[str]:
    chat = _chat_stems()
    return {t for t in keyword_tokens(text) if t not in chat}


def _prompt_lines() -> list[str]:
    """Phrases of the condense prompt a rewrite must not repeat (its instructions, labels and fence)."""
    return [
        "standalone question",
        "follow-up question",
        "rewrite the",
        "the conversation",
        "conversation>",
        "papers cited",
        "reply with the question",
        "instructions",
        "can be understood without",
    ]


def usable_rewrite(text: str, question: str = "", conversation: str = "") -> str | None:
    """An LLM's condensed question, or None when it is not one worth searching: the rule-based rewrite is used.

    Rejected: nothing; a runaway; text that repeats the prompt or begins like an answer or a chat turn;
    a rewrite several times longer than the question (``REWRITE_TIMES``, ``REWRITE_EXTRA_WORDS``); one
    that shares no content word with the question and the conversation (it is about something else).
    """
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.endswith(":")] or lines  # "Here is the standalone question:"
    if not lines:
        return None
    line = re.sub(r"^(?:standalone question|follow-up question|question)\s*:\s*", "", lines[0], flags=re.IGNORECASE)
    line = line.strip().strip("\"'“”").strip()
    if not line or len(line) > REWRITE_CHARS or len(line.split()) > REWRITE_WORDS:
        return None
    low = line.lower()
    if _ANSWER_START.match(line) or any(p in low for p in _prompt_lines()):
        return None
    if question:
        n = len(question.split())
        if len(line.split()) > max(REWRITE_TIMES * n, n + REWRITE_EXTRA_WORDS):
            return None
        known = _content_stems(question) | _content_stems(conversation)
        if not _content_stems(line) & known:
            return None
    return line


@dataclass
class Turn:
    question: str  # as the user typed it
    standalone: str  # what was searched
    answer: Answer | None = None
    # The titles its rewrite carried (none unless it was a follow-up): the next follow-up carries them too.
    context: tuple[str, ...] = ()


@dataclass
class ChatSession:
    """One conversation. Each UI session gets its own, so histories never mix."""

    engine: Engine
    turns: list[Turn] = field(default_factory=list)

    def reset(self) -> None:
        self.turns.clear()

    def condense(self, question: str, backend: Backend) -> str:
        """The question to search for: ``question`` itself, or for a follow-up, a standalone rewrite."""
        return self._rewrite(question, backend)[0]

    def _rewrite(self, question: str, backend: Backend) -> tuple[str, tuple[str, ...]]:
        """(the question to search for, the titles it carries).

        Only a follow-up (``follow_up``) is rewritten. With an LLM (not extractive) the condense
        prompt rewrites it from the last turns, fenced as data; otherwise, or when the LLM gives
        nothing usable, it is anchored to the previous turn: its question as typed, and the papers it
        was about: every paper its answer cited, in citation order, then those its own rewrite
        carried, if it was a follow-up (at most ``CARRY_TITLES``). The latter keep "they" meaning
        the same papers through a run of follow-ups when an answer quotes only some of them, and
        stand in for the papers of an answer that cited none. Built from the previous question as
        typed, never from its rewrite, so rewrites do not nest or grow.
        """
        if not self.turns:
            return question, ()
        kind = follow_up(question, self.engine.index.stem_stats)
        if kind is None:
            return question, ()
        last = self.turns[-1]
        titles = list(dict.fromkeys(_cited_titles(last.answer) + list(last.context)))
        pick = None if kind.pick is None else kind.pick - 1 if kind.pick > 0 else kind.pick  # an index: -1 the last
        if pick is not None and -len(titles) <= pick < len(titles):
            titles = [titles[pick]]
        # Titles are corpus text, and the rewrite may reach an LLM's prompt as the question: ``as_data``.
        titles = [clip(as_data(t), TITLE_CHARS, words=True) for t in titles[:CARRY_TITLES]] if kind.papers else []
        # A demo model (SmolLM2) rewrites follow-ups into junk: the rule-based rewrite is used instead.
        if not backend.extractive and not backend.demo:
            text = self._llm_rewrite(question, backend)
            if text is not None:
                return text, tuple(titles)
        about = []
        if titles:
            about.append("about " + ", ".join(f'"{t}"' for t in titles))
        about.append(f'after "{clip(last.question, PREVIOUS_CHARS, words=True)}"')
        return f"{question} ({'; '.join(about)})", tuple(titles)

    def _llm_rewrite(self, question: str, backend: Backend) -> str | None:
        turns = []
        for t in self.turns[-HISTORY_TURNS:]:
            answer = t.answer.answer if t.answer else ""
            # Numbered as the answer's text cites them (in the fullwidth brackets ``as_data`` gives its citations).
            cited = "; ".join(f'\uff3b{n}\uff3d "{history_data(x)}"' for n, x in _cited(t.answer)) or "none"
            turns.append(
                f"User: {history_data(clip(t.question, LONG_CHARS, words=True))}\n"
                f"Assistant: {history_data(clip(answer, HISTORY_ANSWER_CHARS, words=True))}\n"
                f"Papers cited: {cited}"
            )
        history = f"{HISTORY_OPEN}\n" + "\n\n".join(turns) + f"\n{HISTORY_CLOSE}"
        prompt = load_prompt(self.engine.settings, "condense").format(
            history=history, question=" ".join(question.split())
        )
        try:
            text = generate_text(backend, [{"role": "user", "content": prompt}], 96)  # without any reasoning
        except LLMError:
            return None
        conversation = " ".join(
            [t.question for t in self.turns[-HISTORY_TURNS:]]
            + [x for t in self.turns[-HISTORY_TURNS:] for x in _cited_titles(t.answer)]
            + [x for t in self.turns[-HISTORY_TURNS:] for x in t.context]
        )
        return usable_rewrite(text, question, conversation)

    def ask(self, question: str, backend: Backend, **options: Unpack[AskOptions]) -> tuple[str, AnswerStream]:
        """Condense, retrieve, and return (standalone question, answer stream).

        The turn joins the history only once its answer completes: a failed or
        cancelled answer must not steer the next follow-up.
        """
        standalone, context = self._rewrite(question, backend)
        stream = self.engine.ask(standalone, backend, **options)

        def record(answer: Answer | None) -> None:
            if answer is not None:
                self.turns.append(Turn(question, standalone, answer, context))

        stream.on_done = record
        return standalone, stream
