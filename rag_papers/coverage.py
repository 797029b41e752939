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
The answer stage says the uncovered aspects first, in one line, and refuses when the central
aspect is uncovered and nothing is close. The floors are fitted on eval/qa.jsonl's dev part, and
the facet tests on dev and the near-misses of rounds 4 to 6 once each had been scored
(eval/coverage_study.py); docs/design-notes.md has the figures.

Why our own and not a llama-index evaluator: those ask an LLM to judge relevancy after the fact;
this runs without one, before the answer is written, so the no-LLM answer can say what is missing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from rag_papers.corpus import STOPWORDS, plain_text, sentences
from rag_papers.corpus.titles import GENERIC_ACRONYMS
from rag_papers.keyword import QUERY_BOILERPLATE, keyword_tokens, paper_text
from rag_papers.paths import load_words

if TYPE_CHECKING:
    from rag_papers.embedding import TextEmbedder

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

# Things a question can ask to be named ("which games was LAMIR tested on?", "which of the 21 frontier models
# scored best?", "which base model is it built on?"): answered only by a sentence that names one. Tasks and
# domains are left out: their answers are described in words ("classification"), not named.
_NAMED_HEADS = (
    r"games?|environments?|simulators?|languages?|backbones?|baselines?|architectures?|LLMs?|"
    r"(?:frontier|base|pretrained|pre-trained|foundation|teacher|student|backbone|reference|judge) (?:[\w-]+ )?models?|"
    r"(?:language|vision|reward) models?|encoders?|robots?|libraries|toolkits?|solvers?|organisms?|species|"
    r"hardware|chips?|accelerators?|engines?|(?:RL|reinforcement[- ]learning|training|optimi[sz]ation) algorithms?|"
    r"optimi[sz]ers?"
)
# A number asked for: "how much", "by how much", "the exact accuracy", "what FID numbers". ("How many GPUs"
# and the like are training details, asked before.)
_FIGURES_ASKED = re.compile(
    r"(?:^|[,;:—–]\s*|\b(?:and|but|by)\s+)how (?:much|many)\b(?! (?:\w+er|more|less)\b)|"
    r"\b(?:exact|explicit|precise) (?:[\w-]+ ){0,2}?(?:numbers?|values?|figures?|rates?|accuracy|scores?|counts?|"
    r"sizes?|amounts?|costs?)\b|"
    r"\bwhat (?:[\w-]+ ){0,3}?(?:numbers?|scores?|rates?|percentages?|values?|thresholds?|figures?|ratios?|margins?)"
    r"(?![\w-])",  # not "what the score-smoothing study says"
    re.I,
)
# A number as a sentence states a figure: standalone, not part of a name ("o1-like", "LLaDA-8B", "3D").
_FIGURE = re.compile(r"(?<![\w.-])\d+(?:[.,]\d+)*(?:\s?(?:%|×|x\b|-?fold\b|times\b|pp\b|points?\b))?(?![\w-])")

