"""Retrieve and answer stages: ranking, relevance, cited answers, refusal, streaming citation checks, budgeting."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import SEEDS, FakeBackend, run_main

from rag_papers.answer import CitationFilter
from rag_papers.chat import Engine
from rag_papers.config import PROJECT_ROOT, Settings
from rag_papers.corpus import content_hash, derive_title, plain_text
from rag_papers.llm import ExtractiveBackend, estimate_tokens
from rag_papers.retrieve import Filters, Retriever

ABBA_Q = "What does ABBA claim?"
OFF_TOPIC = ["who won the 2022 World Cup?", "best recipe for sourdough bread"]


def seed_abstracts() -> list[str]:
    out: list[str] = []
    for f in sorted(SEEDS.glob("*.txt")):
        paras = [" ".join(p.split()) for p in re.split(r"\n\s*\n", f.read_text(encoding="utf-8")) if p.strip()]
        out.extend(paras[1:])  # the first paragraph is the "ICLR 2026 Papers" header
    return out


def coining(name: str) -> str:
    """The one seeds abstract that introduces ``name``."""
    (found,) = [
        a for a in seed_abstracts() if re.search(rf"\b(?:[Ww]e|[Tt]his paper)\s+introduces?\b[^.]*\b{name}\b", a)
    ]
    return found


ABBA_ID = content_hash(coining("ABBA"))


# ------------------------------------------------------------------ retrieval
@pytest.mark.parametrize(
    ("query", "name"),
    [
        (ABBA_Q, "ABBA"),
        ("What is SWAX?", "SWAX"),
        ("How does TemGX explain temporal graph neural networks?", "TemGX"),
        ("routing in DirMoE", "DirMoE"),
    ],
)
def test_paper_named_in_the_query_ranks_first(engine: Engine, query: str, name: str) -> None:
    abstract = coining(name)
    res = engine.search(query)
    assert res.relevant is True
    top = res.results[0]
    assert top.id == content_hash(abstract)
    assert top.title == derive_title(abstract)
    assert top.passage and top.passage in abstract  # a real piece of the abstract, title stripped
    assert [h.score for h in res.results] == sorted((h.score for h in res.results), reverse=True)
    assert len(res.results) == engine.settings.top_k


@pytest.mark.parametrize("query", OFF_TOPIC)
def test_off_topic_queries_are_not_relevant(engine: Engine, query: str) -> None:
    res = engine.search(query)
    assert res.relevant is False
    assert res.relevance < engine.settings.min_score <= engine.search(ABBA_Q).relevance


def test_filters_restrict_both_retrievers(engine: Engine) -> None:
    assert engine.search(ABBA_Q, filters=Filters(venue="ICLR", year_min=2026, year_max=2026)).results[0].id == ABBA_ID
    none = engine.search(ABBA_Q, filters=Filters(year_min=2027))
    assert none.results == [] and none.relevant is False
    assert engine.search(ABBA_Q, filters=Filters(venue="NeurIPS")).results == []
    only = engine.search("low-rank adaptation", 10, filters=Filters(keyword="Hadamard"))
    assert only.results and all("hadamard" in only.papers[h.id].abstract.lower() for h in only.results)


def test_registry_rows_are_read_for_the_winners_and_filters_fill_k_in_rank_order(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fusion reads paper rows in rank order, k at a time, until k papers pass the filters."""
    full = engine.search("low-rank adaptation of large models", 30).results  # every seed paper is a candidate
    top_text = f"{full[0].title} {engine.index.get([full[0].id])[full[0].id].abstract}".lower()
    texts = {pid: f"{p.title} {p.abstract}".lower() for pid, p in engine.index.get([h.id for h in full]).items()}
    word = next(
        w
        for w in ("matrix", "training", "parameters", "model", "performance")
        if w not in top_text and sum(w in texts[h.id] for h in full) >= 3
    )
    calls: list[int] = []
    real_get = engine.index.get

    def counted_get(ids: list[str]) -> Any:
        calls.append(len(ids))
        return real_get(ids)

    monkeypatch.setattr(engine.index, "get", counted_get)
    assert [h.id for h in engine.search("low-rank adaptation of large models", 3).results] == [h.id for h in full[:3]]
    assert calls and max(calls) <= 3
    calls.clear()
    got = engine.search("low-rank adaptation of large models", 3, filters=Filters(keyword=word)).results
    assert calls and max(calls) <= 12  # 4k rows at a time with filters
    assert [h.id for h in got] == [h.id for h in full if word in texts[h.id]][:3]
    assert full[0].id not in {h.id for h in got}


