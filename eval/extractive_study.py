"""The no-LLM answer's quoting rules (``rag_papers.answer.QuoteRules``): fitted on dev, scored on test.

Run from a checkout, after `rag-papers ingest` of the seeds into the data directory:

    .venv/bin/python eval/extractive_study.py [--home DIR] [--fit]

Per split of eval/qa.jsonl it prints, before (the quoting this replaced: every paper within 0.8
of the best retrieval score, up to three, cited) and after (``QuoteRules()``, the defaults):
near-miss off-topic questions that get a caveat or a refusal, answerable questions with a caveat
and with a refusal, citation precision (the share of the answers' citations, over answerable
questions, whose paper is gold) and recall (the mean share of a question's gold papers cited). A retrieval refusal counts as a refusal in both. ``--fit`` grid
searches the rules on dev only and prints the best. Why offline: each question's retrieval,
sentences and cosines are computed once, by the functions the answer stage calls
(``question_terms``, ``quote_candidates``), and ``plan_quotes`` is cheap, so a grid of a few
hundred settings takes seconds; ``--check`` confirms on some questions that ``Engine.ask``
cites exactly what the offline plan does.
"""

from __future__ import annotations

import argparse
import itertools
import pickle
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from rag_papers.answer import QuoteRules, _sources, plan_quotes, question_terms, quote_candidates
from rag_papers.chat import Engine
from rag_papers.config import PROJECT_ROOT, Settings
from rag_papers.evaluate import SPLITS, Question, load_qa
from rag_papers.llm import ExtractiveBackend

Q = dict[str, Any]

# Stage 1 picks which papers and sentences are quoted (precision against refusals), stage 2 the caveat.
SELECT_GRID = {
    "paper_ratio": [0.7, 0.8, 0.85, 0.9, 0.95],
    "floor": [0.1, 0.2, 0.25, 0.3, 0.35],
    "ratio": [0.6, 0.7, 0.8, 0.85, 0.9, 0.95],
}
CAVEAT_GRID = {
    "caveat": [0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1.01],
    "caveat_below": [0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 9.0],
}
MAX_REFUSED = 0.01  # of dev's answerable questions, as the retrieval floor allows (eval/README.md)
# Of dev's answerable questions. A caveat is a true statement (the question's specific words are in none of the
# quoted abstracts) above answers that still quote: a budget of one in five, not one in ten, so that a
# question about something no abstract covers is said to be that (docs/design-notes.md has the curve).
MAX_CAVEAT = 0.20


def collect(engine: Engine, questions: list[Question]) -> list[Q]:
    """Per question: its retrieval, the sources the answer would quote from, their sentences scored."""
    s = engine.settings
    out = []
    for q in questions:
        result = engine.search(q.question)
        used = _sources(result, s.context_papers, s.source_min_ratio) if result.relevant else []
        terms = question_terms(q.question, used, engine.index.stem_stats, s.keyword_max_df)
        cands = quote_candidates(q.question, used, engine.index.embedder) if used else []
        out.append({"q": q, "relevant": result.relevant, "used": used, "terms": terms, "cands": cands})
    return out


def before(row: Q) -> tuple[list[str], bool, bool]:
    """(cited ids, caveat, refused) as the previous quoting answered."""
    if not row["relevant"]:
        return [], False, True
    used = row["used"]
    top = used[0][0].score
    keep = [h.id for h, _ in used[:3] if h.score >= top * 0.8] or [used[0][0].id]
    return keep, False, False


def after(row: Q, rules: QuoteRules) -> tuple[list[str], bool, bool]:
    if not row["relevant"]:
        return [], False, True
    plan = plan_quotes(row["q"].question, row["used"], row["cands"], row["terms"], rules)
    cited = list(dict.fromkeys(row["used"][n - 1][0].id for n, _ in plan.lines))
    return cited, plan.caveat is not None, plan.refused


def measure(rows: list[Q], answer: Any) -> dict[str, float]:
    near = [r for r in rows if r["q"].subkind == "near-miss"]
    ans = [r for r in rows if r["q"].gold]
    got = {id(r): answer(r) for r in near + ans}
    cites = [(c, r["q"].gold) for r in ans for c in got[id(r)][0]]
    recall = [len(set(got[id(r)][0]) & set(r["q"].gold)) / len(r["q"].gold) for r in ans]
    return {
        "near_miss": len(near),
        "near_miss_caveat_or_refusal": sum(got[id(r)][1] or got[id(r)][2] for r in near) / len(near) if near else 0.0,
        "answerable": len(ans),
        "answerable_caveat": sum(got[id(r)][1] for r in ans) / len(ans) if ans else 0.0,
        "answerable_refusal": sum(got[id(r)][2] for r in ans) / len(ans) if ans else 0.0,
        "citation_precision": sum(c in gold for c, gold in cites) / len(cites) if cites else 0.0,
        "citations": len(cites),
        "citation_recall": sum(recall) / len(recall) if recall else 0.0,
    }


