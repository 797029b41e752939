"""The formats researchers export (issue 27): BibTeX, RIS, CSL-JSON, the arXiv metadata snapshot, OpenAlex,
OpenReview and Semantic Scholar, each ingested into a real index of the seeds as it comes.

The fixtures in tests/formats/ follow each source's documented export or API response (Zotero's BibTeX and
CSL-JSON, an RIS export, a line of arxiv-metadata-oai-snapshot.json, an OpenAlex /works page, OpenReview API v2
notes, a Semantic Scholar Graph API search page), each with one record that has no abstract.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli, run_main
from test_integrity import one_error_line
from test_validation import papers_json

from rag_papers.config import Settings
from rag_papers.corpus import read_file

FORMATS_DIR = Path(__file__).parent / "formats"
FORMAT_NAMES = ("BibTeX", "RIS", "CSL-JSON", "arXiv", "OpenAlex", "OpenReview", "Semantic Scholar")

# file: [(title, year, authors, url, venue, a phrase of the abstract)], in file order; each file also holds one
# record without an abstract.
EXPECTED: dict[str, list[tuple[str, int, list[str], str, str | None, str]]] = {
    "zotero.bib": [
        (
            "Attention is All you Need",
            2017,
            ["Ashish Vaswani", "Noam Shazeer", "Niki Parmar", "Jakob Uszkoreit"],
            "https://proceedings.neurips.cc/paper/2017/hash/3f5ee243547dee91fbd053c1c4a845aa-Abstract.html",
            "Advances in Neural Information Processing Systems",
            "sequence transduction models based on complex recurrent or convolutional networks",
        ),
        (
            "Quantum-chemical insights from deep tensor neural networks",
            2017,
            ["Kristof T. Schütt", "Farhad Arbabzadah", "Stefan Chmiela", "Klaus-Robert Müller", "Alexandre Tkatchenko"],
            "https://doi.org/10.1038/ncomms13890",
            "Nature Communications",
            "chemically resolved insights into quantum-mechanical observables of molecular systems",
        ),
    ],
    "endnote.ris": [
        (
            "Deep residual learning for image recognition",
            2016,
            ["Kaiming He", "Xiangyu Zhang", "Shaoqing Ren", "Jian Sun"],
            "https://doi.org/10.1109/CVPR.2016.90",
            "2016 IEEE Conference on Computer Vision and Pattern Recognition (CVPR)",
            "residual learning framework to ease the training of much deeper networks",
        ),
        (
            "Batch normalization: accelerating deep network training by reducing internal covariate shift",
            2015,
            ["Sergey Ioffe", "Christian Szegedy"],
            "https://proceedings.mlr.press/v37/ioffe15.html",
            "Proceedings of the 32nd International Conference on Machine Learning",
            "internal covariate shift: normalizing layer inputs for each training mini-batch",
        ),
    ],
    "zotero-csl.json": [
        (
            "Highly accurate protein structure prediction with AlphaFold",
            2021,
            ["John Jumper", "Richard Evans", "DeepMind AlphaFold Team"],
            "https://doi.org/10.1038/s41586-021-03819-2",
            "Nature",
            "predict protein structures with atomic accuracy",
        ),
        (
            "Denoising diffusion probabilistic models",
            2020,
            ["Jonathan Ho", "Ajay Jain", "Pieter Abbeel"],
            "https://proceedings.neurips.cc/paper/2020/hash/4c5bcfec8584af0d967f1ab10179ca4b-Abstract.html",
            "Advances in Neural Information Processing Systems",
            "image synthesis with diffusion probabilistic models inspired by nonequilibrium thermodynamics",
        ),
    ],
    "arxiv-metadata-oai-snapshot.json": [
        (
            "Calculation of prompt diphoton production cross sections at Tevatron and LHC energies",
            2007,
            ["C. Balázs", "E. L. Berger", "P. M. Nadolsky", "C.-P. Yuan"],
            "https://arxiv.org/abs/0704.0001",
            None,
            "production of massive photon pairs at hadron colliders in perturbative quantum chromodynamics",
        ),
        (
            "An old-style identifier paper on automata learning",
            2005,
            ["A. Author", "B. Writer"],
            "https://arxiv.org/abs/cs/0501001",
            None,
            "learning deterministic finite automata from queries and counterexamples",
        ),
        (
            "Attention Is All You Need",
            2017,
            ["Ashish Vaswani", "Noam Shazeer", "Niki Parmar", "Jakob Uszkoreit"],
            "https://arxiv.org/abs/1706.03762",
            None,
            "the Transformer, dispensing with recurrence and convolutions entirely",
        ),
    ],
    "openalex-works.json": [
        (
            "The state of OA: a large-scale analysis of the prevalence and impact of Open Access articles",
            2018,
            ["Heather Piwowar", "Jason Priem", "Stefanie Haustein"],
            "https://doi.org/10.7717/peerj.4375",
            "PeerJ",
            "reproducible studies assessing the prevalence and characteristics of Open Access",
        ),
        (
            "Adam: A Method for Stochastic Optimization",
            2014,
            ["Diederik P. Kingma", "Jimmy Ba"],
            "https://doi.org/10.48550/arxiv.1412.6980",
            "arXiv (Cornell University)",
            "first-order gradient-based optimization of stochastic objective functions",
        ),
    ],
    "openreview-notes.json": [
        (
            "Sparse Mixture of Experts Routing with Learned Capacity",
            2025,
            ["Ana Lopes", "Wei Zhang"],
            "https://openreview.net/forum?id=HkgBR3qRcQ",
            "ICLR 2025 Poster",
            "learn the capacity of each expert jointly with the router to stop token dropping",
        ),
        (
            "Calibrated Uncertainty for Retrieval-Augmented Generation",
            2024,
            ["Priya Natarajan"],
            "https://openreview.net/forum?id=Bx9kP2aQw1",
            None,
            "answer uncertainty estimated from the agreement between retrieved passages",
        ),
    ],
    "semantic-scholar.json": [
        (
            "BERT: Pre-training of Deep Bidirectional Transformers for Language Understanding",
            2019,
            ["Jacob Devlin", "Ming-Wei Chang"],
            "https://www.semanticscholar.org/paper/649def34f8be52c8b66281af98ae884c09aef38b",
            "North American Chapter of the Association for Computational Linguistics",
            "pre-train deep bidirectional representations from unlabeled text",
        ),
        (
            "Graph Attention Networks for Citation Recommendation",
            2018,
            ["Petar Velickovic"],
            "https://www.semanticscholar.org/paper/204e3073870fae3d05bcbc2f6a8e263d9b72e776",
            "ICLR",
            "masked self-attentional layers on citation graphs to recommend citations",
        ),
    ],
}


def env_of(settings: Settings) -> dict[str, str]:
    return {"RAG_PAPERS_HOME": str(settings.home)}


def copy_fixture(name: str, tmp_path: Path) -> Path:
    return Path(shutil.copy(FORMATS_DIR / name, tmp_path / name))


def from_file(papers: list[dict[str, Any]], path: Path) -> list[dict[str, Any]]:
    return [p for p in papers if any(s.startswith(f"{path.resolve()}:") for s in p["sources"])]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_format_is_ingested_as_its_papers(name: str, seeded: Settings, tmp_path: Path) -> None:
    env = env_of(seeded)
    before = papers_json(env)
    path = copy_fixture(name, tmp_path)
    res = run_main("ingest", str(path), "--no-progress", env=env)
    assert res.returncode == 0, res.stderr
    expected = EXPECTED[name]
    assert f"{len(expected) + 1} abstracts read" not in res.stdout  # the record without an abstract is not one
    assert f"{len(expected)} added" in res.stdout and "1 record skipped: no abstract" in res.stdout, res.stdout
    after = papers_json(env)
    assert len(after) == len(before) + len(expected)
    got = sorted(from_file(after, path), key=lambda p: int(p["sources"][0].rpartition(":")[2]))
    assert [(p["title"], p["year"], p["authors"], p["url"], p["venue"]) for p in got] == [e[:5] for e in expected]
    for p in got:  # wrapped lines, indents and LaTeX are gone from what is stored
        assert "\n" not in p["abstract"] and "  " not in p["abstract"] and "{" not in p["abstract"], p["abstract"]
    for paper, (*_, phrase) in zip(got, expected):
        res = run_main("search", "--json", phrase, env=env)
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout)["results"][0]["id"] == paper["id"], (phrase, res.stdout[:500])


def test_ingest_json_reports_the_skipped_records(seeded: Settings, tmp_path: Path) -> None:
    res = run_main("ingest", str(copy_fixture("zotero.bib", tmp_path)), "--json", "--no-progress", env=env_of(seeded))
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["skipped"] == 1 and report["added"] == 2 and report["records"] == 2


def test_the_same_paper_from_two_sources_is_one_paper_listing_both(seeded: Settings, tmp_path: Path) -> None:
    """Zotero's BibTeX and the arXiv snapshot both hold "Attention is all you need", with abstracts that differ:
    the same normalised title and first author make it one paper, in one ingest or in two."""
    env = env_of(seeded)
    n_seeds = len(papers_json(env))
    bib, arxiv = copy_fixture("zotero.bib", tmp_path), copy_fixture("arxiv-metadata-oai-snapshot.json", tmp_path)
    res = run_main("ingest", str(bib), "--no-progress", env=env)
    assert res.returncode == 0, res.stderr
    res = run_main("ingest", str(arxiv), "--no-progress", env=env)
    assert res.returncode == 0, res.stderr
    papers = papers_json(env)
    assert len(papers) == n_seeds + 2 + 3 - 1
    (both,) = [p for p in papers if p["title"].lower() == "attention is all you need"]
    assert {s.rpartition(":")[0] for s in both["sources"]} == {str(bib.resolve()), str(arxiv.resolve())}
    # and again, both files in one ingest into a fresh copy: nothing changes
    res = run_main("ingest", str(bib), str(arxiv), "--no-progress", env=env)
    assert res.returncode == 0, res.stderr
    assert len(papers_json(env)) == n_seeds + 4


def test_same_doi_is_one_paper(seeded: Settings, tmp_path: Path) -> None:
    """A CSL-JSON item and an RIS record with the same DOI (and different abstracts and titles) are one paper."""
    env = env_of(seeded)
    n_seeds = len(papers_json(env))
    ris = tmp_path / "one.ris"
    ris.write_text(
        "TY  - JOUR\nTI  - AlphaFold: protein structures\nAU  - Jumper, J.\nPY  - 2021\n"
        "AB  - We predict the three-dimensional structures of proteins from their sequences with a neural network.\n"
        "DO  - https://doi.org/10.1038/S41586-021-03819-2\nER  - \n",
        encoding="utf-8",
    )
    res = run_main("ingest", str(copy_fixture("zotero-csl.json", tmp_path)), str(ris), "--no-progress", env=env)
    assert res.returncode == 0, res.stderr
    papers = papers_json(env)
    assert len(papers) == n_seeds + 2
    (alpha,) = [p for p in papers if "AlphaFold" in p["title"]]
    assert len(alpha["sources"]) == 2


BAD: dict[str, str] = {
    "unbalanced.bib": "@article{broken,\n  title = {Unbalanced {braces},\n  abstract = {An abstract of enough words here.},\n  year = {2020}\n}\n",
    "not-bibtex.bib": "This is a plain note someone saved as .bib.\nIt has no entries at all, only prose.\n",
    "no-er.ris": "TY  - JOUR\nTI  - A record\nAU  - Doe, J.\nAB  - An abstract long enough to index here.\nER  - \n\n"
    "TY  - JOUR\nTI  - A record that never ends\nAB  - Its abstract is long enough to index too.\n",
    "not-ris.ris": "Title: a record\nAbstract: not in RIS at all\n",
    "other-shape.json": json.dumps({"items": [{"name": "x", "value": 1}]}),
    "list-of-numbers.json": "[1, 2, 3]",
    "broken.json": '{"results": [{"title": "x", ',
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_file_of_unknown_or_broken_format_is_refused_in_one_line(name: str, seeded: Settings, tmp_path: Path) -> None:
    env = env_of(seeded)
    before = papers_json(env)
    good = copy_fixture("zotero.bib", tmp_path)  # named with it, and left out with it: all or nothing
    bad = tmp_path / name
    bad.write_text(BAD[name], encoding="utf-8")
    line = one_error_line(run_main("ingest", str(good), str(bad), "--no-progress", env=env))
    assert str(bad) in line
    if name.startswith(("not-", "other-", "list-")):
        assert all(f in line for f in FORMAT_NAMES), line
    assert papers_json(env) == before


def test_broken_bibtex_is_one_line_from_the_console_script_too(seeded: Settings, tmp_path: Path) -> None:
    """bibtexparser logs a failed entry as a warning, which only a real process shows (pytest captures logging)."""
    bad = tmp_path / "unbalanced.bib"
    bad.write_text(BAD["unbalanced.bib"], encoding="utf-8")
    line = one_error_line(run_cli("ingest", str(bad), "--no-progress", env=env_of(seeded)))
    assert f"{bad}:1: malformed BibTeX, an entry is not closed" in line, line


def test_exports_as_they_also_come(tmp_path: Path) -> None:
    """JSON lines whose first line is longer than the sniffed head (a collaboration's author list), OpenReview
    API v1 notes (plain values), and Semantic Scholar's batch answer (null for an unknown paper)."""
    snapshot = (FORMATS_DIR / "arxiv-metadata-oai-snapshot.json").read_text(encoding="utf-8").splitlines()
    first = json.loads(snapshot[0])
    first["authors"] = ", ".join(f"A. Person{i}" for i in range(2_000))
    long_first = tmp_path / "snapshot.json"
    long_first.write_text("\n".join([json.dumps(first), *snapshot[1:]]) + "\n", encoding="utf-8")
    recs = list(read_file(long_first))
    assert [len(r.authors or []) for r in recs] == [2_000, 2, 4]
    assert [r.url for r in recs][1] == "https://arxiv.org/abs/cs/0501001"

    v1 = tmp_path / "v1.json"
    content = {"title": "A v1 note", "authors": ["X Y"], "abstract": "An OpenReview API v1 note: plain values."}
    note = {"id": "r1", "forum": "r1", "cdate": 1538000000000, "content": content}
    v1.write_text(json.dumps({"notes": [note]}), encoding="utf-8")
    (rec,) = read_file(v1)
    assert (rec.title, rec.year, rec.url) == ("A v1 note", 2018, "https://openreview.net/forum?id=r1")

    batch = tmp_path / "batch.json"
    paper = {"paperId": "p1", "title": "T", "abstract": "Some abstract words.", "year": 2020, "authors": []}
    batch.write_text(json.dumps([None, paper]), encoding="utf-8")
    skipped: list[str] = []
    assert [r.id for r in read_file(batch, skipped.append)] == ["s2:p1"]
    assert skipped == [f"{batch}:1"]
