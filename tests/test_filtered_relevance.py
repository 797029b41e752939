"""Relevance is decided on the papers the filters keep (issue 26, item 3).

Reported: `search "what does ABBA claim?" --keyword positional --json` said `relevant: true` although
ABBA was filtered out, and `ask` answered the ABBA question from BAM; on a larger index,
`ask "what does Meta-PlanGPT-2 propose?" --year-min 2022` quoted Tri-PlanGPT-Zero. The query's words
counted as known because some paper of the whole index had them.
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_main
from test_integrity import ABBA_QUERY, abba_id, search_json

from rag_papers.config import Settings


def ask_json(env: dict[str, str], query: str, *extra: str) -> dict[str, object]:
    res = run_main("ask", "--json", "--llm", "extractive", query, *extra, env=env)
    assert res.returncode == 0, res.stderr
    return dict(json.loads(res.stdout))


def test_a_filter_that_removes_the_named_paper_makes_the_search_not_relevant(seeded: Settings) -> None:
    env = {"RAG_PAPERS_HOME": str(seeded.home)}
    unfiltered = search_json(env)
    assert unfiltered["relevant"] is True and unfiltered["results"][0]["id"] == abba_id()
    filtered = search_json(env, "--keyword", "positional")
    ids = [r["id"] for r in filtered["results"]]
    assert ids and abba_id() not in ids
    assert filtered["relevant"] is False, filtered["relevance"]
    answer = ask_json(env, ABBA_QUERY, "--keyword", "positional")
    assert answer["refused"] is True and answer["citations"] == []


def test_a_filter_that_keeps_the_named_paper_keeps_it_relevant(seeded: Settings) -> None:
    """The check is on the kept papers, not a penalty for filtering: ABBA kept, ABBA answered."""
    env = {"RAG_PAPERS_HOME": str(seeded.home)}
    filtered = search_json(env, "--keyword", "Hadamard")
    assert filtered["results"][0]["id"] == abba_id() and filtered["relevant"] is True
    answer = ask_json(env, ABBA_QUERY, "--keyword", "Hadamard")
    assert answer["refused"] is False and answer["citations"] == [abba_id()]


def test_a_year_filter_that_removes_the_named_method_refuses_instead_of_quoting_its_neighbour(
    seeded: Settings, tmp_path: Path
) -> None:
    """Two papers on one topic with coined names; the year filter keeps only the other one."""
    env = {"RAG_PAPERS_HOME": str(seeded.home)}
    body = (
        "a hierarchical planner for long-horizon household robot tasks that decomposes goals into "
        "subgoals with a language model and verifies each plan step against a learned world model, "
        "improving success rates on unseen kitchens and reducing replanning calls"
    )
    recs = [
        {"id": "meta", "abstract": f"We present Meta-PlanGPT-2, {body}.", "year": 2019},
        {"id": "tri", "abstract": f"We present Tri-PlanGPT-Zero, {body}.", "year": 2023},
    ]
    corpus = tmp_path / "planners.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    assert run_main("ingest", "--no-progress", str(corpus), env=env).returncode == 0
    query = "what does Meta-PlanGPT-2 propose?"
    assert search_json(env, query=query)["results"][0]["id"] == "meta"
    filtered = search_json(env, "--year-min", "2022", query=query)
    assert [r["id"] for r in filtered["results"]][:1] == ["tri"]
    assert filtered["relevant"] is False, filtered["relevance"]
    answer = ask_json(env, query, "--year-min", "2022")
    assert answer["refused"] is True and "tri" not in answer["citations"]  # type: ignore[operator]


def test_a_refusal_under_a_filter_says_the_filter_first_in_the_cli_and_the_json(seeded: Settings) -> None:
    """Reported (issues 45 and 47): with the keyword filter RNA, "which papers study learnable parameters?" said only
    "The indexed abstracts don't cover this question", with no word of the filter that kept every other paper out."""
    out = run_main("ask", "--llm", "extractive", "--keyword", "RNA", "which papers study learnable parameters?")
    assert out.returncode == 0, out.stderr
    first = out.stdout.strip().splitlines()[0]
    assert first.startswith("The filters (keyword 'RNA') keep only papers that don't cover this question"), first
    assert "widen or clear" in first
    js = run_main("ask", "--json", "--llm", "extractive", "--keyword", "positional", "what does ABBA claim?")
    answer = json.loads(js.stdout)
    assert answer["refused"] and answer["answer"].startswith("The filters (keyword 'positional')")
    plain = json.loads(run_main("ask", "--json", "--llm", "extractive", "who won the 2022 World Cup?").stdout)
    assert plain["refused"] and "filters" not in plain["answer"]  # no filter on: the usual refusal