def objective(m: dict[str, float]) -> float:
    """What the fit maximises on dev: near-misses flagged plus the mean of citation precision and recall (precision
    alone is best served by citing one paper), among the rules that refuse at most ``MAX_REFUSED`` and caveat at
    most ``MAX_CAVEAT`` of the answerable questions."""
    if m["answerable_refusal"] > MAX_REFUSED or m["answerable_caveat"] > MAX_CAVEAT:
        return -1.0
    return m["near_miss_caveat_or_refusal"] + (m["citation_precision"] + m["citation_recall"]) / 2


def fit(dev: list[Q]) -> QuoteRules:
    """Stage 1 (caveats off: they change nothing that is cited) picks the selection, stage 2 the caveat."""
    best = QuoteRules(caveat=1.01)
    for grid in (SELECT_GRID, CAVEAT_GRID):
        scored = []
        for values in itertools.product(*grid.values()):
            rules = replace(best, **dict(zip(grid, values)))
            m = measure(dev, lambda r, rules=rules: after(r, rules))
            scored.append((objective(m), rules, m))
        scored.sort(key=lambda x: (-x[0], x[2]["answerable_caveat"]))  # ties: the fewer false caveats
        for score, rules, m in scored[:5]:
            print(f"  {score:.4f} {asdict(rules)} {m}", file=sys.stderr)
        best = scored[0][1]
    return best


def check(engine: Engine, rows: list[Q], n: int) -> None:
    """``Engine.ask`` with the extractive backend cites exactly what ``after`` says, caveats and refuses alike."""
    for row in rows[:n]:
        ans = engine.ask(row["q"].question, ExtractiveBackend()).run()
        cited, caveat, refused = after(row, QuoteRules())
        assert (ans.citations, ans.caveat is not None, ans.refused) == (cited, caveat, refused), row["q"].id


def table(rows: list[Q], rules: QuoteRules) -> list[str]:
    lines = [
        "| split | answer | near-miss caveat or refusal | answerable caveat | answerable refusal "
        "| citation precision (citations) | citation recall |",
        "|---|---|---|---|---|---|---|",
    ]
    for split in SPLITS:
        part = [r for r in rows if r["q"].split == split]
        for label, answer in (("before", before), ("after", lambda r: after(r, rules))):
            m = measure(part, answer)
            lines.append(
                f"| {split} | {label} | {m['near_miss_caveat_or_refusal']:.3f} (n={m['near_miss']}) "
                f"| {m['answerable_caveat']:.3f} | {m['answerable_refusal']:.3f} (n={m['answerable']}) "
                f"| {m['citation_precision']:.3f} ({m['citations']}) | {m['citation_recall']:.3f} |"
            )
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--home", type=Path, help="data directory holding the seeds index (default: the settings')")
    ap.add_argument("--qa", type=Path, default=PROJECT_ROOT / "eval" / "qa.jsonl")
    ap.add_argument("--fit", action="store_true", help="grid search the rules on dev and print the best")
    ap.add_argument("--cache", type=Path, help="pickle of the collected rows: written if absent, else read")
    ap.add_argument("--check", type=int, default=20, help="questions to confirm against Engine.ask (0: none)")
    args = ap.parse_args()
    settings = Settings(home=args.home) if args.home else Settings()
    engine = Engine(settings)
    if args.cache and args.cache.is_file():  # a development aid: the collected rows of an earlier run
        rows = pickle.loads(args.cache.read_bytes())
    else:
        rows = collect(engine, load_qa(args.qa))
        if args.cache:
            args.cache.write_bytes(pickle.dumps(rows))
    if args.check:
        check(engine, rows, args.check)
    if args.fit:
        fitted = fit([r for r in rows if r["q"].split == "dev"])
        print(f"fitted on dev: {asdict(fitted)}", file=sys.stderr)
    print(f"rules: {asdict(QuoteRules())}")
    print("\n".join(table(rows, QuoteRules())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
