"""The rule judge's vocabulary: the facets, the cues (``cues.toml``) and the word lists (``rag_papers/words/``).

Data, not code: each cue is a regular expression read once from ``cues.toml``, each word list a file; the helpers
here say which words of a question are boilerplate, which name the field, and how common a word is in English.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from functools import lru_cache
from importlib import resources
from typing import Any

from rag_papers.corpus import STOPWORDS
from rag_papers.keyword import QUERY_BOILERPLATE, keyword_tokens
from rag_papers.paths import load_words

TermStats = Callable[[list[str]], tuple[int, list[tuple[str, int]]]]  # ``Index.stem_stats``


NAME, DESCRIPTION, FACET = "name", "description", "facet"


LIMITATIONS, RESULTS, DATA, METHOD, COMPARISON, HOW, WHY, SETUP, FIGURES, NAMED = (
    "limitations",
    "results",
    "data",
    "method",
    "comparison",
    "how",
    "why",
    "training or compute details",
    "the figures asked for",
    "the names asked for",
)


BEST, VALIDATION = "which performs best", "real-world or wet-lab validation"


PROOF = "a formal proof"


LOOSE_MATCH = "a close match to the question"  # ``Coverage.loose``: what ``uncovered`` names


CODE = "a code release"


SCOPE = "scope"  # "does X also work for Y?": the aspect is Y as written


COMBINATION = "combination"  # "has anyone combined X with Y?": the aspect is "X together with Y"


# A number as a sentence states a figure: standalone, not part of a name ("o1-like", "LLaDA-8B", "3D").
_FIGURE = re.compile(r"(?<![\w.-])\d+(?:[.,]\d+)*(?:\s?(?:%|×|x\b|-?fold\b|times\b|pp\b|points?\b))?(?![\w-])")


def _pattern(entry: dict[str, str]) -> re.Pattern[str]:
    return re.compile(entry["pattern"], re.IGNORECASE if "i" in entry.get("flags", "") else 0)


def _load_cues() -> dict[str, Any]:
    """The cues (``cues.toml``, shipped in the package): what a question asks for and what a sentence states."""
    return tomllib.loads((resources.files(__package__) / "cues.toml").read_text(encoding="utf-8"))


_CUES = _load_cues()


# What a question asks for, by its wording. Only the first match counts; comparison is decided by
# ``comparison_sides`` (it needs two sides), how and why by the question's first word.
FACET_ASKED: list[tuple[str, re.Pattern[str]]] = [(f, _pattern(e)) for f, e in _CUES["asked"].items()]


_ASKED = dict(FACET_ASKED)  # by facet, for the facets asked_facet checks first


_FIGURES_ASKED = _ASKED[FIGURES]


# A sentence of an abstract that states each facet (the facet is covered when a source has one).
FACET_CUES: dict[str, re.Pattern[str]] = {f: _pattern(e) for f, e in _CUES["stated"].items()}


# Training and compute details, by which of them is asked: (asked, stated) pairs.
SETUP_PARTS: list[tuple[re.Pattern[str], re.Pattern[str]]] = [
    (_pattern(p["asked"]), _pattern(p["stated"])) for p in _CUES["setup_parts"]
]


_CUE = {name: _pattern(e) for name, e in _CUES["cues"].items()}


_DATA_WORDS, _OTHERS, _OWN_LIMITS, _ASKS_OTHERS = (
    _CUE[n] for n in ("data_words", "others", "own_limits", "asks_others")
)


_LIMITS_OF, _OBJECT_OF, _FAMILIES_ASKED, _COMPARE = (
    _CUE[n] for n in ("limits_of", "object_of", "families_asked", "compare")
)


_SCOPE_ASKED, _HOW_ROBUST, _SCOPE_END = (_CUE[n] for n in ("scope_asked", "how_robust", "scope_end"))


_SCOPE_OBJECT, _CONTRAST_ASKED, _LAST_OBJECT = (_CUE[n] for n in ("scope_object", "contrast_asked", "last_object"))


_COMBINATION_ASKED, _LISTING, _DATA_DESCRIBED = (_CUE[n] for n in ("combination_asked", "listing", "data_described"))


_TIME_SAVED, _INDIRECT_AMOUNT, _ROUGHLY, _WH_HEAD = (
    _CUE[n] for n in ("time_saved", "indirect_amount", "roughly", "wh_head")
)


_MANNER, _QUOTED = _CUE["manner"], _CUE["quoted"]


def _stems(words: frozenset[str]) -> frozenset[str]:
    return frozenset(t for w in words for t in keyword_tokens(w))


# The word lists (rag_papers/words/): each file says what it holds.
_QUESTION_WORDS = load_words("question_words")


_HEAD_NOUNS = load_words("head_nouns")


_ABBREVIATIONS = load_words("abbreviations")


_FIELD_WORDS = _stems(load_words("field_words"))


_QUALITY_KEPT = _stems(load_words("quality_kept"))


_AUX = load_words("auxiliaries")


_NAMED_KINDS = load_words("named_kinds")


_FIGURE_GENERIC = load_words("figure_generic")


# Question boilerplate: never an aspect (rag_papers/words/boilerplate.txt), with the retrieve stage's query
# boilerplate and the stop words.
BOILERPLATE = load_words("boilerplate")


_TOKEN = re.compile(r"\d+(?:\.\d+)?%|[^\W_](?:[\w.+'/-]*[^\W_])?")


_CAPS = re.compile(r"[A-Z]")


# ------------------------------------------------------------------ splitting the question
@lru_cache(maxsize=1)
def _boiler_stems() -> frozenset[str]:
    words = BOILERPLATE | QUERY_BOILERPLATE | STOPWORDS
    return frozenset(t for w in words for t in keyword_tokens(w)) | frozenset(words)


def _is_boiler(word: str) -> bool:
    w = word.lower().strip("'")
    if w in STOPWORDS or w in BOILERPLATE:
        return True
    stems = keyword_tokens(w)
    return not stems or all(t in _boiler_stems() for t in stems)


GENERIC_NAMES = load_words("generic_names")


# "MuZero-style", "Flash-something", "PAC-type": the name is the part before the suffix.
_SUFFIX_HEDGES = "style|like|based|type|esque|ish|something|inspired|related|driven|flavou?red"


_HEDGES = f"{_SUFFIX_HEDGES}|lab"


_NAME_SUFFIX = re.compile(rf"-(?:{_SUFFIX_HEDGES})$", re.IGNORECASE)


def hedged(name: str, question: str) -> bool:
    """Whether the question names ``name`` only as a likeness ("MuZero-style", "Flash-something", "Baker-lab",
    "Kamenica-Gentzkow style maybe"): then the exact name is no aspect the abstracts must contain."""
    if re.search(rf"-(?:{_HEDGES})$", name, re.IGNORECASE):
        return True
    return bool(re.search(rf"{re.escape(name)}(?:-|\s+)(?:{_HEDGES})\b", question, re.IGNORECASE))


def generic_name(word: str) -> bool:
    """One of the field's names (``GENERIC_NAMES``: "LLM", "AI"), or its plural ("AIs")."""
    w = word.lower()
    return w in GENERIC_NAMES or (len(w) > 2 and w.endswith("s") and w[:-1] in GENERIC_NAMES)


