"""The ``rag-papers`` command: argument parsing and printing only.

Heavy libraries (torch, chromadb, llama-index, gradio) are imported inside the command
that needs them, so ``rag-papers --help`` stays instant.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from rag_papers import RagPapersError, __version__
from rag_papers.choices import AUTO, DEFAULT_CONFIGS, EMBED_BACKENDS, JUDGE_MODES, PRESETS, RETRIEVAL_MODES

if TYPE_CHECKING:
    from rag_papers.config import Settings
    from rag_papers.retrieve import Filters

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")  # read when onnxruntime loads (see model_files.py)

DEBUG_HELP = "on an unexpected error, print the traceback (also: RAG_PAPERS_DEBUG=1)"
LLM_HELP = (
    "answer backend: ollama, llamacpp, extractive (quotes, no LLM) or a registered plugin; auto uses Ollama when "
    "it serves the model, else extractive (default: %(setting)s)"
)
JSON_HELP = "print one JSON object instead of text (default: text)"
PROGRESS_HELP = "no progress bar (default: a bar on a terminal)"
COLOR_HELP = (
    "dim the scores of a search the abstracts don't cover: auto (on a terminal, unless NO_COLOR is set or "
    "TERM=dumb), always or never (default: auto)"
)
COLOR_CHOICES = ("auto", "always", "never")
REFERENCE_FORMATS = ("bibtex", "ris", "csl")  # rag_papers.references.FORMATS, named here so --help loads nothing
LISTED = 20  # damaged, merged and warned records ingest names one a line; --json lists them all
QUERY_ECHO = 200  # characters of a query that `search` echoes above its results
DIM, RESET = "\x1b[2m", "\x1b[0m"  # ANSI SGR 2 (faint) and SGR 0


def setting_default(field: str) -> str:
    """A setting's default as help states it: ``Settings``' own field default, then what each preset sets it to.

    Read when help is shown (``SettingsHelp``), never when the parser is built, so ``--help`` text cannot drift
    from ``Settings`` while ``rag-papers search ...`` still parses without loading pydantic. A default made by
    a factory (``home``, ``ollama_host``) depends on the environment: such a flag's help says it in words.
    """
    from rag_papers.config import Settings

    default = Settings.model_fields[field].default
    said = "none" if default is None else str(default)
    presets = [f"{name}: {values[field]}" for name, values in PRESETS.items() if field in values]
    return f"{said}; preset {', '.join(presets)}" if presets else said


SETTING_REF = re.compile(r"%\(setting(?::(\w+))?\)s")


def with_settings(action: argparse.Action) -> argparse.Action:
    """``action`` with ``%(setting)s`` in its help replaced by the default of the setting it sets (its ``dest``)
    and ``%(setting:NAME)s`` by setting NAME's (``setting_default``); argparse expands the rest."""
    if not action.help or "%(setting" not in action.help:
        return action
    filled = copy.copy(action)
    filled.help = SETTING_REF.sub(lambda m: setting_default(m.group(1) or action.dest), action.help)
    return filled


class SettingsHelp(argparse.HelpFormatter):
    """argparse's formatter, with the settings' defaults filled into each flag's help (``with_settings``)."""

    def _expand_help(self, action: argparse.Action) -> str:
        return super()._expand_help(with_settings(action))


def flag_help(action: argparse.Action) -> str:
    """A flag's help as ``--help`` prints it."""
    return SettingsHelp("rag-papers")._expand_help(action)


def _safe(text: object) -> str:
    """What the CLI prints in plain-text mode: corpus, model and user text without control bytes.

    One sanitiser (``corpus.safe_text``) for every such print, so an index written before
    ingest stripped controls, a hostile query or a model's output cannot move the cursor,
    recolour the terminal or reorder a title with bidi overrides. JSON output needs none:
    ``json.dumps`` escapes every control and non-ASCII character.
    """
    from rag_papers.corpus import safe_text

    return safe_text(str(text))


def use_colour(mode: str | None, stream: TextIO) -> bool:
    """Whether to style what goes to ``stream`` with ANSI codes: ``--color always`` or ``never`` decide; auto
    (the default) styles a terminal only, and not when NO_COLOR is set to anything but the empty string
    (https://no-color.org, where a flag given on the command line wins over it) or TERM is dumb."""
    if mode in ("always", "never"):
        return mode == "always"
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):  # a closed or stand-in stream
        return False