def test_concurrent_searches_from_other_threads_match_sequential_ones(engine: Engine) -> None:
    """UI request threads search at once; each reads SQLite through its own connection."""
    from concurrent.futures import ThreadPoolExecutor

    queries = [ABBA_Q, "What is SWAX?", "routing in DirMoE", OFF_TOPIC[0], "low-rank adaptation", "graph explanations"]
    expected = [[(h.id, h.score) for h in engine.search(q).results] for q in queries]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda q: [(h.id, h.score) for h in engine.search(q).results], queries * 3))
    assert got == expected * 3
    assert engine.index.store._readers  # the request threads' own connections, closed with the index
    engine.index.close()
    assert engine.index.store._readers == []


def test_cli_search_json_batches_queries(seeded: Settings) -> None:
    queries = [ABBA_Q, OFF_TOPIC[0], "What is SWAX?"]
    res = run_main("search", "--json", *queries)
    assert res.returncode == 0, res.stderr
    lines = [json.loads(line) for line in res.stdout.splitlines()]
    assert len(lines) == 3
    for q, obj in zip(queries, lines):
        assert {"query", "results", "relevant"} <= set(obj)
        assert obj["query"] == q
        assert obj["results"]
        for hit in obj["results"]:
            assert {"id", "title", "score"} <= set(hit)
            assert isinstance(hit["score"], float)
    assert (lines[0]["relevant"], lines[1]["relevant"], lines[2]["relevant"]) == (True, False, True)
    # ``relevance`` is the evidence the default floor (min_score) is applied to.
    assert [obj["relevance"] >= seeded.min_score for obj in lines] == [obj["relevant"] for obj in lines]
    assert lines[0]["results"][0]["id"] == ABBA_ID
    assert lines[2]["results"][0]["id"] == content_hash(coining("SWAX"))


def test_cli_papers_json_lists_every_paper(seeded: Settings) -> None:
    res = run_main("papers", "--json")
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    abstracts = seed_abstracts()
    assert len(rows) == 38
    assert [r["abstract"] for r in rows] == abstracts  # ingest order
    for row, a in zip(rows, abstracts):
        assert row["id"] == content_hash(a)
        assert row["title"] == derive_title(a)
        (src,) = row["sources"]
        file, line = src.rsplit(":", 1)
        lines = Path(file).read_text(encoding="utf-8").splitlines()
        assert Path(file).parent == SEEDS.resolve()
        assert " ".join(lines[int(line) - 1].split()) == a


# ------------------------------------------------------------------ answers with a scripted LLM
def test_valid_citations_are_kept_and_mapped_to_papers(engine: Engine) -> None:
    engine.settings.source_min_ratio = 0.0  # give the model all top-5 papers, weak ones included
    reply = "ABBA reparameterizes the update as a Hadamard product of low-rank matrices [1]. Others differ [2][3]."
    fake = FakeBackend(reply=reply)
    stream = engine.ask(ABBA_Q, fake)
    streamed = "".join(stream)
    answer = stream.answer
    assert answer is not None
    assert streamed == reply and answer.answer == reply
    assert answer.backend == "fake" and answer.model == "fake-1" and answer.refused is False
    ids = [s.id for s in answer.sources]
    assert ids[0] == ABBA_ID
    assert answer.citations == ids[:3]
    assert [s.n for s in answer.sources] == list(range(1, len(ids) + 1))
    assert answer.removed_citations == []
    (messages,) = fake.calls
    assert [m["role"] for m in messages] == ["system", "user"]
    assert coining("ABBA") in messages[1]["content"] and ABBA_Q in messages[1]["content"]


