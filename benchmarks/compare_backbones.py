"""Flat and graph backbones, untrained and pretrained under the same time budget, on one table.

Rows: the flat all-MiniLM-L6-v2 (FirstP, no training); flat + ``simcse``; flat + ``docsplit`` (DocSplit /
SimDE: sentence halves, cosine / 0.05, + 0.1 x MLM); graphdoc untrained (the same encoder, mean of passages
through zero-initialised GAT layers); graphdoc + ``half``; graphdoc + ``docsplit`` (each sentence half
chunked into its own graph). Every pretraining run is ``graphdoc pretrain`` in a subprocess on the same
local corpus (20 Newsgroups train sample, the Wikipedia sample, QMSum train meetings, each cut to its first
``--train-passages`` passages) for the same wall-clock budget (``pretrain.max_seconds``) on this CPU: flat
models train their encoder (they are nothing else), graph models keep it frozen and pay for encoding their
training passages inside the budget (a cold passage cache per run). Columns:

* 20 Newsgroups test clustering (k-means, k = 20, L2-normalised vectors): NMI and purity, mean of seeds;
* a linear probe (logistic regression on L2-normalised document vectors) on 20 Newsgroups: accuracy and
  macro-F1 trained on a stratified train sample, and 5-shot (5 documents per class) over 10 draws;
* QMSum val retrieval: nDCG@10 of the val queries over the val meetings (cosine, document vectors).

MiniLM encodes ~10-15 passages/s and trains far slower on a 2-core CPU, so every size is an option; the
defaults take about 30 minutes there. Longformer and BERT-base rows are GPU-scale (graphdoc/configs/docsplit-*.yaml).

    python benchmarks/compare_backbones.py               # writes docs/compare_backbones.md

The report goes between the benchmark markers of ``--output``; the notes around them are kept.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch
import yaml
from doc_blocks import write_block
from finetune import peak_rss_mib
from pretrain import (WIKI, clustering, cut_for_training, encode_many, graph_vectors, log, ndcg10, normalize,
                      passage_vectors, qmsum, read_jsonl_gz, require_data, run_pretrain, stratified, write_jsonl,
                      write_yaml)

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data"
#: row -> (backbone, pretraining objective or None)
ROWS = {"flat MiniLM (no training)": ("flat", None), "flat + simcse": ("flat", "simcse"),
        "flat + docsplit": ("flat", "docsplit"), "graphdoc untrained": ("graph", None),
        "graphdoc + half": ("graph", "half"), "graphdoc + docsplit split": ("graph", "docsplit")}
BASE_CONFIGS = {"flat": "docsplit-minilm.yaml", "graph": "pretrain-default.yaml"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    p.add_argument("--work-dir", type=Path, default=Path("/tmp/graphdoc-compare-bench"),
                   help="evaluation passage cache, samples and training runs")
    p.add_argument("--budget", type=float, default=240.0, help="seconds of training loop per pretraining row")
    p.add_argument("--news-test", type=int, default=400, help="20news test documents (stratified)")
    p.add_argument("--probe-train", type=int, default=400, help="20news train documents for the probe (stratified)")
    p.add_argument("--eval-passages", type=int, default=3, help="passages per 20news document (graph rows)")
    p.add_argument("--qmsum-distractors", type=int, default=0, help="train meetings added to the 35 val ones")
    p.add_argument("--qmsum-passages", type=int, default=16, help="passages per QMSum meeting (graph rows)")
    p.add_argument("--train-news", type=int, default=600, help="20news train documents in the training corpus")
    p.add_argument("--train-passages", type=int, default=4, help="training documents cut to their first N passages")
    p.add_argument("--flat-batch", type=int, default=8, help="documents per step of the flat runs")
    p.add_argument("--graph-batch", type=int, default=32, help="documents per step of the graph runs")
    p.add_argument("--schedule-steps", type=int, default=10000,
                   help="max_steps of every run: its linear decay is that long, so the budget stops it first")
    p.add_argument("--seeds", type=int, default=5, help="k-means seeds")
    p.add_argument("--shots", type=int, default=5)
    p.add_argument("--repeats", type=int, default=10, help="few-shot draws")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0, help="sampling seed")
    p.add_argument("--output", type=Path, default=ROOT / "docs" / "compare_backbones.md")
    return p.parse_args(argv)


# ------------------------------------------------------------------ data
def prepare_data(args, work: Path, model) -> dict:
    """Samples to evaluate on, and the training corpus (as JSONL files cut to ``train_passages``)."""
    from graphdoc.corpus import read_corpus
    from graphdoc.documents import Document

    news_train = read_jsonl_gz(args.data_dir / "20news" / "train.jsonl.gz")
    test = stratified(read_jsonl_gz(args.data_dir / "20news" / "test.jsonl.gz"), args.news_test, args.seed)
    probe = stratified(news_train, args.probe_train, args.seed)
    queries, qrels, qm_corpus, qm_train = qmsum(args.data_dir, args.qmsum_distractors, args.seed)
    training = {"news_train": [Document.from_dict(r) for r in stratified(news_train, args.train_news, args.seed)],
                "wiki": list(read_corpus(args.data_dir / WIKI)),
                "qmsum_train": [Document.from_dict(r) for r in qm_train]}
    sources = [str(write_jsonl(cut_for_training(model, docs, args.train_passages)[0], work / f"{name}.jsonl"))
               for name, docs in training.items()]
    sizes = {name: len(docs) for name, docs in training.items()}
    log(f"20news test {len(test)}, probe train {len(probe)}; QMSum {len(qm_corpus)} meetings, {len(queries)} "
        f"queries; training corpus {sizes}")
    return {"test": test, "probe": probe, "queries": queries, "qrels": qrels, "qm_corpus": qm_corpus,
            "sources": sources, "train_sizes": sizes}


# ------------------------------------------------------------------ vectors
def flat_vectors(model, cache, d: dict) -> dict[str, torch.Tensor]:
    """FirstP vectors (as ``FlatEncoder.encode`` gives them) of every evaluation text, through ``cache``."""
    from graphdoc.documents import Document

    def firstp(records):
        texts = [model.first_input(Document.from_dict(r)) for r in records]
        return encode_many(cache, model.passage_encoder.tokenize(texts, truncate=True))

    return {"test": firstp(d["test"]), "probe": firstp(d["probe"]), "qm": firstp(d["qm_corpus"]),
            "queries": query_vectors(model, cache, d)}


def query_vectors(model, cache, d: dict) -> torch.Tensor:
    return encode_many(cache, [model.prepare_query(t).token_ids[0] for t in d["queries"].values()])


def graph_inputs(args, model, cache, d: dict) -> dict:
    """Passage vectors (frozen encoder, through ``cache``) of every evaluation document, and query vectors."""
    return {"test": passage_vectors(model, cache, d["test"], args.eval_passages),
            "probe": passage_vectors(model, cache, d["probe"], args.eval_passages),
            "qm": passage_vectors(model, cache, d["qm_corpus"], args.qmsum_passages),
            "queries": query_vectors(model, cache, d)}


def graph_row(model, inputs: dict) -> dict[str, torch.Tensor]:
    """Document vectors of ``model``'s graph layers; a query is a single-node graph."""
    out = {k: graph_vectors(model, inputs[k]) for k in ("test", "probe", "qm")}
    out["queries"] = graph_vectors(model, [(x[None], [0]) for x in inputs["queries"]])
    return out


