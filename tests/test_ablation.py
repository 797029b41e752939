"""eval/ablation.py: what a rule buys is counted by how far each outcome goes (a caveat 1, a refusal 2), and it
reads only the read rounds."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from conftest import eval_script

from rag_papers.evaluate import load_qa

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def ablation() -> ModuleType:
    return eval_script("ablation")


def _tally(refused: int, caveated: int, gold: int = 0, facet: int = 0, n: int = 100) -> dict[str, int]:
    return {
        "n": n,
        "refused": refused,
        "caveated": caveated,
        "flagged": refused + caveated,
        "gold_cited": gold,
        "facet_quoted": facet,
    }


def _report(**rules: dict[str, dict[str, int]]) -> dict[str, Any]:
    base = {
        "answerable": _tally(2, 10, gold=90, facet=20),
        "near-miss": _tally(30, 40),
        "off-topic": _tally(18, 1, n=20),
    }
    return {"questions": 220, "rules": {"all rules": base, **rules}}


def test_a_rule_that_turns_near_misses_from_caveated_to_refused_pays(ablation: ModuleType) -> None:
    """Flags alone miss it: the rule flags no near-miss the others do not, but refuses 12 of them rather than
    caveating, for one answerable question refused rather than caveated and one gold paper."""
    without = {
        "answerable": _tally(1, 11, gold=91, facet=20),
        "near-miss": _tally(18, 52),
        "off-topic": _tally(18, 1, n=20),
    }
    b = ablation.buys(_report(strict=without), "strict")
    assert (b["flagged"], b["near_refused"], b["caveated"], b["refused"], b["lost"]) == (0, 12, -1, 1, 1)
    assert b["net"] == 12 - (-1) - 2 * 1 - 1  # 10
    assert "| strict | 0 | 12 | 0 | 0 | -1 | 1 | 1 | 10 | pays |" in ablation.markdown(_report(strict=without))


def test_a_rule_that_only_changes_which_sentence_is_quoted_is_counted_by_the_facets_it_quotes(
    ablation: ModuleType,
) -> None:
    base = _report()["rules"]["all rules"]
    without = {**base, "answerable": {**base["answerable"], "facet_quoted": 14}}
    b = ablation.buys(_report(order=without), "order")
    assert b["facet"] == 6 and b["net"] == 6
    same = ablation.markdown(_report(same=dict(base)))
    assert "| same | 0 | 0 | 0 | 0 | 0 | 0 | 0 | 0 | no effect |" in same


def test_a_rule_that_caveats_more_answerable_questions_than_it_flags_does_not_pay(ablation: ModuleType) -> None:
    without = {
        "answerable": _tally(2, 4, gold=90, facet=20),
        "near-miss": _tally(30, 35),
        "off-topic": _tally(18, 1, n=20),
    }
    b = ablation.buys(_report(wordy=without), "wordy")
    assert (b["flagged"], b["caveated"], b["net"]) == (5, 6, -1)
    assert "| wordy |" in (md := ablation.markdown(_report(wordy=without))) and "does not pay" in md


def test_it_reads_only_the_read_rounds(ablation: ModuleType) -> None:
    """Never rounds 1 to 3's test part, never a round after ``LAST_READ_ROUND``."""
    path = ROOT / "eval" / "qa.jsonl"
    rounds = ablation.read_rounds(path)
    read = ablation.read_part(load_qa(path), rounds)
    assert read and all(rounds[q.id] <= ablation.LAST_READ_ROUND for q in read)
    assert not [q for q in read if rounds[q.id] in ablation.TEST_ROUNDS and q.split == "test"]
    later = [i for i, r in rounds.items() if r > ablation.LAST_READ_ROUND]
    assert not {q.id for q in read} & set(later)
