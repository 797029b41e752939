"""Evaluate stage: `rag-papers eval` end to end on the seeds, its metrics checked independently, bad Q&A files."""

from __future__ import annotations

import json
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from conftest import run_main

from rag_papers.chat import Engine
from rag_papers.config import PROJECT_ROOT, Settings
from rag_papers.evaluate import DEFAULT_CONFIGS, SPLIT_SEED, assign_splits, fit_floor, run_eval
from rag_papers.retrieve import Retriever

QA = PROJECT_ROOT / "eval" / "qa.jsonl"


def _split_rounds(tmp_path: Path, every: int = 1) -> Path:
    """eval/qa.jsonl's rounds 1 to 3, the part with a dev/test split: what a floor is fitted and checked on; with
    ``every`` 2, every other question of it (for checks of what the report computes, which hold at any size). The
    blind rounds after them (all test, 158 questions each) only make every config's run longer."""
    path = tmp_path / "rounds-1-3.jsonl"
    lines = [line for line in QA.read_text().splitlines() if line.strip() and _round(json.loads(line)) <= 3][::every]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_eval_scores_every_config_and_writes_its_reports(seeded: Settings, tmp_path: Path) -> None:
    # With no --qa, a source checkout's eval/qa.jsonl is read, all of it.
    every = [json.loads(line) for line in QA.read_text().splitlines() if line.strip()]
    res = run_main("eval", "--json", "--configs", "bm25", "--out", str(tmp_path / "default"))
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads(res.stdout)["meta"]["questions"] == len(every)

    qa = _split_rounds(tmp_path)
    out = tmp_path / "results"
    res = run_main("eval", "--json", "--qa", str(qa), "--out", str(out))
    assert res.returncode == 0, res.stderr[-3000:]
    report = json.loads(res.stdout)
    configs = {c["name"]: c for c in report["configs"]}
    assert set(configs) <= set(DEFAULT_CONFIGS) and {"naive", "dense", "bm25", "hybrid"} <= set(configs)
    # The seeds index holds no mpnet vectors: the quality preset is skipped with the way to make it run.
    assert "quality" not in configs and "--preset quality" in report["meta"]["skipped"]["quality"]

    questions = [json.loads(line) for line in qa.read_text().splitlines() if line.strip()]
    kinds = Counter((q["split"], q["kind"]) for q in questions)
    assert report["meta"]["questions"] == len(questions) and report["meta"]["papers"] == 38

    for c in configs.values():
        assert set(c["splits"]) == {"dev", "test"}
        for split in ("dev", "test"):
            metrics = c["splits"][split]["metrics"]
            for kind in ("lexical", "paraphrase", "multi"):
                assert metrics[kind]["n"] == kinds[split, kind]
                assert all(0.0 <= v <= 1.0 for k, v in metrics[kind].items() if k != "n")
                # ir-measures' hit@1 and recall@5, recomputed here from the ranked lists the run recorded.
                rows = [r for r in c["per_question"] if r["kind"] == kind and r["split"] == split]
                hit1 = statistics.fmean(1.0 if r["ranked"][:1] and r["ranked"][0] in r["gold"] else 0.0 for r in rows)
                rec5 = statistics.fmean(len(set(r["ranked"][:5]) & set(r["gold"])) / len(r["gold"]) for r in rows)
                assert metrics[kind]["hit@1"] == pytest.approx(hit1, abs=1e-4)
                assert metrics[kind]["recall@5"] == pytest.approx(rec5, abs=1e-4)
            off = [r for r in c["per_question"] if r["kind"] == "offtopic" and r["split"] == split]
            refusal = c["splits"][split]["refusal"]
            assert refusal["offtopic"] == kinds[split, "offtopic"] == len(off)
            assert refusal["refusal_recall"] == pytest.approx(sum(not r["relevant"] for r in off) / len(off), abs=1e-4)
            answerable = [r for r in c["per_question"] if r["gold"] and r["split"] == split]
            assert refusal["false_refusal_rate"] == pytest.approx(
                sum(not r["relevant"] for r in answerable) / len(answerable), abs=1e-4
            )
            assert 0 < refusal["near_miss"] < refusal["offtopic"]
        assert c["latency_ms"]["p50"] > 0

    # The default is at least as good as the naive llama-index pipeline at hit@1 and recall@5 on every kind of
    # the held-out part (not at MRR on paraphrases: eval/README.md).
    # Round 3's blind paraphrases (eval/README.md) put naive ahead at paraphrase recall@5 on test: that one figure
    # is reported, not asserted.
    for kind in ("lexical", "paraphrase", "multi", "all"):
        test = {name: configs[name]["splits"]["test"]["metrics"][kind] for name in ("hybrid", "naive")}
        assert test["hybrid"]["hit@1"] >= test["naive"]["hit@1"], kind
        if kind != "paraphrase":
            assert test["hybrid"]["recall@5"] >= test["naive"]["recall@5"], kind
    assert configs["hybrid"]["splits"]["test"]["metrics"]["lexical"]["hit@1"] == 1.0
    # The default floors refuse at most 1% of dev's answerable questions (none of rounds 1 and 2; one of round 3's
    # blind paraphrases); plainly unrelated questions are refused.
    assert configs["hybrid"]["splits"]["dev"]["refusal"]["false_refusal_rate"] <= 0.01
    refused = {r["id"] for r in configs["hybrid"]["per_question"] if not r["relevant"]}
    by_text = {q["id"]: q["question"] for q in questions}
    assert any("FIFA" in by_text[i] for i in refused) and any("sourdough" in by_text[i] for i in refused)

    # A floor fitted on dev, applied unchanged to test, where one score decides relevance; none for naive or RRF.
    for name in ("dense", "bm25", "hybrid"):
        dev, test = (configs[name]["splits"][p]["refusal"] for p in ("dev", "test"))
        assert dev["fitted_false_refusal_rate"] <= 0.01
        assert test["fitted_floor"] == dev["fitted_floor"]
        rows = [r for r in configs[name]["per_question"] if r["split"] == "test"]
        off = [r["relevance"] for r in rows if not r["gold"]]
        assert test["fitted_refusal_recall"] == pytest.approx(
            sum(x < dev["fitted_floor"] for x in off) / len(off), abs=1e-4
        )
    assert "fitted_floor" not in configs["naive"]["refusal"] and "fitted_floor" not in configs["rrf"]["refusal"]

    assert json.loads((out / "results.json").read_text())["meta"]["questions"] == len(questions)
    md = (out / "report.md").read_text()
    assert "| hybrid | test | paraphrase |" in md and "| hybrid | dev | paraphrase |" in md and "fitted floor" in md
    assert (out / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_committed_split_is_the_seeded_one_and_the_set_is_large_enough() -> None:
    """eval/qa.jsonl's dev/test split is what ``assign_splits`` draws with the fixed seed, stratified by kind, one
    round at a time: the questions the project was tuned on before the split (q001-q156) are all dev, round 2
    (q157-q426) was drawn alone, and round 3 was drawn after it without changing any earlier line's split.
    Round 4 (q636-q793) is all test: written blind after rounds 1-3's test part had been scored, to be scored once;
    round 5 (q794-q951) likewise, written blind after round 4 had been scored, and round 6 (q952-q1109) after
    round 5 had been scored and read, round 7 (q1110-q1267) after round 6 had been scored and read, round 8 (q1268-q1425) after round 7, round 9 (q1426-q1583) after round 8, round 10 (q1584-q1741) after round 9, round 11 (q1742-q1899) after round 10, round 12 (q1900-q2057) after round 11, round 13 (q2058-q2215) after round 12, round 14 (q2216-q2373) after round 13, round 15 (q2374-q2531) after round 14, round 16 (q2532-q2689) after round 15, round 17 (q2690-q2847) after round 16, round 18 (q2848-q3005) after round 17, round 19 (q3006-q3163) after round 18, round 20 (q3164-q3321) after round 19, round 21 (q3322-q3479) after round 20, round 22 (q3480-q3637) after round 21, round 23 (q3638-q3795) after round 22, round 24 (q3796-q3953) after round 23, round 25 (q3954-q4111) after round 24, round 26 (q4112-q4269) after round 25, round 27 (q4270-q4365), the topic round, after round 26: 96
    questions on research topics in technical words, half of them near-misses; and round 28 (q4366-q4461), a second
    topic round, after round 27 had been scored; round 29 (q4462-q4557), a third topic round, after round 28 had
    been scored and read; round 30 (q4558-q4653), a fourth, after round 29 had been scored and read; and round 31 (q4654-q4797), half
    topics and half the usual paraphrases, after round 30 had been scored and read; and round 32 (q4798-q4941), likewise
    with lay and detailed near-misses too, after round 31 had been scored and read; and round 33 (q4942-q5141), every
    kind, for the one judge (issue 46), written before its rulebook changed and scored once at the end; and rounds 34
    (q5142-q5349) and 35 (q5350-q5557), every kind with more unrelated questions and near-misses, each written
    after the last had been scored and scored once with the judge's final rules; and round 36 (q5558-q5765), the
    same mix, written after the ablation counted refusals and quoted facets, before the rules it cut were cut."""
    rows = [json.loads(line) for line in QA.read_text().splitlines() if line.strip()]
    rounds = [_round(r) for r in rows]
    assert rounds == sorted(rounds) and set(rounds) == set(range(1, 37))  # appended round by round
    assert all(r["split"] == "dev" for r in rows if _round(r) == 1) and rounds.count(1) == 156
    for n in (2, 3):
        upto = [r for r in rows if _round(r) <= n]
        assert [r["split"] for r in assign_splits(redrawn_without_split(upto, n), SPLIT_SEED)] == [
            r["split"] for r in upto
        ], f"round {n}"
        assert [r["split"] for r in assign_splits(redrawn_without_split(upto, n), SPLIT_SEED + 1)] != [
            r["split"] for r in upto
        ], f"round {n}"
        for key, group in _groups([r for r in rows if _round(r) == n]).items():
            assert abs(sum(r["split"] == "test" for r in group) - len(group) / 2) <= 0.5, (n, key)
    for n in range(4, 37):
        late = [r for r in rows if _round(r) == n]
        size, near_misses = (96, 48) if n >= 27 else (150, 60)  # rounds 27 to 32 ask of topics (and more)
        assert len(late) >= size and all(r["split"] == "test" for r in late), f"round {n}"
        assert sum(r.get("subkind") == "near-miss" for r in late) >= near_misses, f"round {n}"
        assert all(r["absent"] for r in late if r.get("subkind") == "near-miss"), f"round {n}"
    kinds = Counter(r["kind"] for r in rows)
    assert kinds["paraphrase"] >= 150 and kinds["multi"] >= 40 and kinds["offtopic"] >= 60
    near = sum(r.get("subkind") == "near-miss" for r in rows)
    assert near >= kinds["offtopic"] / 2 and all(r.get("subkind") for r in rows if r["kind"] == "offtopic")
    # Round 3 (issue 25): at least 60 near-misses, each naming what the abstracts lack.
    third = [r for r in rows if _round(r) == 3]
    assert sum(r.get("subkind") == "near-miss" for r in third) >= 60
    assert all(r["absent"] for r in third if r.get("subkind") == "near-miss")
    facets = {"limitations", "results", "data", "method", "comparison", "how", "why"}
    assert {r["facet"] for r in rows if "facet" in r} <= facets


def _round(row: dict[str, Any]) -> int:
    """A line's writing round: its ``round`` field; lines before round 3 have none and are told by their id."""
    return int(row.get("round") or (1 if int(row["id"][1:]) <= 156 else 2))


def redrawn_without_split(rows: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """The rows with round ``n``'s splits taken away, as they were before that round was drawn."""
    return [{k: v for k, v in r.items() if k != "split" or _round(r) != n} for r in rows]


def _groups(rows: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    out: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault((r["kind"], r.get("subkind") or ""), []).append(r)
    return out


def test_eval_terminal_table_and_own_qa_file(seeded: Settings, tmp_path: Path) -> None:
    """A user's own file: two questions, the default format, two configurations."""
    lines = [json.loads(line) for line in QA.read_text().splitlines() if line.strip()]
    mine = [next(q for q in lines if q["kind"] == "lexical"), next(q for q in lines if q["kind"] == "offtopic")]
    qa = tmp_path / "mine.jsonl"
    qa.write_text("".join(json.dumps(q) + "\n" for q in mine))
    res = run_main("eval", "--qa", str(qa), "--configs", "bm25,hybrid", "--out", str(tmp_path / "r"))
    assert res.returncode == 0, res.stderr[-3000:]
    table = res.stdout.splitlines()
    assert any(line.split()[:2] == ["hybrid", "lexical"] for line in table)
    assert not any(line.startswith("naive") for line in table)
    assert "results.json" in res.stderr


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "Q&A file not found"),
        ('{"id": "a", "question": "x", "gold": []}\nnot json\n', ":2: bad Q&A line"),
        (
            '{"id": "a", "question": "x", "gold": []}\n{"id": "a", "question": "y", "gold": []}\n',
            "duplicate question id",
        ),
        ('{"id": "a", "question": "x", "gold": ["no-such-paper"]}\n', "gold ids not in the index: no-such-paper"),
        ("\n\n", "no questions"),
    ],
)
def test_bad_qa_files_fail_in_one_line(seeded: Settings, tmp_path: Path, content: str | None, expected: str) -> None:
    qa = tmp_path / "qa.jsonl"
    if content is not None:
        qa.write_text(content)
    res = run_main("eval", "--qa", str(qa), "--configs", "bm25", "--out", str(tmp_path / "r"))
    assert res.returncode != 0
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert expected in res.stderr and str(qa) in res.stderr
    assert not (tmp_path / "r").exists()