def test_invalid_citations_are_cut_from_the_stream_and_reported(engine: Engine) -> None:
    engine.settings.source_min_ratio = 0.0
    reply = "ABBA uses a Hadamard product [1][9]. It wins everywhere [12]. See also [2, 7]."
    stream = engine.ask(ABBA_Q, FakeBackend(reply=reply))
    chunks = list(stream)
    answer = stream.answer
    assert answer is not None
    assert "[9]" not in "".join(chunks) and "[12]" not in "".join(chunks)
    assert answer.answer == "ABBA uses a Hadamard product [1]. It wins everywhere. See also [2]."
    assert answer.removed_citations == ["[9]", "[12]", "[7]"]
    assert answer.citations == [answer.sources[0].id, answer.sources[1].id]
    assert answer.notice and "[9]" in answer.notice


@pytest.mark.parametrize("query", OFF_TOPIC)
def test_refusal_calls_no_llm(engine: Engine, query: str) -> None:
    fake = FakeBackend(reply="I should never be asked [1].")
    answer = engine.ask(query, fake).run()
    assert fake.calls == []
    assert answer.refused is True
    refusal = (PROJECT_ROOT / "prompts" / "refusal.txt").read_text(encoding="utf-8").strip()
    # The refusal, after the names no abstract contains where the question has some ("World Cup").
    assert (
        answer.answer
        == (f"No indexed abstract mentions {' or '.join(answer.uncovered)}. " if answer.uncovered else "") + refusal
    )
    assert answer.citations == [] and answer.sources == []


def test_citation_filter_across_chunk_boundaries() -> None:
    filt = CitationFilter(2)
    out = [
        filt.feed(p)
        for p in ["Claim one ", "[", "1", "]", " and two [", "2", "] bad [", "3", "]", ". Mixed [1,", " 3]."]
    ]
    assert out[1] == "" and out[2] == ""  # nothing shown while a citation is still open
    assert "".join(out) + filt.flush() == "Claim one [1] and two [2] bad. Mixed [1]."  # no stray space
    assert filt.used == [1, 2]
    assert filt.removed == ["[3]", "[3]"]

    other = CitationFilter(3)
    text = "Array x[i] stays, [see below] stays, [4] goes, [ 2 ] kept, unclosed [1"
    out2 = "".join(other.feed(ch) for ch in text) + other.flush()
    assert out2 == "Array x[i] stays, [see below] stays, goes, [2] kept, unclosed [1"
    assert other.used == [2] and other.removed == ["[4]"]


def test_weak_matches_are_not_put_in_the_prompt(engine: Engine) -> None:
    """Papers far below the best match would only invite wrong citations."""
    fake = FakeBackend(reply="ABBA [1].")
    stream = engine.ask(ABBA_Q, fake)
    answer = stream.run()
    top = stream.result.results[0].score
    given = {s.id for s in answer.sources}
    assert answer.sources[0].id == ABBA_ID
    for hit in stream.result.results:
        assert (hit.id in given) == (hit.score >= engine.settings.source_min_ratio * top or hit.id == ABBA_ID)
    assert len(given) < len(stream.result.results)  # the seeds have one clear ABBA paper
    (messages,) = fake.calls
    assert f"[{len(given) + 1}] " not in messages[1]["content"]