# What a question asks for, by its wording. Only the first match counts; comparison is decided by
# ``comparison_sides`` (it needs two sides), how and why by the question's first word.
FACET_ASKED: list[tuple[str, re.Pattern[str]]] = [
    (
        LIMITATIONS,
        re.compile(
            r"\b(?:limitations?|limits|weakness(?:es)?|drawbacks?|shortcomings?|downsides?|caveats?|"
            r"failure (?:modes?|cases?)|(?:where|when) (?:does|do|did) \S+(?: \S+){0,8}? (?:fail|break down)|cons\b|"
            r"disadvantages?)",
            re.I,
        ),
    ),
    # The hardware, compute and hyperparameters of a run: what an abstract seldom states (fitted on dev's
    # near-misses, "How many GPUs were used to train X?"; asked before results, which "how many" also reads).
    (
        SETUP,
        re.compile(
            r"\b(?:GPUs?|TPUs?|GPU[- ]hours?|hardware|learning[- ]rate|batch[- ]sizes?|hyper-?parameters?|epochs?|"
            r"model sizes?|how many (?:trainable |learnable )?parameters|(?:what|which) (?:[\w-]+ )?parameter counts?|"
            r"(?:what|which) (?:LoRA |adapter )?ranks?\b(?! (?:of|do|does|did)\b)|"
            # "what context length": a setting asked for; "beyond the training context length": a result
            r"how many (?:training )?tokens(?! per)|training tokens|(?:what|which) (?:training )?context length|"
            r"training (?:time|cost|budget)|GPU budget|wall[- ]clock|(?:inference |sampling )?latency|"
            r"(?:what|much|extra|added|additional|total) (?:[\w-]+ )?time\b|time per|how much (?:compute|memory|GPU)|"
            r"(?:memory|compute) (?:use|usage|footprint|cost|requirements?)|"
            r"how long (?:does|did|do) (?:it|they|\S+) (?:take|train)|run-?times?|running times?|timings?|"
            r"in (?:milli)?(?:seconds|minutes|hours|days)|(?:seconds|minutes|hours) per|"
            r"how many (?:milli)?(?:seconds|minutes|hours|days))\b",
            re.I,
        ),
    ),
    # Built, made or tested outside a computer: abstracts of simulated or in-silico work seldom say so.
    (
        VALIDATION,
        re.compile(
            r"\b(?:in the real world|real[- ]world (?:tests?|trials?|deployment|experiments?|robots?|hardware)|"
            r"(?:real|physical) (?:robots?|hardware)|wet[- ]?lab|in vitro|in vivo|synthesi[sz]ed|fabricated|"
            r"(?:validated|verified|confirmed|tested) experimentally|experimentally (?:validated|verified|confirmed|tested)|"
            r"clinical (?:trials?|validation)|(?:real|actual) deployments?|deployed in (?:practice|production)|piloted|"
            r"(?:with|by|in|at|involving|among) real (?:[\w-]+ )?(?:hospitals?|organi[sz]ations?|companies|users|"
            r"patients|clinics?)|"
            r"user stud(?:y|ies)|human (?:evaluation|study|studies|raters))\b",
            re.I,
        ),
    ),
    # A proof asked for in so many words ("Is there a formal proof that Smooth-Leaky prevents plasticity loss?"):
    # an empirical paper shows, it does not prove.
    (
        PROOF,
        re.compile(
            r"\b(?:(?:formal|rigorous|mathematical) (?:proofs?|guarantees?)|"
            r"(?:formally|rigorously|mathematically) (?:prove[sdn]?|proven|shown|guaranteed))\b",
            re.I,
        ),
    ),
    # Code asked for: most abstracts give no link, and a quoted sentence about the method does not release it.
    (
        CODE,
        re.compile(
            r"\b(?:code\b[^?.]{0,80}?\b(?:released|available|public|shared|open[- ]sourced?)|open[- ]sourced?|"
            r"(?:public|open|released) (?:source )?code|"
            r"release[sd]? (?:the |their |its )?(?:source )?code|github|repositor(?:y|ies))\b",
            re.I,
        ),
    ),
    (FIGURES, _FIGURES_ASKED),
    (
        BEST,
        re.compile(
            r"\bwhich\b(?![^?]{0,30}\bpapers?\b)[^?]{0,80}?\b(?:the\s+)?"
            r"(?:best|(?<!built )(?<!builds )(?<!build )on top|highest|most accurate|strongest)\b",  # not "built on top of"
            re.I,
        ),
    ),
    (
        NAMED,
        re.compile(
            rf"\b(?:which|what)\s+(?:of\s+the\s+(?:\S+\s+)?)?"
            rf"(?:(?!papers?\b|works?\b|stud(?:y|ies)\b|articles?\b)[\w-]+\s+){{0,2}}?(?:{_NAMED_HEADS})\b",
            re.I,
        ),
    ),
    (
        DATA,
        re.compile(
            r"\b(?:data ?sets?|benchmarks?|corpora|corpus|what data|which data|training data|evaluat\w* on|"
            r"test(?:ed)? on|trained on|experiments? on)\b",
            re.I,
        ),
    ),
    (
        RESULTS,
        re.compile(
            r"\b(?:results?|findings?|how (?:well|much|fast|many|large|big)|by how much|performance|accuracy|"
            r"speed-?ups?|improvements?|gains?|numbers?|outperform\w*|beat|better than|state[- ]of[- ]the[- ]art)\b",
            re.I,
        ),
    ),
]
_ASKED = dict(FACET_ASKED)  # by facet, for the facets asked_facet checks first
# A sentence of an abstract that states each facet (the facet is covered when a source has one).
FACET_CUES: dict[str, re.Pattern[str]] = {
    SETUP: re.compile(
        r"\b(?:GPUs?|TPUs?|A100s?|H100s?|V100s?|hours?|days|learning[- ]rates?|batch[- ]sizes?|hyper-?parameters?|"
        r"epochs?|memory|latency|throughput|FLOPs?|wall[- ]clock|"
        r"\d+(?:\.\d+)?\s?[BM]\b|\d+(?:\.\d+)?\s?(?:billion|million))",
        re.I,
    ),
    LIMITATIONS: re.compile(
        r"\b(?:limitations?|limited to|fails?\b|failure|cannot|can't|does not (?:scale|generali[sz]e|apply)|"
        r"patholog(?:y|ies)|collapses?\b|"
        # what another approach is held back by (its limits, asked of the paper that points them out)
        r"(?:limited|constrained|bottlenecked|hampered|hindered) by|suffers? from|still rel(?:y|ies) on|"
        r"sensitiv\w* to|(?:computationally|prohibitively) expensive|slow(?:er)? (?:[\w-]+ )?convergence|"
        r"struggles?|drawbacks?|weakness|only (?:applies|works|holds)|restricted to|at the (?:cost|expense) of|"
        r"trade-?offs?|future work|remains? (?:challenging|difficult|open)|leave[s]? .{0,40} (?:open|future)|"
        r"the (?:main )?(?:issue|problem|downside|catch) (?:with|is)|detrimental|downsides?)",
        re.I,
    ),
    DATA: re.compile(
        r"\b(?:data ?sets?|benchmarks?|corpus|corpora|suite|collected|trained on|evaluat\w* on|experiments? on|"
        r"tested on|tasks?\b|[A-Z][A-Za-z]*[A-Z0-9][A-Za-z0-9-]*(?:-\d+[A-Za-z]*)?)",
    ),
    # A winner named ("X outperforms ...", "the best-performing"), not "to the best of our knowledge".
    BEST: re.compile(
        r"\b(?:outperform\w*|best[- ]performing|perform(?:s|ed)? (?:the )?best|top[- ](?:performing|ranked)|"
        r"(?:achiev|obtain|reach|attain)\w* the (?:best|highest|strongest)|ranks? first|strongest|superior to|beats?)\b",
        re.I,
    ),
    # The work built, made or tested outside a computer.
    VALIDATION: re.compile(
        r"\b(?:real[- ]world (?:robots?|hardware|experiments?|tests?|trials?|deployment)|(?:real|physical) (?:robots?|hardware)|"
        r"wet[- ]?lab|in vitro|in vivo|synthesi[sz]ed|fabricated|experimentally (?:validated|verified|confirmed|tested)|"
        r"(?:validated|verified|confirmed|tested) (?:experimentally|in the lab)|clinical (?:trials?|validation)|"
        r"deploy(?:ed|ment)s?|user stud(?:y|ies)|human (?:evaluation|study|studies|raters)|participants)\b",
        re.I,
    ),
    CODE: re.compile(
        r"(?:github|gitlab|huggingface)\.|https?://|\b(?:code|implementation|models?|data) (?:and \w+ )?(?:is|are|will be) "
        r"(?:publicly |openly |made )?(?:available|released|public)|\bopen[- ]sourced?\b|\bwe release\b",
        re.I,
    ),
    PROOF: re.compile(
        r"\b(?:prove[sdn]?|proofs?|theorems?|provabl[ey]|guarantees?|guaranteed|theoretical(?:ly)?|lemmas?)\b", re.I
    ),
    RESULTS: re.compile(
        _FIGURE.pattern
        + r"|\b(?:outperform\w*|improv\w*|achiev\w*|surpass\w*|state[- ]of[- ]the[- ]art|reduc\w*|faster|"
        r"speed-?ups?|gains?|better|superior|competitive|matches|exceed\w*|higher|lower|"
        r"(?:prove|show|establish|demonstrate|reveal)s?|we find|findings)\b",
        re.I,
    ),
}
# Training and compute details, by which of them is asked: a question about GPUs is not answered by a sentence
# that states a learning rate. (asked, stated) pairs; a question that asks none of them in these words is
# answered by any (FACET_CUES[SETUP]).
SETUP_PARTS: list[tuple[re.Pattern[str], re.Pattern[str]]] = [
    (  # hardware and time
        re.compile(
            r"\b(?:GPUs?(?! memory)|TPUs?|GPU[- ]hours?|hardware|training time|wall[- ]clock|"
            r"how long (?:does|did|do) \S+ train)\b",
            re.I,
        ),
        re.compile(r"\b(?:GPUs?|TPUs?|[AHV]100s?|GPU[- ]hours?|hours?|days|wall[- ]clock|hardware)\b", re.I),
    ),
    (  # training time cut by the method: a relative figure answers it ("training time reductions of 13.01%")
        re.compile(
            r"\b(?:cut\w*|reduc\w*|shorten\w*|less|lower\w*|sav\w*|speed\w*|faster)\b(?:\W+\w+){0,6}?\W+training time|"
            r"\btraining time\b(?:\W+\w+){0,3}?\W+(?:reduc\w*|cut|sav\w*|drop\w*)",
            re.I,
        ),
        re.compile(r"\btraining (?:time|cost)s?\b[^.]*\d|\d[^.]*\btraining (?:time|cost)s?\b", re.I),
    ),
    (  # hyperparameters
        re.compile(r"\b(?:learning[- ]rates?|batch[- ]sizes?|hyper-?parameters?|epochs?|schedules?)\b", re.I),
        re.compile(r"\b(?:learning[- ]rates?|batch[- ]sizes?|hyper-?parameters?|epochs?|warm-?up|schedules?)\b", re.I),
    ),
    (  # a low-rank method's rank ("what rank did ABBA use?"): a number given as one
        re.compile(r"\b(?:what|which) (?:LoRA |adapter )?ranks?\b", re.I),
        re.compile(r"\b(?:rank|r)\s?(?:=|of)\s?\d+|\branks? (?:\d+|up to \d+)", re.I),
    ),
    (  # model size
        re.compile(
            r"\b(?:model sizes?|how many (?:trainable |learnable )?parameters|parameter counts?|"
            r"how (?:big|large) (?:is|are|were))\b",
            re.I,
        ),
        re.compile(
            r"\b(?:\d+(?:\.\d+)?\s?[BM]\b|\d+(?:\.\d+)?\s?(?:billion|million)|model sizes?|"
            r"\d[\d.,]*\s?[BMK]?\s+(?:trainable\s+)?parameters|parameter counts?)",
            re.I,
        ),
    ),
    (  # memory
        re.compile(r"\bmemory\b", re.I),
        re.compile(r"\b(?:memory|VRAM|footprint)\b", re.I),
    ),
    (  # tokens trained on, context length
        re.compile(r"\b(?:how many (?:training )?tokens(?! per)|training tokens|context length)\b", re.I),
        re.compile(r"\d[\d.,]*\s?[KMBT]?\s+tokens\b(?! per)|\bcontext (?:length|window)s? of\b|\b\d+[Kk]\b"),
    ),
    (  # time taken
        re.compile(
            r"\b(?:(?:what|much|extra|added|additional|total) (?:[\w-]+ )?time|time per|how long|run-?times?|"
            r"running times?|timings?|in (?:milli)?(?:seconds|minutes|hours|days)|(?:seconds|minutes|hours) per)\b",
            re.I,
        ),
        re.compile(r"\b(?:seconds?|minutes?|hours?|ms|latency|wall[- ]clock|time per)\b", re.I),
    ),
    (  # latency, throughput and compute cost
        re.compile(
            r"\b(?:latency|throughput|FLOPs?|how much compute|compute (?:cost|budget)|training (?:cost|budget)|"
            r"per second)\b",
            re.I,
        ),
        re.compile(
            r"\b(?:latency|throughput|FLOPs?|comput\w* (?:cost|budget|overhead)|speed-?ups?|faster)\b|\d(?:\.\d+)?\s?[x×]\b",
            re.I,
        ),
    ),
]
# A sentence that names a dataset or benchmark in words (the facet DATA); a name of one is told by its shape
# (``_dataset_like``).
_DATA_WORDS = re.compile(
    r"\b(?:data ?sets?|benchmarks?|corpus|corpora|suites?|collected|trained on|evaluat\w* on|experiments? on|"
    r"tested on|leaderboards?|(?:validat|evaluat|test|assess|benchmark|experiment)\w*\b[^.;]{0,60}?\bon)\b",
    re.I,
)
# A sentence about earlier work or the problem ("Existing methods fail to ...", "However, current models
# struggle ...") states others' limits, not the paper's own.
_OTHERS = re.compile(
    r"\b(?:existing|prior|previous|current|conventional|traditional|standard|earlier|typical|popular|"
    r"state-of-the-art|recent|many|most|these|such)\b|^(?:however|while|although|despite|yet)\b",
    re.I,
)
# A paper's own limits, as abstracts state them: "fails", "cannot" and "struggles" there are nearly always said of
# the problem or of earlier methods ("Directly feeding raw parameters fails to ..."), so they are not counted.
_OWN_LIMITS = re.compile(
    r"\b(?:limitations?|limited to|does not (?:scale|generali[sz]e|apply)|drawbacks?|weakness|"
    r"only (?:applies|works|holds)|restricted to|at the (?:cost|expense) of|trade-?offs?|future work|"
    r"remains? (?:challenging|difficult|open)|leave[s]? .{0,40} (?:open|future)|"
    r"the (?:main )?(?:issue|problem|downside|catch) (?:with|is)|detrimental|downsides?)",
    re.I,
)
_ASKS_OTHERS = re.compile(
    r"\b(?:motivat\w*|existing|prior|previous|current|conventional|traditional|standard|other|earlier|"
    r"identif\w*|warn\w*|discover\w*|uncover\w*|reveal\w*|point(?:s|ed)? out|classical)\b",  # "a failure it identified"
    re.I,
)
# "What shortcoming of adapter-only tuning pushes people to ...?", "What weaknesses of classical imaging does the
# analysis explain?": the limits of one thing, asked of another (not "What are the limitations of ABBA?").
_LIMITS_OF = re.compile(
    r"\b(?:limitations?|limits|weakness(?:es)?|drawbacks?|shortcomings?|downsides?) (?:of|in|with) "
    r"(?:the |a |an )?(?P<of>[^?;]+?)(?:,[^?]*?)?\s+(?:does|do|did|push\w*|motivat\w*|lead\w*|drive\w*|make\w*)\b",
    re.I,
)


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


