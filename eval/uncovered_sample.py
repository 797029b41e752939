"""The precision of ``uncovered``: is an aspect the answer names as not addressed really absent from the
abstracts it cites? Measured on a labelled sample of the test part's answers.

    .venv/bin/python eval/uncovered_sample.py --home DIR --draw 60     # write eval/results/uncovered_sample.jsonl
    (a reader labels each line: "label": "absent" or "present", judging by meaning, not words)
    .venv/bin/python eval/uncovered_sample.py --score                  # precision, per kind of aspect

The draw is seeded and stratified by the kind of aspect (name, description, facet), from the extractive
answers to the test part's questions (all kinds). The reader sees the question, the aspect and the cited
abstracts, never the rules that named it.
"""

from __future__ import annotations

import argparse
import json
import pickle
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rag_papers.config import PROJECT_ROOT, Settings

SAMPLE = PROJECT_ROOT / "eval" / "results" / "uncovered_sample.jsonl"
SEED = 2026


def answers(home: Path | None, cache: Path | None) -> Iterator[tuple[Any, list[str], list[str], dict[str, Any]]]:
    """(question, uncovered, cited ids, papers) of the extractive answer to each test question: from
    ``Engine.ask``, or from eval/coverage_study.py's collected rows (``--cache``) planned with the defaults."""
    from rag_papers.answer import QuoteRules, plan_quotes
    from rag_papers.coverage import CoverageRules

    if cache is not None:
        for row in pickle.loads(cache.read_bytes()):
            q = row["q"]
            if q.split != "test" or not row["relevant"] or row["analysis"] is None:
                continue
            used = row["used"]
            plan = plan_quotes(
                q.question, used, row["cands"], row["analysis"], QuoteRules(), CoverageRules(), row["above_floor"]
            )
            if plan.refused:
                continue
            cited = list(dict.fromkeys(used[n - 1][0].id for n, _ in plan.lines))
            yield q, [a.text for a in plan.coverage.uncovered], cited, {h.id: p for h, p in used}
        return
    from rag_papers.chat import Engine
    from rag_papers.evaluate import load_qa
    from rag_papers.llm import ExtractiveBackend

    engine = Engine(Settings(home=home) if home else Settings())
    backend = ExtractiveBackend(engine.settings)
    for q in load_qa(PROJECT_ROOT / "eval" / "qa.jsonl"):
        if q.split != "test":
            continue
        stream = engine.ask(q.question, backend)
        ans = stream.run()
        if not ans.refused:
            yield q, ans.uncovered, ans.citations, stream.result.papers


def draw(home: Path | None, n: int, out: Path, cache: Path | None = None) -> None:
    from rag_papers.coverage import FACET_CUES, split_question

    pool: dict[str, list[dict[str, object]]] = {}
    for q, uncovered, citations, papers in answers(home, cache):
        if not uncovered:
            continue
        cited = [{"id": c, "title": papers[c].title, "abstract": papers[c].abstract} for c in citations]
        names = split_question(q.question)[0]
        for aspect in uncovered:
            kind = "name" if aspect in names else "facet" if aspect in FACET_CUES else "description"
            pool.setdefault(kind, []).append(
                {"qid": q.id, "question": q.question, "aspect": aspect, "kind": kind, "cited": cited, "label": None}
            )
    rng = random.Random(SEED)
    per = max(1, n // max(1, len(pool)))
    rows = [r for kind in sorted(pool) for r in rng.sample(pool[kind], min(per, len(pool[kind])))]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    print(f"wrote {len(rows)} aspects to {out} (pool: { {k: len(v) for k, v in pool.items()} })", file=sys.stderr)


def score(path: Path) -> None:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    labelled = [r for r in rows if r.get("label") in ("absent", "present")]
    for kind in ("all", *sorted({r["kind"] for r in labelled})):
        part = [r for r in labelled if kind == "all" or r["kind"] == kind]
        absent = sum(r["label"] == "absent" for r in part)
        print(f"{kind:<12} precision {absent / len(part):.3f} ({absent} of {len(part)} really absent)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--home", type=Path)
    ap.add_argument("--draw", type=int, help="draw this many aspects to label")
    ap.add_argument("--score", action="store_true")
    ap.add_argument("--file", type=Path, default=SAMPLE)
    ap.add_argument("--cache", type=Path, help="eval/coverage_study.py's collected rows (with the test part)")
    args = ap.parse_args()
    if args.draw:
        draw(args.home, args.draw, args.file, args.cache)
    if args.score:
        score(args.file)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
