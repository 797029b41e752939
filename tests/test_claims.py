"""Claim-level support: every sentence of an answer is checked against the abstracts it cites.

Reported: a citation was only checked for pointing at a given source, so an extractive answer
could cite the hybrid fine-tuning paper for a sentence about something else, and nothing said so.
"""

from __future__ import annotations

import json
from typing import Any

from conftest import FakeBackend, run_main

from rag_papers.chat import Engine
from rag_papers.claims import check_claims, split_claims
from rag_papers.config import Settings
from rag_papers.corpus import plain_text, sentences

ABBA = "what does ABBA claim?"


def _two_papers(engine: Engine) -> tuple[Any, Any]:
    """The top paper for ABBA and an unrelated one (the last of the index)."""
    res = engine.search(ABBA, 3)
    top = res.papers[res.results[0].id]
    other = next(p for p in engine.index.papers() if p.id not in res.papers)
    return top, other


def test_claims_are_sentences_and_list_lines_with_their_citations() -> None:
    text = (
        "From the abstracts (quoted, no LLM):\n"
        "- **ABBA: adapters**: ABBA reparameterizes the update as two low-rank products. It wins. [1]\n"
        "It improves accuracy [2][3]. It costs nothing. [1]\n"
        "The abstracts say nothing about cost."
    )
    got = split_claims(text, skip=["From the abstracts (quoted, no LLM):"])
    assert got == [
        ("ABBA reparameterizes the update as two low-rank products. It wins.", [1]),
        ("It improves accuracy.", [2, 3]),
        ("It costs nothing.", [1]),
        ("The abstracts say nothing about cost.", []),
    ]


def test_a_sentence_its_source_holds_is_supported_and_one_from_another_paper_is_not(engine: Engine) -> None:
    top, other = _two_papers(engine)
    own = sentences(plain_text(top.abstract))[1]
    foreign = sentences(plain_text(other.abstract))[1]
    sources = [(top.id, top.abstract), (other.id, other.abstract)]
    floor = engine.settings.claim_floor
    claims = check_claims(
        f"{own} [1]\n{foreign} [1]\n{foreign} [2]\nNo citation here at all.", sources, engine.index.embedder, floor
    )
    assert [c.supported for c in claims] == [True, False, True, False]
    assert claims[0].evidence == {"id": top.id, "sentence": own} and claims[0].support > 0.95
    assert claims[1].support < floor and claims[1].citations == [top.id]
    assert claims[1].evidence is not None and claims[1].evidence["id"] == top.id  # the closest it has, shown anyway
    assert claims[2].evidence == {"id": other.id, "sentence": foreign}
    assert claims[3].citations == [] and claims[3].evidence is None


def test_ask_json_gives_each_claim_its_support_and_evidence(seeded: Settings) -> None:
    res = run_main("ask", "--json", "--llm", "extractive", ABBA)
    assert res.returncode == 0, res.stderr
    ans = json.loads(res.stdout)
    assert ans["claims"], ans
    ids = {s["id"]: s for s in ans["sources"]}
    for c in ans["claims"]:
        assert set(c) == {"text", "citations", "support", "supported", "evidence"}
        assert c["citations"] and set(c["citations"]) <= set(ids)
        assert c["supported"] and c["evidence"]["id"] in c["citations"]  # a quote is backed by its own abstract
        assert c["text"] in ans["answer"] or c["evidence"]["sentence"].startswith(c["text"][:40])


def test_an_llm_claim_its_source_does_not_hold_is_marked_in_json_and_in_the_terminal(
    engine: Engine, seeded: Settings, monkeypatch: Any
) -> None:
    top, other = _two_papers(engine)
    own = sentences(plain_text(top.abstract))[0]
    foreign = sentences(plain_text(other.abstract))[2]
    reply = f"{own} [1] {foreign} [1] ABBA was invented on the moon."

    from rag_papers import llm

    monkeypatch.setitem(llm._REGISTRY, "fake", llm.BackendSpec("fake", lambda settings, model: FakeBackend(reply)))
    ans = engine.ask(ABBA, FakeBackend(reply)).run()
    assert [c.supported for c in ans.claims] == [True, False, False]
    assert ans.unsupported[0].evidence is not None and ans.unsupported[1].citations == []

    res = run_main("ask", "--llm", "fake", ABBA)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "Not supported by the sources it cites (2 of 3 claims):" in out
    assert f"! {foreign[:60]}" in out and "(cites nothing)" in out
    assert "closest in [1] (support" in out
    js = json.loads(run_main("ask", "--json", "--llm", "fake", ABBA).stdout)
    assert [c["supported"] for c in js["claims"]] == [True, False, False]
