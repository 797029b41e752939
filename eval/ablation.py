"""What each rule of the rule judge buys: near-misses flagged against answerable questions caveated, on the read rounds.

Run from a checkout, after `rag-papers ingest` of the seeds into the data directory:

    .venv/bin/python eval/ablation.py [--home DIR] [--out eval/results] [--limit N] [--rules a,b,...]

For every question of eval/qa.jsonl's read part (the dev part of rounds 1 to 3, and rounds 4 to
``LAST_READ_ROUND``: each written blind and scored once before later rules were chosen on it; never rounds 1 to 3's
test part, never a later round),
the question is retrieved once as ``Engine.ask`` retrieves it, and then judged by the rule judge with no LLM (the
quoting answer) once with every rule on and once with each rule off (``coverage.off``, or the rule's own threshold
at 0). The report (``ablation.md``, ``ablation.json``) gives, per rule, what switching it off changes: near-misses
flagged (refused, or caveated: a line said first) and refused, unrelated questions refused, answerable questions
caveated or refused, answerable questions whose gold paper is cited, and answerable questions asking for a facet
(the data, the limitations, ...) whose quotes state it. An outcome counts by how far it goes, a caveat 1 and a
refusal 2: a gain for a near-miss, a cost for an answerable question. A rule pays for itself when what it buys
(near-misses flagged and refused, unrelated questions refused, facets quoted) is more than what it costs
(answerable questions caveated and refused, gold lost); one that changes nothing, or costs more than it buys, does
not. Embeddings are computed once per text (``Memo``), so every configuration judges the same evidence.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, get_args

from rag_papers.chat import Engine
from rag_papers.config import PROJECT_ROOT, CoverageSettings, RuleName, Settings
from rag_papers.evaluate import Question as QA
from rag_papers.evaluate import load_qa
from rag_papers.judge import Question
from rag_papers.judge.aspects import states_facet
from rag_papers.judge.rules import RuleJudge

# The rules switched off by a threshold of their own (0: off), beside those ``coverage.off`` names.
THRESHOLD_RULES = {
    "loose-match": "loose_match",
    "flat-lift": "flat_lift",
    "everyday": "everyday_margin",
}
TEST_ROUNDS = (1, 2, 3)  # their test part is never read here
LAST_READ_ROUND = 35  # later rounds are held out (rounds 33 to 35: read when issue 46 was scored; 36: its last check)


class Memo:
    """The index's embedder, each text embedded once: every configuration judges with the same vectors."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.docs: dict[str, Any] = {}
        self.queries: dict[str, Any] = {}

    def embed_query(self, text: str) -> Any:
        if text not in self.queries:
            self.queries[text] = self.inner.embed_query(text)
        return self.queries[text]

    def embed_documents(self, texts: Sequence[str]) -> list[Any]:
        todo = list(dict.fromkeys(t for t in texts if t not in self.docs))
        if todo:
            for t, v in zip(todo, self.inner.embed_documents(todo)):
                self.docs[t] = v
        return [self.docs[t] for t in texts]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def read_rounds(path: Path) -> dict[str, int]:
    """Each question's writing round, by id (a line without one is of round 1)."""
    return {
        (obj := json.loads(line))["id"]: int(obj.get("round", 1))
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip()
    }


def read_part(qa: list[QA], rounds: dict[str, int]) -> list[QA]:
    """The read questions: dev of rounds 1 to 3, all of rounds 4 to ``LAST_READ_ROUND``."""
    out = []
    for q in qa:
        r = rounds.get(q.id, 1)
        if (r in TEST_ROUNDS and q.split == "dev") or 4 <= r <= LAST_READ_ROUND:
            out.append(q)
    return out


def group(q: QA) -> str:
    if q.kind != "offtopic":
        return "answerable"
    return "near-miss" if q.subkind == "near-miss" else "off-topic"


def variants(base: Settings, names: list[str]) -> Iterator[tuple[str, Settings]]:
    yield "all rules", base
    for name in names:
        if name in THRESHOLD_RULES:
            cov = base.coverage.model_copy(update={THRESHOLD_RULES[name]: 0.0})
        else:
            cov = base.coverage.model_copy(update={"off": [name]})
        yield name, base.model_copy(update={"coverage": cov})


Outcome = tuple[bool, bool, bool, bool]
COUNTS = ("n", "refused", "caveated", "flagged", "gold_cited", "facet_quoted")  # each group's tally (``tally``)


def outcome(
    judge: RuleJudge, q: Question, result: Any, gold: set[str], states: Callable[[str], bool] | None
) -> Outcome:
    """(refused, caveated, gold cited, facet quoted) as the quoting answer would have them. ``states``: the test of
    a sentence stating the facet the question asks for (None: it asks for none), the same for every configuration."""
    v = judge.judge(q, result)
    cited = {pid for pid, _ in v.quotes}
    quoted = states is not None and not v.refused and any(states(text) for _, text in v.quotes)
    return v.refused, (not v.refused) and v.caveat is not None, bool(cited & gold), quoted


def facet_states(q: Question, rules: CoverageSettings) -> Callable[[str], bool] | None:
    """The sentence test of the facet ``q`` asks for, by the rules' own test with every rule on; None: no facet."""
    return states_facet(q.text, q.facet, q.named, rules) if q.facet is not None else None


