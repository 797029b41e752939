"""Synthetic corpora: deterministic, the right size and shape, the seed abstracts mixed in."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_main

from rag_papers.corpus import content_hash, read_file
from rag_papers.synth import MAX_WORDS, MIN_WORDS, generate, record_at, sample_queries, seed_records


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    assert generate(300, a, seed=7) == 300
    generate(300, b, seed=7)
    generate(300, c, seed=8)
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_n_lines_fields_lengths_and_unique(tmp_path: Path) -> None:
    out = tmp_path / "corpus.jsonl"
    generate(500, out, seed=1)
    rows = _lines(out)
    assert len(rows) == 500
    synthetic = [r for r in rows if "id" in r]
    assert len(synthetic) == 500 - 38
    for r in synthetic:
        assert set(r) == {"id", "title", "abstract", "year", "venue", "authors"}
        assert MIN_WORDS <= len(r["abstract"].split()) <= MAX_WORDS
        assert 2012 <= r["year"] <= 2026 and r["venue"] and 2 <= len(r["authors"]) <= 7
        assert r["title"] and r["title"] != r["abstract"]
    assert len({content_hash(r["abstract"]) for r in rows}) == 500
    assert len({r["title"] for r in rows}) == 500
    assert len({r["id"] for r in synthetic}) == len(synthetic)
    # Varied: many areas and venues, not one template repeated.
    assert len({r["venue"] for r in rows}) >= 30
    assert len({r["abstract"].split(".")[0] for r in synthetic}) > 400
    # The corpus reader accepts every line (what `rag-papers ingest` runs first).
    assert sum(1 for _ in read_file(out)) == 500


def test_seeds_included_once_without_id(tmp_path: Path) -> None:
    out = tmp_path / "corpus.jsonl"
    generate(1000, out)
    rows = _lines(out)
    seeds = seed_records()
    assert len(seeds) == 38
    seed_abstracts = {s["abstract"] for s in seeds}
    found = [r for r in rows if r["abstract"] in seed_abstracts]
    assert len(found) == 38 and all("id" not in r for r in found)
    positions = [i for i, r in enumerate(rows) if r["abstract"] in seed_abstracts]
    assert positions[0] < 100 and positions[-1] > 900  # spread over the file, not bunched
    # Their ids stay the content hash, so eval/qa.jsonl's gold ids resolve in a synthetic corpus too.
    gold = {
        g
        for line in (Path(__file__).parent.parent / "eval" / "qa.jsonl").read_text().splitlines()
        for g in json.loads(line)["gold"]
    }
    assert gold <= {content_hash(r["abstract"]) for r in found}


def test_record_at_matches_file_and_queries_are_deterministic(tmp_path: Path) -> None:
    out = tmp_path / "corpus.jsonl"
    generate(120, out, seed=3)
    rows = _lines(out)
    for i in (0, 1, 2, 57, 119):
        assert record_at(i, 120, seed=3) == rows[i]
    q = sample_queries(60, seed=2)
    assert q == sample_queries(60, seed=2) and len(q) == 60 and len(set(q)) > 50


def test_cli_synth(tmp_path: Path) -> None:
    out = tmp_path / "cli.jsonl"
    res = run_main("synth", "40", str(out), "--seed", "5")
    assert res.returncode == 0, res.stderr
    assert "wrote 40 abstracts" in res.stderr
    direct = tmp_path / "direct.jsonl"
    generate(40, direct, seed=5)
    assert out.read_bytes() == direct.read_bytes()
