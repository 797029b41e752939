"""The fusion and refusal study behind the hybrid defaults: every candidate fitted on dev, scored on test.

Run from a checkout, after `rag-papers ingest` of the seeds into the data directory:

    .venv/bin/python eval/fusion_study.py [--home DIR] [--out eval/results/fusion.md]

Each method's parameters are chosen by grid search on the dev part of eval/qa.jsonl (and
its cross-validated dev figure is reported, 5 folds over dev), then the chosen
parameters are scored once on the test part. Why offline: the candidates' cosines and
term statistics are read once per question from the real index (the same calls the
retriever makes), so trying a few hundred parameter settings takes seconds; the chosen
one is then what `rag_papers.retrieve` implements and `rag-papers eval` measures.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rag_papers.chat import Engine
from rag_papers.config import PROJECT_ROOT, Settings
from rag_papers.keyword import keyword_tokens, lucene_idf, paper_text
from rag_papers.retrieve import dense_hits, keyword_query

K1, B = 1.2, 0.75
Q = dict[str, Any]


def collect(settings: Settings, qa: Path) -> tuple[list[Q], int, float]:
    """Per question: each candidate's dense score, head and best-chunk cosine, and its query terms' counts."""
    engine = Engine(settings)
    index = engine.index
    rows = index.store.db.execute("SELECT id, title, abstract FROM papers").fetchall()
    toks = {pid: paper_text(title, abstract).split() for pid, title, abstract in rows}
    df: Counter[str] = Counter()
    for t in toks.values():
        df.update(set(t))
    avgdl = sum(map(len, toks.values())) / len(toks)
    out = []
    for line in qa.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        q = json.loads(line)
        chunk_hits, doc_hits = index.nearest(index.embedder.embed_query(q["question"]), settings.candidates)
        terms = list(dict.fromkeys(keyword_tokens(keyword_query(q["question"]))))
        q["dense"] = {h.paper_id: h.score for h in dense_hits(chunk_hits, doc_hits, settings.candidates)}
        q["terms"] = terms
        q["df"] = {t: df.get(t, 0) for t in terms}
        q["tf"] = {pid: {t: tk.count(t) for t in terms if t in tk} for pid, tk in toks.items()}
        q["dl"] = {pid: len(tk) for pid, tk in toks.items()}
        out.append(q)
    return out, len(toks), avgdl


# ------------------------------------------------------------------ keyword evidence
def keyword(
    q: Q, n: int, avgdl: float, p: float = 1.0, max_df: float = 1.0
) -> tuple[dict[str, tuple[float, float]], float]:
    """(paper -> (BM25 with idf^p weights, specificity-weighted share), coverage of the query's idf^2 mass)."""
    w = {t: lucene_idf(n, q["df"][t]) ** p for t in q["terms"] if not q["df"][t] / n > max_df}
    total = sum(w.values())
    every = sum(lucene_idf(n, q["df"][t]) ** 2 for t in q["terms"])
    coverage = sum(lucene_idf(n, q["df"][t]) ** 2 for t in q["terms"] if q["df"][t]) / every if every else 0.0
    out = {}
    for pid, tfs in q["tf"].items():
        norm = K1 * (1 - B + B * q["dl"][pid] / avgdl)
        raw = sum(w[t] * c * (K1 + 1) / (c + norm) for t, c in tfs.items() if t in w)
        if raw > 0:
            out[pid] = (raw, raw / (K1 + 1) / total)
    return out, coverage


def _z(xs: dict[str, float]) -> dict[str, float]:
    m, sd = statistics.fmean(xs.values()), statistics.pstdev(xs.values()) or 1.0
    return {k: (x - m) / sd for k, x in xs.items()}


def _minmax(xs: dict[str, float]) -> dict[str, float]:
    lo, hi = min(xs.values()), max(xs.values())
    return {k: (x - lo) / (hi - lo) if hi > lo else 0.0 for k, x in xs.items()}


def _ranks(xs: dict[str, float]) -> dict[str, int]:
    return {k: i + 1 for i, (k, _) in enumerate(sorted(xs.items(), key=lambda x: (-x[1], x[0])))}


# ------------------------------------------------------------------ fusion methods
def rank(q: Q, n: int, avgdl: float, method: str, prm: dict[str, Any]) -> list[str]:
    d: dict[str, float] = q["dense"]
    floor = min(d.values())
    if method == "dense":
        s = dict(d)
    elif method == "bm25":
        s = {k: v[0] for k, v in keyword(q, n, avgdl, max_df=prm.get("max_df", 1.0))[0].items()}
    elif method == "previous":  # the fusion before this study: confidence-scaled share, FTS5's idf
        raw: dict[str, float] = {}
        for pid, tfs in q["tf"].items():
            norm = K1 * (1 - B + B * q["dl"][pid] / avgdl)
            ws = {t: max(math.log((n - q["df"][t] + 0.5) / (q["df"][t] + 0.5)), 1e-6) for t in tfs}
            if tfs:
                raw[pid] = sum(ws[t] * c * (K1 + 1) / (c + norm) for t, c in tfs.items() if q["df"][t] <= n / 2)
        known = sum(lucene_idf(n, q["df"][t]) for t in q["terms"] if q["df"][t])
        share = {k: min(1.0, v / known) for k, v in raw.items() if v > 0} if known else {}
        conf = max(share.values(), default=0.0) ** 0.5
        s = {k: 0.65 * d.get(k, floor) + 0.35 * share.get(k, 0.0) * conf for k in {*d, *share}}
    elif method == "specific":  # dense + w x specificity-weighted keyword share (absolute scores)
        kw, _ = keyword(q, n, avgdl, p=prm["p"], max_df=prm["max_df"])
        s = {k: d.get(k, floor) + prm["w"] * (kw[k][1] if k in kw else 0.0) for k in {*d, *kw}}
    elif method in ("zscore", "minmax"):
        kw, _ = keyword(q, n, avgdl, p=prm["p"])
        raw = {k: kw[k][0] if k in kw else 0.0 for k in d}
        norm_f: Callable[[dict[str, float]], dict[str, float]] = _z if method == "zscore" else _minmax
        dn, kn = norm_f(d), norm_f(raw)
        s = {k: dn[k] + prm["w"] * kn[k] for k in d}
    elif method == "rrf":
        kw, _ = keyword(q, n, avgdl, p=prm["p"])
        rd, rk = _ranks(d), _ranks({k: v[0] for k, v in kw.items()})
        s = {k: 1 / (prm["k"] + rd.get(k, 10**6)) + prm["w"] / (prm["k"] + rk.get(k, 10**6)) for k in {*rd, *rk}}
    elif method == "learned":
        s = prm["model"](q)
    else:
        raise ValueError(method)
    return [k for k, _ in sorted(s.items(), key=lambda x: (-x[1], x[0]))]


def learned_features(q: Q, n: int, avgdl: float) -> dict[str, list[float]]:
    d = q["dense"]
    kw1, _ = keyword(q, n, avgdl, p=1, max_df=0.25)
    kw2, _ = keyword(q, n, avgdl, p=2)
    raw = {k: kw2[k][0] if k in kw2 else 0.0 for k in d}
    zd, zk, rd = _z(d), _z(raw), _ranks(d)
    return {
        k: [d[k], zd[k], kw1[k][1] if k in kw1 else 0.0, kw2[k][1] if k in kw2 else 0.0, zk[k], 1 / rd[k]] for k in d
    }


def fit_learned(qs: list[Q], n: int, avgdl: float) -> dict[str, Any]:
    """Logistic regression on (question, candidate) pairs, gold or not: a linear fusion learned on dev."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    X, y = [], []
    for q in qs:
        for k, f in learned_features(q, n, avgdl).items():
            X.append(f)
            y.append(int(k in q["gold"]))
    model = LogisticRegression(max_iter=2000, class_weight="balanced").fit(np.array(X), np.array(y))

    def score(q: Q) -> dict[str, float]:
        fs = learned_features(q, n, avgdl)
        return dict(zip(fs, model.decision_function(np.array(list(fs.values()))).tolist()))

    return {"model": score, "coef": [round(float(c), 3) for c in model.coef_[0]]}


GRIDS: dict[str, list[dict[str, Any]]] = {
    "dense": [{}],
    "previous": [{}],
    "bm25": [{"max_df": m} for m in (1.0, 0.25)],
    "specific": [
        {"w": w, "p": p, "max_df": m}
        for w in (0.1, 0.2, 0.3, 0.45, 0.6, 0.8, 1.0, 1.3)
        for p in (1, 2, 3)
        for m in (1.0, 0.25, 0.1)
    ],
    "zscore": [{"w": w, "p": p} for w in (0.1, 0.2, 0.3, 0.5, 0.75, 1.0) for p in (1, 2)],
    "minmax": [{"w": w, "p": p} for w in (0.1, 0.2, 0.3, 0.5, 0.75, 1.0) for p in (1, 2)],
    "rrf": [{"k": k, "w": w, "p": p} for k in (1, 5, 10, 30, 60) for w in (0.25, 0.5, 1.0) for p in (1, 2)],
}
KINDS = ("lexical", "paraphrase", "multi")


def scores(qs: list[Q], n: int, avgdl: float, method: str, prm: dict[str, Any]) -> dict[str, dict[str, float]]:
    per: dict[str, list[dict[str, float]]] = {}
    for q in qs:
        if not q["gold"]:
            continue
        ranked, gold = rank(q, n, avgdl, method, prm), set(q["gold"])
        first = next((i for i, p in enumerate(ranked) if p in gold), None)
        per.setdefault(q["kind"], []).append(
            {
                "hit@1": float(bool(ranked) and ranked[0] in gold),
                "R@5": len(gold & set(ranked[:5])) / len(gold),
                "MRR": 1 / (first + 1) if first is not None else 0.0,
                "n": 1.0,
            }
        )
    return {
        k: {m: (sum if m == "n" else statistics.fmean)(r[m] for r in rows) for m in rows[0]} for k, rows in per.items()
    }


def objective(res: dict[str, dict[str, float]]) -> float:
    return sum(v["hit@1"] + v["R@5"] + v["MRR"] for k, v in res.items() if k in KINDS)


def fit(qs: list[Q], n: int, avgdl: float, method: str) -> dict[str, Any]:
    if method == "learned":
        return fit_learned([q for q in qs if q["gold"]], n, avgdl)
    return max(GRIDS[method], key=lambda prm: objective(scores(qs, n, avgdl, method, prm)))


def cross_validated(qs: list[Q], n: int, avgdl: float, method: str, folds: int = 5) -> dict[str, dict[str, float]]:
    parts = [qs[i::folds] for i in range(folds)]
    pooled: dict[str, list[dict[str, float]]] = {}
    for i in range(folds):
        train = [q for j, part in enumerate(parts) if j != i for q in part]
        for kind, v in scores(parts[i], n, avgdl, method, fit(train, n, avgdl, method)).items():
            pooled.setdefault(kind, []).append(v)
    return {
        k: {m: sum(r[m] * r["n"] for r in rs) / sum(r["n"] for r in rs) for m in ("hit@1", "R@5", "MRR")}
        for k, rs in pooled.items()
    }


# ------------------------------------------------------------------ refusal evidence
def refusal_evidence(q: Q, n: int, avgdl: float, a: float, b: float) -> float:
    """Best cosine + a x best specific keyword share + b x coverage of the question's idf^2 mass."""
    kw, coverage = keyword(q, n, avgdl, max_df=0.25)
    return max(q["dense"].values()) + a * max((v[1] for v in kw.values()), default=0.0) + b * coverage


def floor_at(answerable: list[float], max_false: float) -> float:
    ranked = sorted(answerable)
    return ranked[min(int(max_false * len(ranked)), len(ranked) - 1)]


def refusal_rates(qs: list[Q], ev: dict[str, float], floor: float) -> dict[str, float]:
    off = [q for q in qs if not q["gold"]]
    near = [q for q in off if q.get("subkind") == "near-miss"]
    ans = [q for q in qs if q["gold"]]
    return {
        "off-topic refused": sum(ev[q["id"]] < floor for q in off) / len(off),
        "near-misses refused": sum(ev[q["id"]] < floor for q in near) / len(near) if near else 0.0,
        "answerable refused": sum(ev[q["id"]] < floor for q in ans) / len(ans),
    }


REFUSAL_GRID = [(a, b) for a in (0.0, 0.1, 0.2, 0.4) for b in (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.7, 1.0)]


def _fmt(res: dict[str, dict[str, float]]) -> list[str]:
    return [f"{res[k]['hit@1']:.3f} / {res[k]['R@5']:.3f} / {res[k]['MRR']:.3f}" if k in res else "-" for k in KINDS]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--home", type=Path, help="data directory holding the seeds index (default: the settings')")
    ap.add_argument("--qa", type=Path, default=PROJECT_ROOT / "eval" / "qa.jsonl")
    ap.add_argument("--out", type=Path, default=PROJECT_ROOT / "eval" / "results" / "fusion.md")
    args = ap.parse_args()
    settings = Settings(**({"home": args.home} if args.home else {}))
    qs, n, avgdl = collect(settings, args.qa)
    dev = [q for q in qs if q.get("split") == "dev"]
    test = [q for q in qs if q.get("split") == "test"]
    lines = [
        "# Fusion and refusal study",
        "",
        f"`eval/fusion_study.py` over {n} papers: {len(dev)} dev and {len(test)} test questions of `eval/qa.jsonl`. "
        "Parameters chosen by grid search on dev (objective: the sum of hit@1, recall@5 and MRR over the three "
        "answerable kinds); dev figures are 5-fold cross-validated over dev; test figures use the parameters fitted "
        "on all of dev. Each cell: hit@1 / recall@5 / MRR.",
        "",
        "| method | fitted on dev | dev (cv) lexical | dev (cv) paraphrase | dev (cv) multi "
        "| test lexical | test paraphrase | test multi |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for method in (*GRIDS, "learned"):
        prm = fit(dev, n, avgdl, method)
        shown = {"coef": prm["coef"]} if method == "learned" else prm
        cells = _fmt(cross_validated(dev, n, avgdl, method)) + _fmt(scores(test, n, avgdl, method, prm))
        lines.append(f"| {method} | `{json.dumps(shown)}` | " + " | ".join(cells) + " |")
        print(lines[-1], file=sys.stderr)
    lines += [
        "",
        "## Refusal evidence",
        "",
        "Evidence = best cosine + a x best specific keyword share + b x coverage (the share of the question's "
        "squared idf mass in words some abstract has). (a, b) chosen on dev for the most off-topic questions "
        "refused at a floor refusing at most 1% of dev's answerable ones; the floor is fitted on dev and applied "
        "unchanged to test.",
        "",
        "| evidence | floor rule | part | off-topic refused | near-misses refused | answerable refused |",
        "|---|---|---|---|---|---|",
    ]
    dev_ans = [q for q in dev if q["gold"]]

    def value(a: float, b: float) -> float:
        ev = {q["id"]: refusal_evidence(q, n, avgdl, a, b) for q in dev}
        r = refusal_rates(dev, ev, floor_at([ev[q["id"]] for q in dev_ans], 0.01))
        return r["off-topic refused"] - 5 * max(0.0, r["answerable refused"] - 0.01)

    best = max(REFUSAL_GRID, key=lambda ab: value(*ab))
    for label, (a, b) in (("best cosine only", (0.0, 0.0)), (f"a={best[0]}, b={best[1]}", best)):
        ev = {q["id"]: refusal_evidence(q, n, avgdl, a, b) for q in qs}
        for rule, max_false in (("<= 1% of dev refused", 0.01), ("none of dev refused", 0.0)):
            floor = floor_at([ev[q["id"]] for q in dev_ans], max_false)
            for part, group in (("dev", dev), ("test", test)):
                r = refusal_rates(group, ev, floor)
                lines.append(
                    f"| {label} | {rule} ({floor:.4f}) | {part} | {r['off-topic refused']:.3f} | "
                    f"{r['near-misses refused']:.3f} | {r['answerable refused']:.3f} |"
                )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
