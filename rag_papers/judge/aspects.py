"""Question coverage: what a question asks about, and whether the retrieved abstracts address each part.

A claim can be supported by the sentence it cites and still not answer what was asked: "and what
about its limitations?" answered with ABBA's contribution, "what does DoRA report on GLUE?" with the
nearest PEFT paper. So the question is split into its aspects:

- the **names** it uses (methods, models, datasets, numbers: "DoRA", "GLUE", "ES-dLLM", "12%"),
  matched as words (a name of several capitalised words, "Decision Transformer", as a phrase). A
  name no indexed abstract contains at all (the keyword index's document frequency is 0) is the
  strongest sign that the corpus does not answer the question;
- the **facet** it asks for (limitations, results, data, training details, real-world or wet-lab
  validation, figures, names, which performs best, scope, a comparison, how or why). Most are
  covered only by a sentence that states them as asked (``states_facet``: GPUs are not answered
  by a learning rate, a dataset by the paper's own name, a threshold by the "1" of "o1-like", the
  paper's limitations by what earlier methods fail to do, "which games?" by a sentence whose
  subject is MuZero); a scope ("does X also work for Y?") only by the paper asked about naming Y;
  a combination ("has anyone combined X with Y?") only by one paper naming both; a comparison by
  each compared paper; how and why by meaning, like descriptions;
- the **descriptions**, the other content words in phrases ("speculative decoding", "draft model"),
  matched as words or by meaning: the phrase's sentence embedding against the abstracts' sentences,
  as the claim check matches claims.

Question boilerplate ("need", "want", "find", "paper", "method", "approach", ...) is never an aspect.
The rule judge (``rules.py``) says the uncovered aspects first, in one line. The thresholds are
``Settings.coverage``'s, the cues ``cues.toml``'s; eval/ablation.py measures what each rule buys, and
docs/design-notes.md has the figures.

Why our own and not a llama-index evaluator: those ask an LLM to judge relevancy after the fact;
this runs without one, before the answer is written, so the no-LLM answer can say what is missing.
With an LLM, the model itself judges (``model.LLMJudge``), and these rules judge only what it cannot.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from rag_papers.config import FACET_RULES, CoverageSettings
from rag_papers.corpus import STOPWORDS, plain_text, sentences
from rag_papers.corpus.titles import GENERIC_ACRONYMS
from rag_papers.judge.question import Question
from rag_papers.judge.words import (  # the package's own vocabulary
    _ASKS_OTHERS,
    _AUX,
    _DATA_WORDS,
    _FACET_WORDS,
    _FAMILIES_ASKED,
    _FIELD_WORDS,
    _FIGURE,
    _FIGURE_GENERIC,
    _FIGURES_ASKED,
    _LIMITS_OF,
    _NAMED_KINDS,
    _OBJECT_OF,
    _OTHERS,
    _OWN_LIMITS,
    _QUESTION_WORDS,
    _ROUGHLY,
    COMBINATION,
    DATA,
    DESCRIPTION,
    FACET,
    FACET_CUES,
    FIGURES,
    GENERIC_NAMES,
    LIMITATIONS,
    LOOSE_MATCH,
    NAME,
    NAMED,
    SCOPE,
    SETUP,
    SETUP_PARTS,
    TESTED_FACETS,
    _boiler_stems,
    _content,
    _is_boiler,
)
from rag_papers.keyword import keyword_tokens, paper_text

if TYPE_CHECKING:
    from rag_papers.embedding import TextEmbedder


def _asks_others_limits(question: str, own: set[str]) -> bool:
    """Whether the limits asked for are another approach's: said so ("existing", "what it points out"), or the
    limits of something that is none of the question's or the sources' own terms ("What are the limitations of
    ABBA?" asks for ABBA's own)."""
    if _ASKS_OTHERS.search(question):
        return True
    m = _LIMITS_OF.search(question)
    if not m or re.fullmatch(r"(?:it|this|them|these|its|their)\b.*", m.group("of"), re.I):
        return False
    return not any(w.lower() in own for w in re.findall(r"[\w.+-]+", m.group("of")))


_NAME_TOKEN = re.compile(r"(?<![\w-])[A-Za-z][\w-]*[A-Za-z0-9](?![\w-])")


def _named_here(sentence: str, m: re.Match[str], own: set[str], window: int) -> bool:
    """Whether token ``m`` of ``sentence`` names something the sentence says was used or compared: name-shaped
    (``_dataset_like``, or a capitalised word inside the sentence: "English", "Leduc"), not the question's or the
    paper's own terms, and standing where a named thing used stands (``_OBJECT_OF``)."""
    token = m.group()
    shaped = _dataset_like(sentence, m, own) or (
        m.start() > 0
        and bool(re.fullmatch(r"[A-Z][a-z]+", token))
        and token.lower() not in own
        and token.lower() not in STOPWORDS
        and token.lower() not in GENERIC_NAMES
    )
    return shaped and bool(_OBJECT_OF.search(sentence[max(0, m.start() - window) : m.start()]))


def _family_named(sentence: str, m: re.Match[str], window: int) -> bool:
    """Whether token ``m`` names a family of methods by what it is based on ("GNN-based", "SMILES-based"), standing
    where a named thing used stands (``_OBJECT_OF``): the answer to "which families of ...?"."""
    return bool(re.fullmatch(r"[A-Z][A-Za-z0-9]*[A-Z0-9][A-Za-z0-9]*-(?:based|style|type)", m.group())) and bool(
        _OBJECT_OF.search(sentence[max(0, m.start() - window) : m.start()])
    )


def _dataset_like(sentence: str, m: re.Match[str], own: set[str]) -> bool:
    """Whether token ``m`` of ``sentence`` can name a dataset or benchmark ("GSM8K", "ImageNet", "MT-Bench"):
    a word with a digit or two capitals, not the question's own names (the paper's method is no dataset of it),
    not a field acronym ("LLM", "MoE"), not one defined right here ("(ARMs)") nor an acronym's plural."""
    token = m.group()
    if token in GENERIC_ACRONYMS or token.lower() in own:
        return False
    if sentence[m.start() - 1 : m.start()] == "(" and sentence[m.end() : m.end() + 1] == ")":
        return False
    if re.fullmatch(r"[a-z]*[A-Z]{2,}s", token):
        return False
    if re.fullmatch(r"[A-Z]{1,2}", token):
        return False  # "LP", "RL": an abbreviation, too short to name a dataset
    if any(part.isalpha() and part.islower() for part in token.split("-")[1:]):
        return False  # "PAC-style", "MoE-based": a qualifier, not a name
    # A capital inside a part ("ImageNet", "MT-Bench"), not only at the start of each ("Mixture-of-Experts").
    return bool(re.search(r"\d", token)) or any(re.search(r"[A-Z]", part[1:]) for part in token.split("-"))


@dataclass
class Aspect:
    """One thing a question asks about, and whether the sources address it."""

    text: str  # as the user wrote it: "DoRA", "speculative decoding", "limitations"
    kind: str  # NAME, DESCRIPTION or FACET
    covered: bool = False
    df: int | None = None  # names: the indexed papers that contain it; descriptions: any of its words (0: none)
    score: float = 0.0  # descriptions: the best cosine to a source sentence; names and facets: 1 when found
    evidence: str | None = None  # the sentence that covers it, when one does
    source: int | None = None  # the source (1-based) that covers it

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Coverage:
    """A question's aspects and which the sources address (``check``)."""

    aspects: list[Aspect] = field(default_factory=list)
    facet: str | None = None  # LIMITATIONS, RESULTS, DATA, COMPARISON, HOW, WHY or None
    sides: list[str] = field(default_factory=list)  # a comparison's two sides, as written
    listing: bool = False
    # Retrieval found the papers relevant, but only just (``Settings.loose_match``): said even when every aspect
    # the rules can test is covered, since a question in everyday words on a neighbouring topic passes them all.
    loose: bool = False

    @property
    def missing(self) -> list[Aspect]:
        """The question's aspects the sources don't address (``uncovered`` adds the loose match)."""
        return [a for a in self.aspects if not a.covered]

    @property
    def uncovered(self) -> list[Aspect]:
        return [*self.missing, Aspect(LOOSE_MATCH, FACET)] if self.loose else self.missing

    def line(self) -> str | None:
        """The one line said first: "The abstracts don't mention DoRA or GLUE"."""
        missing = self.missing
        if not missing:
            return "The abstracts match this question only loosely" if self.loose else None
        nowhere = [a for a in missing if a.kind == NAME and a.df == 0]
        texts = [a.text for a in missing]
        what = texts[0] if len(texts) == 1 else ", ".join(texts[:-1]) + " or " + texts[-1]
        if len(nowhere) == len(missing):
            loosely = ", and the abstracts match the question only loosely" if self.loose else ""
            return f"No indexed abstract mentions {what}{loosely}"
        loosely = ", and match the question only loosely" if self.loose else ""
        return f"The abstracts don't mention {what}{loosely}"


def facet_topic(analysis: Analysis) -> list[_Evidence]:
    """The aspects of a list-by-facet question besides the facet ("speech recognition" in "which papers on
    speech recognition release their code?")."""
    words = _FACET_WORDS.get(analysis.facet or "", frozenset())
    return [e for e in analysis.evidence if e.aspect.kind in (NAME, DESCRIPTION) and _content(e.aspect.text) - words]


def topic_text(text: str, facet: str | None) -> str:
    """An aspect's words without the facet's own at its ends: "speech recognition release" -> "speech recognition"."""
    words = _FACET_WORDS.get(facet or "", frozenset())
    parts = text.split()
    while parts and not _content(parts[-1]) - words:
        parts.pop()
    while parts and not _content(parts[0]) - words:
        parts.pop(0)
    return " ".join(parts) or text


def addresses(ev: _Evidence, n: int, rules: CoverageSettings) -> bool:
    """Whether source ``n`` addresses one aspect on its own: a name found in it, a description's words or a
    sentence close in meaning."""
    if ev.aspect.kind != DESCRIPTION:
        return n in ev.found
    return ev.share.get(n, 0.0) >= rules.word_share or ev.cos.get(n, (0.0, ""))[0] >= rules.describe_floor


# ------------------------------------------------------------------ checking it against the sources
# Where an aspect counts as covered: ``Settings.coverage`` (config.CoverageSettings), every threshold described there.
CoverageRules = CoverageSettings


@dataclass
class _Evidence:
    """One aspect's evidence in each source (1-based): where a name or facet is found, how close a phrase is."""

    aspect: Aspect
    found: dict[int, str | None] = field(default_factory=dict)  # source -> sentence (None: found as words)
    share: dict[int, float] = field(default_factory=dict)  # descriptions: source -> share of the words it has
    cos: dict[int, tuple[float, str]] = field(default_factory=dict)  # descriptions: source -> (cosine, sentence)


@dataclass
class Analysis:
    """A question's aspects with their evidence in each source: computed once, decided cheaply (``decide``)."""

    q: Question
    evidence: list[_Evidence]
    rules: CoverageSettings = field(default_factory=CoverageSettings)
    # The sources' own terms: the abbreviations they define ("(TGNN)") and their titles' words. A dataset or
    # model a sentence names is none of these (a paper's own method is not what it was tested on).
    own_terms: frozenset[str] = frozenset()

    @property
    def question(self) -> str:
        return self.q.text

    @property
    def facet(self) -> str | None:
        return self.q.facet

    @property
    def sides(self) -> list[str]:
        return list(self.q.sides)

    def facet_test(self) -> Callable[[str], bool]:
        """The test a sentence passes when it states the facet asked for, as this question asks it (never, for a
        facet without a test of its own: how, why, a comparison). Built once per question by its callers."""
        names = [e.aspect.text for e in self.evidence if e.aspect.kind == NAME]
        return states_facet(self.question, self.facet, [*names, *self.own_terms], self.rules)


@lru_cache(maxsize=256)
def _setup_cues(question: str) -> tuple[re.Pattern[str], ...]:
    asked = tuple(stated for ask, stated in SETUP_PARTS if ask.search(question))
    return asked or (FACET_CUES[SETUP],)


def figure_focus(question: str) -> frozenset[str]:
    """The stems of what a figure is asked of ("How much accuracy does X lose?": accuracy; "What confidence
    threshold ...": confidence, threshold); empty when it is asked of a comparison ("how much faster")."""
    words: list[str] = []
    for m in _FIGURES_ASKED.finditer(question):
        head = re.sub(r"(?i)^.*?\b(?:how (?:much|many)|exact|explicit|precise|what)\b", "", m.group()).split()
        tail = question[m.end() :].split() if re.search(r"(?i)how (?:much|many)$", m.group().strip()) else []
        for w in [*head, *tail[:4]]:
            w = w.strip(",.?!;:()")
            if not w or w.lower() in _AUX or _is_boiler(w) or w.lower() in _QUESTION_WORDS:
                break
            words.append(w)
    generic = _FIGURE_GENERIC
    stems = {
        t
        for w in words
        if w.lower() not in generic and not re.fullmatch(r"(?i)\w+er|more|less", w)
        for t in keyword_tokens(w)
    }
    return frozenset(stems - _boiler_stems())


def states_facet(
    question: str, facet: str | None, names: Sequence[str], rules: CoverageSettings | None = None
) -> Callable[[str], bool]:
    """The test a sentence passes when it states ``facet`` as ``question`` asks for it: training details by the
    part asked (GPUs are not answered by a learning rate); data by a dataset named in words or by its shape,
    other than the question's own names; names asked for by one that stands where a thing used is named; figures
    by a number; limitations by ``FACET_CUES`` in a sentence not about others' work; results by ``FACET_CUES``."""
    rules = rules or CoverageSettings()
    window = rules.object_window
    if facet == SETUP:
        cues = _setup_cues(question) if "setup-parts" not in rules.off else (FACET_CUES[SETUP],)
        return lambda s: any(c.search(s) for c in cues)
    own = {n.lower() for n in names}
    if facet == DATA:
        return lambda s: bool(_DATA_WORDS.search(s)) or any(_dataset_like(s, m, own) for m in _NAME_TOKEN.finditer(s))
    if facet == NAMED:
        if _FAMILIES_ASKED.search(question):  # "which families of baselines?": "GNN-based, PLM-based models"
            return lambda s: any(
                _named_here(s, m, own, window) or _family_named(s, m, window) for m in _NAME_TOKEN.finditer(s)
            )
        return lambda s: any(_named_here(s, m, own, window) for m in _NAME_TOKEN.finditer(s))
    if facet == FIGURES:
        focus = figure_focus(question) if "figure-focus" not in rules.off else frozenset()
        if not focus:
            return lambda s: bool(_FIGURE.search(s))
        need = math.ceil(len(focus) * rules.figure_focus_share)  # "false-positive rate": not any number beside a "rate"
        return lambda s: bool(_FIGURE.search(s)) and len(focus & set(keyword_tokens(s))) >= need
    if facet == LIMITATIONS:
        if "others-limits" in rules.off or _asks_others_limits(
            question, own
        ):  # others' limits ("what drawbacks of X motivate?")
            return lambda s: bool(FACET_CUES[LIMITATIONS].search(s))
        return lambda s: bool(_OWN_LIMITS.search(s)) and not _OTHERS.search(s)
    cue = FACET_CUES.get(facet or "")
    if cue is None:
        return lambda s: False
    return lambda s: bool(cue.search(s))


def _flat(text: str) -> str:
    text = re.sub(r"['’]s\b", "", plain_text(text).lower())
    return " " + " ".join(re.sub(r"[-_/–]", " ", text).split()) + " "


# A figure the question names ("16x", "21%"), and the words that say it is remembered roughly ("up to roughly 16x").
_FIGURE_NAME = re.compile(r"~?(\d+(?:\.\d+)?)\s?(?:%|x|×|-?fold)?", re.I)


def _has_figure(abstract: str, figure: re.Match[str], name: str, question: str | None, rules: CoverageSettings) -> bool:
    """Whether ``abstract`` gives the figure ``name``: the same number (its whole part: "13%" is "13.01%"), or, when
    the question remembers it roughly ("~15x", "about 21%", "if I remember"), one within ``rough_figure`` of it."""
    value = float(figure.group(1))
    before = question[: question.find(name)] if question and name in question else ""
    near = before[-rules.rough_window :] if rules.rough_window else ""
    rough = name.startswith("~") or bool(_ROUGHLY.search(near)) or bool(question and _ROUGHLY.search(question))
    for m in re.finditer(r"(?<![\w.])\d+(?:\.\d+)?", plain_text(abstract)):
        v = float(m.group())
        if int(v) == int(value) and (v == value or value == int(value)):
            return True
        if rough and abs(v - value) <= rules.rough_figure * value:
            return True
    return False


def _defines_kind_of(abstract: str, acronym: str) -> bool:
    """Whether ``abstract`` defines an abbreviation that ends with ``acronym`` and is longer: "(TGNN)" for GNN,
    "(MLLMs)" for LLM. Not one that starts with it: "(TGNN)" is no TGN."""
    return any(
        d.rstrip("s").upper().endswith(acronym) and len(d.rstrip("s")) > len(acronym)
        for d in _DEFINED.findall(abstract)
    )


def _versioned(stem: str, tokens: set[str]) -> bool:
    """Whether ``tokens`` hold a version of the name ``stem``: "Qwen" of "Qwen2.5-7B" (the index keeps "qwen2")."""
    if len(stem) < 3 or not stem.isalpha():
        return False
    return any(t.startswith(stem) and re.fullmatch(r"\d+[a-z]?", t[len(stem) :]) for t in tokens)


def _spelt_out(acronym: str, abstract: str, part_zipf: float) -> bool:
    """Whether ``abstract`` spells ``acronym`` out: consecutive content words of one sentence with its initials
    ("VAE" of "Dirichlet variational autoencoder": a compound of two English words gives both initials). A run with
    a stop word in it ("vary an encoder") is none."""
    letters = acronym.lower()
    for sentence in sentences(plain_text(abstract)):
        words = [w.lower() for w in re.findall(r"[A-Za-z]+", sentence)]
        for i in range(len(words)):
            j, k = i, 0
            while k < len(letters) and j < len(words):
                w = words[j]
                if len(w) <= 2 or w in STOPWORDS:
                    break
                if w[0] != letters[k]:
                    break
                k += 1
                if k < len(letters) and _compound_initial(w, letters[k], part_zipf):
                    k += 1
                j += 1
            if k == len(letters) and not _defined_otherwise(sentence, words[i:j], letters):
                return True
    return False


def _defined_otherwise(sentence: str, run: list[str], letters: str) -> bool:
    """Whether ``sentence`` abbreviates a phrase ``run`` starts as something else: "temporal graph neural networks
    (TGNN)" spells no TGN."""
    pattern = r"\W+".join(map(re.escape, run)) + r"(?:\W+[A-Za-z]+){0,2}\W*\(([A-Za-z][\w-]*)\)"
    m = re.search(pattern, sentence, re.I)
    return m is not None and m.group(1).lower().rstrip("s") != letters


def _compound_initial(word: str, letter: str, part_zipf: float) -> bool:
    """Whether ``word`` is two English words of three letters or more (each at least ``part_zipf`` common), the
    second starting with ``letter`` ("autoencoder": auto, encoder)."""
    from wordfreq import zipf_frequency

    return any(
        word[i] == letter
        and zipf_frequency(word[:i], "en") >= part_zipf
        and zipf_frequency(word[i:], "en") >= part_zipf
        for i in range(3, len(word) - 2)
    )


def name_found(
    name: str,
    sources: Sequence[tuple[str, str]],
    tokens: Sequence[set[str]],
    question: str | None = None,
    rules: CoverageSettings | None = None,
) -> list[int]:
    """The sources (1-based) that contain ``name``: its words, and a name of several words as a phrase ("Decision
    Transformer" is not in an abstract that says "decision" once and "Transformer" later); hyphens count as spaces
    and the last word may take a plural s."""
    rules = rules or CoverageSettings()
    off = rules.off
    stems = keyword_tokens(name)
    acronyms = {
        t for w in re.findall(r"[A-Za-z]+", name) if re.fullmatch(r"[A-Z]{3,6}s?", w) for t in keyword_tokens(w)
    }
    has = [
        n
        for n, toks in enumerate(tokens, 1)
        if all(
            t in toks
            or ("name-versions" not in off and _versioned(t, toks))
            or ("spelt-out" not in off and t in acronyms and _spelt_out(t, sources[n - 1][1], rules.compound_part_zipf))
            for t in stems
        )
    ]
    figure = _FIGURE_NAME.fullmatch(name)
    if figure and "rough-figures" not in off:
        return [n for n, (_, a) in enumerate(sources, 1) if n in has or _has_figure(a, figure, name, question, rules)]
    acronym = re.fullmatch(r"([A-Z]{2,6})s?", name)
    if acronym and "acronym-kinds" not in off:  # "GNNs" of an abstract that defines "(TGNN)": a kind of GNN
        kinds = [n for n, (_, a) in enumerate(sources, 1) if _defines_kind_of(a, acronym.group(1))]
        return sorted({*has, *kinds})
    words = _flat(name).split()
    # A one-letter part the index does not keep ("K" of "K-Flow") must be there too: the name is then a phrase,
    # else every abstract with a "flow" has K-Flow.
    dropped = " " not in name.strip() and any(len(w) == 1 and w.isalpha() for w in words) and len(words) > 1
    # Only a name of capitalised words, as the question writes it: a run of names it lists ("PepBenchData,
    # PepBenchPipeline"), a name with its qualifier ("ABBA's Hadamard-product") or a compound spelt many ways
    # ("LLM-as-judge") is no phrase.
    capitalised = re.fullmatch(r"[A-Z][a-z]+(?: [A-Z][a-z]+)+", name) and (question is None or name in question)
    if (not dropped and not capitalised) or "name-phrases" in off:
        return has
    phrase = re.compile(r"(?<!\w)" + re.escape(" ".join(words)) + r"(?:s|es)?\W")
    return [n for n in has if phrase.search(_flat(" ".join(sources[n - 1])))]


def analyse(
    q: Question | str,
    sources: Sequence[tuple[str, str]],
    embedder: TextEmbedder | None,
    names_df: Callable[[str], int] | None = None,
    cache: dict[str, Any] | None = None,
    rules: CoverageSettings | None = None,
) -> Analysis:
    """The aspects of question ``q`` and their evidence in each of ``sources`` ((title, abstract) pairs).

    ``names_df``: how many indexed papers contain a name's words (``Index.keyword_matches``'s count);
    without it a name's document frequency is unknown. ``cache``: sentence embeddings to reuse.
    """
    rules = rules or CoverageSettings()
    if isinstance(q, str):  # a study's or a test's question, not yet parsed
        q = Question.parse(q, rules)
    question = q.text
    out = Analysis(q, [], rules)
    tokens = [set(paper_text(t, a).split()) for t, a in sources]
    sents = [sentences(plain_text(a)) for _, a in sources]
    for name in q.names:
        stems = keyword_tokens(name)
        if not stems:
            continue
        ev = _Evidence(Aspect(name, NAME, df=names_df(name) if names_df is not None else None))
        ev.found = {n: None for n in name_found(name, sources, tokens, question, rules)}
        out.evidence.append(ev)
    phrase_stems = [(p, [t for t in keyword_tokens(p) if t not in _boiler_stems()]) for p in q.phrases]
    phrase_stems = [(p, st) for p, st in phrase_stems if st]
    sims = _phrase_sims([p for p, _ in phrase_stems], sents, embedder, cache)
    for (phrase, stems), per_source in zip(phrase_stems, sims):
        ev = _Evidence(Aspect(phrase, DESCRIPTION))
        ev.share = {n: sum(t in toks for t in stems) / len(stems) for n, toks in enumerate(tokens, 1)}
        ev.cos = per_source
        out.evidence.append(ev)
    out.own_terms = own_terms(sources, rules.defined_term_window)
    facet_evidence(out, sources, sents, tokens)
    return out


_DEFINED = re.compile(r"\(([A-Za-z][\w-]*[A-Za-z0-9])\)")


def own_terms(sources: Sequence[tuple[str, str]], window: int = 80) -> frozenset[str]:
    """The sources' own terms, lower-cased: the abbreviations their abstracts define, the words of the terms they
    define ("Reinforcement Learning with Verifiable Rewards (RLVR)") and their titles' words."""
    terms: set[str] = set()
    for title, abstract in sources:
        for m in _DEFINED.finditer(abstract):
            terms.add(m.group(1).lower())
            before = _NAME_TOKEN.findall(abstract[max(0, m.start() - window) : m.start()])
            terms.update(t.lower() for t in before[-(sum(c.isupper() for c in m.group(1)) + 2) :])
        terms.update(t.lower() for t in _NAME_TOKEN.findall(title))
    return frozenset(terms | {t[:-1] for t in terms if t.endswith("s")})


def _combination_evidence(tokens: Sequence[set[str]], pair: tuple[str, str], share: float) -> _Evidence:
    """Where two topics are joined: a source with two thirds of the specific content words of each (all of them
    would miss a paraphrase; half, a two-word side of which one word is everywhere)."""
    ev = _Evidence(Aspect(f"{pair[0]} together with {pair[1]}", FACET))
    sides = [_content(x) - _FIELD_WORDS for x in pair]
    for n, toks in enumerate(tokens, 1):
        if all(len(side & toks) >= len(side) * share for side in sides):
            ev.found[n] = None
    return ev


def _scope_evidence(analysis: Analysis, tokens: Sequence[set[str]], target: str) -> _Evidence:
    """Where a scope question's target is reached: a source that has every content word of one of its "or"
    alternatives, and is the paper asked about (it has the question's names that any source has, and half the
    content words of the subject: "Does [the INR + grid inversion method] carry over to [3D elastic inversion]?").
    """
    ev = _Evidence(Aspect(target, FACET))
    options = [o for o in (_content(x) for x in re.split(r"\s+or\s+", target)) if o]
    cue_at = analysis.q.scope_at if analysis.q.scope_at is not None else max(0, analysis.question.find(target))
    subject = _content(re.sub(r"(?i)^\s*\w+\s+", "", analysis.question[:cue_at]))
    subject -= {t for e in analysis.evidence if e.aspect.kind == NAME for t in keyword_tokens(e.aspect.text)}
    names = [e for e in analysis.evidence if e.aspect.kind == NAME and e.found]
    for n, toks in enumerate(tokens, 1):
        if any(n not in e.found for e in names):
            continue  # another paper than the one asked about
        if subject and len(subject & toks) < len(subject) * analysis.rules.scope_subject_share:
            continue
        if any(o <= toks for o in options):
            ev.found[n] = None
    return ev


def _found_names(analysis: Analysis) -> list[_Evidence]:
    """The question's names that some source has, not the field's and not a likeness: what names a paper asked about."""
    return [
        e for e in analysis.evidence if e.aspect.kind == NAME and e.found and e.aspect.text not in analysis.q.ignored
    ]


def _head_evidence(analysis: Analysis, tokens: Sequence[set[str]]) -> _Evidence | None:
    """What a wh-question about a named paper asks for ("regret bound" of LAMIR), found when the first source
    with the paper's name has a word of it. None when the question is of another shape, names no paper any
    source has, or asks for a head of boilerplate only ("what method ...")."""
    asked = analysis.q.head if "head" not in analysis.rules.off else None
    head = _content(asked) if asked else set()
    names = _found_names(analysis)
    if not asked or not head or not names or asked.lower() in TESTED_FACETS or analysis.facet == NAMED:
        return None
    if analysis.q.listing:  # "Which papers focus on ...": a topic of papers, not a head to find
        return None
    if asked.split()[-1].lower() in _NAMED_KINDS:
        return None  # "which pretrained network does it plug in?": answered by a name, not by the word
    ev = _Evidence(Aspect(asked, FACET))
    n = min(names[0].found)
    if head & tokens[n - 1]:
        ev.found[n] = None
    return ev


def _asked_about(analysis: Analysis) -> set[int] | None:
    """The sources a facet question about a named paper asks about: those with every name of the question that
    any source has (not the field's, not a likeness). None (any source may state it) when it names none, or no
    source has them all, or it compares papers (a named one with a described one too) or asks for a list of them."""
    if analysis.sides or analysis.q.compares or analysis.q.listing or "asked-about" in analysis.rules.off:
        return None
    names = _found_names(analysis)
    if not names:
        return None
    both = set.intersection(*(set(e.found) for e in names))
    return both or None


def facet_evidence(
    analysis: Analysis,
    sources: Sequence[tuple[str, str]],
    sents: Sequence[Sequence[str]] | None = None,
    tokens: Sequence[set[str]] | None = None,
) -> None:
    """Add the facet asked for, with the first sentence of each source that states it, to ``analysis``.
    ``sents`` and ``tokens``: each source's sentences and index tokens, as ``analyse`` has them (else made here)."""
    analysis.evidence = [e for e in analysis.evidence if e.aspect.kind != FACET]
    if sents is None:
        sents = [sentences(plain_text(a)) for _, a in sources]
    if tokens is None:
        tokens = [set(paper_text(t, a).split()) for t, a in sources]
    head = _head_evidence(analysis, tokens)
    if head is not None:
        analysis.evidence.append(head)
    off = analysis.rules.off
    pair = analysis.q.combination if analysis.facet == COMBINATION and "combination" not in off else None
    if pair is not None:
        analysis.evidence.append(_combination_evidence(tokens, pair, analysis.rules.combination_share))
        return
    target = analysis.q.scope if analysis.facet == SCOPE and "scope" not in off else None
    if target is not None:
        analysis.evidence.append(_scope_evidence(analysis, tokens, target))
        return
    if analysis.facet not in TESTED_FACETS or FACET_RULES[analysis.facet] in off:
        return
    ev = _Evidence(Aspect(str(analysis.facet), FACET))
    states = analysis.facet_test()
    asked_about = _asked_about(analysis)
    for n, ss in enumerate(sents, 1):
        if asked_about is not None and n not in asked_about:
            continue  # "How many GPU hours does ABBA need?" is not answered by another paper's hours
        hit = next((x for x in ss if states(x)), None)
        if hit is not None:
            ev.found[n] = hit
    analysis.evidence.append(ev)


def decide(analysis: Analysis, read: Sequence[int]) -> Coverage:
    """Which aspects the sources numbered ``read`` (those the answer quotes, or all a model reads) address."""
    rules = analysis.rules
    cov = Coverage(facet=analysis.facet, sides=list(analysis.sides))
    for ev in analysis.evidence:
        if ev.aspect.kind == NAME and (ev.aspect.text in analysis.q.ignored or "names" in rules.off):
            continue
        if ev.aspect.kind == DESCRIPTION:
            # Never said missing: on the read questions, a description no abstract has a word of flagged 15
            # near-misses and caveated 44 answerable questions (paraphrases use other words by design; eval/ablation.py).
            # Its evidence still tells which papers address a list's topic (``addresses``, ``facet_topic``).
            continue
        a = Aspect(ev.aspect.text, ev.aspect.kind, df=ev.aspect.df)
        n = next((n for n in read if n in ev.found), None)
        if n is not None:
            a.covered, a.score, a.source, a.evidence = True, 1.0, n, ev.found[n]
        cov.aspects.append(a)
    return cov


def _phrase_sims(
    phrases: list[str], sents: list[list[str]], embedder: TextEmbedder | None, cache: dict[str, Any] | None
) -> list[dict[int, tuple[float, str]]]:
    """Per phrase: source -> (cosine, sentence) of that source's sentence nearest the phrase in meaning."""
    flat = [(n, s) for n, ss in enumerate(sents, 1) for s in ss]
    if not phrases or not flat or embedder is None:
        return [{} for _ in phrases]
    import numpy as np

    from rag_papers.claims import embed_cached

    cache = {} if cache is None else cache
    embed_cached([s for _, s in flat] + phrases, embedder, cache)
    matrix = np.stack([np.asarray(cache[s]) for _, s in flat])
    out: list[dict[int, tuple[float, str]]] = []
    for phrase in phrases:
        sims = matrix @ np.asarray(cache[phrase])
        best: dict[int, tuple[float, str]] = {}
        for (n, s), cos in zip(flat, sims):
            if n not in best or cos > best[n][0]:
                best[n] = (float(cos), s)
        out.append(best)
    return out