# ------------------------------------------------------------------ context budgeting
def test_context_budget_fits_as_many_sources_as_the_window_allows(engine: Engine) -> None:
    engine.settings.max_answer_tokens = 64
    engine.settings.source_min_ratio = 0.0
    reply = "Claims [1][2][3][4][5]."
    counts = []
    for window in (600, 900, 1300, 2000, 8192):
        fake = FakeBackend(reply=reply)
        fake.context_window = window
        stream = engine.ask(ABBA_Q, fake)
        answer = stream.run()
        (messages,) = fake.calls
        assert sum(estimate_tokens(m["content"]) for m in messages) + 64 <= window, window
        k = len(answer.sources)
        user = messages[1]["content"]
        assert [s.id for s in answer.sources] == [h.id for h in stream.result.results[:k]]
        for s in answer.sources:
            assert f"[{s.n}] {s.title} (id {s.id})" in user
        assert f"[{k + 1}] " not in user
        # Citing a source that did not fit is caught like any other invalid citation.
        assert answer.removed_citations == [f"[{i}]" for i in range(k + 1, 6)]
        counts.append(k)
    assert counts == sorted(counts)
    assert 1 <= counts[0] < 5
    assert counts[-1] == engine.settings.context_papers == 5


# ------------------------------------------------------------------ top_k and context_papers
def test_top_k_is_the_papers_retrieved_and_context_papers_caps_the_prompt(engine: Engine) -> None:
    """top_k papers are retrieved; the first min(top_k, context_papers) are the prompt and the answer's sources."""
    engine.settings.source_min_ratio = 0.0  # no paper left out for scoring low: the counts are top_k's
    fake = FakeBackend(reply="ABBA [1][3].")
    stream = engine.ask(ABBA_Q, fake, top_k=2)
    answer = stream.run()
    assert [h.id for h in stream.result.results] == [s.id for s in answer.sources]
    assert len(answer.sources) == 2 and answer.sources[0].id == ABBA_ID
    (messages,) = fake.calls
    assert "[2] " in messages[1]["content"] and "[3] " not in messages[1]["content"]
    assert answer.removed_citations == ["[3]"]  # a third paper was never given

    engine.settings.context_papers = 3
    stream = engine.ask(ABBA_Q, FakeBackend(reply="ABBA [1]."), top_k=8)
    answer = stream.run()
    assert len(stream.result.results) == 8  # all retrieved (the answer's ``search`` has them) ...
    assert answer.search is not None and len(answer.search["results"]) == 8
    assert [s.id for s in answer.sources] == [h.id for h in stream.result.results[:3]]  # ... three read


# ------------------------------------------------------------------ prompts come from files
def test_prompts_are_read_from_prompts_dir(engine: Engine, tmp_path: Path) -> None:
    prompts = tmp_path / "prompts"
    shutil.copytree(PROJECT_ROOT / "prompts", prompts)
    system = "You are the CANARY-7 assistant. Cite abstracts as [n].\n"
    (prompts / "answer_system.txt").write_text(system, encoding="utf-8")
    (prompts / "source.txt").write_text("<<{n}>> {title} :: {abstract}", encoding="utf-8")
    (prompts / "refusal.txt").write_text("CANARY-7 cannot help with that.\n", encoding="utf-8")
    engine.settings.prompts_dir = prompts
    fake = FakeBackend(reply="ABBA [1].")
    answer = engine.ask(ABBA_Q, fake).run()
    (messages,) = fake.calls
    assert messages[0]["content"] == system
    assert f"<<1>> {answer.sources[0].title} :: " in messages[1]["content"]
    assert "(id " not in messages[1]["content"]
    refused = engine.ask(OFF_TOPIC[1], fake).run()
    assert refused.answer == "CANARY-7 cannot help with that."
    assert len(fake.calls) == 1