# ------------------------------------------------------------------ metrics
def linear_probe(train_x: torch.Tensor, train_y: list[str], test_x: torch.Tensor, test_y: list[str], shots: int,
                 repeats: int, seed: int) -> dict:
    """Logistic regression on normalised vectors: trained on all of ``train`` and on ``shots`` per class."""
    from sklearn.linear_model import LogisticRegression

    from graphdoc.finetune.classification import accuracy, macro_f1
    from graphdoc.finetune.fewshot import sample_per_class

    xtr, xte = normalize(train_x), normalize(test_x)

    def fit(rows: list[int]) -> dict[str, float]:
        clf = LogisticRegression(max_iter=1000).fit(xtr[rows], [train_y[i] for i in rows])
        predicted = clf.predict(xte).tolist()
        return {"accuracy": accuracy(test_y, predicted), "macro_f1": macro_f1(test_y, predicted)}

    out = {f"probe {m}": v for m, v in fit(list(range(len(train_y)))).items()}
    labels = {f"{i:06d}": y for i, y in enumerate(train_y)}
    draws = [fit([int(k) for k in sample_per_class(labels, shots, seed + r)]) for r in range(repeats)]
    for m in ("accuracy", "macro_f1"):
        out[f"few {m}"] = float(np.mean([x[m] for x in draws]))
        out[f"few {m} sd"] = float(np.std([x[m] for x in draws]))
    return out