def test_fit_floor_refuses_at_most_the_allowed_answerable_questions() -> None:
    # Under 100 answerable questions, 1% allows none: the floor is the weakest answerable score.
    assert fit_floor([0.5, 0.3, 0.4], [0.1, 0.35, 0.29]) == {
        "fitted_floor": 0.3,
        "fitted_refusal_recall": 0.6667,
        "fitted_false_refusal_rate": 0.0,
    }
    # Ties at the floor stay accepted: only scores strictly below it are refused.
    assert fit_floor([0.3, 0.3, 0.6], [0.3, 0.2]) == {
        "fitted_floor": 0.3,
        "fitted_refusal_recall": 0.5,
        "fitted_false_refusal_rate": 0.0,
    }
    # 200 answerable: 2 may be refused, so the floor is the third weakest.
    answerable = [0.1, 0.2] + [0.5] * 198
    assert fit_floor(answerable, [0.45, 0.6, 0.05, 0.2]) == {
        "fitted_floor": 0.5,
        "fitted_refusal_recall": 0.75,
        "fitted_false_refusal_rate": 0.01,
    }


def test_the_reported_floor_is_the_one_its_figures_were_computed_at() -> None:
    """The floor is reported to 4 decimals; its figures were computed at the unrounded score, so a score between
    the two (0.40469 against 0.4047) was refused by `min_score` set to the reported floor and not by eval. The
    floor is now rounded down and scored as reported: the weakest accepted answerable question stays accepted.
    (The search's own relevance is already rounded to 4 decimals; this keeps ``fit_floor`` right for any input.)"""
    got = fit_floor([0.40468, 0.9], [0.40469, 0.40461, 0.1])
    floor = got["fitted_floor"]
    assert floor == 0.4046 and fit_floor([0.3837, 0.9], [0.1])["fitted_floor"] == 0.3837
    assert got["fitted_refusal_recall"] == round(sum(x < floor for x in [0.40469, 0.40461, 0.1]) / 3, 4) == 0.3333
    assert got["fitted_false_refusal_rate"] == 0.0 and floor <= 0.40468


