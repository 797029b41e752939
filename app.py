"""Run the rag-papers chat UI: ``python app.py [--host H] [--port P] [--auth-file F] [--llm X] [--model M]``.

A thin entry point (same as ``rag-papers chat``) for people who expect a Gradio app to
start from ``app.py``. Heavy imports (gradio, torch, chromadb) happen only in ``main``,
so ``python app.py --help`` is instant.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="app.py", description="Open the rag-papers chat UI (ingests the shipped seeds if the index is empty)."
    )
    p.add_argument("--host", help="interface to bind (default: 127.0.0.1, this machine only); others need a login")
    p.add_argument("--port", type=int, help="port (default: 7860)")
    p.add_argument("--auth", help="require a login, given as user:password (visible in ps: prefer --auth-file)")
    p.add_argument("--auth-file", type=Path, help="require a login, read from a file holding user:password")
    p.add_argument(
        "--insecure-no-auth", action="store_true", help="serve a non-loopback --host without a login (anyone can use it)"
    )
    p.add_argument("--llm", help="auto (default), ollama, llamacpp or extractive")
    p.add_argument("--model", help="default model: a name (ollama) or GGUF path (llamacpp)")
    p.add_argument("--home", type=Path, help="data directory (default: $RAG_PAPERS_HOME or ~/.local/share/rag-papers)")
    p.add_argument("--preset", help="named settings preset: default, quality, fast, dense, bm25")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
    from rag_papers import RagPapersError
    from rag_papers.config import load_settings

    try:
        try:
            settings = load_settings(
                args.preset,
                host=args.host,
                port=args.port,
                auth=args.auth,
                auth_file=args.auth_file,
                llm=args.llm,
                home=args.home,
            )
        except RagPapersError:
            raise
        except Exception as exc:  # pydantic ValidationError, a bad rag-papers.toml
            raise RagPapersError(f"bad settings: {' '.join(str(exc).splitlines()[:3])}") from None
        from rag_papers.ui import launch

        launch(settings, llm=args.llm, model=args.model, insecure_no_auth=args.insecure_no_auth)
    except RagPapersError as exc:
        print(f"app.py: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
