"""rag-papers: retrieval-augmented Q&A over research-paper abstracts."""

__version__ = "0.1.0"


class RagPapersError(Exception):
    """An error the user can act on; the CLI prints it as one line and exits non-zero."""