def test_relevance_does_not_depend_on_how_many_results_are_asked_for(engine: Engine) -> None:
    """Eval ranks ten deep (recall@10); the app asks for ``top_k``. Relevance read the best cosine of the hits
    returned, so the same question had two relevances: this one (round 5) 0.4031 at ten, 0.3778 at five, and a
    floor between them refused it in the app but not in eval."""
    q = "KTO or DPO: which preference-optimization objective degrades less when the preference labels are noisy?"
    deep, app = engine.retriever.search(q, 10), engine.retriever.search(q)
    assert len(deep.results) == 10 and len(app.results) == engine.settings.top_k
    assert deep.relevance == app.relevance and deep.relevant == app.relevant
    assert [h.id for h in deep.results[: engine.settings.top_k]] == [h.id for h in app.results]


def test_the_fitted_floor_applied_as_min_score(engine: Engine, tmp_path: Path) -> None:
    """Set the fitted floor as ``min_score`` and search again: the refusals are the ones eval reported. They are the
    floor's alone (eval's note says so), so the sentence evidence under it (``sentence_match``) is off here."""
    qa = _split_rounds(tmp_path, every=2)
    report = run_eval(engine.settings, qa, tmp_path / "r", ["hybrid"], engine=engine)
    fitted = report["configs"][0]["refusal"]
    questions = [json.loads(line) for line in qa.read_text().splitlines() if line.strip()]
    floor_alone = engine.settings.model_copy(update={"sentence_match": 0.0})
    calibrated = Retriever(engine.index, floor_alone.model_copy(update={"min_score": fitted["fitted_floor"]}))
    refused = {q["id"] for q in questions if not calibrated.search(q["question"]).relevant}
    answerable = [q for q in questions if q["gold"]]
    off = [q for q in questions if not q["gold"]]
    assert sum(q["id"] in refused for q in answerable) / len(answerable) == pytest.approx(
        fitted["fitted_false_refusal_rate"], abs=1e-4
    )
    assert sum(q["id"] in refused for q in off) / len(off) == pytest.approx(fitted["fitted_refusal_recall"], abs=1e-4)
    # The floor is the highest such: nudging it up refuses one more answerable question.
    stricter = Retriever(engine.index, floor_alone.model_copy(update={"min_score": fitted["fitted_floor"] + 1e-4}))
    assert sum(not stricter.search(q["question"]).relevant for q in answerable) > len(answerable) * 0.01