def tally(rows: list[tuple[str, Outcome]]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for g, (refused, caveated, cited, quoted) in rows:
        t = out.setdefault(g, dict.fromkeys(COUNTS, 0))
        t["n"] += 1
        t["refused"] += refused
        t["caveated"] += caveated
        t["flagged"] += refused or caveated
        t["gold_cited"] += cited
        t["facet_quoted"] += quoted
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--home", type=Path, help="data directory holding the seeds index (default: the setting)")
    ap.add_argument("--out", type=Path, default=PROJECT_ROOT / "eval" / "results")
    ap.add_argument("--limit", type=int, help="at most N questions, evenly spread (a quick look)")
    ap.add_argument("--rules", help="comma-separated rules to switch off one at a time (default: every rule)")
    args = ap.parse_args(argv)
    settings = Settings(**({"home": args.home} if args.home else {}))
    path = PROJECT_ROOT / "eval" / "qa.jsonl"
    rounds = read_rounds(path)
    questions = read_part(load_qa(path), rounds)
    if args.limit:
        step = max(1, len(questions) // args.limit)
        questions = questions[::step][: args.limit]
    assert all(rounds[q.id] <= LAST_READ_ROUND for q in questions), "a held-out round was read"
    names = args.rules.split(",") if args.rules else [*THRESHOLD_RULES, *get_args(RuleName)]
    engine = Engine(settings)
    memo = Memo(engine.index.embedder)
    t0 = time.perf_counter()
    prepared = []
    for i, qa in enumerate(questions, 1):
        q = Question.parse(qa.question, settings.coverage)
        prepared.append((qa, q, engine.retrieve(q), facet_states(q, settings.coverage)))
        if i % 250 == 0:
            print(f"  retrieved {i}/{len(questions)}", file=sys.stderr)
    print(f"retrieved {len(questions)} questions in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    report: dict[str, Any] = {"questions": len(questions), "rules": {}}
    for name, variant in variants(settings, names):
        t1 = time.perf_counter()
        judge = RuleJudge(variant, memo, engine.index.name_df, quoting=True)
        rows = [(group(qa), outcome(judge, q, result, set(qa.gold), states)) for qa, q, result, states in prepared]
        report["rules"][name] = tally(rows)
        print(f"  {name}: {time.perf_counter() - t1:.0f} s", file=sys.stderr)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ablation.json").write_text(json.dumps(report, indent=1))
    (args.out / "ablation.md").write_text(markdown(report))
    print(markdown(report))
    return 0


def buys(report: dict[str, Any], name: str) -> dict[str, int]:
    """What rule ``name`` buys: each count with every rule on less the count with ``name`` off, and its net.

    An outcome counts by how far it goes, a caveat 1 and a refusal 2 (so a near-miss refused instead of caveated
    is a gain, an answerable question refused instead of caveated a cost): net = near-misses flagged + near-misses
    refused + unrelated refused + facets quoted - answerable caveated - 2 x answerable refused - gold lost."""
    base, t = report["rules"]["all rules"], report["rules"][name]
    empty = dict.fromkeys(COUNTS, 0)

    def delta(g: str, key: str) -> int:
        return int(base.get(g, empty).get(key, 0)) - int(t.get(g, empty).get(key, 0))

    out = {
        "flagged": delta("near-miss", "flagged"),
        "near_refused": delta("near-miss", "refused"),
        "unrelated": delta("off-topic", "refused"),
        "caveated": delta("answerable", "caveated"),
        "refused": delta("answerable", "refused"),
        "lost": -delta("answerable", "gold_cited"),  # gold the rule loses (cited without it, not with it)
        "facet": delta("answerable", "facet_quoted"),
    }
    gain = out["flagged"] + out["near_refused"] + out["unrelated"] + out["facet"]
    out["net"] = gain - out["caveated"] - 2 * out["refused"] - out["lost"]
    return out


def markdown(report: dict[str, Any]) -> str:
    base = report["rules"]["all rules"]
    ans, near = base["answerable"], base.get("near-miss", {"n": 0, "flagged": 0, "refused": 0})
    off = base.get("off-topic", {"n": 0, "refused": 0})
    lines = [
        "# What each rule buys (eval/ablation.py)",
        "",
        f"{report['questions']} read questions (dev of rounds 1 to 3, rounds 4 to {LAST_READ_ROUND}), judged with no LLM."
        f" With every rule: near-misses flagged {near['flagged']} (refused {near['refused']}) of {near['n']},"
        f" answerable caveated {ans['caveated']} and refused {ans['refused']} of {ans['n']}, gold cited"
        f" {ans['gold_cited']}, facet asked for quoted {ans.get('facet_quoted', 0)}, unrelated questions refused"
        f" {off['refused']} of {off['n']}.",
        "",
        "Each row switches one rule off. Its columns say what the rule buys: the near-misses it flags and those it"
        " refuses (rather than caveats), the unrelated questions it refuses, the answerable questions asking for a"
        " facet whose quotes state it, the answerable questions it caveats or refuses, the gold papers it costs (or"
        " saves: negative). An outcome counts by how far it goes, a caveat 1 and a refusal 2: net = near-misses"
        " flagged + near-misses refused + unrelated refused + facets quoted - answerable caveated - 2 x answerable"
        " refused - gold lost; a rule pays for itself when net > 0.",
        "",
        "| rule | near-misses flagged | near-misses refused | unrelated refused | facet quoted | answerable caveated"
        " | answerable refused | gold cited lost | net | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in report["rules"]:
        if name == "all rules":
            continue
        b = buys(report, name)
        changed = any(v for k, v in b.items() if k != "net")
        verdict = "no effect" if not changed else "pays" if b["net"] > 0 else "does not pay"
        lines.append(
            f"| {name} | {b['flagged']} | {b['near_refused']} | {b['unrelated']} | {b['facet']} | {b['caveated']}"
            f" | {b['refused']} | {b['lost']} | {b['net']} | {verdict} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