# ------------------------------------------------------------------ extractive (no LLM)
def test_extractive_answer_quotes_and_cites_given_sources(engine: Engine) -> None:
    stream = engine.ask(ABBA_Q, ExtractiveBackend())
    streamed = "".join(stream)
    answer = stream.answer
    assert answer is not None
    assert answer.backend == "extractive" and answer.model is None and answer.refused is False
    assert streamed.strip() == answer.answer
    ids = [s.id for s in answer.sources]
    assert ids[0] == ABBA_ID
    assert answer.citations and answer.citations[0] == ABBA_ID and set(answer.citations) <= set(ids)
    papers = engine.index.get(ids)
    quotes = [ln for ln in answer.answer.splitlines() if ln.startswith("- ")]
    assert quotes
    for line in quotes:
        m = re.fullmatch(r"- (.+) \[(\d+)\]", line)
        assert m, line
        n = int(m.group(2))
        assert 1 <= n <= len(ids)
        assert m.group(1) in papers[ids[n - 1]].abstract  # a verbatim sentence of the cited paper
    assert answer.removed_citations == []


def test_cli_ask_json_falls_back_to_extractive(seeded: Settings) -> None:
    res = run_main("ask", "--json", ABBA_Q, env={"OLLAMA_HOST": "http://127.0.0.1:9"})
    assert res.returncode == 0, res.stderr
    obj = json.loads(res.stdout)
    assert {"answer", "citations", "sources", "refused", "backend", "model", "timings"} <= set(obj)
    assert obj["backend"] == "extractive" and obj["model"] is None and obj["refused"] is False
    assert obj["sources"][0]["id"] == ABBA_ID
    assert obj["citations"] and set(obj["citations"]) <= {s["id"] for s in obj["sources"]}
    assert "retrieval_ms" in obj["timings"]
    assert obj["notice"] and "ollama serve" in obj["notice"]


def test_cli_ask_says_once_in_one_short_line_that_no_ollama_server_answers(seeded: Settings) -> None:
    """Reported (issue 16): a 200-character notice, most of it the Ollama client's own advice, printed above every
    answer. Now one short line, the first time for this data directory and server; the footer still names the
    backend, and ``--json`` keeps the notice on every answer."""
    env = {"OLLAMA_HOST": "http://127.0.0.1:9"}
    first = run_main("ask", ABBA_Q, env=env)
    assert first.returncode == 0, first.stderr
    notes = [line for line in first.stderr.splitlines() if "Ollama" in line]
    assert len(notes) == 1 and len(notes[0]) <= 100 and "ollama serve" in notes[0], first.stderr
    assert "ollama.com" not in first.stderr and "Please check" not in first.stderr
    second = run_main("ask", ABBA_Q, env=env)
    assert second.returncode == 0 and "Ollama" not in second.stderr, second.stderr
    assert "[extractive;" in second.stderr  # what answered is still said
    other = run_main("ask", ABBA_Q, env={"OLLAMA_HOST": "http://127.0.0.1:7"})  # another server: said again
    assert "127.0.0.1:7" in other.stderr
    obj = json.loads(run_main("ask", "--json", ABBA_Q, env=env).stdout)
    assert "ollama serve" in obj["notice"] and len(obj["notice"]) <= 100


def test_cli_ask_top_k_limits_the_sources(seeded: Settings) -> None:
    """``ask --top-k 2``: two papers retrieved, so at most two sources (context_papers is 5)."""
    every_source = {"RAG_PAPERS_SOURCE_MIN_RATIO": "0"}  # without --top-k, all five would be sources
    res = run_main("ask", "--json", "--llm", "extractive", "--top-k", "2", ABBA_Q, env=every_source)
    assert res.returncode == 0, res.stderr
    obj = json.loads(res.stdout)
    assert [s["n"] for s in obj["sources"]] == [1, 2] and obj["sources"][0]["id"] == ABBA_ID
    assert obj["backend"] == "extractive" and set(obj["citations"]) <= {s["id"] for s in obj["sources"]}