def test_eval_answers_reports_claim_support_and_the_flag_on_swapped_claims(seeded: Settings, tmp_path: Path) -> None:
    """Issue 15: `eval --answers` scores each answer's claims, and the unsupported-claim flag on a set with
    sentences swapped between papers: its floor fitted on dev, its precision and recall on test."""
    rows = [json.loads(line) for line in QA.read_text().splitlines() if line.strip()]
    picked = [r for r in rows if r["split"] == "dev"][:24:2] + [r for r in rows if r["split"] == "test"][:24:2]
    qa = tmp_path / "qa.jsonl"
    qa.write_text("".join(json.dumps(r) + "\n" for r in picked))
    res = run_main(
        "eval", "--qa", str(qa), "--configs", "hybrid", "--answers", "--llm", "extractive", "--json",
        "--out", str(tmp_path / "out"), "--answers-limit", "8",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    a = json.loads(res.stdout)["answers"]
    per = a["per_question"]
    assert a["questions_answered"] == len(per) == 16 and {r["split"] for r in per} == {"dev", "test"}
    for split, c in a["claim_support"].items():
        answered = [r for r in per if r["split"] == split and not r["refused"] and r["claims"]]
        assert c["claims"] == sum(r["claims"] for r in answered) > 0
        assert c["supported_share"] == 1.0  # quotes, each cited to the abstract it comes from
    flag = a["claim_flag"]
    assert 0 < flag["fitted_floor"] < 1 and flag["floor"] == Settings().claim_floor
    dev, test = flag["dev"], flag["test"]
    assert dev["swapped"] > 0 and test["swapped"] > 0 and dev["quote"] >= dev["swapped"]
    assert dev["at_fitted"]["recall"] >= flag["recall_target"]  # what the fit promises, on the part it was fitted on
    for view in (dev, test):
        for label in ("at_floor", "at_fitted"):
            f = view[label]
            assert 0 <= f["recall"] <= 1 and 0 <= f["precision"] <= 1
            assert f["quote_flagged"] == 0.0  # a verbatim quote is never flagged
    md = (tmp_path / "out" / "report.md").read_text()
    assert "unsupported-claim flag on the swapped set (test" in md and "claims supported by the abstracts" in md


def test_answer_scores_count_outcomes_per_kind_and_split(engine: Engine) -> None:
    """``eval --answers``: each row says whether the answer was refused or carried an ``uncovered`` line; the
    refused, caveated and plain shares are summarised per kind (answerable, near-miss, off-topic) and split."""
    from rag_papers.evaluate import load_qa, score_answers

    qs = load_qa(QA)
    picked = [
        q
        for split in ("dev", "test")
        for pred in (lambda q: q.subkind == "near-miss", lambda q: bool(q.gold), lambda q: q.subkind == "unrelated")
        for q in [q for q in qs if q.split == split and pred(q)][:3]
    ]
    report = score_answers(engine, picked, "extractive", None)
    rows = report["per_question"]
    assert [r["id"] for r in rows] == [q.id for q in picked]
    assert all(isinstance(r["caveat"], bool) and r["split"] in ("dev", "test") for r in rows)
    assert all(r["caveat"] == bool(r["uncovered"]) for r in rows if not r["refused"])
    for split in ("dev", "test"):
        got = report["splits"][split]
        assert set(got) == {"answerable", "near-miss", "off-topic"}
        for group, pred in (
            ("near-miss", lambda q: q.subkind == "near-miss"),
            ("answerable", lambda q: bool(q.gold)),
            ("off-topic", lambda q: q.subkind == "unrelated"),
        ):
            part = [r for r, q in zip(rows, picked) if q.split == split and pred(q)]
            view = got[group]
            assert view["n"] == len(part) == 3
            assert view["refused"] == pytest.approx(sum(r["refused"] for r in part) / 3, abs=1e-4)
            assert view["caveated"] == pytest.approx(sum(r["caveat"] for r in part) / 3, abs=1e-4)
            assert view["refused"] + view["caveated"] + view["plain"] == pytest.approx(1.0, abs=1e-3)
        gold = [bool(set(r["citations"]) & set(q.gold)) for r, q in zip(rows, picked) if q.split == split and q.gold]
        assert got["answerable"]["gold_cited"] == pytest.approx(sum(gold) / 3, abs=1e-4)


def test_answers_limit_below_one_is_a_one_line_error(seeded: Settings, tmp_path: Path) -> None:
    res = run_main("eval", "--answers", "--answers-limit", "0", "--out", str(tmp_path / "out"))
    assert res.returncode != 0
    assert res.stderr.strip().splitlines()[-1].endswith("--answers-limit must be at least 1 (got 0)")
    assert not (tmp_path / "out").exists()
