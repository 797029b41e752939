"""The no-LLM answer's quoting and coverage rules (``QuoteRules``, ``CoverageRules``): fitted on dev, scored on test.

Run from a checkout, after `rag-papers ingest` of the seeds into the data directory:

    .venv/bin/python eval/coverage_study.py [--home DIR] [--fit] [--cache FILE] [--check N]

Per split of eval/qa.jsonl and per kind of question (answerable: lexical, paraphrase and multi;
near-miss; off-topic: unrelated), it prints the share of answers refused, caveated (an
``uncovered`` line said first) and plain, and for the answerable ones the share whose gold paper is
cited. ``--fit`` grid searches the rules on dev only and prints the best; the defaults in
``rag_papers`` are what it found. Why offline: each question's retrieval (as ``Engine.ask`` does it),
its aspects' evidence in the sources and the sentences' cosines are computed once, by the functions
the answer stage calls (``prepare_quotes``), and ``plan_quotes`` is cheap, so a grid of thousands
of settings takes a minute; ``--check`` confirms on some questions that ``Engine.ask`` cites,
caveats and refuses exactly as the offline plan does.
"""

from __future__ import annotations

import argparse
import itertools
import pickle
import sys
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from rag_papers.answer import QuoteRules, _sources, named_sources, plan_quotes, prepare_quotes
from rag_papers.chat import Engine
from rag_papers.config import PROJECT_ROOT, Settings
from rag_papers.coverage import CoverageRules
from rag_papers.evaluate import SPLITS, Question, load_qa
from rag_papers.llm import ExtractiveBackend

Row = dict[str, Any]
Outcome = tuple[list[str], bool, bool]  # (cited ids, caveated, refused)

# The targets (issue 25), as the fit's constraints on dev: at most these shares of answerable questions
# caveated and refused, and at least this share of off-topic ones refused and of answerable ones citing gold.
LOOSE_MATCH = Settings().loose_match
MAX_CAVEAT = 0.10
MAX_REFUSED = 0.01
MIN_OFFTOPIC_REFUSED = 0.90
MIN_GOLD_CITED = 0.95

# Descriptions are not named uncovered (CoverageRules.describe, decided on the labelled dev draw), so the rules
# that judge them (describe_floor, word_share, technical_zipf, compound_zipf) are not searched.
GRID: dict[str, list[float]] = {
    "refuse_below": [0.0, 0.3, 0.35],
    "list_floor": [0.25, 0.3, 0.35, 0.4, 0.45],
}


def group(q: Question) -> str:
    """answerable, near-miss or off-topic (the unrelated questions)."""
    if q.kind != "offtopic":
        return "answerable"
    return "near-miss" if q.subkind == "near-miss" else "off-topic"


def collect(engine: Engine, questions: list[Question]) -> list[Row]:
    """Per question: the retrieval ``Engine.ask`` makes, the sources, their aspects' evidence and sentences."""
    s = engine.settings
    backend = ExtractiveBackend(s)
    out = []
    for i, q in enumerate(questions, 1):
        stream = engine.ask(q.question, backend)
        result = stream.result
        used = _sources(result, stream.source_limit(), s.source_min_ratio, q.question) if result.relevant else []
        analysis, cands = (
            prepare_quotes(q.question, used, engine.index.embedder, engine.index.name_df, 0.0, result.above_floor)
            if used
            else (None, [])
        )
        out.append(
            {
                "q": q,
                "relevant": result.relevant,
                "used": used,
                "analysis": analysis,
                "cands": cands,
                "above_floor": result.above_floor,
                "relevance": result.relevance,
            }
        )
        if i % 50 == 0:
            print(f"  collected {i}/{len(questions)}", file=sys.stderr)
    return out


def outcome(row: Row, rules: QuoteRules, cov: CoverageRules) -> Outcome:
    if not row["relevant"] or row["analysis"] is None:
        return [], False, True
    used = row["used"]
    top = used[0][0].score
    named = set(named_sources(row["analysis"]))
    cands = [
        c
        for c in row["cands"]
        if c.n == 1
        or used[c.n - 1][0].score >= rules.paper_ratio * top
        or used[c.n - 1][0].id in row["above_floor"]
        or c.n in named
    ]
    plan = plan_quotes(row["q"].question, used, cands, row["analysis"], rules, cov, row["above_floor"])
    cited = list(dict.fromkeys(used[n - 1][0].id for n, _ in plan.lines))
    loose = row.get("relevance", 1.0) < LOOSE_MATCH  # AnswerStream's loose-match line (rows of older caches: none)
    return cited, plan.caveat is not None or (loose and not plan.refused), plan.refused


def measure(rows: list[Row], answer: Callable[[Row], Outcome]) -> dict[str, dict[str, float]]:
    """Per group: n, refused, caveated, plain shares; answerable also gold_cited (any gold paper cited)."""
    out: dict[str, dict[str, float]] = {}
    for g in ("answerable", "near-miss", "off-topic"):
        part = [r for r in rows if group(r["q"]) == g]
        if not part:
            continue
        got = [answer(r) for r in part]
        n = len(part)
        m = {
            "n": n,
            "refused": sum(x[2] for x in got) / n,
            "caveated": sum(x[1] and not x[2] for x in got) / n,
            "plain": sum(not x[1] and not x[2] for x in got) / n,
        }
        if g == "answerable":
            m["gold_cited"] = sum(bool(set(x[0]) & set(r["q"].gold)) for x, r in zip(got, part)) / n
            cites = [c in r["q"].gold for x, r in zip(got, part) for c in x[0]]
            m["citation_precision"] = sum(cites) / len(cites) if cites else 0.0
        out[g] = m
    return out