def _common(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("settings (override rag-papers.toml and RAG_PAPERS_* variables)")
    g.add_argument("--home", type=Path, help="data directory (default: $RAG_PAPERS_HOME or ~/.local/share/rag-papers)")
    g.add_argument(
        "--chroma-url",
        help="use a Chroma server, e.g. http://127.0.0.1:8000, not the embedded store (default: %(setting)s)",
    )
    g.add_argument("--config", type=Path, help="settings file (default: ./rag-papers.toml)")
    g.add_argument("--preset", help=f"named settings preset (default: none): {', '.join(PRESETS)}")
    g.add_argument(
        "--embed-model",
        help="embedding model: a folder, a package, or a Hugging Face hub name org/name (downloaded once) "
        "(default: %(setting)s)",
    )
    g.add_argument(
        "--embed-model-2",
        help="a second embedding model whose vectors are stored beside the first's and fused with them at query "
        "time (default: %(setting)s)",
    )
    g.add_argument(
        "--embed-backend", choices=EMBED_BACKENDS, help="embedding runtime (see embed_backend; default: %(setting)s)"
    )


def _rerank(p: argparse.ArgumentParser) -> None:
    """The reranker settings: only for the commands that search."""
    g = p.add_argument_group("reranking (optional cross-encoder second stage; adds its inference to each query)")
    g.add_argument(
        "--reranker",
        metavar="NAME_OR_FOLDER",
        help="cross-encoder that rescores the top fused candidates: a model folder or a hub name such as "
        "cross-encoder/ms-marco-MiniLM-L-6-v2 (downloaded once) (default: %(setting)s)",
    )
    g.add_argument(
        "--rerank-candidates", type=int, help="fused candidates the reranker rescores (default: %(setting)s)"
    )
    g.add_argument(
        "--min-rerank",
        type=float,
        help="relevance floor on the best reranker score, replacing the fused-score floor (default: %(setting)s)",
    )


def _judge(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--judge",
        choices=JUDGE_MODES,
        help="who decides whether the abstracts address the question: the rules, the LLM, or auto (the LLM with "
        "Ollama or a GGUF that is not the demo model) (default: %(setting)s)",
    )


def _filters(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("filters")
    g.add_argument("--year-min", type=int, help="only papers from this year on (default: no limit)")
    g.add_argument("--year-max", type=int, help="only papers up to this year (default: no limit)")
    g.add_argument("--venue", help="only papers from this venue (default: any)")
    g.add_argument(
        "--keyword", help="only papers whose title or abstract has each of these whole words, any case (default: none)"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rag-papers",
        description="Ask questions about research-paper abstracts; answers cite the papers they come from.",
    )
    parser.add_argument("--version", action="version", version=f"rag-papers {__version__}")
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("ingest", help="index abstracts (default: the shipped ICLR 2026 seeds)")
    p.add_argument(
        "paths",
        nargs="*",
        type=Path,
        help=".txt (seeds format), .jsonl, .csv, .bib, .ris, .xml or .atom (the arXiv API's Atom feed) or .json "
        "(CSL-JSON, arXiv, OpenAlex, OpenReview, Semantic Scholar) files, or folders",
    )
    p.add_argument("--rebuild", action="store_true", help="drop the index first (needed after changing embed_model)")
    p.add_argument(
        "--strict",
        action="store_true",
        help="refuse a whole export for one damaged record (default: the good records go in and each damaged one "
        "is named, FILE:LINE: reason)",
    )
    p.add_argument("--no-progress", action="store_true", help=PROGRESS_HELP)
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    _common(p)

    p = sub.add_parser(
        "repair",
        help="rebuild derived data from the registry alone: vectors the store lacks or cannot read, the keyword index",
    )
    p.add_argument("--no-progress", action="store_true", help=PROGRESS_HELP)
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    _common(p)

    p = sub.add_parser("search", help="rank papers for one or more queries (no LLM)")
    p.add_argument("queries", nargs="*")
    p.add_argument("--queries-file", type=Path, help="a file of queries, one per line (default: the arguments)")
    p.add_argument("--top-k", type=int, help="papers to return (the top_k setting; default: %(setting)s)")
    p.add_argument(
        "--retrieval",
        choices=RETRIEVAL_MODES,
        help=f"ranking: {', '.join(RETRIEVAL_MODES)} (the retrieval setting; default: %(setting)s)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object per query (default: text)")
    p.add_argument("--color", choices=COLOR_CHOICES, help=COLOR_HELP)
    _filters(p)
    _common(p)
    _rerank(p)

    p = sub.add_parser("ask", help="answer a question with citations")
    p.add_argument("question", nargs="+")
    p.add_argument("--llm", help=LLM_HELP)
    _judge(p)
    p.add_argument(
        "--model",
        help="model name (ollama) or GGUF path (llamacpp) (default: the ollama_model setting, %(setting:ollama_model)s, "
        "or the "
        "packaged SmolLM2 for llamacpp)",
    )
    p.add_argument(
        "--top-k",
        type=int,
        help="papers to retrieve (the top_k setting; default: %(setting)s); the answer reads and cites at most "
        "context_papers of them",
    )
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    p.add_argument(
        "--cite",
        choices=REFERENCE_FORMATS,
        help="after the answer, its sources (the cited ones, else all) as references in this format, for a "
        "reference manager; with --json, as the field 'references' (default: none)",
    )
    _filters(p)
    _common(p)
    _rerank(p)

    p = sub.add_parser("papers", help="list the indexed papers")
    p.add_argument("--json", action="store_true", help="one JSON object per paper")
    p.add_argument(
        "--format",
        choices=REFERENCE_FORMATS,
        help="the whole library as references for a reference manager: BibTeX, RIS or CSL-JSON (default: a line "
        "per paper)",
    )
    _common(p)

    p = sub.add_parser("remove", help="remove papers from the index by id")
    p.add_argument("ids", nargs="+")
    _common(p)

    p = sub.add_parser("eval", help="score retrieval (and optionally answers) on Q&A pairs")
    p.add_argument("--qa", type=Path, help="Q&A file (default: eval/qa.jsonl of a source checkout)")
    p.add_argument(
        "--out", type=Path, help="results folder (default: eval/results of a source checkout, else HOME/eval)"
    )
    p.add_argument("--configs", help=f"comma-separated configurations (default: {','.join(DEFAULT_CONFIGS)})")
    p.add_argument("--answers", action="store_true", help="also score answers' citations, refusals and claim support")
    p.add_argument(
        "--answers-limit",
        type=int,
        metavar="N",
        help="answer at most N questions of each split, evenly spread (for slow LLMs; default: all)",
    )
    p.add_argument("--llm", help=f"backend for --answers: {LLM_HELP}")
    p.add_argument("--model", help="model for --answers (default: the backend's default)")
    _judge(p)
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    _common(p)
    _rerank(p)

    p = sub.add_parser("chat", help="open the Gradio chat UI (ingests the seeds if the index is empty)")
    p.add_argument("--host", help="interface to bind; any other address needs a login (default: %(setting)s)")
    p.add_argument("--port", type=int, help="port to serve on (default: %(setting)s)")
    p.add_argument(
        "--auth", help="require a login, user:password (visible in ps: prefer --auth-file; default: %(setting)s)"
    )
    p.add_argument(
        "--auth-file", type=Path, help="require a login, read from a file holding user:password (default: %(setting)s)"
    )
    p.add_argument(
        "--insecure-no-auth",
        action="store_true",
        help="serve a non-loopback --host without a login (anyone can use it)",
    )
    p.add_argument("--llm", help=LLM_HELP)
    p.add_argument(
        "--model",
        help="default model: a name (ollama) or GGUF path (llamacpp) (default: the backend's default, for ollama "
        "the ollama_model setting)",
    )
    _common(p)
    _rerank(p)

    p = sub.add_parser("info", help="show settings, index size and LLM backend status")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    _common(p)

    p = sub.add_parser(
        "fetch",
        help="download abstracts from arXiv, OpenReview or OpenAlex, then ingest them (the one command that uses "
        "the network)",
        description="Download abstracts into a file (JSON lines, a format `ingest` reads) under HOME/fetched or "
        "--out, then ingest it as `rag-papers ingest FILE` would. Polite (a User-Agent, the API's rate, retries "
        "with backoff) and resumable: run the same command again after an interruption to go on from the last "
        "complete page.",
    )
    fetch_sub = p.add_subparsers(dest="source", metavar="SOURCE", required=True)
    f = fetch_sub.add_parser("arxiv", help="papers matching an arXiv API query, e.g. 'all:retrieval AND cat:cs.CL'")
    f.add_argument("target", metavar="QUERY", help="an arXiv search_query (fields such as ti:, au:, abs:, cat:)")
    f.add_argument("--max", type=int, default=100, help="papers to fetch at most (default: %(default)s)")
    _fetch_options(f, "arxiv_url", "100, the most is 2000")
    f = fetch_sub.add_parser(
        "openreview", help="a whole OpenReview venue (API v2), e.g. ICLR.cc/2026/Conference: its accepted papers"
    )
    f.add_argument("target", metavar="VENUE_ID", help="the venue id, as in the venue's OpenReview page")
    f.add_argument("--max", type=int, help="notes to fetch at most (default: all)")
    f.add_argument(
        "--submissions",
        action="store_true",
        help="every submission (invitation VENUE_ID/-/Submission), not only the papers whose venueid is VENUE_ID",
    )
    _fetch_options(f, "openreview_url", "1000, the API's most")
    f = fetch_sub.add_parser("openalex", help="works matching an OpenAlex full-text search")
    f.add_argument("target", metavar="QUERY", help="words to search titles, abstracts and full texts for")
    f.add_argument("--max", type=int, default=100, help="works to fetch at most (default: %(default)s)")
    f.add_argument(
        "--mailto",
        dest="openalex_mailto",
        metavar="EMAIL",
        help="your email, sent as mailto= for OpenAlex's polite pool (default: %(setting)s)",
    )
    _fetch_options(f, "openalex_url", "200, the API's most")

    # --- scale testing (rag_papers.synth, rag_papers.bench)
    from rag_papers import bench, synth  # light modules: nothing heavy is imported at load

    p = sub.add_parser("synth", help="write a synthetic corpus of N abstracts (JSONL, seeds mixed in)")
    synth.add_arguments(p)
    p = sub.add_parser("bench", help="scale benchmark: ingest/query/memory/cold start vs a llama-index baseline")
    bench.add_arguments(p)
    # --debug after the command name too; SUPPRESS keeps a subcommand from resetting `rag-papers --debug CMD`.
    for command in [*sub.choices.values(), *fetch_sub.choices.values()]:
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
        command.formatter_class = SettingsHelp
    return parser


def _fetch_options(p: argparse.ArgumentParser, url_setting: str, page_default: str) -> None:
    """What every ``fetch SOURCE`` takes besides its target and --max."""
    p.add_argument(
        "--out",
        type=Path,
        metavar="FILE.jsonl",
        help="where the fetched records go (default: HOME/fetched/SOURCE-TARGET.jsonl); FILE.jsonl.part and "
        "FILE.jsonl.fetch-state hold an unfinished fetch",
    )
    p.add_argument("--page-size", type=int, help=f"records asked for per request (default: {page_default})")
    p.add_argument(
        "--url",
        dest=url_setting,
        help=f"the API's address, for a mirror or a local stand-in (the {url_setting} setting; default: %(setting)s)",
    )
    p.add_argument("--no-progress", action="store_true", help=PROGRESS_HELP)
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    _common(p)


def settings_from(args: argparse.Namespace, **extra: Any) -> Settings:
    from rag_papers.config import load_settings

    if getattr(args, "config", None):
        if not args.config.is_file():
            raise RagPapersError(f"settings file {args.config} not found")
        os.environ["RAG_PAPERS_CONFIG"] = str(args.config)
    flags = {
        "home": getattr(args, "home", None),
        "chroma_url": getattr(args, "chroma_url", None),
        "embed_model": getattr(args, "embed_model", None),
        "embed_model_2": getattr(args, "embed_model_2", None),
        "embed_backend": getattr(args, "embed_backend", None),
        "top_k": getattr(args, "top_k", None),
        "retrieval": getattr(args, "retrieval", None),
        "llm": getattr(args, "llm", None),
        "judge": getattr(args, "judge", None),
        "reranker": getattr(args, "reranker", None),
        "rerank_candidates": getattr(args, "rerank_candidates", None),
        "min_rerank": getattr(args, "min_rerank", None),
        **extra,
    }
    return load_settings(getattr(args, "preset", None), **flags)  # a bad value or file: one RagPapersError


def filters_from(args: argparse.Namespace) -> Filters:
    """The filter flags, refused at once (before anything loads) when no paper could pass them."""
    from rag_papers.retrieve import SearchRequest

    filters = SearchRequest.checked(
        year_min=args.year_min, year_max=args.year_max, venue=args.venue, keyword=args.keyword
    ).filters()
    if args.year_min is not None and args.year_max is not None and args.year_min > args.year_max:
        raise RagPapersError(
            f"empty year range: --year-min {args.year_min} is after --year-max {args.year_max}, so no paper can match"
        )
    return filters


def _read_queries(path: Path) -> list[str]:
    """The non-blank lines of a queries file; a FIFO, folder, unreadable or blank-only file is an error.

    ``stat`` decides before anything opens the file: reading a FIFO would wait for a writer forever.
    """
    from rag_papers.corpus import check_regular_file, open_binary

    check_regular_file(path)
    with open_binary(path) as fh:
        data = fh.read()
    try:
        lines = data.decode("utf-8-sig").splitlines()
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise RagPapersError(f"{path}:{line}: not valid UTF-8 ({exc.reason}); one query per line expected") from None
    queries = [q.strip() for q in lines if q.strip()]
    if not queries:
        raise RagPapersError(f"{path}: no queries (only blank lines)")
    return queries


# The indexes and stores the running command opened, closed by ``main`` when it ends. A process releases them
# on exit anyway; ``main`` also runs in-process (the tests call it many times in one process), where an index
# left open would keep its files, threads and chromadb's cached client for that folder alive into the next command.
_OPENED: list[Any] = []


def _opened(opened: Any) -> Any:
    _OPENED.append(opened)
    return opened


def _close_opened() -> None:
    while _OPENED:
        try:
            _OPENED.pop().close()
        except Exception:  # closing a store that failed is no reason to fail the command's result
            pass


def _engine(settings: Settings) -> Any:
    from rag_papers.chat import Engine
    from rag_papers.index import Index

    engine = Engine(settings, _opened(Index(settings)))
    if engine.index.count() == 0:
        raise RagPapersError("the index is empty: run `rag-papers ingest` (or `rag-papers ingest FILES`) first")
    _check_reranker(settings)
    return engine


def _check_reranker(settings: Settings) -> None:
    """Find (or fetch) the reranker's folder before any search, so a bad one fails once, as one line."""
    if settings.reranker:
        from rag_papers.rerank import load_reranker

        load_reranker(settings)


def cmd_ingest(args: argparse.Namespace) -> int:
    from rag_papers.ingest import Ingester
    from rag_papers.store import Store

    settings = settings_from(args)
    paths = args.paths or [settings.seeds_dir]
    strict = bool(getattr(args, "strict", False))  # `fetch` ingests through here without the flag
    if args.rebuild:
        # Validate before anything is touched: a rebuild sets a damaged registry aside on open.
        from rag_papers.corpus import expand_paths, validate
        from rag_papers.model_files import resolve_model_path

        validate(expand_paths(paths), on_damaged=None if strict else (lambda _line: None))
        resolve_model_path(settings.embed_model, settings.models_dir)  # a model it cannot get must not cost the index
    store = _opened(Store(settings, rebuild=args.rebuild))
    report = Ingester(store).ingest(
        paths, rebuild=args.rebuild, show_progress=not args.no_progress and not args.json, strict=strict
    )
    if args.json:
        print(json.dumps({**report.to_dict(), "notes": store.notes}))
        return 0
    for note in store.notes:
        print(_safe(f"rag-papers: {note}"), file=sys.stderr)
    _listed([f"skipped {line}" for line in report.damaged], "damaged records skipped")
    _listed(
        [f"{m['record']} merged into {m['paper']} ({m['same']} as {m['as']})" for m in report.merged],
        "records merged",
    )
    _listed(report.warnings, "warnings")
    for given, indexed_as in report.renamed[:10]:
        print(
            f"rag-papers: id {given!r} belongs to an indexed paper with a different abstract: indexed as {indexed_as!r}",
            file=sys.stderr,
        )
    if len(report.renamed) > 10:
        print(f"rag-papers: ... and {len(report.renamed) - 10} more ids renamed (see --json)", file=sys.stderr)
    print(report.summary())
    return 0


def _listed(lines: list[str], what: str) -> None:
    """The first ``LISTED`` of ``lines`` on stderr, one a line, then how many more (``--json`` has them all)."""
    for line in lines[:LISTED]:
        print(_safe(f"rag-papers: {line}"), file=sys.stderr)
    if len(lines) > LISTED:
        print(f"rag-papers: ... and {len(lines) - LISTED} more {what} (see --json)", file=sys.stderr)


def _references(index: Any, ids: list[str], fmt: str) -> str:
    """The papers of ``ids`` (in that order, those still indexed) as references in format ``fmt``."""
    from rag_papers.references import export_references

    found = index.get(ids)
    return export_references([found[i] for i in ids if i in found], fmt)


def cmd_fetch(args: argparse.Namespace) -> int:
    """Fetch into a file, then ingest that file through ``cmd_ingest``: one ingest path for every file."""
    from rag_papers.fetch import fetch
    from rag_papers.ingest import plural

    url_flags = ("arxiv_url", "openreview_url", "openalex_url", "openalex_mailto")
    settings = settings_from(args, **{k: getattr(args, k, None) for k in url_flags})
    quiet = args.no_progress or args.json

    def resumed(records: int, pages: int) -> None:
        print(f"rag-papers: resuming the fetch after {pages} page{plural(pages)} ({records} records)", file=sys.stderr)

    result = fetch(
        settings,
        args.source,
        args.target,
        max_records=args.max,
        page_size=args.page_size,
        out=args.out,
        submissions=getattr(args, "submissions", False),
        show_progress=not quiet,
        on_resume=resumed,
    )
    skipped = f", {result.skipped} left out (not papers)" if result.skipped else ""
    print(
        _safe(
            f"rag-papers: fetched {result.records} records in {result.pages} page{plural(result.pages)} "
            f"({result.requests} request{plural(result.requests)}, {result.seconds:.1f} s{skipped}) into {result.path}"
        ),
        file=sys.stderr,
    )
    ingest_args = argparse.Namespace(**{**vars(args), "paths": [result.path], "rebuild": False})
    return cmd_ingest(ingest_args)


def cmd_repair(args: argparse.Namespace) -> int:
    from rag_papers.ingest import Ingester
    from rag_papers.store import Store

    settings = settings_from(args)
    store = _opened(Store(settings))
    report = Ingester(store).repair(show_progress=not args.no_progress and not args.json)
    if args.json:
        print(json.dumps({**report.to_dict(), "notes": store.notes}))
        return 0
    for note in store.notes:
        print(_safe(f"rag-papers: {note}"), file=sys.stderr)
    print(
        f"checked {report.papers:,} papers against the vector store at {store.vectors.location}: "
        f"{report.reembedded:,} re-embedded ({report.chunks:,} chunks) in {report.seconds:.1f} s"
    )
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    from rag_papers.corpus import clip, plain_text  # what is printed for a reader: LaTeX and Markdown rendered

    queries = list(args.queries)
    for n, q in enumerate(queries, 1):
        if not q.strip():  # the nearest papers to nothing are arbitrary: never print them as results
            raise RagPapersError(f"empty query (QUERY {n} is blank): give the words to search for")
    if args.queries_file:
        queries += _read_queries(args.queries_file)
    if not queries:
        raise RagPapersError("no query given: pass QUERY or --queries-file FILE")
    filters = filters_from(args)
    settings = settings_from(args)  # --top-k is the top_k setting: checked by its rules there
    engine = _engine(settings)
    colour = use_colour(args.color, sys.stdout)
    for q in queries:
        res = engine.search(q, settings.top_k, filters)
        if args.json:
            print(json.dumps(res.to_dict()), flush=True)
            continue
        if res.filtered_out:
            flag = f"  (no result: the filters excluded every paper: {res.filter_reason})"
        elif res.relevant:
            flag = ""
        else:  # the papers still listed are the nearest ones, which the words say without colour too
            closest = "; below, the closest papers, not matches" if res.results else ""
            flag = f"  (no relevant paper: the abstracts don't seem to cover this{closest})"
        # The query echoed as a reminder, clipped: a query read from a file may be a megabyte long.
        print(_safe(f"Query: {clip(' '.join(q.split()), QUERY_ECHO)}{flag}"))
        for rank, h in enumerate(res.results, 1):
            rerank = "" if h.rerank_score is None else f" (rerank {h.rerank_score:.3f})"
            score = _safe(f"{h.score:.3f}{rerank}")
            if colour and not res.relevant:  # greyed out: these scores did not make the papers matches
                score = f"{DIM}{score}{RESET}"
            # Sanitised piece by piece: the only escape codes printed are the two above.
            print(f"{rank:>2}. {score}  {_safe(plain_text(h.title))}  [{_safe(h.id)}]")
            print(_safe(f"      {clip(plain_text(h.passage), 160)}"))
        print()
    return 0


def _first_time(settings: Settings, notice: str) -> bool:
    """Whether ``notice`` is new for this data directory (and records it). A notice about the setup, such as no
    Ollama server, holds until the setup changes: said once, not above every answer (the footer names the
    backend each time). A data directory that cannot be written to shows it every time."""
    seen = settings.in_home("notices-shown.txt")
    line = " ".join(notice.split())  # kept one a line: compared as it is written
    try:
        if line in (seen.read_text(encoding="utf-8").splitlines() if seen.is_file() else []):
            return False
        seen.parent.mkdir(parents=True, exist_ok=True)
        with seen.open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")
    except OSError:
        pass
    return True


def cmd_ask(args: argparse.Namespace) -> int:
    question = " ".join(args.question).strip()
    if not question:
        raise RagPapersError("empty question: ask something about the papers")
    filters = filters_from(args)
    settings = settings_from(args)
    engine = _engine(settings)
    backend, note = engine.backend(args.llm, args.model)
    stream = engine.ask(question, backend, note if backend.extractive else "", settings.top_k, filters)

    def cited_ids(answer: Any) -> list[str]:
        refs = [s.id for s in answer.sources if s.id in answer.citations] or [s.id for s in answer.sources]
        return [] if answer.refused else refs

    if args.json:
        answer = stream.run()
        out = answer.to_dict()
        if args.cite:
            out["references"] = _references(engine.index, cited_ids(answer), args.cite)
        print(json.dumps(out))
        return 0
    if backend.extractive and (args.llm in (None, AUTO)) and settings.llm == AUTO and _first_time(settings, note):
        print(_safe(f"({note})"), file=sys.stderr)
    clock = ThinkingClock(sys.stderr)
    judging = False
    for chunk in stream:
        if stream.phase == "judging" and not judging:
            judging = True  # said once: the model reads the abstracts before it answers
            print(_safe(f"({stream.judging}…)"), file=sys.stderr, flush=True)
        clock.tick(stream.phase, stream.thinking_seconds)
        sys.stdout.write(_safe(chunk))  # a split escape sequence loses its ESC here: harmless text is left
        sys.stdout.flush()
    clock.tick("", stream.thinking_seconds)
    answer = stream.answer
    assert answer is not None
    print()
    if answer.sources:
        from rag_papers.corpus import plain_text

        print("\nSources:")
        for s in answer.sources:
            mark = "*" if s.id in answer.citations else " "
            print(_safe(f"{mark}[{s.n}] {plain_text(s.title)}  ({s.id})"))
    _print_unsupported(answer)
    if answer.uncovered and answer.caveat and not answer.answer.startswith(answer.caveat):
        print(_safe(f"\n{answer.caveat}."))  # what the model said the abstracts leave out (its line is taken out)
    if answer.notice and (not answer.refused or answer.model_refused) and answer.notice not in (note, answer.answer):
        print(_safe(f"\nNote: {answer.notice}"))
    if args.cite and cited_ids(answer):
        from rag_papers.references import FORMAT_NAMES

        print(f"\nReferences ({FORMAT_NAMES[args.cite]}):\n")
        print(_references(engine.index, cited_ids(answer), args.cite).rstrip("\n"))
    t = answer.timings
    print(
        _safe(
            f"\n[{answer.backend}{' ' + answer.model if answer.model else ''}; retrieval {t.get('retrieval_ms', 0):.0f} ms, "
            f"generation {t.get('generation_ms', 0):.0f} ms]"
        ),
        file=sys.stderr,
    )
    return 0


class ThinkingClock:
    """While a thinking model reasons, says so on stderr with the seconds so far: one line rewritten each second on
    a terminal, a line every ``EVERY`` seconds otherwise; then how long it thought. The reasoning itself is not
    printed: it is not the answer."""

    EVERY = 10.0

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.tty = use_colour(None, out)
        self.shown = -1.0  # the seconds last said; -1: nothing said yet
        self.done = False

    def tick(self, phase: str, seconds: float) -> None:
        if self.done:
            return
        if phase == "thinking":
            step = 1.0 if self.tty else self.EVERY
            if self.shown < 0 or seconds - self.shown >= step:
                self.shown = seconds
                line = f"thinking… {seconds:.0f} s"
                self.out.write(f"\r{line}\033[K" if self.tty else f"({line})\n")
                self.out.flush()
        elif self.shown >= 0:  # the answer begins (or the stream ended): say how long it thought
            self.done = True
            self.out.write(
                f"\r(thought for {seconds:.0f} s)\033[K\n" if self.tty else f"(thought for {seconds:.0f} s)\n"
            )
            self.out.flush()


def _print_unsupported(answer: Any) -> None:
    """The claims the cited abstracts do not back, each with the closest sentence they hold."""
    from rag_papers.corpus import clip

    bad = answer.unsupported
    if not bad:
        return
    numbers = {s.id: s.n for s in answer.sources}
    print(f"\nNot supported by the sources it cites ({len(bad)} of {len(answer.claims)} claims):")
    for c in bad:
        cites = "".join(f"[{numbers[i]}]" for i in c.citations if i in numbers)
        print(_safe(f"  ! {clip(c.text, 160)} {cites or '(cites nothing)'}"))
        if c.evidence:
            n = numbers.get(c.evidence["id"], "?")
            print(_safe(f"      closest in [{n}] (support {c.support:.2f}): {clip(c.evidence['sentence'], 160)}"))


def cmd_papers(args: argparse.Namespace) -> int:
    from rag_papers.index import Index
    from rag_papers.vectors import NEARLY_FULL, free_bytes, mb

    settings = settings_from(args)
    index = _opened(Index(settings))
    free = free_bytes(settings.home)
    if free < NEARLY_FULL:  # the list needs no space, so it is given; the commands that do would stop
        print(
            _safe(
                f"rag-papers: no space left on the device holding {settings.home} ({mb(free)} free): the list is "
                "complete, but ingest, search and ask need some; free some space and run the command again"
            ),
            file=sys.stderr,
        )
    if args.format:
        from rag_papers.references import export_references

        sys.stdout.write(export_references(list(index.papers()), args.format))
        return 0
    for p in index.papers():
        if args.json:
            print(
                json.dumps(
                    {
                        "id": p.id,
                        "title": p.title,
                        "abstract": p.abstract,
                        "sources": p.sources,
                        "year": p.year,
                        "venue": p.venue,
                        "authors": p.authors,
                        "url": p.url,
                        "title_derived": p.title_derived,
                    }
                )
            )
        else:
            print(_safe(f"{p.id}  {p.title}"))
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    from rag_papers.index import Index
    from rag_papers.ingest import Ingester, removal_line

    index = _opened(Index(settings_from(args)))
    missing = [i for i in args.ids if i not in index.get(args.ids)]
    if missing:
        raise RagPapersError(f"no paper with id {', '.join(missing)}; nothing removed")
    n = Ingester(index.store).remove(args.ids)
    print(removal_line(n, index.count()))  # numbers only
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from rag_papers.evaluate import run_cli

    settings = settings_from(args)
    _check_reranker(settings)
    return run_cli(args, settings)


def cmd_chat(args: argparse.Namespace) -> int:
    from rag_papers.ui import launch

    flags = {"host": args.host, "port": args.port, "auth": args.auth, "auth_file": args.auth_file}
    settings = settings_from(args, **{k: v for k, v in flags.items() if v is not None})
    _check_reranker(settings)
    launch(settings, llm=args.llm, model=args.model, insecure_no_auth=args.insecure_no_auth)
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    from rag_papers.llm import get_backend
    from rag_papers.store import Store

    settings = settings_from(args)
    store = _opened(Store(settings))
    backend, note = get_backend(settings, AUTO)
    try:
        store.check_vectors()
        vectors = "in step with the registry"
    except RagPapersError as exc:  # info reports the state of things; it does not fail on it
        vectors = str(exc)
    recorded = store.recorded_second_model()
    info = {
        "version": __version__,
        "home": str(settings.home),
        "store": settings.chroma_url or str(settings.in_home("chroma")),
        "papers": store.count(),
        "vectors": vectors,
        "model_cache": str(settings.models_dir),
        "embed_model": settings.embed_model,
        "embed_model_2": settings.embed_model_2
        or (f"none configured (the index also holds {recorded} vectors)" if recorded else "none"),
        "llm": note,
        "settings": json.loads(settings.model_dump_json()),
    }
    if args.json:
        print(json.dumps(info))
    else:
        for k, v in info.items():
            if k == "model_cache":
                v = f"{v} ({settings.models_dir_origin()})"
            if k != "settings":
                print(_safe(f"{k:>13}: {v}"))
    return 0


def cmd_synth(args: argparse.Namespace) -> int:
    from rag_papers.config import load_settings
    from rag_papers.synth import run

    return run(args, load_settings().home)


def cmd_bench(args: argparse.Namespace) -> int:
    from rag_papers.bench import run_cli

    return run_cli(args)


COMMANDS = {
    "synth": cmd_synth,
    "bench": cmd_bench,
    "ingest": cmd_ingest,
    "fetch": cmd_fetch,
    "repair": cmd_repair,
    "search": cmd_search,
    "ask": cmd_ask,
    "papers": cmd_papers,
    "remove": cmd_remove,
    "eval": cmd_eval,
    "chat": cmd_chat,
    "info": cmd_info,
}


def _error(message: str) -> None:
    """The one stderr line of a failure: controls stripped, newlines folded, length bounded."""
    from rag_papers.corpus import clip, safe_text

    line = " ".join(safe_text(message, newlines=False).split())
    print(f"rag-papers: error: {clip(line, 1000)}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    debug = bool(getattr(args, "debug", False)) or os.environ.get("RAG_PAPERS_DEBUG", "") not in ("", "0")
    try:
        return COMMANDS[args.command](args)
    except RagPapersError as exc:
        if debug:
            traceback.print_exc()
        _error(str(exc))
        return 2
    except KeyboardInterrupt:
        print("rag-papers: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # a bug or a library failure nobody anticipated: one line, never a traceback
        if debug:
            traceback.print_exc()
        from rag_papers.corpus import clip

        what = clip(str(exc), 300)
        _error(
            f"unexpected {type(exc).__name__}: {what}" + ("" if debug else " (rerun with --debug for the traceback)")
        )
        return 1
    finally:
        _close_opened()


if __name__ == "__main__":
    sys.exit(main())
