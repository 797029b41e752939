"""Nothing lost to bad input (issue 26, items 1 and 2): every value is checked before anything is
written, ``ingest --rebuild`` builds beside the old index and swaps it in only when complete, and
``synth`` never overwrites a file it was not told to.

Each test drives the console script's entry point over a real index of the seeds (``seeded``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import VENV_BIN, run_main
from test_integrity import abba_id, one_error_line, search_json, synth

from rag_papers.config import Settings


def papers_json(env: dict[str, str]) -> list[dict[str, Any]]:
    res = run_main("papers", "--json", env=env)
    assert res.returncode == 0, res.stderr
    return [json.loads(line) for line in res.stdout.splitlines() if line.strip()]


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def records(n: int) -> list[dict[str, Any]]:
    words = [
        "sparse",
        "attention",
        "kernels",
        "reduce",
        "memory",
        "traffic",
        "for",
        "long",
        "context",
        "transformer",
        "inference",
    ]
    return [
        {
            "id": f"rec-{i}",
            "title": f"Paper number {i}",
            "abstract": f"We study problem quokka{i}x: " + " ".join(words[(i + k) % len(words)] for k in range(40)),
            "year": 2024,
        }
        for i in range(n)
    ]


BAD_VALUES: dict[str, tuple[str, Any, str]] = {
    # name: (field, value, words the one-line error must contain)
    "huge-year": ("year", 99999999999999999999, "year"),
    "year-0": ("year", 0, "year"),
    "year-far-future": ("year", 30000, "year"),
    "negative-year": ("year", -5, "year"),
    "float-year": ("year", 2024.7, "year"),
    "long-id": ("id", "x" * 5000, "id"),
    "long-title": ("title", "T" * 3_000, "title"),
    "dict-venue": ("venue", {"name": "ICLR"}, "venue"),
    "list-title": ("title", ["a", "b"], "title"),
    "long-url": ("url", "https://example.org/" + "a" * 10_000, "url"),
    "many-authors": ("authors", [f"A{i}" for i in range(6_000)], "authors"),
    "long-author": ("authors", ["A" * 5000], "author"),
}


@pytest.mark.parametrize("case", sorted(BAD_VALUES))
@pytest.mark.parametrize("rebuild", [False, True], ids=["sync", "rebuild"])
def test_a_bad_value_in_the_last_record_is_refused_before_any_write(
    case: str, rebuild: bool, seeded: Settings, tmp_path: Path
) -> None:
    """Reported: a year of 99999999999999999999 passed validation; the write then failed with an
    OverflowError after 96 of 100 papers were written, and with --rebuild the 38 indexed papers were gone."""
    env = {"RAG_PAPERS_HOME": str(seeded.home)}
    key, value, words = BAD_VALUES[case]
    recs = records(100)
    recs[-1][key] = value
    bad = write_jsonl(tmp_path / "library.jsonl", recs)
    before = sorted(p["id"] for p in papers_json(env))
    args = ["ingest", "--no-progress", *(["--rebuild"] if rebuild else []), str(bad)]
    line = one_error_line(run_main(*args, env=env))
    assert f"{bad}:100" in line and words in line, line
    assert sorted(p["id"] for p in papers_json(env)) == before
    assert search_json(env)["results"][0]["id"] == abba_id()


def test_sane_values_still_go_in(seeded: Settings, tmp_path: Path) -> None:
    """The checks refuse only what is wrong: old and recent years, unicode names, a long real title."""
    env = {"RAG_PAPERS_HOME": str(seeded.home)}
    recs = records(3)
    recs[0]["year"] = 1950
    recs[1]["year"] = "2026"
    recs[2]["authors"] = ["Zoë Ångström", "李 雷"]
    recs[2]["title"] = "A " * 200
    good = write_jsonl(tmp_path / "ok.jsonl", recs)
    res = run_main("ingest", "--no-progress", str(good), env=env)
    assert res.returncode == 0, res.stderr
    years = {p["id"]: p["year"] for p in papers_json(env)}
    assert years["rec-0"] == 1950 and years["rec-1"] == 2026


def test_a_rebuild_killed_midway_leaves_the_old_index_whole(seeded: Settings, tmp_path: Path) -> None:
    """--rebuild builds the new index beside the old one: killed at any point before the swap, the
    old index answers as before, and no staging folder is taken for part of the index."""
    env = {**os.environ, "RAG_PAPERS_HOME": str(seeded.home)}
    n = 160  # five batches of 32: it is killed after one, with more to write
    big = synth(tmp_path / "big.jsonl", n)
    proc = subprocess.Popen(
        [str(VENV_BIN / "rag-papers"), "ingest", "--rebuild", str(big)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    # Kill it once it has written part of the new index (its progress bar counts papers).
    deadline = time.monotonic() + 240
    seen = ""
    while time.monotonic() < deadline:
        ch = proc.stderr.read(1)
        if not ch:
            break
        seen += ch
        if "ingest:" in seen and any(f" {k}/{n}" in seen for k in range(32, n)):
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL, seen[-2000:]
    home_env = {"RAG_PAPERS_HOME": str(seeded.home)}
    ids = [p["id"] for p in papers_json(home_env)]
    assert len(ids) == 38 and abba_id() in ids
    assert search_json(home_env)["results"][0]["id"] == abba_id()
    # A later rebuild completes and replaces it, leaving no staging folders behind.
    res = run_main("ingest", "--no-progress", "--rebuild", str(tmp_path / "big.jsonl"), env=home_env)
    assert res.returncode == 0, res.stderr
    assert len(papers_json(home_env)) == n
    assert not [p.name for p in seeded.home.iterdir() if p.name.startswith(".rebuild")]


def test_a_rebuild_swaps_in_the_new_corpus(seeded: Settings, tmp_path: Path) -> None:
    """The swap itself: the rebuilt index holds exactly the new file, searchable at once."""
    env = {"RAG_PAPERS_HOME": str(seeded.home)}
    new = write_jsonl(tmp_path / "new.jsonl", records(5))
    res = run_main("ingest", "--no-progress", "--rebuild", str(new), env=env)
    assert res.returncode == 0, res.stderr
    assert sorted(p["id"] for p in papers_json(env)) == [f"rec-{i}" for i in range(5)]
    hit = search_json(env, query="quokka3x")["results"][0]
    assert hit["id"] == "rec-3"
    assert not [p.name for p in seeded.home.iterdir() if p.name.startswith(".rebuild")]


# ------------------------------------------------------------------ synth
def test_synth_refuses_an_existing_file_unless_forced(tmp_path: Path) -> None:
    out = tmp_path / "corpus.jsonl"
    out.write_text("keep me\n", encoding="utf-8")
    res = run_main("synth", "5", str(out))
    assert res.returncode == 2 and "--force" in res.stderr and str(out) in res.stderr, res.stderr
    assert out.read_text(encoding="utf-8") == "keep me\n"
    res = run_main("synth", "5", str(out), "--force")
    assert res.returncode == 0, res.stderr
    assert len(out.read_text(encoding="utf-8").splitlines()) == 5


def test_synth_never_writes_inside_the_data_directory(seeded: Settings) -> None:
    """Reported: `synth 5 $RAG_PAPERS_HOME/papers.sqlite` exited 0, overwriting the registry."""
    env = {"RAG_PAPERS_HOME": str(seeded.home)}
    db = seeded.home / "papers.sqlite"
    before = db.read_bytes()
    for target, force in ((db, []), (db, ["--force"]), (seeded.home / "new.jsonl", ["--force"])):
        res = run_main("synth", "5", str(target), *force, env=env)
        assert res.returncode == 2 and "data directory" in res.stderr, (target, res.stderr)
    assert db.read_bytes() == before
    assert not (seeded.home / "new.jsonl").exists()
    assert search_json(env)["results"][0]["id"] == abba_id()