# Where a named thing stands when a sentence names what was used: after "on", "across", "including", "such
# as", a comma or "and" of a list ("evaluated on GSM8K and MATH"), not as a subject ("While MuZero enables").
_OBJECT_OF = re.compile(
    r"(?:\b(?:on|across|over|including|includes?|such as|e\.g\.|i\.e\.|like|using|uses?|used|from|with|via|and|or|"
    r"vs\.?|versus|than|compared to|in|among|against|outperform\w*|surpass\w*|beat\w*)|[,(:;/])\s*(?:the\s+|a\s+|an\s+)?(?:[\w-]+\s+)?$",
    re.I,
)
_NAME_TOKEN = re.compile(r"(?<![\w-])[A-Za-z][\w-]*[A-Za-z0-9](?![\w-])")


def _named_here(sentence: str, m: re.Match[str], own: set[str]) -> bool:
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
    return shaped and bool(_OBJECT_OF.search(sentence[max(0, m.start() - 40) : m.start()]))


_FAMILIES_ASKED = re.compile(r"\b(?:famil(?:y|ies)|kinds?|types?|classes|categories) of\b", re.I)


def _family_named(sentence: str, m: re.Match[str]) -> bool:
    """Whether token ``m`` names a family of methods by what it is based on ("GNN-based", "SMILES-based"), standing
    where a named thing used stands (``_OBJECT_OF``): the answer to "which families of ...?"."""
    return bool(re.fullmatch(r"[A-Z][A-Za-z0-9]*[A-Z0-9][A-Za-z0-9]*-(?:based|style|type)", m.group())) and bool(
        _OBJECT_OF.search(sentence[max(0, m.start() - 40) : m.start()])
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


# "How does X compare with Y", "X vs. Y", "difference between X and Y", "is X better than Y".
_COMPARE = re.compile(
    r"\b(?:compare[sd]?|comparison|versus|vs\.?|differ(?:s|ence|ences)?|contrast|relate[sd]? to|"
    r"better than|worse than|similar to)\b",
    re.I,
)
# Question boilerplate: never an aspect (rag_papers/words/boilerplate.txt), with the retrieve stage's query
# boilerplate and the stop words.
BOILERPLATE = load_words("boilerplate")
# What is left of a name or phrase once these are dropped says nothing of its own.
_QUESTION_WORDS = frozenset(["what", "which", "who", "whom", "whose", "how", "why", "when", "where", "whether"])
_TOKEN = re.compile(r"\d+(?:\.\d+)?%|[^\W_](?:[\w.+'/-]*[^\W_])?")
_CAPS = re.compile(r"[A-Z]")
# Boilerplate nouns that end a description as its head ("draft model"): kept in the phrase as written.
_HEAD_NOUNS = frozenset(
    [
        "model",
        "models",
        "method",
        "methods",
        "approach",
        "approaches",
        "framework",
        "frameworks",
        "system",
        "systems",
        "technique",
        "techniques",
        "data",
        "dataset",
        "datasets",
        "benchmark",
        "benchmarks",
    ]
)


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

    @property
    def central(self) -> Aspect | None:
        """What the question is mainly about: its rarest name, else its first description."""
        names = [a for a in self.aspects if a.kind == NAME]
        if names:
            return min(names, key=lambda a: a.df if a.df is not None else 1 << 30)
        descs = [a for a in self.aspects if a.kind == DESCRIPTION]
        return max(descs, key=lambda a: len(a.text)) if descs else None

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


# Abbreviations whose full stop ends no sentence: the word after "e.g." may be a name.
_ABBREVIATIONS = frozenset(["e.g", "i.e", "etc", "vs", "cf", "al", "approx", "resp", "viz"])
# An adverb opening a sentence ("Mechanistically, how do ...?"): how something is asked, not what about. Not
# one inside ("locally weighted regression", "tested empirically"): that is part of what is asked.
_MANNER = re.compile(r"[a-z]{3,}(?:ically|ally|ously|ively|ently|antly|ably|ibly|edly|ingly|fully|lessly)$", re.I)
# A quoted example ("reads 'Tom owns a bike and Sara owns a kite'"): its capitalised words are the example's
# people and things, not names to look for. A quoted title ('Attention Is All You Need') has no lower-case run.
_QUOTED = re.compile(r"(?<!\w)(?:'([^']+)'|\"([^\"]+)\"|\u2018([^\u2019]+)\u2019|\u201c([^\u201d]+)\u201d)(?!\w)")


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


# "Does X also work for Y?", "Does the method carry over to Y?", "Does PepBenchmark include Y?": a yes-or-no
# question whether a paper reaches Y. Answered only by a source that names Y (every content word of one of its
# "or" alternatives), whatever else it shares with the question. Not "Is there work on ...": that asks for papers.
# A yes-or-no question about a paper, not "Is there work on ...?" (that asks for papers).
_YES_NO = (
    r"^\s*(?:does|do|did|can|could|is|are|was|were|has|have|will|would)\b"
    # not "is there work / an image generator that ...": a paper looked for, not one asked about
    r"(?!\s+there\s+(?:(?:a|an|any|some)\b|(?:work|papers?|research|studies|study)\b))"
)
_SCOPE_ASKED = re.compile(
    _YES_NO + r"[^?]*?"
    r"\b(?:also|still|ever|carr(?:y|ies) over|transfers?(?!\s+(?:functions?|learning)\b)|extends?|generali[sz]es?|includes?|covers?|"
    r"appl(?:y|ies) to|works? (?:for|on|with)|(?:evaluated|tested|benchmarked|applied|validated) (?:\w+ly )?"
    r"(?=on|in|against|with|to)|(?:robust|resistant|vulnerable|sensitive|immune) (?=to|against)|"
    r"holds? up (?=against|to|under|when))\b(?P<rest>[^?]*)",
    re.I,
)
# "How robust is IG-FWI when the data are noisy?": a scope asked as a wh-question.
_HOW_ROBUST = re.compile(
    r"^\s*how (?:robust|sensitive|resistant|vulnerable) (?:is|are|was|were)\s+[^?]*?\b(?:to|against|when|under|if)\s+"
    r"(?P<rest>[^?]*)",
    re.I,
)
_SCOPE_END = re.compile(r"\s+(?:the way|as well as|as|like|compared|than|rather|—|–)\b.*$|[,;:].*$", re.I)
_SCOPE_OBJECT = re.compile(r"\b(?:to|for|on|in|of|with|under|when|at|across)\s+(.+)$", re.I)


# "Can it cope with adversarial delays instead of stochastic ones?": what the paper does comes after the contrast,
# what is asked before it (after its last preposition).
_CONTRAST_ASKED = re.compile(
    _YES_NO + r"(?P<before>[^?]*?)\s+(?:instead of|rather than)\b",
    re.I,
)
# What a contrast asks a paper to reach is a setting of a few words ("adversarially chosen delays", "medical ultrasound
# imaging"); read round 26's longer ones were whole clauses of a paraphrase, which no abstract has word for word.
_SETTING_WORDS = 4
_LAST_OBJECT = re.compile(r".*\b(?:to|for|on|in|with|under|when|at|across|if)\s+(.+)$", re.I)


# "Has anyone combined X with Y?", "Which papers apply X to Y?", "Is there a paper that combines X with Y to ...?":
# two topics asked of one paper. Each may be in some abstract; the question is whether one abstract joins them.
_COMBINATION_ASKED = re.compile(
    r"^\s*(?:has anyone|have (?:people|researchers)|is there|are there|does any|do any|any work|which papers?|"
    r"what (?:papers?|work))\b[^?]*?\b(?:combin\w*|pair\w*|merg\w*|integrat\w*|appl(?:y|ies|ied|ying)|brings?|"
    r"brought|bringing|plug(?:s|ged|ging)?|insert\w*|incorporat\w*)\s+(?P<x>[^?]{3,80}?)\s+(?:with|to|into|inside)\s+"
    r"(?P<y>[^?]+?)"
    r"(?:\s+(?:to|so|in order to|for|that)\s+[^?]*)?\s*\??\s*$",
    re.I,
)
# Words that name the whole field, not a topic to join: "apply machine learning to drug discovery" asks one thing.
_FIELD_WORDS = frozenset(
    t
    for w in ["machine", "learning", "deep", "neural", "network", "networks", "AI", "artificial", "intelligence"]
    for t in keyword_tokens(w)
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


def scope_asked(question: str) -> str | None:
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
        if len(_content(target)) > _SETTING_WORDS:
            return None  # a clause ("... explain why models produce novel samples"): the claim asked about, reworded
    if m and not obj and _content(target) <= _QUALITY_KEPT:
        return None  # "still answer correctly", "still accurate": whether quality holds, not a setting reached
    return target if any(t not in _boiler_stems() for t in keyword_tokens(target)) else None


# What "does it still ...?" asks of quality, with no setting after it (read round 22).
_QUALITY_KEPT = frozenset(
    t
    for w in ["accurate", "accuracy", "correct", "correctly", "answer", "work", "perform", "well", "good", "reliable"]
    for t in keyword_tokens(w)
)


# "Which papers ...", "Is there work on ...", "Are there papers ...": asked for a list of papers.
_LISTING_STARTS = [
    # "which papers ...", "what work ...", "which of these papers ..."
    r"(?:which|what)\s+(?:of\s+(?:these|the|those|all\s+the)\s+)?(?:papers?|works?|studies|articles|abstracts)\b",
    r"(?:is|are)\s+there\s+(?:any\s+)?(?:\w+\s+)?(?:papers?|works?|research|studies|articles)\b",  # "is there work"
    r"any\s+(?:papers?|work|research|studies)\s+(?:on|about)\b",  # "any papers on ..."
]
_LISTING = re.compile(r"^\W*(?:" + "|".join(_LISTING_STARTS) + ")", re.IGNORECASE)


_DATA_DESCRIBED = re.compile(
    r"\bdata\s+(?:that\s+|which\s+)?(?:lying|lies|lie|drawn|sampled|distributed|supported|concentrated|living)\b", re.I
)


_TIME_SAVED = re.compile(
    r"\btime\b[^?]{0,40}?\b(?:sav(?:e|es|ed|ing|ings)|cut|cuts|reduc\w*|shorten\w*)\b|"
    r"\b(?:sav(?:e|es|ed|ing)|cut|reduc\w*|shorten\w*)\b[^?]{0,20}?\btime\b",
    re.I,
)


def asks_for_papers(question: str) -> bool:
    return bool(_LISTING.match(question))


# The facets that pick papers out of a list by what each abstract states of itself, whatever its topic.
LISTED_BY_FACET = frozenset([CODE])
# The words such a question uses for the facet itself ("give a public GitHub link to their code"): no topic.
_FACET_WORDS = {
    CODE: frozenset(
        t
        for w in [
            "code",
            "codes",
            "github",
            "repository",
            "repositories",
            "repo",
            "link",
            "links",
            "linked",
            "url",
            "public",
            "publicly",
            "available",
            "release",
            "released",
            "open",
            "source",
            "open-source",
            "implementation",
            "give",
            "gives",
            "provide",
            "provides",
            "share",
            "shares",
            "shared",
            "abstract",
            "abstracts",
            "right",
            "directly",
        ]
        for t in keyword_tokens(w)
    )
}


def listed_by_facet(question: str) -> bool:
    """Whether ``question`` asks for the papers that state a facet of themselves ("Which papers link their
    code?"): every retrieved paper is then read, however far its topic is from the question's."""
    return asks_for_papers(question) and asked_facet(question) in LISTED_BY_FACET


def only_facet_asked(question: str) -> str | None:
    """The facet a question asks papers for and nothing else ("Which of these papers give a public GitHub
    repository for their code?"), else None: its evidence is a paper stating it, not a topic's closeness."""
    facet = asked_facet(question) if asks_for_papers(question) else None
    if facet not in LISTED_BY_FACET:  # ``listed_by_facet``, on the facet read once
        return None
    return facet if not _content(question) - _FACET_WORDS[facet] else None


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


def addresses(ev: _Evidence, n: int, rules: CoverageRules) -> bool:
    """Whether source ``n`` addresses one aspect on its own: a name found in it, a description's words or a
    sentence close in meaning."""
    if ev.aspect.kind != DESCRIPTION:
        return n in ev.found
    return ev.share.get(n, 0.0) >= rules.word_share or ev.cos.get(n, (0.0, ""))[0] >= rules.describe_floor


# "decide which experts fire and how much weight each one gets": an indirect question (its subject before its verb),
# part of what the question asks how to do, not an amount asked for (read round 22). "and how much memory does it
# save?" and "and how many samples?" ask for one.
_INDIRECT_AMOUNT = re.compile(
    r"\band\s+how (?:much|many)\b"
    r"(?!(?:\s+[\w-]+){0,4}?\s+(?:is|are|was|were|do|does|did|can|could|will|would|has|have|had|should)\b)"
    r"(?!(?:\s+[\w-]+){0,3}\s*[?.]?\s*$)",
    re.I,
)


def asked_facet(question: str) -> str | None:
    """The facet ``question`` asks for, by its wording (None: what the papers do in general)."""
    question = _INDIRECT_AMOUNT.sub("and", question)
    if comparison_sides(question):
        # "How many minutes does CryoNet.Refine take compared with Phenix?" asks for a run's cost, on both sides
        return SETUP if _ASKED[SETUP].search(question) else COMPARISON
    if _ASKED[VALIDATION].search(question):
        return VALIDATION  # "Were the designs validated in the wet lab?": not a scope of words to find
    if _ASKED[PROOF].search(question):
        return PROOF
    if scope_asked(question):
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


def comparison_sides(question: str) -> list[str]:
    """The two things a comparison question compares, as written ("SWAX", "FlashLLA"), else [].

    Two names around a comparison word: "How does SWAX compare with FlashLLA?", "ABBA vs LoRA",
    "difference between BAM and ALiBi". A comparison with one named side ("how does ABBA compare
    to prior work?") has one paper to read and is answered as a question about it.
    """
    cue = _COMPARE.search(question)
    if not cue:
        return []
    names, _ = split_question(question)
    at = [(question.find(n), n) for n in names]
    before = [n for i, n in at if 0 <= i < cue.start()]
    after = [n for i, n in at if i >= cue.end()]
    if before and after:
        return [before[-1], after[0]]  # "SWAX compare with FlashLLA", "ABBA vs LoRA"
    if len(after) >= 2:
        return after[:2]  # "the difference between BAM and ALiBi"
    return []


# ------------------------------------------------------------------ checking it against the sources
@dataclass(frozen=True)
class CoverageRules:
    """Where an aspect counts as covered. Fitted on eval/qa.jsonl's dev part (eval/coverage_study.py)."""

    describe_floor: float = 0.4  # a description phrase: its best cosine to a source sentence reaches this
    word_share: float = 0.5  # ...or this share of its words are in one source's title and abstract
    # The central aspect uncovered and no quoted sentence this close: refused. Fitted to 0 (never): on dev,
    # retrieval's own floor already refuses the questions that nothing is close to.
    refuse_below: float = 0.0
    # Only a technical description can be missing: one with a word this rare in English (wordfreq's Zipf
    # scale: 2 is once per 100 million words), or of several words this rare on average ("noisy labels").
    # "speculative decoding" is; "keep trying" is a way of asking.
    technical_zipf: float = 2.0
    compound_zipf: float = 3.5
    # A description is named uncovered only when, besides the above, no indexed abstract contains any of its
    # words (the keyword index's document frequency, as for names): "speculative decoding" on the seeds. On a
    # labelled draw of dev's candidates (eval/results/uncovered_sample_dev.jsonl) no setting of the rules above
    # alone named absent descriptions at a precision above 0.4 (paraphrases use other words by design); with
    # this gate the defaults named none of the draw's present ones. A wrong "the abstracts don't mention"
    # misleads more than a missing one. False: the rules above alone (the study's comparison).
    describe_absent_only: bool = True


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

    question: str
    facet: str | None
    sides: list[str]
    evidence: list[_Evidence]
    # The sources' own terms: the abbreviations they define ("(TGNN)") and their titles' words. A dataset or
    # model a sentence names is none of these (a paper's own method is not what it was tested on).
    own_terms: frozenset[str] = frozenset()

    def facet_test(self) -> Callable[[str], bool]:
        """The test a sentence passes when it states the facet asked for, as this question asks it (never, for a
        facet without a test of its own: how, why, a comparison). Built once per question by its callers."""
        names = [e.aspect.text for e in self.evidence if e.aspect.kind == NAME]
        return states_facet(self.question, self.facet, [*names, *self.own_terms])


@lru_cache(maxsize=256)
def _setup_cues(question: str) -> tuple[re.Pattern[str], ...]:
    asked = tuple(stated for ask, stated in SETUP_PARTS if ask.search(question))
    return asked or (FACET_CUES[SETUP],)


_AUX = frozenset(
    ["does", "do", "did", "is", "are", "was", "were", "can", "could", "has", "have", "had", "will", "would", "should"]
    + ["the", "a", "an", "of"]
)


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
    generic = {"number", "numbers", "value", "values", "figure", "figures", "amount", "amounts"}
    stems = {
        t
        for w in words
        if w.lower() not in generic and not re.fullmatch(r"(?i)\w+er|more|less", w)
        for t in keyword_tokens(w)
    }
    return frozenset(stems - _boiler_stems())


def states_facet(question: str, facet: str | None, names: Sequence[str]) -> Callable[[str], bool]:
    """The test a sentence passes when it states ``facet`` as ``question`` asks for it: training details by the
    part asked (GPUs are not answered by a learning rate); data by a dataset named in words or by its shape,
    other than the question's own names; names asked for by one that stands where a thing used is named; figures
    by a number; limitations by ``FACET_CUES`` in a sentence not about others' work; results by ``FACET_CUES``."""
    if facet == SETUP:
        cues = _setup_cues(question)
        return lambda s: any(c.search(s) for c in cues)
    own = {n.lower() for n in names}
    if facet == DATA:
        return lambda s: bool(_DATA_WORDS.search(s)) or any(_dataset_like(s, m, own) for m in _NAME_TOKEN.finditer(s))
    if facet == NAMED:
        if _FAMILIES_ASKED.search(question):  # "which families of baselines?": "GNN-based, PLM-based models"
            return lambda s: any(_named_here(s, m, own) or _family_named(s, m) for m in _NAME_TOKEN.finditer(s))
        return lambda s: any(_named_here(s, m, own) for m in _NAME_TOKEN.finditer(s))
    if facet == FIGURES:
        focus = figure_focus(question)
        if not focus:
            return lambda s: bool(_FIGURE.search(s))
        need = (len(focus) + 1) // 2  # "false-positive rate": not any number beside a "rate"
        return lambda s: bool(_FIGURE.search(s)) and len(focus & set(keyword_tokens(s))) >= need
    if facet == LIMITATIONS:
        if _asks_others_limits(question, own):  # "what drawbacks of adapter tuning motivate ...?": others' limits
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
_ROUGHLY = re.compile(
    r"(?:~|≈|\b(?:roughly|about|around|approximately|nearly|almost|some|circa|over|up to))\W*$"
    r"|\b(?:remember|recall|i think|if i'm not mistaken|or so)\b",
    re.I,
)
ROUGH_FIGURE = 0.1  # a figure remembered roughly matches one this close, relative to it (16x: 16.8x; 21%: 20.58%)


def _has_figure(abstract: str, figure: re.Match[str], name: str, question: str | None) -> bool:
    """Whether ``abstract`` gives the figure ``name``: the same number (its whole part: "13%" is "13.01%"), or, when
    the question remembers it roughly ("~15x", "about 21%", "if I remember"), one within ``ROUGH_FIGURE`` of it."""
    value = float(figure.group(1))
    before = question[: question.find(name)] if question and name in question else ""
    rough = name.startswith("~") or bool(_ROUGHLY.search(before[-30:])) or bool(question and _ROUGHLY.search(question))
    for m in re.finditer(r"(?<![\w.])\d+(?:\.\d+)?", plain_text(abstract)):
        v = float(m.group())
        if int(v) == int(value) and (v == value or value == int(value)):
            return True
        if rough and abs(v - value) <= ROUGH_FIGURE * value:
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


def _spelt_out(acronym: str, abstract: str) -> bool:
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
                if k < len(letters) and _compound_initial(w, letters[k]):
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


def _compound_initial(word: str, letter: str) -> bool:
    """Whether ``word`` is two English words of three letters or more, the second starting with ``letter``
    ("autoencoder": auto, encoder)."""
    from wordfreq import zipf_frequency

    return any(
        word[i] == letter and zipf_frequency(word[:i], "en") >= 2.5 and zipf_frequency(word[i:], "en") >= 2.5
        for i in range(3, len(word) - 2)
    )


def name_found(
    name: str, sources: Sequence[tuple[str, str]], tokens: Sequence[set[str]], question: str | None = None
) -> list[int]:
    """The sources (1-based) that contain ``name``: its words, and a name of several words as a phrase ("Decision
    Transformer" is not in an abstract that says "decision" once and "Transformer" later); hyphens count as spaces
    and the last word may take a plural s."""
    stems = keyword_tokens(name)
    acronyms = {
        t for w in re.findall(r"[A-Za-z]+", name) if re.fullmatch(r"[A-Z]{3,6}s?", w) for t in keyword_tokens(w)
    }
    has = [
        n
        for n, toks in enumerate(tokens, 1)
        if all(t in toks or _versioned(t, toks) or (t in acronyms and _spelt_out(t, sources[n - 1][1])) for t in stems)
    ]
    figure = _FIGURE_NAME.fullmatch(name)
    if figure:
        return [n for n, (_, a) in enumerate(sources, 1) if n in has or _has_figure(a, figure, name, question)]
    acronym = re.fullmatch(r"([A-Z]{2,6})s?", name)
    if acronym:  # "GNNs" of an abstract that defines "(TGNN)": a kind of GNN, named by its own abbreviation
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
    if not dropped and not capitalised:
        return has
    phrase = re.compile(r"(?<!\w)" + re.escape(" ".join(words)) + r"(?:s|es)?\W")
    return [n for n in has if phrase.search(_flat(" ".join(sources[n - 1])))]


def _word_df(word: str, names_df: Callable[[str], int]) -> int:
    """``names_df`` of a word of a description, spelt as the abstracts may spell it: "parameterised" as
    "parameterized", "timesteps" as "time steps" (two words of English, each of three letters or more)."""
    df = names_df(word)
    if df:
        return df
    american = re.sub(r"is(e|es|ed|ing|ation|ations)$", r"iz\1", word, flags=re.I)
    if american != word and (df := names_df(american)):
        return df
    for i in range(3, len(word) - 2):
        a, b = word[:i], word[i:]
        za, zb = zipfs(a), zipfs(b)
        if a.isalpha() and b.isalpha() and za and zb and min(za + zb) >= 3 and (df := names_df(f"{a} {b}")):
            return df
    return 0


def analyse(
    question: str,
    sources: Sequence[tuple[str, str]],
    embedder: TextEmbedder | None,
    names_df: Callable[[str], int] | None = None,
    cache: dict[str, Any] | None = None,
) -> Analysis:
    """The aspects of ``question`` and their evidence in each of ``sources`` ((title, abstract) pairs).

    ``names_df``: how many indexed papers contain a name's words (``Index.keyword_matches``'s count);
    without it a name's document frequency is unknown. ``cache``: sentence embeddings to reuse.
    """
    names, phrases = split_question(question)
    facet = asked_facet(question)
    out = Analysis(question, facet, comparison_sides(question), [])
    tokens = [set(paper_text(t, a).split()) for t, a in sources]
    sents = [sentences(plain_text(a)) for _, a in sources]
    for name in names:
        stems = keyword_tokens(name)
        if not stems:
            continue
        ev = _Evidence(Aspect(name, NAME, df=names_df(name) if names_df is not None else None))
        ev.found = {n: None for n in name_found(name, sources, tokens, question)}
        out.evidence.append(ev)
    phrase_stems = [(p, [t for t in keyword_tokens(p) if t not in _boiler_stems()]) for p in phrases]
    phrase_stems = [(p, st) for p, st in phrase_stems if st]
    sims = _phrase_sims([p for p, _ in phrase_stems], sents, embedder, cache)
    for (phrase, stems), per_source in zip(phrase_stems, sims):
        # df: the most papers any one of its words is in (0: no indexed abstract has any; None: unknown).
        words = [w for w in re.findall(r"[^\W_][\w-]*", phrase) if set(keyword_tokens(w)) - _boiler_stems()]
        df = max((_word_df(w, names_df) for w in words), default=None) if names_df is not None else None
        ev = _Evidence(Aspect(phrase, DESCRIPTION, df=df))
        ev.share = {n: sum(t in toks for t in stems) / len(stems) for n, toks in enumerate(tokens, 1)}
        ev.cos = per_source
        out.evidence.append(ev)
    out.own_terms = own_terms(sources)
    facet_evidence(out, sources, sents, tokens)
    return out


# The facets a sentence can be tested for (``states_facet``); how, why and a comparison are judged otherwise.
TESTED_FACETS = frozenset([LIMITATIONS, SETUP, VALIDATION, PROOF, CODE, NAMED, BEST, DATA, FIGURES, RESULTS])
_DEFINED = re.compile(r"\(([A-Za-z][\w-]*[A-Za-z0-9])\)")


def own_terms(sources: Sequence[tuple[str, str]]) -> frozenset[str]:
    """The sources' own terms, lower-cased: the abbreviations their abstracts define, the words of the terms they
    define ("Reinforcement Learning with Verifiable Rewards (RLVR)") and their titles' words."""
    terms: set[str] = set()
    for title, abstract in sources:
        for m in _DEFINED.finditer(abstract):
            terms.add(m.group(1).lower())
            before = _NAME_TOKEN.findall(abstract[max(0, m.start() - 80) : m.start()])
            terms.update(t.lower() for t in before[-(sum(c.isupper() for c in m.group(1)) + 2) :])
        terms.update(t.lower() for t in _NAME_TOKEN.findall(title))
    return frozenset(terms | {t[:-1] for t in terms if t.endswith("s")})


def _content(text: str) -> set[str]:
    return {t for t in keyword_tokens(text) if t not in _boiler_stems()}


def _combination_evidence(tokens: Sequence[set[str]], pair: tuple[str, str]) -> _Evidence:
    """Where two topics are joined: a source with two thirds of the specific content words of each (all of them
    would miss a paraphrase; half, a two-word side of which one word is everywhere)."""
    ev = _Evidence(Aspect(f"{pair[0]} together with {pair[1]}", FACET))
    sides = [_content(x) - _FIELD_WORDS for x in pair]
    for n, toks in enumerate(tokens, 1):
        if all(len(side & toks) >= len(side) * 2 / 3 for side in sides):
            ev.found[n] = None
    return ev


def _scope_evidence(analysis: Analysis, tokens: Sequence[set[str]], target: str) -> _Evidence:
    """Where a scope question's target is reached: a source that has every content word of one of its "or"
    alternatives, and is the paper asked about (it has the question's names that any source has, and half the
    content words of the subject: "Does [the INR + grid inversion method] carry over to [3D elastic inversion]?").
    """
    ev = _Evidence(Aspect(target, FACET))
    options = [o for o in (_content(x) for x in re.split(r"\s+or\s+", target)) if o]
    m = _scope_match(analysis.question)
    cue_at = m.start("rest") if m else max(0, analysis.question.find(target))
    subject = _content(re.sub(r"(?i)^\s*\w+\s+", "", analysis.question[:cue_at]))
    subject -= {t for e in analysis.evidence if e.aspect.kind == NAME for t in keyword_tokens(e.aspect.text)}
    names = [e for e in analysis.evidence if e.aspect.kind == NAME and e.found]
    for n, toks in enumerate(tokens, 1):
        if any(n not in e.found for e in names):
            continue  # another paper than the one asked about
        if subject and len(subject & toks) < len(subject) / 2:
            continue
        if any(o <= toks for o in options):
            ev.found[n] = None
    return ev


# "What regret bound does LAMIR achieve?", "What's the exact formula of Smooth-Leaky?": what a question about a
# named paper asks for, its head noun phrase.
_WH_HEAD = re.compile(
    r"^\s*(?:what(?:'s| is| are| was| were)?|which)\s+(?:the\s+|a\s+|an\s+)?"
    r"(?:(?:exact|explicit|precise|main|key|specific|concrete)\s+)?(?P<head>(?:[\w-]+\s+){0,2}?[\w-]+?)\s+"
    r"(?:of|does|do|did|is|are|was|were|has|have|had|for|in|on|at|used|can|could|would|will|that|to)\b",
    re.I,
)


# Kinds of thing a question asks to be named ("what baseline", "which pretrained network"): the abstract names
# one without using the kind's word, so the head test does not apply (names asked for are a facet of their own).
_NAMED_KINDS = frozenset(
    w + s
    for w in ["baseline", "network", "model", "dataset", "benchmark", "method", "algorithm", "architecture"]
    + ["backbone", "encoder", "tool", "game", "environment", "language", "task"]
    for s in ("", "s")
) | {"library", "libraries"}


def _found_names(analysis: Analysis) -> list[_Evidence]:
    """The question's names that some source has, not the field's and not a likeness: what names a paper asked about."""
    return [
        e
        for e in analysis.evidence
        if e.aspect.kind == NAME and e.found and not ignored_name(e.aspect.text, analysis.question)
    ]


def _head_evidence(analysis: Analysis, tokens: Sequence[set[str]]) -> _Evidence | None:
    """What a wh-question about a named paper asks for ("regret bound" of LAMIR), found when the first source
    with the paper's name has a word of it. None when the question is of another shape, names no paper any
    source has, or asks for a head of boilerplate only ("what method ...")."""
    m = _WH_HEAD.match(analysis.question)
    head = _content(m.group("head")) if m else set()
    names = _found_names(analysis)
    if not m or not head or not names or m.group("head").lower() in TESTED_FACETS or analysis.facet == NAMED:
        return None
    if asks_for_papers(analysis.question):  # "Which papers focus on ...": a topic of papers, not a head to find
        return None
    if m.group("head").split()[-1].lower() in _NAMED_KINDS:
        return None  # "which pretrained network does it plug in?": answered by a name, not by the word
    ev = _Evidence(Aspect(m.group("head"), FACET))
    n = min(names[0].found)
    if head & tokens[n - 1]:
        ev.found[n] = None
    return ev


def _asked_about(analysis: Analysis) -> set[int] | None:
    """The sources a facet question about a named paper asks about: those with every name of the question that
    any source has (not the field's, not a likeness). None (any source may state it) when it names none, or no
    source has them all, or it compares papers (a named one with a described one too) or asks for a list of them."""
    if analysis.sides or _COMPARE.search(analysis.question) or asks_for_papers(analysis.question):
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
    pair = combination_asked(analysis.question) if analysis.facet == COMBINATION else None
    if pair is not None:
        analysis.evidence.append(_combination_evidence(tokens, pair))
        return
    target = scope_asked(analysis.question) if analysis.facet == SCOPE else None
    if target is not None:
        analysis.evidence.append(_scope_evidence(analysis, tokens, target))
        return
    if analysis.facet not in TESTED_FACETS:
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


def decide(analysis: Analysis, read: Sequence[int], rules: CoverageRules | None = None) -> Coverage:
    """Which aspects the sources numbered ``read`` (those the answer quotes, or all a model reads) address."""
    rules = rules or CoverageRules()
    cov = Coverage(facet=analysis.facet, sides=list(analysis.sides))
    for ev in analysis.evidence:
        if ev.aspect.kind == NAME and ignored_name(ev.aspect.text, analysis.question):
            continue
        a = Aspect(ev.aspect.text, ev.aspect.kind, df=ev.aspect.df)
        if a.kind in (NAME, FACET):
            n = next((n for n in read if n in ev.found), None)
            if n is not None:
                a.covered, a.score, a.source, a.evidence = True, 1.0, n, ev.found[n]
        else:
            share = max(((ev.share.get(n, 0.0), n) for n in read), default=(0.0, None))
            close = max(((ev.cos[n][0], n) for n in read if n in ev.cos), default=(0.0, None))
            a.score = close[0]
            a.source = close[1]
            a.evidence = ev.cos[close[1]][1] if close[1] is not None else None
            if share[0] >= rules.word_share:
                a.covered, a.source = True, share[1]
            else:
                unknown = a.df == 0 or not rules.describe_absent_only  # no indexed abstract has any of its words
                a.covered = not unknown or close[0] >= rules.describe_floor or not technical(a.text, rules)
        cov.aspects.append(a)
    _either_covers(cov, analysis.question)
    return cov


def _either_covers(cov: Coverage, question: str) -> None:
    """Two descriptions asked as alternatives ("explain, theoretically or mechanistically, how ...") are covered
    when either is (read round 23: "The abstracts don't mention mechanistically"). Not names: "DoRA or LoRA"
    asks of each, and one the abstracts lack is still worth saying."""
    flat = " ".join(question.lower().split())
    for a in cov.aspects:
        if a.covered or a.kind != DESCRIPTION:
            continue
        for b in cov.aspects:
            if b is not a and b.covered and b.kind == DESCRIPTION:
                x, y = a.text.lower(), b.text.lower()
                if f"{x} or {y}" in flat or f"{y} or {x}" in flat:
                    a.covered, a.source, a.evidence = True, b.source, b.evidence
                    break


@lru_cache(maxsize=4096)
def zipfs(phrase: str) -> tuple[float, ...]:
    """How common each content word of ``phrase`` is in English, on wordfreq's Zipf scale (0: unknown,
    3: once per million words, 7: "the").

    Why wordfreq: it ships its frequency tables (no network), and a corpus of a few dozen abstracts
    cannot tell a technical word from an everyday one by its own counts.
    """
    from wordfreq import zipf_frequency

    return tuple(zipf_frequency(w, "en") for w in _content_words(phrase))


def _content_words(phrase: str) -> list[str]:
    """The words ``zipfs`` scores, in its order."""
    return [w for w in re.findall(r"[^\W\d_]+", phrase.lower()) if not _is_boiler(w)]


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


def technical(phrase: str, rules: CoverageRules) -> bool:
    """Whether a description names a technical thing (which the abstracts may lack) rather than asking in
    everyday words: a word rarer than ``technical_zipf``, or several words rarer than ``compound_zipf`` on average."""
    z = tuple(max(f, _base_zipf(w)) for f, w in zip(zipfs(phrase), _content_words(phrase)))
    if not z:
        return False
    return min(z) < rules.technical_zipf or (len(z) > 1 and sum(z) / len(z) < rules.compound_zipf)


# A question asked in technical words: the mean Zipf of its content words under this ("Which papers do
# out-of-distribution detection for image classifiers?" 4.1; a lay one, "How do AI picture makers come up with new
# pictures instead of copying?", 4.9). Chosen on the read rounds with ``Settings.flat_lift``.
QUESTION_ZIPF = 4.2


def technical_question(question: str) -> bool:
    """Whether a question is asked in technical words (the mean ``QUESTION_ZIPF`` of its content words, each at its
    commonest inflection): the kind of question whose topic either is in the abstracts or is not, unlike a lay
    paraphrase, whose everyday words no abstract uses anyway."""
    from wordfreq import zipf_frequency

    words = [w for w in re.findall(r"[^\W_][\w'-]*", question) if not _is_boiler(w.lower()) and keyword_tokens(w)]
    z = [max(zipf_frequency(w.lower(), "en"), _base_zipf(w.lower())) for w in words]
    return bool(z) and sum(z) / len(z) < QUESTION_ZIPF


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