def ignored_name(name: str, question: str) -> bool:
    """A name that is no aspect: one of the field's ("LLM") or named only as a likeness ("MuZero-style")."""
    return generic_name(name) or hedged(name, question)


_POSSESSIVE = re.compile(r"['\u2019]s$")


# A letter standing for a number ("an N-times speedup", "a k-fold cut"): a figure asked for, not a name.
_PLACEHOLDER = re.compile(r"[NnKkMm][-\u2010]?(?:times|fold|x)")


# The facets that pick papers out of a list by what each abstract states of itself, whatever its topic, and the
# words such a question uses for the facet itself ("give a public GitHub link to their code"): no topic.
LISTED_BY_FACET = frozenset([CODE])


_FACET_WORDS = {CODE: _stems(load_words("code_facet_words"))}


# The facets a sentence can be tested for (``states_facet``); how, why and a comparison are judged otherwise.
TESTED_FACETS = frozenset([LIMITATIONS, SETUP, VALIDATION, PROOF, CODE, NAMED, BEST, DATA, FIGURES, RESULTS])


def _content(text: str) -> set[str]:
    return {t for t in keyword_tokens(text) if t not in _boiler_stems()}


# (ending, what replaces it), tried in this order
_INFLECTIONS = [("iest", "y"), ("ies", "y"), ("ier", "y"), ("ing", ""), ("ing", "e"), ("est", ""), ("es", "")]
_INFLECTIONS += [("ed", ""), ("ed", "e"), ("er", ""), ("s", "")]


@lru_cache(maxsize=4096)
def _base_zipf(word: str) -> float:
    """The Zipf frequency of the commonest base form of an inflected ``word`` ("tidies": "tidy", "shakier": "shaky"):
    wordfreq counts each form apart, and a rare form of an everyday word is no technical term."""
    from wordfreq import zipf_frequency

    bases = [word[: -len(end)] + base for end, base in _INFLECTIONS if word.endswith(end) and len(word) - len(end) >= 3]
    return max((zipf_frequency(b, "en") for b in bases), default=0.0)