def evaluate(args, vectors: dict[str, torch.Tensor], d: dict) -> dict:
    test_y, probe_y = [r["label"] for r in d["test"]], [r["label"] for r in d["probe"]]
    scores = clustering(vectors["test"], test_y, args.seeds)
    scores.update(linear_probe(vectors["probe"], probe_y, vectors["test"], test_y, args.shots, args.repeats, args.seed))
    sims = normalize(vectors["queries"]) @ normalize(vectors["qm"]).T
    scores["nDCG@10"] = ndcg10(sims, list(d["queries"]), [r["_id"] for r in d["qm_corpus"]], d["qrels"])
    return scores


# ------------------------------------------------------------------ training
def train_row(args, work: Path, backbone: str, objective: str, sources: list[str]) -> dict:
    """One budgeted ``graphdoc pretrain`` run from the shipped config of ``backbone``; a cold cache per run."""
    import shutil

    config = yaml.safe_load((ROOT / "graphdoc" / "configs" / BASE_CONFIGS[backbone]).read_text(encoding="utf-8"))
    batch = args.flat_batch if backbone == "flat" else args.graph_batch
    config["pretrain"].update(objective=objective, mlm_weight=None, batch_size=batch, max_steps=args.schedule_steps,
                              max_seconds=args.budget, warmup_ratio=0.0, epochs=args.schedule_steps,
                              max_passages=args.train_passages, shuffle_buffer=100000, checkpoint_every=10**6,
                              log_every=1, seed=args.seed)
    name = f"{backbone}-{objective}"
    cache = work / "train-cache" / name
    shutil.rmtree(cache, ignore_errors=True)  # the run pays for its own passage encoding
    summary = run_pretrain(name, write_yaml(work / f"{name}.yaml", config), work / "runs" / name, sources, cache,
                           args.threads)
    summary["config"] = config["pretrain"]
    return summary


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    require_data(args.data_dir)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(args.threads)
    from graphdoc.encoder import GraphDocEncoder
    from graphdoc.flat_encoder import FlatEncoder
    from graphdoc.training.cache import PassageVectorCache

    started = time.perf_counter()
    work = args.work_dir
    work.mkdir(parents=True, exist_ok=True)
    graph = GraphDocEncoder.from_pretrained(device="cpu")
    d = prepare_data(args, work, graph)
    runs = {row: train_row(args, work, backbone, objective, d["sources"])
            for row, (backbone, objective) in ROWS.items() if objective}
    t0 = time.perf_counter()
    results, encode = {}, {}
    cache = PassageVectorCache(work / "eval-cache", graph.passage_encoder)
    inputs = graph_inputs(args, graph, cache, d)
    encode["graph passages (shared by the graph rows)"] = time.perf_counter() - t0
    for row, (backbone, objective) in ROWS.items():
        t0 = time.perf_counter()
        folder = work / "runs" / f"{backbone}-{objective}" / "model"
        if backbone == "graph":
            model = graph if objective is None else GraphDocEncoder.from_pretrained(folder, device="cpu")
            vectors = graph_row(model, inputs)
        else:
            model = FlatEncoder.from_pretrained(None if objective is None else folder, device="cpu")
            vectors = flat_vectors(model, PassageVectorCache(work / "eval-cache", model.passage_encoder), d)
            encode[row] = time.perf_counter() - t0
        results[row] = evaluate(args, vectors, d)
        log(f"{row}: " + ", ".join(f"{k} {v:.3f}" for k, v in results[row].items() if not k.endswith("sd")))
    report = render(args, d, runs, results, encode, time.perf_counter() - started)
    write_block(args.output, report)
    print(report)
    return 0


