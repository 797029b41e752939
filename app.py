"""Run the rag-papers chat UI: ``python app.py [FLAGS]``, the same as ``rag-papers chat [FLAGS]``.

A thin entry point for people who expect a Gradio app to start from ``app.py``. It hands
its arguments to the CLI's ``chat`` command, so both have one set of flags, one settings
path and one way of reporting errors (``--help`` lists them and stays instant: heavy
imports happen only once the UI starts).
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from rag_papers.cli import main as cli_main

    return cli_main(["chat", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