def test_cli_and_bench_choices_are_the_settings_types() -> None:
    """One definition: the flags offer exactly what the ``Settings`` fields accept, and every preset."""
    import argparse
    from typing import get_args

    from rag_papers import bench
    from rag_papers.cli import build_parser
    from rag_papers.config import PRESETS

    def actions(p: argparse.ArgumentParser) -> dict[str, argparse.Action]:
        return {a.dest: a for a in p._actions}

    (subs,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    search = actions(subs.choices["search"])
    bench_parser = argparse.ArgumentParser()
    bench.add_arguments(bench_parser)
    embed = get_args(Settings.model_fields["embed_backend"].annotation)
    assert embed and tuple(search["embed_backend"].choices or ()) == embed
    assert tuple(actions(bench_parser)["embed_backend"].choices or ()) == embed
    assert actions(bench_parser)["embed_backends"].default == ",".join(embed)
    assert tuple(search["retrieval"].choices or ()) == get_args(Settings.model_fields["retrieval"].annotation)
    assert str(search["preset"].help).endswith(", ".join(PRESETS))


def test_a_stopped_answer_is_no_answer_and_no_turn(engine: Engine) -> None:
    """Stop mid-answer: the stream ends, ``answer`` stays None and the conversation keeps no turn."""
    from conftest import FakeBackend

    from rag_papers.chat import ChatSession

    session = ChatSession(engine)
    fake = FakeBackend("ABBA reparameterizes the update as a Hadamard product [1]. " * 20, delay=0.001)
    _, stream = session.ask("What does ABBA claim?", fake)  # type: ignore[arg-type]
    got = []
    for chunk in stream:
        got.append(chunk)
        if len("".join(got)) > 40:
            stream.cancel()
    assert stream.cancelled and stream.answer is None
    assert 40 < len("".join(got)) < 200
    assert session.turns == []


def test_generic_words_are_no_keyword_evidence(engine: Engine) -> None:
    """A match on words found in many abstracts says little about which paper is meant (the retrieval issue:
    "probabilistic", "neural" outvoted the cosine). Words in more than keyword_max_df of the papers give no
    keyword share, so a question made only of them ranks exactly as dense retrieval ranks it."""
    n_docs, stats = engine.index.term_stats(
        "neural network model learning training performance method data results propose show large language"
    )
    common = [t for t, df in stats if engine.settings.keyword_max_df * n_docs < df <= n_docs / 2]
    assert len(common) >= 3, stats  # words the previous filter (in at most half the papers) still counted
    query = " ".join(common)
    res = engine.search(query, 10)
    assert res.results and all(h.keyword_score == 0.0 for h in res.results)
    dense = Retriever(engine.index, engine.settings.model_copy(update={"retrieval": "dense"})).search(query, 10)
    assert [h.id for h in res.results] == [h.id for h in dense.results]


def test_keyword_share_weighs_specific_words_and_counts_unknown_ones_against_every_paper(engine: Engine) -> None:
    """The share is a paper's BM25 over the specific words over (k1 + 1) x their idf plus that of words no paper
    has: adding a word the corpus lacks lowers every paper's share by exactly that word's idf mass."""
    from rag_papers.keyword import lucene_idf

    base = engine.search("Hadamard low-rank adaptation", 5).results[0]
    more = engine.search("Hadamard low-rank adaptation zyxwvut", 5).results[0]
    assert base.id == more.id and 0 < more.keyword_score < base.keyword_score
    n_docs, stats = engine.index.term_stats("Hadamard low-rank adaptation")
    specific = sum(lucene_idf(n_docs, df) for t, df in stats if 0 < df <= engine.settings.keyword_max_df * n_docs)
    assert more.keyword_score == pytest.approx(
        base.keyword_score * specific / (specific + lucene_idf(n_docs, 0)), abs=2e-4
    )


# ------------------------------------------------------------------ honest extractive answers
DLLM_Q = "is there work on making diffusion language models faster?"
DRAFT_Q = "which papers use speculative decoding with a draft model to speed up LLM inference?"


def seed_id(phrase: str) -> str:
    """The id of the one seeds abstract holding ``phrase``."""
    (found,) = [a for a in seed_abstracts() if phrase in a]
    return content_hash(found)


def quote_lines(answer: Any) -> list[tuple[str, int]]:
    """(text before the citation, source n) of each "- ... [n]" line."""
    out = []
    for line in answer.answer.splitlines():
        m = re.fullmatch(r"- (.+) \[(\d+)\]", line)
        if m:
            out.append((m.group(1), int(m.group(2))))
    return out


def test_extractive_cites_no_paper_whose_best_sentence_does_not_match(engine: Engine) -> None:
    """The hybrid fine-tuning paper is retrieved close to ES-dLLM for a question about faster diffusion language
    models, but none of its sentences is about that: it stays a source, uncited, and is not quoted."""
    es_dllm, hybrid = seed_id("we propose ES-dLLM"), seed_id("hybrid fine-tuning")
    answer = engine.ask(DLLM_Q, ExtractiveBackend()).run()
    assert answer.refused is False
    assert hybrid in [s.id for s in answer.sources]  # retrieved and given: the retrieval is unchanged
    assert answer.citations[0] == es_dllm
    # A "which papers" list names every paper above the floor whose best sentence reaches list_floor (issue 25):
    # the hybrid paper is listed only when its sentence does, and then with that sentence.
    if hybrid in answer.citations:
        assert "viable solution for large-scale language model fine-tuning" in answer.answer
    papers = engine.index.get([s.id for s in answer.sources])
    for text, n in quote_lines(answer):
        assert text.split(" — ", 1)[-1] in plain_text(papers[answer.sources[n - 1].id].abstract)  # quotes are rendered


def test_sentence_prior_prefers_contributions_and_results_over_background() -> None:
    from rag_papers.judge.quotes import sentence_prior

    assert sentence_prior("Leveraging this insight, we propose ES-dLLM, a training-free framework.") == 1
    assert sentence_prior("We introduce ABBA, a new PEFT architecture.") == 1
    assert sentence_prior("Our method outperforms strong baselines by 12% on GSM8K.") == 1
    assert sentence_prior("ES-dLLM achieves a 5.6× speedup over vanilla implementations.") == 1
    assert sentence_prior("Diffusion models have become the standard for image generation.") == -1
    assert sentence_prior("However, existing methods ignore the structure of the update.") == -1
    assert sentence_prior("The update is a product of two matrices.") == 0


def test_a_which_papers_question_lists_each_relevant_paper_with_its_title_and_one_sentence(engine: Engine) -> None:
    answer = engine.ask(DLLM_Q, ExtractiveBackend()).run()
    lines = quote_lines(answer)
    assert lines and len(lines) == len(answer.citations)  # one line per cited paper
    papers = engine.index.get(answer.citations)
    for text, n in lines:
        source = answer.sources[n - 1]
        title, _, sentence = text.partition(" — ")
        assert title == source.title and sentence in plain_text(papers[source.id].abstract)
    # Other questions keep the quotes: the top paper's best sentences, no titles.
    abba = engine.ask(ABBA_Q, ExtractiveBackend()).run()
    assert all(" — " not in text for text, _ in quote_lines(abba))


def test_the_prior_quotes_what_a_paper_proposes_and_unrelated_papers_are_not_cited(engine: Engine) -> None:
    """No seeds abstract covers speculative decoding. Before, three papers were quoted; ES-dLLM (LLM inference
    acceleration) is the one whose sentences come close, and of its two closest sentences, nearly tied, the one
    that says what it proposes is quoted rather than the background it starts from."""
    es_dllm = seed_id("we propose ES-dLLM")
    answer = engine.ask(DRAFT_Q, ExtractiveBackend()).run()
    assert answer.citations[0] == es_dllm
    lines = quote_lines(answer)
    assert len(lines) == len(answer.citations)  # a list: one line a paper, the closest few only (issue 25)
    text, n = lines[0]
    assert answer.sources[n - 1].id == es_dllm
    assert "we propose ES-dLLM" in text and "are emerging as a promising alternative" not in text


# The wave-equation paper (IG-FWI) is close; no seeds abstract names FourCastNet.
FOURCAST_Q = "Which papers use physics-informed neural operators like FourCastNet for wave equations?"
WEATHER_Q = "Which papers do global weather forecasting with neural operators like FourCastNet?"


def test_a_question_whose_specific_words_no_quoted_abstract_has_gets_a_caveat_first(engine: Engine) -> None:
    """The closest papers are quoted, said to be only that, and the missing words are named as the user wrote them
    (not as stems). No seeds abstract is about weather forecasting: matched only loosely, and on no name the
    abstracts have, that question is refused, with the same first line (it was quoted under the caveat)."""
    weather = engine.ask(WEATHER_Q, ExtractiveBackend()).run()
    assert weather.refused and weather.uncovered[:1] == ["FourCastNet"], weather.uncovered
    assert weather.answer.startswith("No indexed abstract mentions FourCastNet, and the abstracts match")
    answer = engine.ask(FOURCAST_Q, ExtractiveBackend()).run()
    assert answer.refused is False and answer.citations
    assert answer.caveat is not None and "FourCastNet" in answer.caveat and "fourcastnet" not in answer.caveat
    assert "FourCastNet" in answer.uncovered
    assert answer.answer.startswith(answer.caveat)
    assert answer.to_dict()["caveat"] == answer.caveat and answer.to_dict()["uncovered"] == answer.uncovered
    assert engine.ask(ABBA_Q, ExtractiveBackend()).run().caveat is None
    assert engine.ask(DLLM_Q, ExtractiveBackend()).run().caveat is None


def test_the_reported_speculative_decoding_question_quotes_the_closest_paper(engine: Engine) -> None:
    """Reported (issue 15): asked about speculative decoding with a draft model, which no abstract covers, the
    answer quoted the closest paper. It still does; the line naming "speculative decoding" missing went with the
    description rule (issue 46: it caveated more answerable questions than it flagged near-misses on the read
    rounds, eval/results/ablation.md). The LLM judge is what reads such a question against the abstract."""
    answer = engine.ask(DRAFT_Q, ExtractiveBackend()).run()
    assert answer.refused is False and answer.citations[0] == seed_id("we propose ES-dLLM")
    assert "speculative decoding" not in answer.uncovered
    assert engine.ask(DLLM_Q, ExtractiveBackend()).run().caveat is None


def test_extractive_refuses_when_no_sentence_matches(engine: Engine) -> None:
    """Retrieval finds papers close enough to answer from, but no sentence of them is near the question: nothing is
    quoted, as for a retrieval refusal (retrieval's own call is unchanged). (The U-Net question this test used
    had a sentence at 0.286: since the quoting floor is 0.27 it is answered, with its uncovered line.)"""
    question = "how can I tell if a photo was made by AI?"
    assert engine.search(question).relevant is True
    answer = engine.ask(question, ExtractiveBackend()).run()
    assert answer.refused is True and answer.citations == [] and answer.sources == []
    assert answer.backend == "extractive" and quote_lines(answer) == []
    assert answer.answer == (engine.settings.prompts_dir / "refusal.txt").read_text(encoding="utf-8").strip()


def test_cli_ask_shows_the_caveat(seeded: Settings) -> None:
    res = run_main("ask", "--json", "--llm", "extractive", FOURCAST_Q)
    assert res.returncode == 0, res.stderr
    obj = json.loads(res.stdout)
    assert obj["caveat"] and "FourCastNet" in obj["caveat"] and obj["answer"].startswith(obj["caveat"])
    plain = run_main("ask", "--llm", "extractive", FOURCAST_Q)
    assert plain.returncode == 0 and plain.stdout.startswith(obj["caveat"])
    assert json.loads(run_main("ask", "--json", "--llm", "extractive", ABBA_Q).stdout)["caveat"] is None
