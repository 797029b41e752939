"""Corpus stage: read abstracts (seeds text, JSONL, CSV) into ``Paper`` records.

Readers stream record by record so a corpus of millions never sits in memory, and
validate as they go: every problem is a ``CorpusError`` naming the file and line.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import stat
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from rag_papers import RagPapersError

MAX_ABSTRACT_CHARS = 20_000
MIN_ABSTRACT_WORDS = 5
# Every value is checked against these before anything is written (``check_values``): a value the
# registry cannot store (a year past SQLite's 64-bit INTEGER), or one no real paper has, is an
# error in the input, found in the validating pass rather than by a write halfway through.
MIN_YEAR, MAX_YEAR = 1000, 2200
MAX_ID_CHARS = 256
MAX_TITLE_CHARS = 2_000
MAX_VENUE_CHARS = 500
MAX_URL_CHARS = 2_048
MAX_AUTHORS = 5_000  # collaborations of a few thousand authors exist; more is a broken record
MAX_AUTHOR_CHARS = 500
SUPPORTED_SUFFIXES = (".txt", ".jsonl", ".csv", ".bib", ".ris", ".json")


class CorpusError(RagPapersError):
    """Bad input: the message is one line that names the file (and line)."""


@dataclass
class Paper:
    id: str
    title: str
    abstract: str
    sources: list[str] = field(default_factory=list)
    year: int | None = None
    venue: str | None = None
    authors: list[str] | None = None
    url: str | None = None
    # The title is ours (``derive_title``): the record had none. Stored at ingest; False for papers of
    # registries written before it was, whose titles show unlabelled.
    title_derived: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------- text
# Characters that must never reach a terminal raw, in stored text or in what the CLI prints:
# - C0 and C1 controls and DEL: ESC starts ANSI sequences (colours, cursor moves, clearing the
#   screen, setting the window title), BEL rings, BS and CR overwrite what was printed;
# - the bidi embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069), which reorder
#   the text after them: "\u202egnp.exe" displays as "exe.png";
# - the bidi marks LRM, RLM and ALM (U+200E, U+200F, U+061C), stripped too. They only steer
#   neutral characters and digits, but that is enough to make "1\u200f 2" display as "2 1", and
#   without them right-to-left text still reads correctly (the letters carry their direction).
# Tab and newline are kept where they are meaningful (multi-line output); other whitespace
# controls (CR, VT, FF, the separators U+001C-U+001F, NEL) become spaces, the rest go.
_BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_CONTROLS = [chr(c) for c in [*range(0x00, 0x20), *range(0x7F, 0xA0)]] + list(_BIDI)
# A whole escape sequence goes, not just its ESC: CSI (colours, "\e[2J"), OSC (window title,
# hyperlinks) and DCS/PM/APC strings when their terminator (BEL or ST) follows, and the
# two-character forms. An unterminated string loses only its introducer, so the text after it
# is kept. Other controls go alone: U+009B (the one-character CSI) is more often mojibake for
# "›" than an escape, and without it what follows is plain text.
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[P^_X][^\x1b]*\x1b\\|\x1b[ -/]*[0-~]"
)


def _table(keep: str) -> dict[int, str | None]:
    return {ord(c): (" " if c.isspace() else None) for c in _CONTROLS if c not in keep}


_KEEP_LINES = _table("\t\n")
_ONE_LINE = _table("")


def safe_text(text: str, newlines: bool = True) -> str:
    """``text`` without control, escape-sequence or bidi-control characters: safe to store and print.

    The one sanitiser for everything the corpus readers store and the CLI prints in plain-text
    mode (JSON output is escaped by ``json.dumps`` instead). ``newlines=False`` also turns tab
    and newline into spaces, for one-line messages.
    """
    if text.isascii() and text.isprintable() and (newlines or ("\n" not in text and "\t" not in text)):
        return text  # the common case, fast
    text = _ESCAPES.sub("", text)
    return text.translate(_KEEP_LINES if newlines else _ONE_LINE)


# ------------------------------------------------------------------ plain text for readers
# Abstracts are written in LaTeX and Markdown ("5.6$\times$", "\textbf{PepBenchmark}", "**bold**").
# ``plain_text`` renders the common cases for a reader; what is indexed and what an LLM reads stay as
# stored. Hand-written rather than a LaTeX parser: only this small inline subset occurs in abstracts,
# and unknown markup must degrade to its words, never to an error.
_GREEK = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda", "mu"]
_GREEK += ["nu", "xi", "omicron", "pi", "rho", "sigma", "tau", "upsilon", "phi", "chi", "psi", "omega"]
_LATEX_SYMBOLS: dict[str, str] = {
    **{g: unicodedata.lookup(f"GREEK SMALL LETTER {'LAMDA' if g == 'lambda' else g.upper()}") for g in _GREEK},
    **{
        g.capitalize(): unicodedata.lookup(f"GREEK CAPITAL LETTER {'LAMDA' if g == 'lambda' else g.upper()}")
        for g in _GREEK
    },
    "varepsilon": "ε", "vartheta": "ϑ", "varphi": "φ", "varrho": "ϱ", "varsigma": "ς", "ell": "ℓ",
    "times": "×", "cdot": "·", "pm": "±", "mp": "∓", "div": "÷", "ast": "∗", "star": "⋆", "circ": "∘",
    "leq": "≤", "le": "≤", "geq": "≥", "ge": "≥", "neq": "≠", "ne": "≠", "approx": "≈", "sim": "~",
    "simeq": "≃", "equiv": "≡", "propto": "∝", "ll": "≪", "gg": "≫", "infty": "∞", "partial": "∂",
    "nabla": "∇", "sum": "∑", "prod": "∏", "int": "∫", "sqrt": "√", "in": "∈", "notin": "∉", "subset": "⊂",
    "subseteq": "⊆", "cup": "∪", "cap": "∩", "forall": "∀", "exists": "∃", "emptyset": "∅",
    "to": "→", "rightarrow": "→", "leftarrow": "←", "Rightarrow": "⇒", "leftrightarrow": "↔", "mapsto": "↦",
    "uparrow": "↑", "downarrow": "↓", "ldots": "…", "cdots": "⋯", "dots": "…", "top": "ᵀ", "prime": "′",
    "log": "log", "ln": "ln", "exp": "exp", "max": "max", "min": "min", "arg": "arg", "lim": "lim",
    "sin": "sin", "cos": "cos", "tanh": "tanh", "det": "det", "sup": "sup", "inf": "inf",
    "eg": "e.g.", "ie": "i.e.", "etc": "etc.", "textasciitilde": "~", "LaTeX": "LaTeX", "TeX": "TeX",
}  # fmt: skip
# Commands whose argument is the text to show: \textbf{x}, \emph{x}, \mathbf{x}, ... -> x
_LATEX_WRAP = re.compile(
    r"\\(?:text(?:bf|it|rm|sf|tt|sc|up|normal)?|emph|math(?:bf|rm|it|sf|tt|cal|bb|frak|scr)|boldsymbol|bm"
    r"|underline|operatorname|mbox|hbox|hat|bar|tilde|vec|dot|overline|widehat|widetilde)\s*\{([^{}]*)\}"
)
_LATEX_HREF = re.compile(r"\\href\s*\{[^{}]*\}\s*\{([^{}]*)\}")  # \href{url}{text} -> text (never a link)
_LATEX_FRAC = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
_LATEX_CMD = re.compile(r"\\([A-Za-z]+)")
_LATEX_OTHER = re.compile(r"\\[A-Za-z]+\s*(?:\{([^{}]*)\})?")  # an unknown command (and its argument)
_SUPERSCRIPT = dict(zip("0123456789+-=()niTkᵀ′", "⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁼⁽⁾ⁿⁱᵀᵏᵀ′", strict=True))
# Subscript letters too: Unicode has these (τ_{max} -> τₘₐₓ), not the others.
_SUBSCRIPT = dict(zip("0123456789+-=()aehijklmnoprstuvx", "₀₁₂₃₄₅₆₇₈₉₊₋₌₍₎ₐₑₕᵢⱼₖₗₘₙₒₚᵣₛₜᵤᵥₓ", strict=True))
_SCRIPT = re.compile(r"([\^_])\s*(?:\{([^{}]*)\}|([^\s{}\\]))")
_DOLLAR = "\ue000"  # a private-use stand-in for an escaped "\$" while "$" delimiters are dropped
_BRACES = {"{": "\ue001", "}": "\ue002"}  # and for escaped "\{" "\}" while grouping braces are dropped
_GROUP = re.compile(r"\{([^{}]*)\}")  # a grouping brace pair: "{FlashLLA}" -> "FlashLLA" (BibTeX's case guard)
_MD_MARKS = [
    re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*"),  # **bold** (also inside a word: **Atte**ntion)
    re.compile(r"(?<!\w)__(?=\S)(.+?)(?<=\S)__(?!\w)"),  # __bold__
    re.compile(r"(?<![\w*])\*(?=[^\s*])([^*\n]+?)(?<=[^\s*])\*(?![\w*])"),  # *emphasis*, not a*b*c
    re.compile(r"(?<!\w)_(?=[^\s_])([^_\n]+?)(?<=[^\s_])_(?!\w)"),  # _emphasis_, not snake_case
    re.compile(r"(`+)(?=\S)([^`\n]+?)(?<=\S)\1"),  # `code`
]


def _latex(text: str) -> str:
    """Known symbols to Unicode (first, so \\mathbf{\\Sigma}V cannot run into \\SigmaV), then wrappers unwrapped."""
    text = _LATEX_HREF.sub(r"\1", text)
    text = _LATEX_CMD.sub(lambda m: _LATEX_SYMBOLS.get(m.group(1), m.group(0)), text)
    for _ in range(4):  # nested: \textbf{\emph{x}}
        new = _LATEX_FRAC.sub(r"\1/\2", _LATEX_WRAP.sub(lambda m: m.group(1).strip(), text))
        if new == text:
            break
        text = new
    return text


def _latex_script(m: re.Match[str]) -> str:
    """x^{2} -> x², x_{1} -> x₁ where every character has a Unicode form; else x^(ab), x_max."""
    mark, body = m.group(1), (m.group(2) if m.group(2) is not None else m.group(3)).strip()
    table = _SUPERSCRIPT if mark == "^" else _SUBSCRIPT
    if body and all(c in table for c in body):
        return "".join(table[c] for c in body)
    return f"{mark}({body})" if mark == "^" and len(body) > 1 else f"{mark}{body}"


def _math(m: re.Match[str]) -> str:
    """The inside of $...$: symbols and scripts in Unicode, wrappers unwrapped, braces and spacing gone."""
    body = _latex(re.sub(r"\\[,;:! ]|~", " ", m.group(1)))  # LaTeX spacing first: \sim is a "~" to keep
    body = _LATEX_OTHER.sub(lambda x: x.group(1) or "", _SCRIPT.sub(_latex_script, body))
    return re.sub(r"[{}]", "", body).strip()


def plain_text(text: str) -> str:
    """``text`` with common LaTeX and Markdown rendered for reading: ``5.6$\\times$`` -> ``5.6×``,
    ``\\textbf{x}`` and ``**x**`` -> ``x``, ``$O(n^2)$`` -> ``O(n²)``, ``\\alpha`` -> ``α``, ``95\\%`` -> ``95%``.

    For what a reader sees (quoted sentences, the sources panel, the Markdown export, the CLI's
    passages); never for what is indexed or given to an LLM, which read the text as stored.
    """
    if not re.search(r"[$\\*_`{]", text):
        return text  # the common case, fast
    text = re.sub(r"\\([{}])", lambda m: _BRACES[m.group(1)], text.replace("\\$", _DOLLAR))
    text = re.sub(r"\\([%&#_])", r"\1", text)
    text = re.sub(r"\$\$?([^$]+?)\$\$?", _math, text)
    text = _LATEX_OTHER.sub(lambda m: m.group(1) or "", _latex(text))
    for _ in range(4):  # nested: {{x}}
        text, n = _GROUP.subn(r"\1", text)
        if not n:
            break
    text = text.replace("$", "").replace(_DOLLAR, "$")
    text = text.replace(_BRACES["{"], "{").replace(_BRACES["}"], "}")
    for mark in _MD_MARKS:
        text = mark.sub(lambda m: m.group(m.lastindex or 1), text)
    return re.sub(r"[ \t]{2,}", " ", text)


def normalise(text: str) -> str:
    """Controls stripped (``safe_text``), NFC, collapsed whitespace: what we store and show."""
    return re.sub(r"\s+", " ", unicodedata.normalize("NFC", safe_text(text, newlines=False))).strip()


def normalise_id(text: str) -> str:
    """``normalise`` for identifiers (ids, URLs), also without invisible format characters.

    A zero-width space or joiner (Unicode category Cf) has no business in an id or a URL and
    makes two different ones look the same.
    """
    return "".join(c for c in normalise(text) if unicodedata.category(c) != "Cf")


def content_hash(abstract: str) -> str:
    """Stable id from content: re-ingesting (or re-wrapping the lines of) an abstract gives the same id."""
    key = re.sub(r"\s+", " ", unicodedata.normalize("NFKC", abstract)).strip().casefold()
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]


STOPWORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "and",
        "or",
        "of",
        "for",
        "to",
        "in",
        "on",
        "with",
        "by",
        "from",
        "as",
        "at",
        "into",
        "via",
        "over",
        "under",
        "than",
        "then",
        "that",
        "this",
        "these",
        "those",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "it",
        "its",
        "their",
        "our",
        "we",
        "us",
        "they",
        "them",
        "which",
        "who",
        "whom",
        "whose",
        "what",
        "when",
        "where",
        "while",
        "can",
        "could",
        "may",
        "might",
        "should",
        "would",
        "will",
        "not",
        "no",
        "nor",
        "but",
        "also",
        "both",
        "each",
        "such",
        "more",
        "most",
        "less",
        "many",
        "much",
        "very",
        "however",
        "thus",
        "therefore",
        "moreover",
        "furthermore",
        "yet",
        "still",
        "only",
        "even",
        "across",
        "between",
        "within",
        "without",
        "about",
        "through",
        "during",
        "before",
        "after",
        "above",
        "below",
        "up",
        "down",
        "out",
        "off",
        "again",
        "further",
        "once",
        "here",
        "there",
        "all",
        "any",
        "few",
        "other",
        "some",
        "own",
        "same",
        "so",
        "too",
        "just",
        "do",
        "does",
        "did",
        "doing",
        "has",
        "have",
        "had",
        "having",
        "i",
        "you",
        "he",
        "she",
        "his",
        "her",
        "my",
        "your",
        "if",
        "because",
        "until",
        "against",
        "among",
        "upon",
        "per",
        "e",
        "g",
        "eg",
        "ie",
        "i.e",
        "etc",
    ]
)
# Words that are everywhere in abstracts and say nothing about the topic.
_GENERIC = set(
    [
        "propose",
        "proposes",
        "proposed",
        "introduce",
        "introduces",
        "introduced",
        "present",
        "presents",
        "presented",
        "paper",
        "work",
        "works",
        "method",
        "methods",
        "approach",
        "approaches",
        "model",
        "models",
        "framework",
        "results",
        "result",
        "show",
        "shows",
        "shown",
        "demonstrate",
        "demonstrates",
        "demonstrated",
        "novel",
        "new",
        "existing",
        "recent",
        "recently",
        "state",
        "art",
        "experiments",
        "experimental",
        "extensive",
        "performance",
        "significantly",
        "significant",
        "achieve",
        "achieves",
        "achieving",
        "based",
        "using",
        "use",
        "used",
        "uses",
        "via",
        "key",
        "task",
        "tasks",
        "data",
        "problem",
        "problems",
        "effective",
        "effectively",
        "efficient",
        "efficiency",
        "simple",
        "well",
        "various",
        "wide",
        "range",
        "strong",
        "remarkable",
        "substantial",
        "improve",
        "improves",
        "improved",
        "improvement",
        "improvements",
        "outperforms",
        "large",
        "study",
        "studies",
        "analysis",
        "first",
        "second",
        "however",
        "code",
        "available",
        "github",
        "https",
        "www",
        "com",
        "approach",
        "remain",
        "remains",
        "challenge",
        "challenges",
        "challenging",
        "learning",
        "learn",
        "typically",
        "widely",
        "regarded",
        "vital",
        "role",
        "growing",
        "adoption",
        "promising",
        "alternative",
        "well-designed",
        "extends",
        "involves",
        "capture",
        "crucial",
        "often",
        "usually",
        "highly",
        "inherently",
        "main",
        "important",
        "common",
        "commonly",
        "increasingly",
        "emerging",
        "despite",
        "particular",
        "specifically",
        "given",
    ]
)
_GENERIC_ACRONYMS = set(
    [
        "AI",
        "ML",
        "RL",
        "NLP",
        "LLM",
        "LLMs",
        "LM",
        "LMs",
        "GPU",
        "GPUs",
        "CPU",
        "SGD",
        "RNN",
        "CNN",
        "GNN",
        "GNNs",
        "ICL",
        "QA",
        "MoE",
        "PEFT",
        "SVD",
        "PCA",
        "DNA",
        "RNA",
        "SE",
        "ELBO",
        "MLP",
        "MLPs",
        "ReLU",
        "ViT",
        "ViTs",
        "SOTA",
        "API",
        "CoT",
        "SFT",
        "KL",
        "IID",
        "OOD",
        "TPS",
        "NP",
        "AND",
        "OR",
        "NTK",
    ]
)
_INTRO = re.compile(
    r"\b(?:we|this (?:work|paper)|our)\b[^.]*?\b(?:propose|introduce|present|develop|design|call|name|dub|term|coin)\w*",
    re.IGNORECASE,
)
_NAME_TOKEN = re.compile(r"(?<![\w$\\])([A-Za-z][A-Za-z0-9]*(?:-[A-Za-z0-9]+)*)")


def _is_coinable(tok: str) -> bool:
    if tok in _GENERIC_ACRONYMS or tok.rstrip("s") in _GENERIC_ACRONYMS or len(tok) < 3:
        return False
    if any(part.islower() for part in tok.split("-")[1:]) and "-" in tok and not re.search(r"[a-z][A-Z]", tok):
        return False  # LLM-based, PAC-style: a qualifier, not a name
    upper = sum(c.isupper() for c in tok)
    # SWAX, DirMoE, TemGX, K-Flow, CreatiDesign: two capitals, or a capital after the first letter.
    return upper >= 2 and not re.fullmatch(r"[A-Z][a-z]+-[A-Z][a-z]+", tok)


_NAMING_WORDS = (
    r"(?:called|named|dubbed|termed|coined|algorithm|framework|method|model|benchmark|dataset|approach|system)"
)


def coined_name(abstract: str) -> str | None:
    """The method/benchmark name an abstract introduces (ABBA, SWAX, TemGX), if any.

    Only tokens after an introducing verb ("we propose") count, and only ones that were
    not used earlier (those are background, like TGNN or LoRA). A token set off as a
    name ("X, a ...", "(X)" after a Capitalised expansion, "called X") beats a bare one.
    """
    text = re.sub(r"\\text\w*\{([^}]*)\}|[{}*]", lambda m: m.group(1) or "", abstract)
    seen: set[str] = set()
    weak: str | None = None
    for sentence in re.split(r"(?<=[.!?])\s+", text):
        intro = _INTRO.search(sentence)
        ours = re.match(r"\s*our\s+\w+,\s*([A-Za-z][\w-]*)\s*,", sentence, re.IGNORECASE)
        if ours and _is_coinable(ours.group(1)) and ours.group(1) not in seen:
            return ours.group(1)
        lead = re.match(r"\s*([A-Za-z][\w-]*)\s*(?:\([^)]*\))?\s*,\s+(?:a|an)\b", sentence)
        if lead and _is_coinable(lead.group(1)) and lead.group(1) not in seen:
            return lead.group(1)
        for m in _NAME_TOKEN.finditer(sentence):
            tok = m.group(1)
            if intro and m.start() >= intro.end() and _is_coinable(tok) and tok not in seen:
                before, after = sentence[: m.start()], sentence[m.end() :]
                paren = before.endswith("(") and after.startswith(")")
                expansion = re.search(r"([A-Za-z][\w-]*)\s*\($", before)
                if paren and expansion and expansion.group(1).islower():
                    seen.add(tok)
                    continue  # "neural tangent kernel (NTK)": an established term
                set_off = paren or re.match(r"\s*[,:]", after) or re.search(_NAMING_WORDS + r"\s+$", before)
                if set_off:
                    return tok
                words_since_verb = len(sentence[intro.end() : m.start()].split())
                if weak is None and words_since_verb <= 4:
                    weak = tok
            seen.add(tok)
    return weak


def _clean_for_topic(abstract: str) -> str:
    """Drop URLs, LaTeX commands and markup so they never become 'topic words'.

    A math token that is a plain name (``$k$`` in "Top-$k$", ``$K$``) is kept as its letters, so
    "Top-$k$+Softmax" stays "Top-k+Softmax" rather than "Top-+Softmax"; other math goes.
    """
    text = re.sub(r"\(?https?://\S+|\[[^\]]*\]\([^)]*\)|\S+\.(?:com|org|io)/\S*", " ", abstract)
    text = re.sub(r"\$([A-Za-z][A-Za-z0-9]{0,2})\$", r"\1", text)
    text = re.sub(r"\\[A-Za-z]+|\$[^$]*\$|[{}*_`]", " ", text)
    return text


def _topic_phrases(abstract: str, n: int = 2, exclude: str | None = None) -> list[str]:
    """The most repeated two-word phrases (first appearance breaks ties): the abstract's topic."""
    abstract = _clean_for_topic(abstract)
    if exclude:
        abstract = abstract.replace(exclude, ".")
    counts: Counter[tuple[str, str]] = Counter()
    first: dict[tuple[str, str], int] = {}
    surface: dict[tuple[str, str], str] = {}
    pos = 0
    for sentence in re.split(r"[.;:!?()\[\],]", abstract):
        found = list(re.finditer(r"[A-Za-z][A-Za-z0-9'-]*", sentence))
        for ma, mb in zip(found, found[1:]):
            a, b = ma.group(), mb.group()
            ka, kb = a.lower(), b.lower()
            if any(w in STOPWORDS or w in _GENERIC or len(w) < 3 for w in (ka, kb)):
                continue
            key = (ka, kb)
            counts[key] += 1
            first.setdefault(key, pos)
            plus = sentence[ma.end() : mb.start()].strip() == "+"  # "Top-k+Softmax": one name, kept whole
            surface.setdefault(key, f"{a} + {b}" if plus else f"{a} {b}")
            pos += 1
    freq = Counter(w.lower() for w in re.findall(r"[A-Za-z][A-Za-z0-9'-]*", abstract))
    # Repeated phrases first, then phrases made of the abstract's most repeated words.
    ranked = sorted(counts, key=lambda k: (-counts[k], -(freq[k[0]] + freq[k[1]]), first[k]))
    chosen: list[str] = []
    used: set[str] = set()
    for key in ranked:
        if used & set(key):
            continue
        chosen.append(surface[key])
        used |= set(key)
        if len(chosen) == n:
            break
    if not chosen:  # very short abstract: fall back to its first content words
        words = [w for w in re.findall(r"[A-Za-z][\w-]*", abstract) if w.lower() not in STOPWORDS]
        chosen = [" ".join(words[:4])]
    return chosen


