"""Text as the corpus stores it and as a reader sees it, and the package's one sentence splitter.

``safe_text`` is the one sanitiser for what is stored and printed; ``plain_text`` renders the LaTeX and Markdown of
abstracts for reading; ``sentences`` is how every part of the package (quoting, the sources panel, claim checks,
coverage, derived titles) cuts text into sentences, so that a quoted sentence is one the panel highlights.
"""

from __future__ import annotations

import re
import unicodedata

from rag_papers.paths import load_words

# English stop words (rag_papers/words/stopwords.txt): left out of keyword matching, topic phrases and aspects.
STOPWORDS = load_words("stopwords")

# ---------------------------------------------------------------------- safe to store and print
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


# ----------------------------------------------------------------------------- sentences
# A sentence ends at a stop (. ! ?) followed by whitespace and what starts a sentence: a capital, a digit, a
# quote, an opening parenthesis or TeX ("$", "\"). So "e.g. the", "i.e. a", "et al. show" and "3.5" never end
# one; nor does an abbreviation that never ends a sentence ("e.g.", "i.e.", "cf.", "vs.", "et al.") before a
# capital: "(e.g. BERT)" stays whole.
_SENTENCE_END = re.compile(
    r"(?<!\b[eE]\.g\.)(?<!\b[iI]\.e\.)(?<!\b[cC]f\.)(?<!\bvs\.)(?<!\bet al\.)"
    r"(?<=[.!?])\s+(?=[A-Z0-9(\"'$\\])"
)


def sentences(text: str) -> list[str]:
    """The sentences of ``text``, whitespace collapsed: the one splitter of the package.

    Callers pass what the sentences are for: an abstract as a reader sees it (``plain_text``) for what is
    quoted, highlighted or matched as evidence; the stored text where a model reads it.
    """
    return [s for s in (p.strip() for p in _SENTENCE_END.split(" ".join(text.split()))) if s]


def quotable_sentences(abstract: str, links: bool = False) -> list[str]:
    """The sentences of ``abstract`` an answer may quote, as a reader sees them (``plain_text``): exactly the
    sentences the sources panel highlights, claims are checked against and retrieval's sentence evidence reads.
    Links to code or data answer no question about a topic, so they are left out unless ``links`` (a question
    about where the code is)."""
    parts = sentences(plain_text(abstract))
    return [s for s in parts if len(s.split()) >= 4 and (links or not re.search(r"https?://|github\.com|\bwww\.", s))]
