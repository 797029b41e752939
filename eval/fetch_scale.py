"""The scale benchmark of issue 27: a whole conference fetched from the OpenReview stand-in and ingested.

    .venv/bin/python eval/fetch_scale.py --notes 20000 [--embed-backend onnx] [--json eval/results/fetch-scale.json]

The stand-in (tests/fetch_stub.py's ``OpenReviewStub``) holds ``--notes`` API v2 notes of venue
``BENCH.cc/2026/Conference``, each one a synthetic abstract (``rag_papers.synth``, 150 to 300 words) in the shape
of tests/fetch/openreview-notes.json. ``rag-papers fetch openreview`` runs as its own process into a fresh data
directory, as a user runs it, at the API's own pace (one request every 0.5 s, 1000 notes a page); the script prints
the fetch time, the ingest time, the wall time and the process's peak RSS (its own high-water mark, VmHWM, read
while it runs; ru_maxrss of the children as a fallback).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from fetch_stub import OpenReviewStub  # noqa: E402 - the tests' stand-in, from a source checkout

from rag_papers.synth import synth_record  # noqa: E402

VENUE = "BENCH.cc/2026/Conference"


def note(i: int) -> dict[str, Any]:
    """Synthetic record ``i`` as an OpenReview API v2 note of the benchmark venue."""
    rec = synth_record(i)
    nid = f"B{i:09d}"
    cdate = 1758672000000 + i * 1000
    return {
        "id": nid,
        "forum": nid,
        "number": i + 1,
        "cdate": cdate,
        "tcdate": cdate,
        "mdate": cdate,
        "tmdate": cdate,
        "version": 2,
        "invitations": [f"{VENUE}/-/Submission"],
        "domain": VENUE,
        "readers": ["everyone"],
        "writers": [VENUE],
        "signatures": [f"{VENUE}/Submission{i + 1}/Authors"],
        "content": {
            "title": {"value": rec["title"]},
            "authors": {"value": rec.get("authors") or ["Anonymous"]},
            "abstract": {"value": rec["abstract"]},
            "venue": {"value": "BENCH 2026 Poster"},
            "venueid": {"value": VENUE},
        },
    }


def vm_hwm_mb(pid: int) -> float | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    m = re.search(r"VmHWM:\s+(\d+) kB", text)
    return int(m.group(1)) / 1024 if m else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--notes", type=int, default=20000, help="notes the stand-in holds (default: 20000)")
    ap.add_argument("--embed-backend", default=None, help="onnx, onnx-int8 or torch (default: the setting's)")
    ap.add_argument("--json", type=Path, help="also write the figures here (default: print only)")
    args = ap.parse_args()

    load_at_start = round(os.getloadavg()[0], 1)
    t0 = time.perf_counter()
    notes = [note(i) for i in range(args.notes)]
    print(f"{len(notes):,} notes made in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    with OpenReviewStub(notes) as stub, tempfile.TemporaryDirectory(prefix="fetch-scale-") as home:
        env = {**os.environ, "RAG_PAPERS_HOME": home, "RAG_PAPERS_OPENREVIEW_URL": stub.url}
        if args.embed_backend:
            env["RAG_PAPERS_EMBED_BACKEND"] = args.embed_backend
        cmd = [str(Path(sys.executable).parent / "rag-papers"), "fetch", "openreview", VENUE, "--no-progress"]
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        peak = [0.0]

        def watch() -> None:
            while proc.poll() is None:
                peak[0] = max(peak[0], vm_hwm_mb(proc.pid) or 0.0)
                time.sleep(0.5)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        out, err = proc.communicate()
        wall = time.perf_counter() - start
        watcher.join()
        children_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        if proc.returncode != 0:
            print(err, file=sys.stderr)
            return proc.returncode
        fetched = re.search(r"fetched (\d+) records in (\d+) pages? \((\d+) requests?, ([\d.]+) s", err)
        ingested = re.search(r"(\d+) added.*?; (\d+) papers indexed \((\d+) new chunks\) in ([\d.]+) s", out)
        assert fetched and ingested, (out, err)
        result = {
            "notes": args.notes,
            "fetched": int(fetched.group(1)),
            "pages": int(fetched.group(2)),
            "requests": int(fetched.group(3)),
            "fetch_s": float(fetched.group(4)),
            "papers": int(ingested.group(2)),
            "chunks": int(ingested.group(3)),
            "ingest_s": float(ingested.group(4)),
            "wall_s": round(wall, 1),
            "peak_rss_mb": round(peak[0] or children_mb, 1),
            "embed_backend": args.embed_backend or "onnx (default)",
            "cpus": os.cpu_count(),
            "load_avg_at_start": load_at_start,
            "stand_in_requests": len(stub.requests),
        }
    print(json.dumps(result, indent=1))
    print(
        f"{result['fetched']:,} notes fetched in {result['fetch_s']:.1f} s ({result['pages']} pages), "
        f"{result['papers']:,} papers ingested in {result['ingest_s']:.1f} s ({result['papers'] / result['ingest_s']:.1f}/s); "
        f"wall {result['wall_s'] / 60:.1f} min, peak RSS {result['peak_rss_mb']:.0f} MB",
        file=sys.stderr,
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
