"""eval/aboutness_study.py: it reads only the part of eval/qa.jsonl rules may be chosen on, its AUC is the
pairwise one, and its cross-validation never scores a paper its head was trained on."""

from __future__ import annotations

import json
import random
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from conftest import eval_script

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def study() -> ModuleType:
    return eval_script("aboutness_study")


def test_it_reads_no_test_question_of_rounds_1_to_3_and_nothing_of_round_32_on(study: ModuleType) -> None:
    everything = [json.loads(line) for line in (ROOT / "eval" / "qa.jsonl").read_text(encoding="utf-8").splitlines()]
    read = {d["id"] for d in study.read_part()}
    held_out = {
        d["id"]
        for d in everything
        if (d.get("round") or 0) >= 32 or ((d.get("round") or 0) <= 3 and d["split"] == "test")
    }
    assert held_out and not read & held_out
    assert read == {d["id"] for d in everything} - held_out


def test_auc_counts_pairs_ranked_right_and_ties_as_half(study: ModuleType) -> None:
    rng = random.Random(7)
    labels = [rng.random() < 0.4 for _ in range(60)]
    scores = [float(rng.randint(0, 5)) for _ in range(60)]  # many ties
    pairs = [
        (p, n)
        for p, yp in zip(scores, labels, strict=True)
        if yp
        for n, yn in zip(scores, labels, strict=True)
        if not yn
    ]
    by_hand = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p, n in pairs) / len(pairs)
    assert study.auc(labels, scores) == pytest.approx(by_hand)
    assert study.auc([True, False], [1.0, 0.0]) == 1.0 and study.auc([True, False], [0.0, 1.0]) == 0.0


def test_cross_validation_never_scores_a_paper_its_head_saw(study: ModuleType) -> None:
    rows = [study.Row(f"q{i}", "?", i % 3 == 0, [], [f"p{i % 11}"], np.zeros(2)) for i in range(99)]
    seen: list[Any] = []

    def fit_score(train: list[Any], test: list[Any]) -> Any:
        assert not {r.top[0] for r in train} & {r.top[0] for r in test}
        seen.extend(r.qid for r in test)
        return np.ones(len(test))

    assert len(study.grouped_cv(rows, fit_score)) == 99
    assert sorted(seen) == sorted(r.qid for r in rows)  # every row scored exactly once
