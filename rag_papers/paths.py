"""Where the shipped data lies: inside the installed package, or in the source checkout's top-level folders.

A wheel carries ``prompts/`` and ``seeds/`` as package data (pyproject.toml maps the top-level folders to
``rag_papers/prompts`` and ``rag_papers/seeds``), read through ``importlib.resources``. Run from the repository
(an editable install, or PYTHONPATH) the package folder has no such subfolders and the top-level ones are used.
And what a data directory holds (``HOME_LAYOUT``). No pydantic here: ``synth`` and ``bench`` import this from their
light entry points.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Literal

PACKAGE = "rag_papers"
# The repository when running from a checkout; site-packages in an installed wheel (use only through the helpers).
PROJECT_ROOT = Path(__file__).resolve().parent.parent

# What rag-papers keeps in a data directory (HOME), in one place: each part's name and what it holds. Code names
# a part only through ``home_path`` / ``Settings.in_home``, so a typo is a type error and the layout is read here.
HomePart = Literal[
    "papers.sqlite",
    "chroma",
    "keyword",
    "models",
    "fetched",
    "uploads",
    "eval",
    "logs",
    "ui-secret",
    "notices-shown.txt",
    "replaced-chroma",
    ".rebuild-",
]
HOME_LAYOUT: dict[HomePart, str] = {
    "papers.sqlite": "the registry, the one source of truth: every paper's record and text; the others derive from it",
    "chroma": "the embedded Chroma store (vectors only; unused with chroma_url)",
    "keyword": "the tantivy keyword index, rebuilt from the registry when it is out of step",
    "models": "models, where versions before the per-user cache kept them (still used when filled)",
    "fetched": "what `rag-papers fetch` wrote, one file per query or venue (a rerun resumes it)",
    "uploads": "files added in the UI's Papers tab, kept as uploaded",
    "eval": "evaluation results, for an installed package (a checkout writes eval/results)",
    "logs": "the chat app's log (chat.log, rotated)",
    "ui-secret": "the key the browser's copy of past chats is encrypted with",
    "notices-shown.txt": "setup notices already shown once",
    "replaced-chroma": "the vector store a --rebuild replaced, for the moment of the swap",
    ".rebuild-": "a --rebuild's staging data directory, .rebuild-PID, swapped in when complete (a dead one's is removed)",
}


def home_path(home: Path, part: HomePart, tail: str = "") -> Path:
    """``part`` of the data directory ``home`` (HOME_LAYOUT says what it holds); ``tail`` completes a prefix."""
    return home / f"{part}{tail}"


def shipped_dir(name: str) -> Path:
    """The packaged ``name`` folder as a real path, else the checkout's top-level one.

    Chroma, the corpus readers and the prompt loader want paths, not Traversables: a wheel installs onto disk,
    so ``files()`` is a Path there. A package imported from a zip has no such folder and falls back too (the
    error that follows names the missing path and the setting to point elsewhere).
    """
    packaged = resources.files(PACKAGE) / name
    if isinstance(packaged, Path) and packaged.is_dir():
        return packaged
    return PROJECT_ROOT / name


def prompts_dir() -> Path:
    """Default prompt templates (the ``prompts_dir`` setting overrides it)."""
    return shipped_dir("prompts")


def seeds_dir() -> Path:
    """Default corpus, the ICLR 2026 seed abstracts (the ``seeds_dir`` setting overrides it)."""
    return shipped_dir("seeds")


def checkout_eval_dir() -> Path | None:
    """The source checkout's ``eval/`` folder (Q&A pairs, recorded results); None in an installed package.

    eval/ is the project's measurement kit and is not shipped: an installed package asks for ``--qa`` and writes
    its results under the data directory rather than into site-packages.
    """
    folder = PROJECT_ROOT / "eval"
    return folder if (PROJECT_ROOT / "pyproject.toml").is_file() and folder.is_dir() else None


def default_home() -> Path:
    """Per-user data dir (XDG), overridable with RAG_PAPERS_HOME (the ``home`` setting's default)."""
    env = os.environ.get("RAG_PAPERS_HOME")
    if env:
        return Path(env)
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "rag-papers"


def home_problem(home: Path, exc: OSError) -> str:
    """Why the data directory ``home`` could not be made, in words, for "cannot create the data directory HOME:
    ...": the path in the way when there is one.

    ``mkdir`` reports a dangling symbolic link, or a file where a folder belongs, as "File exists", which
    names neither the path nor what is there; a data directory given as a link to a folder on a disk that is
    not mounted is the usual case.
    """
    for path in (home, *home.parents):
        it = "it" if path == home else str(path)
        if path.is_symlink() and not path.exists():
            return (
                f"{it} is a symbolic link to {path.parent / os.readlink(path)}, which does not exist: create that "
                "folder (or mount its disk), or choose another data directory with RAG_PAPERS_HOME"
            )
        if path.exists() and not path.is_dir():
            return f"{it} is a file, not a folder: move it, or choose another data directory with RAG_PAPERS_HOME"
        if path.is_dir():
            break
    return exc.strerror or str(exc)


def load_words(name: str) -> frozenset[str]:
    """A word list shipped in the package (``rag_papers/words/NAME.txt``): one word a line, ``#`` comments."""
    text = (resources.files(PACKAGE) / "words" / f"{name}.txt").read_text(encoding="utf-8")
    return frozenset(w for line in text.splitlines() if (w := line.split("#", 1)[0].strip()))
