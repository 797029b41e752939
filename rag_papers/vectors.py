"""The index stage's vector store: Chroma collections, derived data rebuilt from the registry.

Vectors are derived data: the registry (``rag_papers.index``) holds every chunk's text,
so whatever happens to the vectors (a store switched to a server, a Chroma folder
deleted by hand, a store chromadb can no longer read after a full disk) is detected
here and repaired by re-embedding from the registry (``Ingester.repair``). This module
knows nothing about papers beyond their ids: chunk vectors are ``<paper id>:<chunk>``,
whole-paper (head) vectors ``<paper id>:doc``. Each embedding model has its own pair of
collections (chunks and heads): the first model's ``<collection>`` and ``<collection>_doc``,
an optional second model's (``embed_model_2``) ``<collection>-m2-chunks`` and
``<collection>-m2-docs``, so the two models may differ in dimension.

Why the chromadb collections themselves and not llama-index's ``ChromaVectorStore``:
that wrapper writes every chunk's text as a Chroma document plus its node JSON as
metadata, and decodes that JSON on every query; ids and distances are all a search
needs here (docs/design-notes.md).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from rag_papers import RagPapersError

if TYPE_CHECKING:
    from rag_papers.config import Settings

Which = Literal["chunks", "docs", "chunks2", "docs2"]
# (chunk collection, head collection) of each embedding model: 0 is embed_model, 1 is embed_model_2.
MODEL_KINDS: tuple[tuple[Which, Which], ...] = (("chunks", "docs"), ("chunks2", "docs2"))


def kinds(model: int) -> tuple[Which, Which]:
    """The (chunks, heads) collections of embedding model ``model`` (0: embed_model, 1: embed_model_2)."""
    if model not in (0, 1):
        raise RagPapersError(f"no embedding model {model}: 0 (embed_model) or 1 (embed_model_2)")
    return MODEL_KINDS[model]


_DISK_FULL = re.compile(r"disk is full|no space left|os error 28|ENOSPC|\(code: 13\)", re.IGNORECASE)


class VectorStoreError(RagPapersError):
    """The vector store cannot be opened or read; the message names the store and the fix.

    ``damaged``: chromadb's error says its files are unreadable (a cut-short HNSW pickle, a
    chroma.sqlite3 that is not a database), not that it is busy, slow or unreachable; only
    then may a store be set aside and rebuilt.
    """

    def __init__(self, message: str, damaged: bool = False) -> None:
        super().__init__(message)
        self.damaged = damaged


# What chromadb says when its files cannot be read, as opposed to timeouts, locks or a server away.
_DAMAGED = re.compile(
    r"pickle|deserializ|not a database|malformed|corrupt|hnsw segment reader|error loading hnsw|invalid (?:header|magic)",
    re.IGNORECASE,
)


class DiskFullError(RagPapersError):
    """Not enough free space: the message names the data directory and the space needed."""


def free_bytes(path: Path) -> int:
    """Free bytes on the filesystem holding ``path`` (its nearest existing parent)."""
    p = path
    while not p.exists() and p.parent != p:
        p = p.parent
    return shutil.disk_usage(p).free


def tree_bytes(path: Path, exclude: Path | None = None) -> int:
    """Bytes the files under ``path`` take on disk (allocated blocks, like ``du``; links as themselves), leaving
    the folder ``exclude`` out: the ingest's headroom (Chroma, tantivy) and the bench's index sizes."""
    total = 0
    stack = [path]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for e in entries:
            try:
                if e.is_dir(follow_symlinks=False):
                    if exclude is None or Path(e.path) != exclude:
                        stack.append(Path(e.path))
                else:
                    total += e.stat(follow_symlinks=False).st_blocks * 512
            except OSError:
                continue
    return total


def mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


def is_disk_full(exc: BaseException) -> bool:
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return True
    return bool(_DISK_FULL.search(str(exc)))


def disk_full_error(home: Path, what: str, *, writing: bool = True) -> DiskFullError:
    """The full-disk line: what to do depends on whether a write (an ingest: rerun it) or a read
    (run the command again) met it; it never promises a search that the full disk may prevent."""
    then = (
        "rerun `rag-papers ingest` to continue: the papers indexed so far are kept"
        if writing
        else "run the command again: nothing indexed is lost"
    )
    return DiskFullError(
        f"no space left on the device holding {home} ({mb(free_bytes(home))} free) while {what}: "
        f"free some space (or move the data directory with RAG_PAPERS_HOME) and {then}"
    )


# Below this much free space, an I/O error from SQLite or chromadb is taken for a full disk: SQLite
# says "disk I/O error" (not "database or disk is full") when it cannot even create its -shm file.
NEARLY_FULL = 1_000_000


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def aside_name(path: Path) -> Path:
    """``<name>.damaged-<time>``, not yet taken: where a damaged store or registry is set aside, never deleted."""
    stem = f"{path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}"
    dest, n = path.with_name(stem), 1
    while dest.exists() or Path(f"{dest}-wal").exists():
        n += 1
        dest = path.with_name(f"{stem}-{n}")
    return dest


class VectorStore:
    """The chunk and head-vector collections (one pair per embedding model) of one data directory or server."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._client: Any = None
        self._cols: dict[Which, Any] = {}
        # Opening is not thread-safe in chromadb (two clients built at once on one path can drop
        # each other's shared System): the two threads of a search must not both open the store.
        self._open_lock = threading.RLock()

    # ---- where
    @property
    def server(self) -> bool:
        return bool(self.settings.chroma_url)

    @property
    def location(self) -> str:
        """What the user knows this store by: the server URL or the embedded folder."""
        return str(self.settings.chroma_url) if self.server else str(self.settings.in_home("chroma"))

    def names(self) -> dict[Which, str]:
        """Every collection this store may hold; the second model's are named from the first's (Chroma's
        character rules hold: the suffixes are letters, digits and hyphens, and end in a letter)."""
        c = self.settings.collection
        return {"chunks": c, "docs": f"{c}_doc", "chunks2": f"{c}-m2-chunks", "docs2": f"{c}-m2-docs"}

    def models(self) -> list[int]:
        """The embedding models in use: 0, and 1 when ``embed_model_2`` is set."""
        return [0, 1] if self.settings.embed_model_2 else [0]

    def in_use(self) -> list[Which]:
        """The collections the settings' models write and read (the second pair only with ``embed_model_2``)."""
        return [w for m in self.models() for w in kinds(m)]

    def model_name(self, which: Which) -> str:
        """The embedding model whose vectors ``which`` holds, as the settings name it."""
        if which in MODEL_KINDS[1]:
            if not self.settings.embed_model_2:
                raise RagPapersError(f"collection {self.names()[which]!r} needs embed_model_2, which is not set")
            return self.settings.embed_model_2
        return self.settings.embed_model

    # ---- errors
    @contextmanager
    def guard(self, what: str, writing: bool = False) -> Iterator[None]:
        """Turn chromadb's errors into one-line ones: a full disk, or a store it cannot read."""
        try:
            yield
        except RagPapersError:
            raise
        except Exception as exc:  # chromadb raises InternalError, ValueError, httpx errors, OSError ...
            if is_disk_full(exc) or (
                not self.server and "i/o error" in str(exc).lower() and free_bytes(self.settings.home) < NEARLY_FULL
            ):
                raise disk_full_error(self.settings.home, what, writing=writing) from None
            if not _DAMAGED.search(str(exc)):
                raise VectorStoreError(
                    f"the vector store at {self.location} failed while {what} ({_first_line(exc)})"
                    + ("" if self.server else ": is another program using it? try again")
                ) from None
            fix = (
                f"run `rag-papers repair --chroma-url {self.location}` to recreate its collections from the registry"
                if self.server
                else "run `rag-papers repair` to rebuild it from the registry (the damaged folder is kept aside)"
            )
            raise VectorStoreError(
                f"the vector store at {self.location} cannot be read ({_first_line(exc)}): {fix}", damaged=True
            ) from None

    # ---- opening
    def client(self) -> Any:
        with self._open_lock:
            if self._client is None:
                try:
                    with self.guard("opening it"):
                        self._client = self._connect()
                except RagPapersError:
                    self._forget_system()
                    raise
            return self._client

    def _forget_system(self) -> None:
        """Drop chromadb's cached System for this folder after a failed open.

        chromadb caches one System per persist directory; when opening fails part way
        (an unreadable chroma.sqlite3) the half-started System stays cached and every
        later client on that path fails with "'RustBindingsAPI' object has no attribute
        'bindings'", even after the folder has been set aside and recreated.
        """
        if self.server:
            return
        try:
            from chromadb.api.shared_system_client import SharedSystemClient

            key = str(self.settings.in_home("chroma"))
            SharedSystemClient._identifier_to_system.pop(key, None)
            SharedSystemClient._identifier_to_refcount.pop(key, None)
        except (ImportError, AttributeError):  # another chromadb layout: nothing cached to drop
            pass

    def _connect(self) -> Any:
        import chromadb
        from chromadb.config import Settings as ChromaSettings

        chroma_settings = ChromaSettings(anonymized_telemetry=False)
        url = self.settings.chroma_url
        if not url:
            return chromadb.PersistentClient(path=str(self.settings.in_home("chroma")), settings=chroma_settings)
        from urllib.parse import urlparse

        u = urlparse(url if "://" in url else f"http://{url}")
        if not u.hostname:
            raise RagPapersError(f"bad --chroma-url {url!r}: expected http://host:port")
        try:
            client = chromadb.HttpClient(
                host=u.hostname, port=u.port or 8000, ssl=u.scheme == "https", settings=chroma_settings
            )
            client.heartbeat()
        except Exception as exc:  # chromadb raises ValueError/ConnectError/JSON errors depending on what answers
            text = _first_line(exc)
            if re.search(r"connect|refused|resolve|timed out|unreachable", text, re.IGNORECASE):
                raise RagPapersError(
                    f"cannot reach Chroma server at {url}: {text} (start one with: chroma run --path DIR --port PORT)"
                ) from None
            if text.lstrip().startswith("<"):
                text = "it sent an HTML page"
            raise RagPapersError(
                f"{url} answered, but not as a Chroma server ({text}): check --chroma-url "
                "(a Chroma server answers GET /api/v2/heartbeat)"
            ) from None
        return client

    def collection(self, which: Which) -> Any:
        """The collection itself (created on first use), checked to be built with the configured model."""
        col = self._cols.get(which)
        if col is not None:
            return col
        with self._open_lock:
            return self._open_collection(which)

    def _open_collection(self, which: Which) -> Any:
        if which not in self._cols:
            name = self.names()[which]
            model = self.model_name(which)
            client = self.client()
            with self.guard(f"opening collection {name!r}"):
                try:
                    col = client.get_collection(name, embedding_function=None)
                except Exception as exc:  # chromadb raises NotFoundError/ValueError depending on version and mode
                    if is_disk_full(exc) or "not exist" not in str(exc).lower() and "not found" not in str(exc).lower():
                        raise
                    col = None
                if col is None:
                    from rag_papers.config import SCHEMA_VERSION

                    try:
                        col = client.create_collection(
                            name,
                            embedding_function=None,
                            configuration={"hnsw": {"space": "cosine"}},
                            metadata={"embed_model": model, "schema": SCHEMA_VERSION},
                        )
                    except Exception as exc:  # another process created it first
                        if "already exists" not in str(exc).lower():
                            raise
                        col = client.get_collection(name, embedding_function=None)
            built_with = (col.metadata or {}).get("embed_model")
            if built_with and built_with != model:
                setting = "embed_model_2" if which in MODEL_KINDS[1] else "embed_model"
                raise RagPapersError(
                    f"the index was built with {setting} {built_with!r} but {model!r} "
                    f"is configured: re-ingest with `rag-papers ingest --rebuild` or set {setting} back"
                )
            self._cols[which] = col
        return self._cols[which]

    def probe(self) -> None:
        """Open the collections in use and run one query on each: where a damaged store first fails.

        chromadb loads a collection's HNSW files on its first query, so an unreadable
        file (a pickle cut short by a full disk) shows up only then.
        """
        for which in self.in_use():
            col = self.collection(which)
            with self.guard(f"reading collection {self.names()[which]!r}"):
                dim = self._dim(col)
                if col.count() and dim:
                    col.query(query_embeddings=[[1.0] + [0.0] * (dim - 1)], n_results=1, include=["distances"])

    @staticmethod
    def _dim(col: Any) -> int:
        """The collection's vector size, as chromadb recorded it at the first write."""
        model = getattr(col, "_model", None)
        return int(getattr(model, "dimension", None) or 0)

    # ---- reading
    def count(self, which: Which) -> int:
        with self.guard("counting vectors"):
            return int(self.collection(which).count())

    def nearest(
        self, which: Which, query_vec: Sequence[float], n: int, where: dict[str, Any] | None
    ) -> list[tuple[str, float]]:
        """(vector id, cosine) of the ``n`` nearest vectors: ids and distances only.

        Why not ``ChromaVectorStore.query``: it fetches every hit's metadata (the node
        JSON llama-index writes) and rebuilds a node from it, most of a query's time at
        1k papers; our ids already say which paper and chunk a vector is.
        """
        col = self.collection(which)
        with self.guard("searching"):
            res = col.query(query_embeddings=[list(query_vec)], n_results=n, where=where or None, include=["distances"])
        return [(vid, 1.0 - float(dist)) for vid, dist in zip(res["ids"][0], res["distances"][0])]

    def existing(self, which: Which, ids: Sequence[str]) -> set[str]:
        """Which of these vector ids the store holds."""
        if not ids:
            return set()
        col = self.collection(which)
        with self.guard("reading vector ids"):
            return set(col.get(ids=list(ids), include=[])["ids"])

    def embeddings(self, which: Which, ids: Sequence[str]) -> dict[str, list[float]]:
        """The stored vectors of these ids, by id (those the store holds)."""
        if not ids:
            return {}
        col = self.collection(which)
        with self.guard("reading vectors"):
            got = col.get(ids=list(ids), include=["embeddings"])
        vecs = got["embeddings"] if got["embeddings"] is not None else []
        return {vid: [float(x) for x in v] for vid, v in zip(got["ids"], vecs)}

    def documents(self, ids: Sequence[str]) -> dict[str, str]:
        """Chunk texts kept as Chroma documents (indexes written before the registry kept them)."""
        col = self.collection("chunks")
        with self.guard("reading chunk texts"):
            got = col.get(ids=list(ids), include=["documents"])
        return {vid: text for vid, text in zip(got["ids"], got["documents"] or []) if text is not None}

    # ---- writing
    def upsert(self, which: Which, ids: list[str], vectors: Any, metadatas: list[dict[str, Any]]) -> None:
        """Write vectors; upsert, so a rerun after a kill overwrites whatever half-written ones it finds."""
        col = self.collection(which)
        with self.guard("writing vectors", writing=True):
            col.upsert(ids=ids, embeddings=vectors, metadatas=metadatas)

    def delete_papers(self, paper_ids: Sequence[str]) -> None:
        """Delete these papers' vectors from every collection in use, and from a second model's collections
        that exist although no second model is configured (an index built with one, used without it)."""
        cols = [self.collection(which) for which in self.in_use()]
        if not self.settings.embed_model_2:
            with self.guard("listing collections"):
                client = self.client()
                existing = {getattr(c, "name", c) for c in client.list_collections()}
                cols += [
                    client.get_collection(self.names()[w], embedding_function=None)
                    for w in MODEL_KINDS[1]
                    if self.names()[w] in existing
                ]
        for start in range(0, len(paper_ids), 200):
            part = list(paper_ids[start : start + 200])
            for col in cols:
                with self.guard("deleting vectors", writing=True):
                    col.delete(where={"document_id": {"$in": part}})

    def drop(self, which: Sequence[Which] | None = None) -> None:
        """Delete these collections, by default all of them (``ingest --rebuild``, or a server collection that
        cannot be read); ``which``: the second model's alone, when an index starts taking its vectors."""
        client = self.client()
        chosen = list(self.names()) if which is None else list(which)
        for name in [self.names()[w] for w in chosen]:
            try:
                client.delete_collection(name)
            except Exception as exc:
                text = str(exc).lower()
                if "not exist" in text or "not found" in text:
                    continue  # not there: nothing to drop
                if is_disk_full(exc):
                    raise disk_full_error(self.settings.home, "dropping the vector store") from None
                raise VectorStoreError(
                    f"cannot delete collection {name!r} at {self.location} ({_first_line(exc)})"
                ) from None
        for w in chosen:
            self._cols.pop(w, None)

    def close(self) -> None:
        """Release the client (the embedded store's files and in-memory indexes)."""
        with self._open_lock:
            self._cols.clear()
            client, self._client = self._client, None
            if client is not None:
                try:
                    client.close()
                except Exception:  # an old chromadb without close(), or a server already gone
                    pass

    def reopen(self) -> None:
        """Drop what this process holds in memory, so the next read sees other processes' writes.

        An embedded Chroma keeps each collection's HNSW index in memory: vectors another
        process adds are counted but not found until the client is opened afresh.
        """
        self.close()

    def adopt(self, staged: VectorStore) -> None:
        """Take ``staged``'s collections as this store's, dropping this store's (``ingest --rebuild``'s swap).

        Embedded: the staging folder is renamed into place (one rename; the old folder is removed
        after). Server: this store's collections are deleted and the staged ones renamed to their names.
        """
        self.close()
        staged.close()
        if self.server:
            client = self.client()
            self.drop()
            mine = self.names()
            with self.guard("renaming the rebuilt collections"):
                present = {getattr(c, "name", c) for c in client.list_collections()}
                for which, name in staged.names().items():
                    if name in present:
                        client.get_collection(name, embedding_function=None).modify(name=mine[which])
            self._cols.clear()
            return
        self._forget_system()
        staged._forget_system()
        src, dest = staged.settings.in_home("chroma"), self.settings.in_home("chroma")
        old = staged.settings.in_home("replaced-chroma")
        if dest.exists():
            os.replace(dest, old)
        if src.exists():
            os.replace(src, dest)
        shutil.rmtree(old, ignore_errors=True)

    def move_aside(self) -> str:
        """Set an unreadable store aside so a fresh one can be built; returns what was done, for the user.

        Embedded: the folder is renamed (``chroma.damaged-<time>``), never deleted, in case
        the user wants it. Server: its collections are deleted (the server's files are not ours).
        """
        if self.server:
            self.client()
            self.drop()
            return f"deleted the unreadable collections on {self.location}"
        self.close()
        self._forget_system()
        src = self.settings.in_home("chroma")
        dest = aside_name(src)
        if src.exists():
            os.replace(src, dest)
        return f"moved the unreadable vector store aside to {dest}"