def derive_title(abstract: str, extra: int = 0) -> str:
    """Deterministic display title: coined name plus topic words, e.g. 'SWAX: sliding window, hybrid architectures'.

    ``extra`` adds more topic phrases, used to break a tie with another paper's title.
    """
    name = coined_name(abstract)
    phrases = _topic_phrases(abstract, 2 + extra, exclude=name)
    topic = ", ".join(phrases)
    if name:
        return f"{name}: {topic}"
    return topic[:1].upper() + topic[1:]


# ------------------------------------------------------------------------ readers
@dataclass
class RawRecord:
    """One abstract as read, before dedupe: where it came from and what the file said."""

    abstract: str
    source: str
    title: str | None = None
    id: str | None = None
    year: int | None = None
    venue: str | None = None
    authors: list[str] | None = None
    url: str | None = None
    # Where two sources of one paper meet (DOI, arXiv id, normalised title and first author): set by the
    # export readers (rag_papers/formats.py), empty for the project's own formats. See ``Ingester._ingest``.
    keys: list[str] = field(default_factory=list)


def check_regular_file(path: Path) -> int:
    """The size of ``path``, which must be a regular file; else a one-line ``CorpusError``.

    Decided from ``stat`` alone, which never blocks: opening a FIFO for reading waits for a
    writer forever, so FIFOs, sockets and devices are refused before anything opens them.
    """
    try:
        st = path.stat()
    except FileNotFoundError:
        raise CorpusError(f"{path}: no such file or directory") from None
    except OSError as exc:  # a folder on the way that this user may not enter, a name too long
        raise CorpusError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if stat.S_ISDIR(st.st_mode):
        raise CorpusError(f"{path}: is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        kind = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode) else "a device"
        raise CorpusError(f"{path}: not a regular file ({kind}); give a file")
    return st.st_size


def open_binary(path: Path) -> BinaryIO:
    """``path`` opened for reading bytes; a file this user may not read is a one-line ``CorpusError``."""
    try:
        return path.open("rb")
    except OSError as exc:
        raise CorpusError(f"{path}: cannot read ({exc.strerror or exc})") from None


def _check_file(path: Path) -> None:
    if check_regular_file(path) == 0:
        raise CorpusError(f"{path}: file is empty")
    with open_binary(path) as fh:
        head = fh.read(8192)
    if b"\x00" in head:
        raise CorpusError(f"{path}: looks like a binary file (NUL bytes); expected text, JSONL or CSV")


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """Decode line by line so a bad byte is reported with its line number.

    A raw NUL byte is refused (binary data); a NUL written as a JSON escape (``\\u0000``) is a
    character like any other control and is stripped with them (``normalise``).
    """
    with open_binary(path) as fh:
        for lineno, raw in enumerate(fh, 1):
            if len(raw) > MAX_ABSTRACT_CHARS * 4 + 1024:
                raise CorpusError(
                    f"{path}:{lineno}: line is {len(raw):,} bytes; an abstract may be at most {MAX_ABSTRACT_CHARS:,} characters"
                )
            try:
                text = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise CorpusError(f"{path}:{lineno}: not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
            if "\x00" in text:
                raise CorpusError(f"{path}:{lineno}: contains NUL bytes; expected text")
            yield lineno, text


def _check_abstract(path: Path, lineno: int, abstract: str) -> str:
    abstract = normalise(abstract)
    if len(abstract) > MAX_ABSTRACT_CHARS:
        raise CorpusError(
            f"{path}:{lineno}: abstract is {len(abstract):,} characters; at most {MAX_ABSTRACT_CHARS:,} allowed"
        )
    return abstract


_HEADER = re.compile(r"^(?P<venue>[A-Za-z][\w&.\- ]*?)\s+(?P<year>(?:19|20)\d\d)\b")


def read_seeds(path: Path) -> Iterator[RawRecord]:
    """Seeds format: an optional one-line header ("ICLR 2026 Papers"), then one abstract per paragraph."""
    venue: str | None = None
    year: int | None = None
    para: list[str] = []
    para_start = 0
    first_para = True

    def flush() -> Iterator[RawRecord]:
        nonlocal first_para, venue, year
        text = " ".join(para)
        is_first, first_para = first_para, False
        if is_first and len(para) == 1 and len(text) < 120 and not text.rstrip().endswith("."):
            m = _HEADER.match(text.strip())
            if m:
                venue, year = normalise(m.group("venue")), int(m.group("year"))
            return
        abstract = _check_abstract(path, para_start, text)
        if len(abstract.split()) < MIN_ABSTRACT_WORDS:
            raise CorpusError(
                f"{path}:{para_start}: paragraph of {len(abstract.split())} words is too short to be an abstract"
            )
        yield RawRecord(abstract=abstract, source=f"{path}:{para_start}", venue=venue, year=year)

    for lineno, line in _lines(path):
        if line.strip():
            if not para:
                para_start = lineno
            para.append(line.strip())
        elif para:
            yield from flush()
            para = []
    if para:
        yield from flush()


def _record_from_mapping(path: Path, lineno: int, obj: dict[str, Any]) -> RawRecord:
    abstract = obj.get("abstract")
    if isinstance(abstract, str):
        abstract = _check_abstract(path, lineno, abstract)
    if not isinstance(abstract, str) or not abstract:  # nothing left once controls are stripped counts too
        raise CorpusError(f"{path}:{lineno}: record has no 'abstract' text")
    year_raw = obj.get("year")
    year: int | None = None
    if isinstance(year_raw, float) and year_raw.is_integer():
        year_raw = int(year_raw)  # 2024.0: a spreadsheet's way of writing a year
    if year_raw not in (None, ""):
        try:
            if isinstance(year_raw, bool) or not isinstance(year_raw, int | str):
                raise ValueError
            year = int(str(year_raw).strip())
        except ValueError:
            raise CorpusError(f"{path}:{lineno}: 'year' must be a whole number, got {clip_repr(year_raw)}") from None
    authors = obj.get("authors")
    if isinstance(authors, str):
        authors = re.split(r";|\band\b|,", authors)
    elif authors is not None and not (isinstance(authors, list) and all(isinstance(a, str) for a in authors)):
        raise CorpusError(f"{path}:{lineno}: 'authors' must be a string or a list of strings")
    if authors is not None:
        authors = [n for n in (normalise(a) for a in authors) if n] or None

    def text(key: str, clean: Callable[[str], str] = normalise) -> str | None:
        v = obj.get(key)
        if v in (None, ""):
            return None
        if isinstance(v, bool) or not isinstance(v, str | int):  # a list or an object is not a title or an id
            raise CorpusError(f"{path}:{lineno}: {key!r} must be text, got {type(v).__name__}")
        return clean(str(v)) or None

    return RawRecord(
        abstract=abstract,
        source=f"{path}:{lineno}",
        title=text("title"),
        id=text("id", normalise_id),
        year=year,
        venue=text("venue"),
        authors=authors,
        url=text("url", normalise_id),
    )


def json_lines(path: Path) -> Iterator[tuple[int, Any]]:
    """Each non-blank line of ``path`` as JSON, with its line number; a malformed line is a ``CorpusError``."""
    for lineno, line in _lines(path):
        if not line.strip():
            continue
        try:
            yield lineno, json.loads(line)
        except json.JSONDecodeError as exc:
            raise CorpusError(f"{path}:{lineno}: malformed JSON ({exc.msg} at column {exc.colno})") from None


def read_jsonl(path: Path) -> Iterator[RawRecord]:
    for lineno, obj in json_lines(path):
        if not isinstance(obj, dict):
            raise CorpusError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
        yield _record_from_mapping(path, lineno, obj)


def read_csv(path: Path) -> Iterator[RawRecord]:
    csv.field_size_limit(MAX_ABSTRACT_CHARS * 4)

    def text_lines() -> Iterator[str]:
        for _, line in _lines(path):
            yield line

    reader = csv.DictReader(text_lines())
    try:
        fields = reader.fieldnames
    except csv.Error as exc:
        raise CorpusError(f"{path}:1: malformed CSV header ({exc})") from None
    if not fields or "abstract" not in [f.strip().lower() for f in fields]:
        raise CorpusError(f"{path}:1: CSV needs an 'abstract' column (found: {', '.join(fields or []) or 'none'})")
    try:
        start = reader.line_num + 1
        for row in reader:
            obj = {(k or "").strip().lower(): v for k, v in row.items()}
            yield _record_from_mapping(path, start, obj)  # a quoted record may span lines: cite its first
            start = reader.line_num + 1
    except csv.Error as exc:
        raise CorpusError(f"{path}:{reader.line_num}: malformed CSV ({exc})") from None


def _folder_files(folder: Path) -> list[Path]:
    """The supported files under ``folder``; a folder this user may not read is an error.

    ``Path.rglob`` skips unreadable folders silently, which would leave their files out of the
    ingest without a word (symlinked folders are not followed, as with ``rglob``).
    """

    def fail(exc: OSError) -> None:
        raise CorpusError(f"{exc.filename or folder}: cannot read the folder ({exc.strerror or exc})")

    found: list[Path] = []
    for root, _dirs, files in os.walk(folder, onerror=fail):
        found.extend(
            q for name in files if (q := Path(root) / name).suffix.lower() in SUPPORTED_SUFFIXES and q.is_file()
        )
    return sorted(found)


def expand_paths(paths: Iterable[Path]) -> list[Path]:
    """Files named, and the supported files inside folders named, sorted for determinism."""
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            found = _folder_files(p)
            if not found:
                raise CorpusError(f"{p}: folder has no {', '.join(SUPPORTED_SUFFIXES)} files")
            out.extend(found)
        else:
            out.append(p)
    return out


def read_file(path: Path, on_skip: Callable[[str], None] | None = None) -> Iterator[RawRecord]:
    """Stream one file's records; raises CorpusError on the first problem, or if it holds none.

    The format is told by the extension and the first few KB (``formats.detect``): an export (BibTeX,
    RIS, CSL-JSON, arXiv, OpenAlex, OpenReview, Semantic Scholar) or the project's own seeds text, JSONL
    or CSV. An export's record without an abstract is skipped and passed to ``on_skip``.
    """
    from rag_papers import formats

    _check_file(path)
    with open_binary(path) as fh:
        head = fh.read(formats.SNIFF_BYTES).decode("utf-8-sig", errors="replace")
    kind = formats.detect(path, head)
    suffix = path.suffix.lower()
    records: Iterable[RawRecord]
    skipped = 0

    def skip(source: str) -> None:
        nonlocal skipped
        skipped += 1
        if on_skip is not None:
            on_skip(source)

    if kind is not None:
        records = formats.read_export(path, kind, skip)
    else:
        records = (read_jsonl if suffix == ".jsonl" else read_csv if suffix == ".csv" else read_seeds)(path)
    count = 0
    for rec in records:
        check_values(rec)
        count += 1
        yield rec
    if count == 0:
        why = f" ({skipped} records skipped: no abstract)" if skipped else ""
        raise CorpusError(f"{path}: no abstracts found{why}")


def clip(text: str, n: int, words: bool = False) -> str:
    """``text`` on one line, cut to ``n`` characters with an ellipsis (the one clipping rule of the package);
    with ``words``, at the end of the last whole word, less a trailing comma or colon (what a prompt quotes)."""
    text = " ".join(text.split())
    if len(text) <= n:
        return text
    cut = text[: n - 1]
    if words and text[n - 1] != " ":
        cut = cut.rsplit(" ", 1)[0]
    return (cut.rstrip(",;: ") if words else cut.rstrip()) + "…"


def clip_repr(value: object, n: int = 40) -> str:
    """A value as an error message shows it: its repr, clipped (a 1 MB value is not echoed)."""
    return clip(repr(value), n)


def check_values(rec: RawRecord) -> None:
    """Refuse a record with a value no real paper has, whatever reader produced it (one ``CorpusError`` line).

    Every reader's records pass through here in the validating pass, so a value the registry
    cannot hold fails there and never halfway through the writes.
    """
    where = rec.source

    def too_long(what: str, value: str | None, limit: int) -> None:
        if value is not None and len(value) > limit:
            raise CorpusError(f"{where}: {what} is {len(value):,} characters; at most {limit:,} allowed")

    if rec.year is not None and not MIN_YEAR <= rec.year <= MAX_YEAR:
        raise CorpusError(f"{where}: year {clip_repr(rec.year)} is out of range ({MIN_YEAR} to {MAX_YEAR})")
    too_long("id", rec.id, MAX_ID_CHARS)
    too_long("title", rec.title, MAX_TITLE_CHARS)
    too_long("venue", rec.venue, MAX_VENUE_CHARS)
    too_long("url", rec.url, MAX_URL_CHARS)
    if rec.authors is not None:
        if len(rec.authors) > MAX_AUTHORS:
            raise CorpusError(f"{where}: {len(rec.authors):,} authors; at most {MAX_AUTHORS:,} allowed")
        for name in rec.authors:
            too_long("an author's name", name, MAX_AUTHOR_CHARS)


def to_paper(rec: RawRecord) -> Paper:
    return Paper(
        id=rec.id or content_hash(rec.abstract),
        title=rec.title or derive_title(rec.abstract),
        abstract=rec.abstract,
        sources=[rec.source],
        year=rec.year,
        venue=rec.venue,
        authors=rec.authors,
        url=rec.url,
        title_derived=rec.title is None,
    )


def validate(
    paths: Iterable[Path],
    on_record: Callable[[RawRecord], None] | None = None,
    on_skip: Callable[[str], None] | None = None,
) -> int:
    """Read every file through once without keeping anything: fail before the index is touched."""
    n = 0
    for path in paths:
        for rec in read_file(path, on_skip):
            n += 1
            if on_record is not None:
                on_record(rec)
    return n