# ------------------------------------------------------------------ report
def table(results: dict, shots: int) -> list[str]:
    lines = [f"| model | NMI | purity | probe acc | probe macro-F1 | {shots}-shot acc | {shots}-shot macro-F1 | "
             "QMSum nDCG@10 |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for row, r in results.items():
        lines.append(f"| {row} | {r['NMI']:.3f} | {r['purity']:.3f} | {100 * r['probe accuracy']:.1f} | "
                     f"{100 * r['probe macro_f1']:.1f} | {100 * r['few accuracy']:.1f} ± "
                     f"{100 * r['few accuracy sd']:.1f} | {100 * r['few macro_f1']:.1f} ± "
                     f"{100 * r['few macro_f1 sd']:.1f} | {r['nDCG@10']:.3f} |")
    return lines


def reached(runs: dict, schedule_steps: int) -> str:
    """Whether any run got to the end of the schedule (the budget is meant to stop every run before it)."""
    done = [row for row, r in runs.items() if r["steps"] >= schedule_steps]
    return f"reached by {', '.join(done)}" if done else "which no run reaches"


def render(args, d: dict, runs: dict, results: dict, encode: dict, seconds: float) -> str:
    import transformers

    import graphdoc

    command = " ".join(["python benchmarks/compare_backbones.py", *sys.argv[1:]])
    lines = ["# Flat and graph backbones under the same pretraining budget", "",
             f"Measured by `{command}` in {seconds / 60:.0f} min on {platform.processor() or platform.machine()} "
             f"({os.cpu_count()} cores shared with other jobs, torch threads {args.threads}, CPU only); graphdoc "
             f"{graphdoc.__version__}, torch {torch.__version__}, transformers {transformers.__version__}; peak "
             f"memory of the evaluating process {peak_rss_mib():.0f} MiB.", ""]
    lines += table(results, args.shots)
    lines += ["", "## Setup", "",
              "- encoder: the built-in all-MiniLM-L6-v2 (mean pooling, normalised; FirstP = title and text "
              "truncated to its 256 tokens) for every row; graph rows add its 2 residual GAT layers (2 heads)",
              f"- 20 Newsgroups: {len(d['test'])} test documents (stratified) clustered with k-means (k = 20, "
              f"{args.seeds} seeds, mean NMI / purity) and probed; the probe (scikit-learn logistic regression, "
              f"L2-normalised vectors) trains on {len(d['probe'])} train documents (stratified), and {args.shots} "
              f"per class over {args.repeats} draws (mean ± sd); graph rows read the first {args.eval_passages} "
              "passages of each document",
              f"- QMSum val: {len(d['queries'])} queries over {len(d['qm_corpus'])} meetings, cosine between the "
              f"query vector and the document vector; graph rows read each meeting's first {args.qmsum_passages} "
              "passages, flat rows its first 256 tokens",
              f"- training corpus (every pretraining row): 20news train {d['train_sizes']['news_train']} "
              f"(stratified), Wikipedia sample {d['train_sizes']['wiki']} articles, QMSum train meetings "
              f"{d['train_sizes']['qmsum_train']}, each cut to its first {args.train_passages} passages, "
              "shuffled together",
              f"- budget: {args.budget:.0f} s of training loop per row (`pretrain.max_seconds`), constant learning "
              f"rate (no warm-up; the linear decay spans {args.schedule_steps} steps, "
              f"{reached(runs, args.schedule_steps)}). Flat "
              "rows train the encoder (graphdoc/configs/docsplit-minilm.yaml: AdamW 5e-5, cosine / 0.05, "
              f"{args.flat_batch} documents per step; docsplit adds 0.1 x MLM through a freshly initialised "
              "head, MiniLM having none); graph rows keep it frozen (graphdoc/configs/pretrain-default.yaml: the GAT "
              f"layers at 1e-3, cosine / 0.2, {args.graph_batch} documents per step) and encode their training "
              "passages inside the budget, from a cold cache (docsplit halves are new passages every epoch)",
              "", "## Pretraining runs", "",
              "| row | steps | documents | epochs | loss (last) | MLM loss (last) | loop s | process wall s | "
              "peak RSS MiB |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row, r in runs.items():
        mlm = f"{r['mlm_loss']:.3f}" if r.get("mlm_loss") is not None else "-"
        lines.append(f"| {row} | {r['steps']} | {r['documents_used']} | {r['epoch'] + 1} | {r['loss']:.3f} | {mlm} | "
                     f"{r['loop_seconds']:.0f} | {r['wall_s']:.0f} | {r['peak_rss_mib']:.0f} |")
    lines += ["", "Documents: training documents seen (one batch per step); epochs: the epoch the run stopped in. "
              "Process wall s adds loading the model (and the MLM head) to the loop.", "",
              "Evaluation encoding (frozen vectors through a passage cache; trained flat encoders encode "
              "everything again): " + "; ".join(f"{k} {v:.0f} s" for k, v in encode.items()) + ".", "",
              "Longformer (graphdoc/configs/docsplit-longformer.yaml, FirstP-4096) and BERT-base "
              "(graphdoc/configs/docsplit-bert.yaml) rows are GPU-scale and not measured here; the tests run a tiny "
              "random Longformer through a docsplit step on the CPU.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