def objective(m: dict[str, dict[str, float]]) -> float:
    """Near-misses caveated or refused, among the rules that meet the other targets on dev (else a penalty)."""
    a, near, off = m.get("answerable", {}), m.get("near-miss", {}), m.get("off-topic", {})
    miss = (
        max(0.0, a.get("caveated", 0) - MAX_CAVEAT)
        + max(0.0, a.get("refused", 0) - MAX_REFUSED)
        + max(0.0, MIN_OFFTOPIC_REFUSED - off.get("refused", 1))
        + max(0.0, MIN_GOLD_CITED - a.get("gold_cited", 1))
    )
    flagged = near.get("refused", 0) + near.get("caveated", 0)
    # Citation precision counts too: citing every paper would meet the gold-cited target alone.
    return flagged + a.get("citation_precision", 0) - 10 * miss


QUOTE_GRID: dict[str, list[float]] = {
    "paper_ratio": [0.75, 0.8, 0.85, 0.9],
    "papers": [3, 4],
    "floor": [0.25, 0.27, 0.3],
    "ratio": [0.8, 0.9],
}


def fit(dev: list[Row]) -> tuple[QuoteRules, CoverageRules]:
    """The coverage rules first (at the default quoting rules), then the quoting rules with them."""
    base = {k: [getattr(QuoteRules(), k)] for k in QUOTE_GRID}
    rules, cov = _fit(dev, {**GRID, "list_floor": [QuoteRules().list_floor], **base})
    fixed = {k: [getattr(cov, k)] for k in GRID if k != "list_floor"}
    return _fit(dev, {**fixed, "list_floor": GRID["list_floor"], **QUOTE_GRID})


def _fit(dev: list[Row], grid: dict[str, list[float]]) -> tuple[QuoteRules, CoverageRules]:
    scored = []
    for values in itertools.product(*grid.values()):
        v = dict(zip(grid, values))
        rules = replace(
            QuoteRules(), **{k: (int(v[k]) if k == "papers" else v[k]) for k in ("list_floor", *QUOTE_GRID)}
        )
        cov = CoverageRules(**{k: v[k] for k in GRID if k != "list_floor"})
        m = measure(dev, lambda r, rules=rules, cov=cov: outcome(r, rules, cov))
        scored.append((objective(m), rules, cov, m))
    scored.sort(key=lambda x: (-x[0], x[3]["answerable"]["caveated"]))  # ties: the fewer false caveats
    for score, rules, cov, m in scored[:8]:
        print(f"  {score:.4f} {asdict(rules)} {asdict(cov)} {m}", file=sys.stderr)
    return scored[0][1], scored[0][2]


def check(engine: Engine, rows: list[Row], n: int) -> None:
    """``Engine.ask`` with the extractive backend cites, caveats and refuses exactly as ``outcome`` says."""
    step = max(1, len(rows) // n) if n else len(rows) + 1
    for row in rows[::step][:n]:
        ans = engine.ask(row["q"].question, ExtractiveBackend(engine.settings)).run()
        cited, caveat, refused = outcome(row, QuoteRules(), CoverageRules())
        got = (ans.citations, ans.caveat is not None and not ans.refused, ans.refused)
        assert got == (cited, caveat and not refused, refused), (row["q"].id, got, (cited, caveat, refused))


def table(rows: list[Row], rules: QuoteRules, cov: CoverageRules) -> list[str]:
    lines = [
        "| split | kind | n | refused | caveated | plain | gold paper cited | citation precision |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for split in SPLITS:
        part = [r for r in rows if r["q"].split == split]
        m = measure(part, lambda r: outcome(r, rules, cov))
        for g, x in m.items():
            gold = f"{x['gold_cited']:.3f}" if "gold_cited" in x else "-"
            prec = f"{x['citation_precision']:.3f}" if "citation_precision" in x else "-"
            lines.append(
                f"| {split} | {g} | {int(x['n'])} | {x['refused']:.3f} | {x['caveated']:.3f} | {x['plain']:.3f} "
                f"| {gold} | {prec} |"
            )
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--home", type=Path, help="data directory holding the seeds index (default: the settings')")
    ap.add_argument("--qa", type=Path, default=PROJECT_ROOT / "eval" / "qa.jsonl")
    ap.add_argument("--fit", action="store_true", help="grid search the rules on dev and print the best")
    ap.add_argument("--cache", type=Path, help="pickle of the collected rows: written if absent, else read")
    ap.add_argument("--check", type=int, default=20, help="questions to confirm against Engine.ask (0: none)")
    ap.add_argument("--split", choices=SPLITS, help="collect and report this part only (dev while fitting)")
    args = ap.parse_args()
    settings = Settings(home=args.home) if args.home else Settings()
    engine = Engine(settings)
    questions = [q for q in load_qa(args.qa) if args.split is None or q.split == args.split]
    if args.cache and args.cache.is_file():  # a development aid: the collected rows of an earlier run
        rows = pickle.loads(args.cache.read_bytes())
    else:
        rows = collect(engine, questions)
        if args.cache:
            args.cache.write_bytes(pickle.dumps(rows))
    rows = [r for r in rows if args.split is None or r["q"].split == args.split]
    if args.check:
        check(engine, rows, args.check)
    rules, cov = QuoteRules(), CoverageRules()
    if args.fit:
        rules, cov = fit([r for r in rows if r["q"].split == "dev"])
        print(f"fitted on dev: {asdict(rules)} {asdict(cov)}", file=sys.stderr)
    print(f"rules: {asdict(rules)} {asdict(cov)}")
    print("\n".join(table(rows, rules, cov)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
