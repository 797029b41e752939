"""Issue 44: references back out to a reference manager (``rag_papers.references``; ``papers --format``,
``ask --cite``; the UI's exports are in tests/test_ui_references.py).

The library exported is the seeds (derived titles, no authors) plus a real Zotero library (tests/fixtures/README.md);
what goes out is compared with what ``papers --json`` says the index holds, and read back with the project's own
readers, with bibtexparser and with rispy.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import run_main
from test_validation import papers_json

from rag_papers.config import Settings
from rag_papers.corpus import DERIVED_TITLE_NOTE, RawRecord, derive_title, read_file, to_paper

FIXTURES = Path(__file__).parent / "fixtures"
SUFFIX = {"bibtex": ".bib", "ris": ".ris", "csl": ".json"}


@pytest.fixture
def library(seeded: Settings, tmp_path: Path) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """The seeds plus the real Zotero library, indexed: (env, ``papers --json``)."""
    env = {"RAG_PAPERS_HOME": str(seeded.home)}
    zotero = Path(shutil.copy(FIXTURES / "zotero-library.bib", tmp_path / "zotero-library.bib"))
    res = run_main("ingest", str(zotero), "--no-progress", env=env)
    assert res.returncode == 0, res.stderr
    papers = papers_json(env)
    assert len(papers) == 38 + 4 and sum(p["title_derived"] for p in papers) == 38
    return env, papers


def exported(env: dict[str, str], fmt: str, tmp_path: Path) -> Path:
    res = run_main("papers", "--format", fmt, env=env)
    assert res.returncode == 0, res.stderr
    path = tmp_path / f"library{SUFFIX[fmt]}"
    path.write_text(res.stdout, encoding="utf-8")
    return path


def same_fields(paper: dict[str, Any], rec: RawRecord) -> None:
    """``rec``, read back, is ``paper``: every field it came with; a derived title comes back as no title."""
    back = to_paper(rec)
    assert back.abstract == paper["abstract"]
    if paper["title_derived"]:
        assert rec.title is None and back.title_derived and back.title == derive_title(paper["abstract"])
        assert paper["title"] == back.title
    else:
        assert rec.title == paper["title"]
    assert (back.year, back.venue, back.authors, back.url) == (
        paper["year"],
        paper["venue"],
        paper["authors"],
        paper["url"],
    )
    assert back.id == paper["id"]


@pytest.mark.parametrize("fmt", ["bibtex", "ris", "csl"])
def test_the_library_reads_back_as_the_same_papers(
    fmt: str, library: tuple[dict[str, str], list[dict[str, Any]]], tmp_path: Path
) -> None:
    env, papers = library
    path = exported(env, fmt, tmp_path)
    back = {r.abstract: r for r in read_file(path)}
    assert len(back) == len(papers)
    for paper in papers:
        same_fields(paper, back[paper["abstract"]])
    assert path.read_text(encoding="utf-8").count(DERIVED_TITLE_NOTE) == 38


def test_bibtex_reads_back_into_bibtexparser(
    library: tuple[dict[str, str], list[dict[str, Any]]], tmp_path: Path
) -> None:
    import bibtexparser
    from bibtexparser.middlewares import LatexDecodingMiddleware, SeparateCoAuthors

    env, papers = library
    text = exported(env, "bibtex", tmp_path).read_text(encoding="utf-8")
    logging.getLogger("bibtexparser").setLevel(logging.CRITICAL)
    lib = bibtexparser.parse_string(text, append_middleware=[LatexDecodingMiddleware(), SeparateCoAuthors()])
    assert lib.failed_blocks == [] and len(lib.entries) == len(papers)
    assert len({e.key for e in lib.entries}) == len(papers)
    by_abstract = {e.fields_dict["abstract"].value: e for e in lib.entries}
    for p in papers:
        entry = by_abstract[p["abstract"]]
        assert entry.fields_dict["title"].value == p["title"]
        authors = entry.fields_dict["author"].value if "author" in entry.fields_dict else None
        assert authors == p["authors"]
        assert ("note" in entry.fields_dict) == p["title_derived"]
        if p["id"].startswith("doi:"):
            assert entry.fields_dict["doi"].value.lower() == p["id"].removeprefix("doi:")


def test_ris_reads_back_into_rispy(library: tuple[dict[str, str], list[dict[str, Any]]], tmp_path: Path) -> None:
    import rispy

    env, papers = library
    entries = rispy.loads(exported(env, "ris", tmp_path).read_text(encoding="utf-8"))
    assert len(entries) == len(papers)
    by_abstract = {e["abstract"]: e for e in entries}
    for p in papers:
        e = by_abstract[p["abstract"]]
        assert e["title"] == p["title"] and e.get("secondary_title") == p["venue"]
        names = [" ".join(reversed([x.strip() for x in a.split(",", 1)])) for a in e.get("authors", [])]
        assert (names or None) == p["authors"]
        assert (DERIVED_TITLE_NOTE in e.get("notes", [])) == p["title_derived"]


def test_csl_json_is_an_array_of_items(library: tuple[dict[str, str], list[dict[str, Any]]], tmp_path: Path) -> None:
    env, papers = library
    items = json.loads(exported(env, "csl", tmp_path).read_text(encoding="utf-8"))
    assert isinstance(items, list) and len(items) == len(papers) and len({i["id"] for i in items}) == len(items)
    by_abstract = {i["abstract"]: i for i in items}
    for p in papers:
        item = by_abstract[p["abstract"]]
        assert item["title"] == p["title"] and item.get("container-title") == p["venue"]
        assert (item.get("note") == DERIVED_TITLE_NOTE) == p["title_derived"]
        if p["year"]:
            assert item["issued"] == {"date-parts": [[p["year"]]]}


def test_an_exported_library_ingests_as_the_same_index(
    library: tuple[dict[str, str], list[dict[str, Any]]], tmp_path: Path
) -> None:
    """Into an empty index, the BibTeX export gives the same papers: ids, titles (derived ones marked), fields."""
    env, papers = library
    path = exported(env, "bibtex", tmp_path)
    fresh = {"RAG_PAPERS_HOME": str(tmp_path / "fresh")}
    res = run_main("ingest", str(path), "--no-progress", env=fresh)
    assert res.returncode == 0, res.stderr
    keep = ("id", "title", "abstract", "year", "venue", "authors", "url", "title_derived")
    again = {p["id"]: {k: p[k] for k in keep} for p in papers_json(fresh)}
    assert again == {p["id"]: {k: p[k] for k in keep} for p in papers}


def test_ask_cite_gives_the_answers_sources_as_references(
    library: tuple[dict[str, str], list[dict[str, Any]]], tmp_path: Path
) -> None:
    import bibtexparser
    from bibtexparser.middlewares import LatexDecodingMiddleware

    env, papers = library
    question = "How does deepfake detection run in real time?"
    res = run_main("ask", "--llm", "extractive", "--json", "--cite", "bibtex", question, env=env)
    assert res.returncode == 0, res.stderr
    answer = json.loads(res.stdout)
    cited = [s["id"] for s in answer["sources"] if s["id"] in answer["citations"]] or [
        s["id"] for s in answer["sources"]
    ]
    assert cited
    lib = bibtexparser.parse_string(answer["references"], append_middleware=[LatexDecodingMiddleware()])
    titles = {p["id"]: p["title"] for p in papers}
    assert [e.fields_dict["title"].value for e in lib.entries] == [titles[i] for i in cited]
    text = run_main("ask", "--llm", "extractive", "--cite", "ris", question, env=env)
    assert text.returncode == 0, text.stderr
    assert "\nReferences (RIS):\n" in text.stdout
    assert text.stdout.split("\nReferences (RIS):\n", 1)[1].count("TY  - ") == len(cited)
