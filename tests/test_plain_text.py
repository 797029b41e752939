"""LaTeX and Markdown in what a reader sees (``corpus.plain_text``), and derived titles that keep math tokens."""

from __future__ import annotations

import re

import pytest
from conftest import SEEDS, run_main

from rag_papers.chat import Engine
from rag_papers.config import Settings
from rag_papers.corpus import derive_title, plain_text, read_seeds
from rag_papers.llm import ExtractiveBackend


def seed(marker: str) -> str:
    """The one seeds abstract that contains ``marker``."""
    (found,) = [r.abstract for f in sorted(SEEDS.glob("*.txt")) for r in read_seeds(f) if marker in r.abstract]
    return found


SPEEDUP = seed("5.6$\\times$")  # ES-dLLM: "delivering 5.6$\times$ to 16.8$\times$ speedup"
PEPBENCH = seed("\\textbf{PepBenchmark}")
ATTENT = seed("**Atte**ntion")
SPECGD = seed("$\\mathbf{U}\\mathbf{V}^T$")
DIRMOE = seed("Top-$k$+Softmax")
MARKUP = re.compile(r"\$|\\[A-Za-z%]|\*\*|`|\\textbf")


def test_plain_text_renders_the_seeds_latex_and_markdown() -> None:
    assert "5.6× to 16.8× speedup" in plain_text(SPEEDUP)
    pep = plain_text(PEPBENCH)
    assert "we present PepBenchmark, which" in pep and "(1) PepBenchData, a" in pep
    att = plain_text(ATTENT)
    assert "named Attention Neural Teaching (AtteNT)" in att
    spec = plain_text(SPECGD)
    assert "each update step is UVᵀ where UΣVᵀ" in spec
    assert "Top-k+Softmax" in plain_text(DIRMOE)
    for abstract in (SPEEDUP, PEPBENCH, ATTENT, SPECGD, DIRMOE):
        assert not MARKUP.search(plain_text(abstract)), plain_text(abstract)
        # Only markup goes: the words stay, in order.
        assert plain_text(abstract).split()[:3] == abstract.split()[:3]


@pytest.mark.parametrize(
    ("text", "plain"),
    [
        ("$O(n^2)$ time", "O(n²) time"),
        ("$\\Theta(nd^2)$", "Θ(nd²)"),
        ("$\\alpha \\leq 0.5$ and $\\beta \\geq 1$, $\\approx 3$, $\\sim$10", "α ≤ 0.5 and β ≥ 1, ≈ 3, ~10"),
        ("95\\% agreement (\\eg images)", "95% agreement (e.g. images)"),
        ("\\emph{deep} \\textit{and} \\mathbf{x} $\\tau_{\\max}$ $x_{1}$", "deep and x τₘₐₓ x₁"),
        ("**bold**, *Ann loves pie*, `code`, __strong__", "bold, Ann loves pie, code, strong"),
        ("snake_case stays, a*b*c stays, costs \\$5", "snake_case stays, a*b*c stays, costs $5"),
        ("no markup at all [1].", "no markup at all [1]."),
    ],
)
def test_plain_text_cases(text: str, plain: str) -> None:
    assert plain_text(text) == plain


def test_extractive_quotes_are_plain_text_and_the_prompt_is_not(engine: Engine) -> None:
    """Quoted sentences are shown rendered; the index and what an LLM reads keep the text as stored."""
    from conftest import FakeBackend

    engine.settings.source_min_ratio = 0.0
    q = "How much speedup does ES-dLLM deliver on an NVIDIA H200 GPU?"
    answer = engine.ask(q, ExtractiveBackend()).run()
    assert "5.6× to 16.8×" in answer.answer and "$" not in answer.answer and "\\" not in answer.answer
    fake = FakeBackend(reply="ES-dLLM is faster [1].")
    engine.ask(q, fake).run()
    assert "5.6$\\times$ to 16.8$\\times$" in fake.calls[0][1]["content"]
    stored = [p for p in engine.index.papers() if "5.6$\\times$" in p.abstract]
    assert len(stored) == 1


def test_ui_panel_and_export_show_plain_text(engine: Engine) -> None:
    from rag_papers.chat import ChatSession
    from rag_papers.ui.export import export_markdown
    from rag_papers.ui.render import sources_panel
    from rag_papers.ui.state import Exchange, UIState

    result = engine.search("PepBenchmark peptide benchmark PepBenchData")
    items = [h.numbered(n) for n, h in enumerate(result.results[:3], 1)]
    pep = next(it for it in items if "PepBenchmark" in it.title)
    ex = Exchange(question="peptides", mode="search", items=items, papers=result.papers, done=True)
    state = UIState(session=ChatSession(engine), exchanges=[ex], view=(0, pep.n))
    html = sources_panel(state)
    text = re.sub(r"<[^>]+>", "", html)
    assert "textbf" not in text and "PepBenchData" in text
    md = export_markdown(state)
    assert "textbf" not in md and "\\$" not in md


def test_cli_search_prints_plain_passages(seeded: Settings) -> None:
    q = "PepBenchData PepBenchPipeline PepBenchLeaderboard components"
    res = run_main("search", q, "--top-k", "1")
    assert res.returncode == 0, res.stderr
    assert "Here we present PepBenchmark, which" in res.stdout and "textbf" not in res.stdout
    out = run_main("search", "--json", q, "--top-k", "1")
    assert "\\\\textbf{PepBenchmark}" in out.stdout  # JSON is data: as stored


# ------------------------------------------------------------------ derived titles
def test_derived_titles_keep_math_tokens() -> None:
    """DirMoE's title was "DirMoE: expert selection, Top- Softmax": the $k$ was dropped with the LaTeX."""
    assert derive_title(DIRMOE) == "DirMoE: expert selection, Top-k + Softmax"


def test_seed_titles_keep_math_tokens_and_nothing_dangles() -> None:
    """Only titles whose topic words held a math token change (a stored title changes at re-ingest only)."""
    titles = {derive_title(r.abstract) for f in sorted(SEEDS.glob("*.txt")) for r in read_seeds(f)}
    assert "K-Flow: scaling parameter, K-amplitude transformations" in titles  # was "amplitude transformations"
    assert "SWAX: softmax attention, sliding windows" in titles
    assert "ABBA: pre-trained weights, Hadamard product" in titles
    assert not any(re.search(r"-\s|\s-|\$|\\", t) for t in titles), titles


def test_an_href_shows_its_text_not_its_target() -> None:
    assert plain_text(r"see $$\href{http://example.org/x}{the chart}$$ here") == "see the chart here"
