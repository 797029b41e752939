"""A question as every stage reads it, parsed once (``Question.parse``).

Before, the raw string was parsed again wherever a stage needed one of its parts (its names, its facet, whether it
asks for a list, a comparison's sides): about thirty call sites, each free to read it differently. Chat parses it
once and hands the ``Question`` to retrieval and to the judge, which read its parts from it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from rag_papers.config import CoverageSettings
from rag_papers.corpus import plain_text
from rag_papers.judge.words import (  # the package's own vocabulary
    _ABBREVIATIONS,
    _ASKED,
    _CAPS,
    _COMBINATION_ASKED,
    _COMPARE,
    _CONTRAST_ASKED,
    _DATA_DESCRIBED,
    _FACET_WORDS,
    _FIELD_WORDS,
    _HEAD_NOUNS,
    _HOW_ROBUST,
    _INDIRECT_AMOUNT,
    _LAST_OBJECT,
    _LISTING,
    _MANNER,
    _NAME_SUFFIX,
    _PLACEHOLDER,
    _POSSESSIVE,
    _QUALITY_KEPT,
    _QUESTION_WORDS,
    _QUOTED,
    _SCOPE_ASKED,
    _SCOPE_END,
    _SCOPE_OBJECT,
    _TIME_SAVED,
    _TOKEN,
    _WH_HEAD,
    CODE,
    COMBINATION,
    COMPARISON,
    DATA,
    FACET_ASKED,
    HOW,
    LISTED_BY_FACET,
    PROOF,
    RESULTS,
    SCOPE,
    SETUP,
    VALIDATION,
    WHY,
    _base_zipf,
    _boiler_stems,
    _content,
    _is_boiler,
    generic_name,
    ignored_name,
)
from rag_papers.keyword import keyword_tokens


def _looks_like_name(word: str, first: bool) -> bool:
    """A method, model, dataset or figure: "DoRA", "GLUE", "ES-dLLM", "GPT-4", "Mamba" (not first), "12%".

    Not a bare number ("35": a count, or a year, is no name to look for) nor one of ``GENERIC_NAMES``
    ("LLM", "AI"), which name the field, not a method.
    """
    if generic_name(word) or _PLACEHOLDER.fullmatch(word):
        return False
    if re.fullmatch(r"\d+(?:\.\d+)?%?|~?\d+(?:\.\d+)?[kKmM]", word):
        return word.endswith("%")
    if len(_CAPS.findall(word)) >= 2 and not word.isupper() or (word.isupper() and len(word) >= 2):
        return True
    if re.search(r"[A-Za-z]", word) and re.search(r"\d", word):
        return True
    return word[:1].isupper() and not first and not _is_boiler(word)


def _example_spans(q: str) -> list[tuple[int, int]]:
    spans = []
    for m in _QUOTED.finditer(q):
        words = m.group().split()
        if len(words) >= 4 and sum(w[:1].islower() for w in words) >= 2:
            spans.append(m.span())
    return spans


def split_question(question: str) -> tuple[list[str], list[str]]:
    """(names, description phrases) of ``question``, each as written, in order, without repeats.

    Adjacent name words make one name ("Gaussian Splatting"), not words a comma or a bracket parts ("Llama,
    Qwen"); a description phrase is a run of content words between stop words, boilerplate and names
    ("speculative decoding").
    """
    q = plain_text(" ".join(question.split()))
    words = [(m.group(), m.start()) for m in _TOKEN.finditer(q)]
    examples = _example_spans(q)
    names: list[str] = []
    phrases: list[str] = []
    run: list[str] = []
    name_run: list[str] = []
    sentence_start = True

    def close_runs() -> None:
        if run:
            phrases.append(" ".join(run))
            run.clear()
        if name_run:
            names.append(" ".join(name_run))
            name_run.clear()

    end = 0
    for i, (word, start) in enumerate(words):
        first = sentence_start or i == 0
        sentence_start = q[start + len(word) : start + len(word) + 1] in (".", "?", "!") and (
            word.lower() not in _ABBREVIATIONS
        )
        if name_run and q[end:start].strip():  # "Llama, Qwen": two names
            names.append(" ".join(name_run))
            name_run.clear()
        end = start + len(word)
        word = _NAME_SUFFIX.sub("", _POSSESSIVE.sub("", word))  # "a temporal GNN's prediction": the name is GNN
        if any(a <= start < b for a, b in examples) and not word[:1].islower():
            close_runs()
            continue
        if first and _MANNER.fullmatch(word):
            close_runs()
            continue
        if _looks_like_name(word, first) and not (first and _is_boiler(word)):
            if run:
                phrases.append(" ".join(run))
                run.clear()
            name_run.append(word)
            continue
        if name_run:
            names.append(" ".join(name_run))
            name_run.clear()
        if run and word.lower() in _HEAD_NOUNS:
            run.append(word)  # "draft model", "diffusion models": shown whole, matched on the content words
            continue
        if _is_boiler(word) or word.lower() in _QUESTION_WORDS or generic_name(word):
            if run:
                phrases.append(" ".join(run))
                run.clear()
            continue
        run.append(word)
    close_runs()
    return list(dict.fromkeys(names)), list(
        dict.fromkeys(p for p in phrases if p.lower() not in {n.lower() for n in names})
    )


def combination_asked(question: str) -> tuple[str, str] | None:
    """The two topics a question asks one paper to join ("Dirichlet-style mixture-of-experts routing", "diffusion
    language models"), else None; a side of field words only ("machine learning") is no topic."""
    m = _COMBINATION_ASKED.match(question)
    if not m:
        return None
    x, y = m.group("x").strip(" ,"), m.group("y").strip(" ,?")
    if not (_content(x) - _FIELD_WORDS) or not (_content(y) - _FIELD_WORDS):
        return None
    return x, y


def _scope_match(question: str) -> re.Match[str] | None:
    """A scope question's wording, its ``rest`` group what it asks the paper to reach: "does X also work for Y?"
    or "how robust is X when Y?"."""
    return _SCOPE_ASKED.match(question) or _HOW_ROBUST.match(question)


def scope_asked(question: str, setting_words: int = 4) -> str | None:
    """What a yes-or-no scope question asks whether a paper reaches, as written ("vision-language reasoning
    models", "adversarially chosen delays"), else None."""
    m = _scope_match(question)
    if m:
        rest = _SCOPE_END.sub("", m.group("rest")).strip(" ?.")
        obj = _SCOPE_OBJECT.search(rest)
        target = (obj.group(1) if obj else rest).strip(" ?.")
    else:
        c = _CONTRAST_ASKED.match(question)
        if not c:
            return None
        obj = _LAST_OBJECT.match(c.group("before"))
        target = (obj.group(1) if obj else c.group("before")).strip(" ?.,")
        if len(_content(target)) > setting_words:
            return None  # a clause ("... explain why models produce novel samples"): the claim asked about, reworded
    if m and not obj and _content(target) <= _QUALITY_KEPT:
        return None  # "still answer correctly", "still accurate": whether quality holds, not a setting reached
    return target if any(t not in _boiler_stems() for t in keyword_tokens(target)) else None


def asks_for_papers(question: str) -> bool:
    return bool(_LISTING.match(question))


def only_facet_asked(question: str, facet: str | None) -> str | None:
    """The facet a list question asks papers for (``facet``) and nothing else ("Which of these papers give a public
    GitHub repository for their code?"), else None: its evidence is a paper stating it, not a topic's closeness."""
    if facet not in LISTED_BY_FACET:
        return None
    return facet if not _content(question) - _FACET_WORDS[facet] else None


def asked_facet(question: str, setting_words: int = 4) -> str | None:
    """The facet ``question`` asks for, by its wording (None: what the papers do in general)."""
    question = _INDIRECT_AMOUNT.sub("and", question)
    if comparison_sides(question):
        # "How many minutes does CryoNet.Refine take compared with Phenix?" asks for a run's cost, on both sides
        return SETUP if _ASKED[SETUP].search(question) else COMPARISON
    if _ASKED[VALIDATION].search(question):
        return VALIDATION  # "Were the designs validated in the wet lab?": not a scope of words to find
    if _ASKED[PROOF].search(question):
        return PROOF
    if scope_asked(question, setting_words):
        return SCOPE
    if combination_asked(question):
        return COMBINATION
    if asks_for_papers(question):
        # "Which papers study failure modes of diffusion models?": a topic of papers, not a facet of one paper
        # (as before, data and results are still read as asked: "which papers evaluate on GSM8K?").
        # A paper's property asked of the list ("which papers link their code?") is the facet that picks the papers.
        return next((f for f, p in FACET_ASKED if f in (DATA, RESULTS, CODE) and p.search(question)), None)
    for facet, pattern in FACET_ASKED:
        if facet == DATA and _DATA_DESCRIBED.search(question):
            continue  # "trained on data lying on a line": the setting studied, not which dataset
        if facet == SETUP and _TIME_SAVED.search(question):
            continue  # "how much time did it save?": a result, not a run's cost
        if pattern.search(question):
            return facet
    first = question.strip().lower().split(" ", 1)[0] if question.strip() else ""
    if first == "why":
        return WHY
    if first == "how" and not re.match(r"\s*how (?:well|much|fast|many|large|big)\b", question, re.I):
        return HOW
    return None


_SIDE_SPLIT = re.compile(r"\s*(?:\bwith\b|\bto\b|\band\b|\bvs\.?|\bversus\b|\bagainst\b|\bor\b|,)\s*", re.I)


def comparison_sides(question: str, names: Sequence[str] | None = None) -> list[str]:
    """The two things a comparison question compares, as written ("SWAX", "FlashLLA"), else [].

    Two names around a comparison word: "How does SWAX compare with FlashLLA?", "ABBA vs LoRA",
    "difference between BAM and ALiBi". A comparison with one named side ("how does ABBA compare
    to prior work?") has one paper to read and is answered as a question about it.
    """
    cue = _COMPARE.search(question)
    if not cue:
        return []
    if names is None:
        names = split_question(question)[0]
    at = [(question.find(n), n) for n in names]
    before = [n for i, n in at if 0 <= i < cue.start()]
    after = [n for i, n in at if i >= cue.end()]
    if before and after:
        return [before[-1], after[0]]  # "SWAX compare with FlashLLA", "ABBA vs LoRA"
    if len(after) >= 2:
        return after[:2]  # "the difference between BAM and ALiBi"
    return []


def question_zipf(question: str) -> float | None:
    """How common a question's content words are in English: their mean Zipf, each at its commonest inflection (None:
    no content word). Under ``coverage.question_zipf`` it is asked in technical words ("Which papers do
    out-of-distribution detection for image classifiers?" 4.1; a lay one, "How do AI picture makers come up with new
    pictures instead of copying?", 4.9): the kind of question whose topic either is in the abstracts or is not,
    unlike a lay paraphrase, whose everyday words no abstract uses anyway."""
    from wordfreq import zipf_frequency

    words = [w for w in re.findall(r"[^\W_][\w'-]*", question) if not _is_boiler(w.lower()) and keyword_tokens(w)]
    z = [max(zipf_frequency(w.lower(), "en"), _base_zipf(w.lower())) for w in words]
    return sum(z) / len(z) if z else None


@dataclass(frozen=True)
class Question:
    """What a question asks, by its wording: the parts the rules judge, and those retrieval and chat act on."""

    text: str
    names: tuple[str, ...] = ()  # "DoRA", "GLUE", "Gaussian Splatting": matched as words
    phrases: tuple[str, ...] = ()  # its other content words in phrases: "speculative decoding"
    facet: str | None = None  # what it asks of a paper: limitations, data, a scope, ... (asked_facet)
    sides: tuple[str, ...] = ()  # a comparison's two sides, as written ("SWAX", "FlashLLA")
    compares: bool = False  # worded as a comparison ("compare", "vs", "better than"), with two sides or not
    listing: bool = False  # asks for papers ("Which papers ...", "Is there work on ...")
    scope: str | None = None  # "does X also work for Y?": Y as written
    scope_at: int | None = None  # where Y's clause starts in ``text`` (the subject X is before it)
    combination: tuple[str, str] | None = None  # "has anyone combined X with Y?"
    head: str | None = None  # "What regret bound does LAMIR achieve?": what a wh-question asks for ("regret bound")
    ignored: frozenset[str] = field(default_factory=frozenset)  # its names that are no aspect: "LLM", "MuZero-style"
    zipf: float | None = None  # how common its content words are in English (question_zipf)

    @classmethod
    def parse(cls, text: str, rules: CoverageSettings | None = None) -> Question:
        """``text`` read once. ``rules``: the coverage settings a part depends on (a setting's words at most)."""
        rules = rules or CoverageSettings()
        names, phrases = split_question(text)
        scope = scope_asked(text, rules.setting_words)
        match = _scope_match(text)
        head = _WH_HEAD.match(text)
        return cls(
            text=text,
            names=tuple(names),
            phrases=tuple(phrases),
            facet=asked_facet(text, rules.setting_words),
            sides=tuple(comparison_sides(text, names)),
            compares=bool(_COMPARE.search(text)),
            listing=asks_for_papers(text),
            scope=scope,
            scope_at=match.start("rest") if match and scope is not None else None,
            combination=combination_asked(text),
            head=head.group("head") if head else None,
            ignored=frozenset(n for n in names if ignored_name(n, text)),
            zipf=question_zipf(text),
        )

    @property
    def only_facet(self) -> str | None:
        """The facet it asks papers for and nothing else ("Which papers link their code?"), else None."""
        return only_facet_asked(self.text, self.facet if self.listing else None)

    @property
    def listed_by_facet(self) -> bool:
        """Whether it asks for the papers that state a facet of themselves: every retrieved paper is then read."""
        return self.listing and self.facet in LISTED_BY_FACET

    @property
    def named(self) -> tuple[str, ...]:
        """Its names that are aspects: not the field's ("LLM"), not a likeness ("MuZero-style")."""
        return tuple(n for n in self.names if n not in self.ignored)

    def technical(self, rules: CoverageSettings) -> bool:
        """Whether it is asked in technical words (``coverage.question_zipf``)."""
        return self.zipf is not None and self.zipf < rules.question_zipf
