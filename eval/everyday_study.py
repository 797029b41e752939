"""How the everyday-question margin (``coverage.everyday_margin``) was chosen: on the read rounds only.

Run from a checkout, after `rag-papers ingest` of the seeds into the data directory:

    .venv/bin/python eval/everyday_study.py [--home DIR]

For every read question of eval/qa.jsonl (``eval/ablation.py``'s read part: the dev part of rounds 1 to 3 and rounds
4 to ``LAST_READ_ROUND``), judged by the rule judge with the everyday rule off: among those it does not refuse, how
many of each group stand nearer an everyday question (``rag_papers/words/everyday.txt``) than their best paper by
more than each margin, with their best paper's cosine under ``coverage.everyday_best``. The margin is the smallest
that catches no answerable question and no near-miss there.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from ablation import LAST_READ_ROUND, Memo, group, read_part

from rag_papers.chat import Engine
from rag_papers.config import PROJECT_ROOT, Settings
from rag_papers.evaluate import load_qa
from rag_papers.judge import Question
from rag_papers.judge.rules import RuleJudge, judged_hits, nearest_everyday

MARGINS = (0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--home", type=Path, help="data directory holding the seeds index (default: the setting)")
    args = ap.parse_args(argv)
    base = Settings(**({"home": args.home} if args.home else {}))
    settings = base.model_copy(update={"coverage": base.coverage.model_copy(update={"everyday_margin": 0.0})})
    path = PROJECT_ROOT / "eval" / "qa.jsonl"
    rounds = {
        (o := json.loads(line))["id"]: int(o.get("round", 1)) for line in path.read_text().splitlines() if line.strip()
    }
    questions = read_part(load_qa(path), rounds)
    engine = Engine(settings)
    embedder = Memo(engine.index.embedder)  # each text embedded once
    judge = RuleJudge(settings, embedder, engine.index.name_df, quoting=True)
    gaps: list[tuple[str, float, str]] = []
    for qa in questions:
        q = Question.parse(qa.question, settings.coverage)
        result = engine.retrieve(q)
        if judge.judge(q, result).refused or result.query_vec is None or not result.results:
            continue
        best = max(h.dense_score for h in judged_hits(result, settings.top_k))
        if best < base.coverage.everyday_best:
            gaps.append((group(qa), nearest_everyday(embedder, result.query_vec) - best, qa.id))
    print(
        f"read part (rounds to {LAST_READ_ROUND}): {len(questions)} questions; not refused without the rule, by group:"
    )
    print(dict(Counter(g for g, _, _ in gaps)) | {"(best cosine under everyday_best)": len(gaps)})
    print("| margin | answerable | near-miss | off-topic |\n|---|---|---|---|")
    for m in MARGINS:
        c = Counter(g for g, gap, _ in gaps if gap > m)
        print(f"| {m:.2f} | {c['answerable']} | {c['near-miss']} | {c['off-topic']} |")
    print(
        "off-topic caught at the default:",
        [i for g, gap, i in gaps if g == "off-topic" and gap > base.coverage.everyday_margin],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
