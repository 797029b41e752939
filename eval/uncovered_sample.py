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


def answers(
    home: Path | None, cache: Path | None, split: str = "test", permissive: bool = False
) -> Iterator[tuple[Any, list[Any], list[str], dict[str, Any]]]:
    """(question, uncovered aspects, cited ids, papers) of the extractive answer to each question of ``split``:
    from ``Engine.ask``, or from eval/coverage_study.py's collected rows (``--cache``) planned with the defaults.

    ``permissive`` (with ``--cache``): every description whose words the cited abstracts mostly lack is a
    candidate, whatever its cosine or its words' rarity, so that one labelled draw can score any stricter rule.
    """
    from rag_papers.answer import QuoteRules, plan_quotes
    from rag_papers.coverage import CoverageRules

    cov = CoverageRules(describe_floor=9.0, technical_zipf=99.0) if permissive else CoverageRules()
    if cache is not None:
        for row in pickle.loads(cache.read_bytes()):
            q = row["q"]
            if q.split != split or not row["relevant"] or row["analysis"] is None:
                continue
            used = row["used"]
            plan = plan_quotes(q.question, used, row["cands"], row["analysis"], QuoteRules(), cov, row["above_floor"])
            if plan.refused:
                continue
            cited = list(dict.fromkeys(used[n - 1][0].id for n, _ in plan.lines))
            yield q, plan.coverage.uncovered, cited, {h.id: p for h, p in used}
        return
    if split != "test" or permissive:
        raise SystemExit("--split dev and --permissive need --cache (eval/coverage_study.py's collected rows)")
    from rag_papers.chat import Engine
    from rag_papers.coverage import DESCRIPTION, Aspect
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
            yield q, [Aspect(t, DESCRIPTION) for t in ans.uncovered], ans.citations, stream.result.papers


def draw(
    home: Path | None, n: int, out: Path, cache: Path | None = None, split: str = "test", permissive: bool = False
) -> None:
    """A seeded draw stratified by kind. The labeller's file holds no rule's evidence; each aspect's cosine and
    its words' rarity go to a side file (``.features.jsonl``) for scoring stricter rules on the labels."""
    from rag_papers.coverage import TESTED_FACETS, scope_asked, split_question, zipfs

    pool: dict[str, list[dict[str, object]]] = {}
    for q, uncovered, citations, papers in answers(home, cache, split, permissive):
        if not uncovered:
            continue
        cited = [{"id": c, "title": papers[c].title, "abstract": papers[c].abstract} for c in citations]
        names = split_question(q.question)[0]
        for a in uncovered:
            aspect = a.text
            facet = aspect in TESTED_FACETS or aspect == scope_asked(q.question)
            kind = "name" if aspect in names else "facet" if facet else "description"
            pool.setdefault(kind, []).append(
                {
                    "qid": q.id,
                    "question": q.question,
                    "aspect": aspect,
                    "kind": kind,
                    "cited": cited,
                    "label": None,
                    "_cos": a.score,
                    "_zipf_min": min(zipfs(aspect), default=0.0),
                }
            )
    rng = random.Random(SEED)
    per = max(1, n // max(1, len(pool)))
    rows = [r for kind in sorted(pool) for r in rng.sample(pool[kind], min(per, len(pool[kind])))]
    out.parent.mkdir(parents=True, exist_ok=True)
    blind = [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows]
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in blind), encoding="utf-8")
    feats = [{"qid": r["qid"], "aspect": r["aspect"], "cos": r["_cos"], "zipf_min": r["_zipf_min"]} for r in rows]
    out.with_suffix(".features.jsonl").write_text("".join(json.dumps(f) + "\n" for f in feats), encoding="utf-8")
    print(f"wrote {len(rows)} aspects to {out} (pool: { {k: len(v) for k, v in pool.items()} })", file=sys.stderr)


def score(path: Path) -> None:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    labelled = [r for r in rows if r.get("label") in ("absent", "present")]
    for kind in ("all", *sorted({r["kind"] for r in labelled})):
        part = [r for r in labelled if kind == "all" or r["kind"] == kind]
        absent = sum(r["label"] == "absent" for r in part)
        print(f"{kind:<12} precision {absent / len(part):.3f} ({absent} of {len(part)} really absent)")


def score_rules(path: Path, home: Path | None) -> None:
    """For a ``--permissive`` draw: the precision of the descriptions each rule would name uncovered, on the
    labels (the cosine from the side file, the words' index frequency from the index at ``home``)."""
    import re

    from rag_papers.chat import Engine
    from rag_papers.coverage import CoverageRules, _boiler_stems, technical
    from rag_papers.keyword import keyword_tokens

    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    feats = [json.loads(line) for line in path.with_suffix(".features.jsonl").read_text().splitlines() if line]
    name_df = Engine(Settings(home=home) if home else Settings()).index.name_df
    desc = [(r, f) for r, f in zip(rows, feats, strict=True) if r["kind"] == "description" and r.get("label")]

    def absent_everywhere(phrase: str) -> bool:
        words = [w for w in re.findall(r"[^\W_][\w-]*", phrase) if set(keyword_tokens(w)) - _boiler_stems()]
        return bool(words) and all(name_df(w) == 0 for w in words)

    rules = {
        "every candidate": lambda r, f: True,
        "defaults without the index gate": lambda r, f: (
            f["cos"] < CoverageRules().describe_floor and technical(r["aspect"], CoverageRules())
        ),
        "defaults (technical, far, in no indexed abstract)": lambda r, f: (
            f["cos"] < CoverageRules().describe_floor
            and technical(r["aspect"], CoverageRules())
            and absent_everywhere(r["aspect"])
        ),
        "in no indexed abstract, any rarity": lambda r, f: absent_everywhere(r["aspect"]),
    }
    total = sum(r["label"] == "absent" for r, _ in desc)
    print(f"{len(desc)} labelled candidate descriptions, {total} really absent")
    for name, rule in rules.items():
        named = [r for r, f in desc if rule(r, f)]
        absent = sum(r["label"] == "absent" for r in named)
        prec = f"{absent / len(named):.3f}" if named else "-"
        print(f"  {name:<52} names {len(named):>2}, {absent} absent: precision {prec}, recall {absent / total:.3f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--home", type=Path)
    ap.add_argument("--draw", type=int, help="draw this many aspects to label")
    ap.add_argument("--score", action="store_true")
    ap.add_argument("--file", type=Path, default=SAMPLE)
    ap.add_argument("--cache", type=Path, help="eval/coverage_study.py's collected rows (with the test part)")
    ap.add_argument("--split", choices=("dev", "test"), default="test", help="draw from this part (dev: --cache)")
    ap.add_argument("--permissive", action="store_true", help="draw from every candidate description (--cache)")
    ap.add_argument("--score-rules", action="store_true", help="a --permissive draw: each description rule's precision")
    args = ap.parse_args()
    if args.draw:
        draw(args.home, args.draw, args.file, args.cache, args.split, args.permissive)
    if args.score:
        score(args.file)
    if args.score_rules:
        score_rules(args.file, args.home)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
