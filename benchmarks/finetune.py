"""Supervised fine-tuning of the default model (frozen encoder, cached passage vectors): SciFact, QMSum, 20news.

MiniLM encodes ~20 passages/s on the 2-core CPU here, so every run trains the graph layers (and a head)
over cached passage vectors. The cache is seeded from existing *untrained* default-model indexes: their
graph layers are the identity, so their passage node vectors are the encoder's own vectors (checked on a
few documents against the encoder). Queries are encoded (short). 20 Newsgroups reuses the pretraining
benchmark's cache shards where the keys match.

* SciFact: fine-tune on the train queries (a seeded 10% held out as dev to keep the best epoch), evaluate
  on test: dense and hybrid nDCG@10 / R@100 against BM25 and the untuned model.
* QMSum: train queries (10% held out as dev), evaluate on val; section graph (the index's) and full graph.
  Hard negatives only from the train queries' meetings (``--qmsum-negative-pool judged``): QMSum's val
  queries ask about other meetings, which would otherwise only ever be negatives in training.
* 20 Newsgroups: stratified subsamples, first passages of each document; a linear head on the document
  node (graph layers trained) against the flat encoder (FirstP) and the untrained mean of passages with
  the same head; full subsample and few-shot 5 / 10 per class over 10 seeds.
* news-supcon: on the same kind of sample, the graph layers trained with cross-entropy against supervised
  contrastive training (objective ``supcon``, the head a probe); test accuracy / macro-F1 and k-means
  (k = 20) NMI of the test documents' vectors before and after.

    python benchmarks/finetune.py --parts scifact,qmsum,news     # writes WORK_DIR/report.md
    python benchmarks/finetune.py --parts news-supcon --news-train 600 --news-test 400
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import gzip
import json
import platform
import shutil
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import torch
from graphdoc.config import NEGATIVE_POOLS
from pretrain import clustering, require_data, stratified  # the pretraining benchmark's sampler: its cache matches

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data"
MEASURES = ["nDCG@10", "R@100"]
SHOTS = (5, 10)  # few-shot training documents per class, part news
_QMSUM = ("qmsum/corpus.jsonl.gz", "qmsum/queries.jsonl", "qmsum/qrels/train.tsv", "qmsum/qrels/val.tsv")
_NEWS = ("20news/train.jsonl.gz", "20news/test.jsonl.gz")
#: part -> (the files of --data-dir it reads, the option naming the index it starts from or None)
PARTS = {"scifact": (("scifact/corpus.jsonl.gz", "scifact/queries.jsonl", "scifact/qrels/train.tsv",
                      "scifact/qrels/test.tsv"), "scifact_index"),
         "qmsum": (_QMSUM, "qmsum_index"), "qmsum-full": (_QMSUM, "qmsum_index"),
         "news": (_NEWS, None), "news-supcon": (_NEWS, None)}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--parts", default="scifact,qmsum,news,qmsum-full",
                   help=f"comma-separated, run in this order; of: {', '.join(PARTS)}")
    p.add_argument("--data-dir", type=Path, default=DEFAULT_DATA, help="holds scifact/, qmsum/ and 20news/")
    p.add_argument("--work-dir", type=Path, default=Path("/tmp/graphdoc-finetune-bench"))
    p.add_argument("--scifact-index", type=Path, default=Path("/tmp/sfidx"))
    p.add_argument("--qmsum-index", type=Path, default=Path("/tmp/qmidx"))
    p.add_argument("--pretrain-cache", type=Path, default=Path("/tmp/graphdoc-pretrain-bench/cache"))
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--hard-negatives", type=int, default=4)
    p.add_argument("--qmsum-epochs", type=int, default=4)
    p.add_argument("--qmsum-hard-negatives", type=int, default=2)
    p.add_argument("--qmsum-init", type=Path, default=None, metavar="MODEL_DIR",
                   help="parts qmsum(-full): fine-tune from this saved graphdoc model (e.g. a `graphdoc pretrain` "
                        "output on the index's encoder) instead of the index's model; its untuned scores become "
                        "rows too")
    p.add_argument("--qmsum-negative-pool", choices=NEGATIVE_POOLS, default="judged",
                   help="part qmsum(-full): hard negatives from all meetings, or only from the training queries' "
                        "meetings (QMSum splits meetings between train and val queries: with corpus, the val "
                        "meetings are only ever negatives in training)")
    p.add_argument("--qmsum-full-epochs", type=int, default=2, help="part qmsum-full: the full graph costs ~5x")
    p.add_argument("--news-train", type=int, default=1000)
    p.add_argument("--news-test", type=int, default=800)
    p.add_argument("--news-passages", type=int, default=4)
    p.add_argument("--news-epochs", type=int, default=20)
    p.add_argument("--news-init", type=Path, default=None, metavar="MODEL_DIR",
                   help="part news: also start from this saved graphdoc model (e.g. a `graphdoc pretrain` output "
                        "on the same frozen encoder): its graph layers + head trained, and a head on its frozen vectors")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--news-seeds", type=int, default=1, help="part news: full-training-set runs per model (seeds 0..N-1)")
    p.add_argument("--supcon-temperature", type=float, default=0.1, help="part news-supcon")
    p.add_argument("--kmeans-seeds", type=int, default=5, help="part news-supcon: k-means restarts (NMI mean)")
    p.add_argument("--supcon-seeds", type=int, default=3, help="part news-supcon: training seeds per objective")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto",
                   help="passage encoder precision of the 20news parts, and of the ranking parts' index model "
                        "(the precision its index was built at) (bf16: about 1.7x as fast on CPUs with native "
                        "bfloat16; its vectors are cached apart from fp32 ones)")
    p.add_argument("--output", type=Path, default=None,
                   help="the report (default WORK_DIR/report.md; docs/finetune.md is written by hand from reports)")
    return p.parse_args(argv)


def log(message: str) -> None:
    print(time.strftime("%H:%M:%S"), message, flush=True)


def peak_rss_mib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ------------------------------------------------------------------ cache seeding from an index
def seed_from_index(index: Path, model, cache, docs_by_id: dict, check: int = 3):
    """Prepared documents in index order, their vectors written to the cache as one shard."""
    from graphdoc.device import autocast_dtype
    from graphdoc.fileio import atomic_write
    from graphdoc.retrieval.dense_searcher import DenseSearcher
    from graphdoc.training.cache import passage_key

    final = index / "final"
    ids = (final / "doc_ids.txt").read_text(encoding="utf-8").splitlines()
    ptr = np.load(final / "passage_ptr.npy")
    stored = json.loads((index / "manifest.json").read_text())
    vectors = DenseSearcher(final, stored["metric"], stored["faiss_factory"], device="cpu").passage_vectors
    cap = stored["model"]["chunker"]["max_passages"]
    prepared, keys, rows = [], [], []
    for i, doc_id in enumerate(ids):
        p = model.prepare(docs_by_id[doc_id], cap)
        if len(p.token_ids) != ptr[i + 1] - ptr[i]:
            raise SystemExit(f"{doc_id}: {len(p.token_ids)} passages here, {ptr[i + 1] - ptr[i]} in the index")
        prepared.append(p)
        keys += [passage_key(t) for t in p.token_ids]
        rows += list(range(ptr[i], ptr[i + 1]))
    for i in np.linspace(0, len(ids) - 1, check).astype(int):  # the index holds the encoder's vectors
        with torch.inference_mode():
            mine = cache.encoder.encode_ids(prepared[i].token_ids).float().numpy()
        diff = float(np.abs(mine - vectors[ptr[i]:ptr[i + 1]]).max())
        log(f"  check {ids[i]}: {len(mine)} passages, max |diff| {diff:.2e}")
        if diff > (1e-4 if autocast_dtype(torch.device("cpu"), model.passage_encoder.config.precision) is None
                   else 1e-2):  # bf16 vectors move with the batch they were encoded in
            raise SystemExit("index vectors differ from the encoder's (was the index built at another --precision?)")
    name = f"vectors-seed-{index.name}"
    if not (cache.folder / f"{name}.json").is_file():
        with atomic_write(cache.folder / f"{name}.npy", "wb") as h:
            np.save(h, np.ascontiguousarray(vectors[rows], dtype=np.float32), allow_pickle=False)
        with atomic_write(cache.folder / f"{name}.json", "w", encoding="utf-8") as h:
            json.dump({"keys": keys}, h)
    cache.refresh()
    return ids, prepared


def read_corpus_dict(path: Path) -> dict:
    from graphdoc.corpus import read_corpus

    return {d.id: d for d in read_corpus(path)}


def ranking_setup(args, index: Path, corpus: Path, queries: dict, name: str):
    from graphdoc.backbones import load_index_model
    from graphdoc.finetune.data import RankingData
    from graphdoc.finetune.inputs import GraphInputs, open_cache
    from graphdoc.retrieval.bm25 import BM25Index

    manifest = json.loads((index / "manifest.json").read_text())
    model = load_index_model(manifest["model"], device="cpu")
    model.passage_encoder.config.precision = args.precision  # the index's vectors: built at this precision
    cache = open_cache(model, True, args.work_dir / "cache", args.work_dir)
    t0, misses = time.perf_counter(), cache.misses
    ids, prepared = seed_from_index(index, model, cache, read_corpus_dict(corpus))
    docs = GraphInputs(model, cache)
    docs.add_prepared(prepared)
    q = GraphInputs(model, cache)
    q.add_queries(queries.items())
    log(f"{name}: {len(ids)} documents, {sum(len(p.token_ids) for p in prepared)} passages, {len(queries)} "
        f"queries; {cache.misses - misses} passages encoded in {time.perf_counter() - t0:.0f} s")
    bm25 = BM25Index.load(index / "final" / "bm25")
    return model, RankingData(docs, ids, q, dict(queries), bm25), manifest


def split_dev(qrels: dict, fraction: float = 0.1, seed: int = 0) -> tuple[dict, dict]:
    qids = sorted(qrels)
    dev = set(np.random.default_rng(seed).permutation(qids)[:max(1, int(len(qids) * fraction))].tolist())
    return {q: qrels[q] for q in qids if q not in dev}, {q: qrels[q] for q in qids if q in dev}


def scores(trainer, qrels: dict, alpha_qrels: dict | None = None) -> dict:
    """dense / hybrid (alpha 0.6 zscore) / hybrid with alpha tuned on ``alpha_qrels`` of the current weights."""
    from graphdoc.finetune.crossval import choose_alpha
    from graphdoc.retrieval.evaluation import evaluate
    from graphdoc.retrieval.fusion import FusionConfig

    out = trainer.rank(sorted(qrels))
    rows = {"dense": evaluate(out["dense"], qrels, MEASURES), "hybrid a=0.6": evaluate(out["hybrid"], qrels, MEASURES)}
    if alpha_qrels:
        parts = trainer.rank(sorted(alpha_qrels))["components"]
        alpha, _ = choose_alpha(parts, alpha_qrels, "zscore", "nDCG@10", prefer=0.6)  # ties: nearest 0.6
        run = out["components"].hybrid(FusionConfig(alpha=alpha, normalization="zscore"))
        rows[f"hybrid a={alpha} (tuned on dev)"] = evaluate(run, qrels, MEASURES)
    return rows


def ranking_task(args, name: str, index: Path, folder: Path, train_split: str, eval_split: str,
                 variants: list[tuple[str, str | None]], epochs: int, hard_negatives: int,
                 negative_pool: str = "corpus") -> dict:
    from graphdoc.corpus import read_qrels, read_queries
    from graphdoc.finetune.config import RankingConfig
    from graphdoc.finetune.ranking_trainer import RankingTrainer
    from graphdoc.retrieval.evaluation import evaluate

    queries = dict(read_queries(folder / "queries.jsonl"))
    train_all, test = read_qrels(folder, train_split), read_qrels(folder, eval_split)
    queries = {q: t for q, t in queries.items() if q in train_all or q in test}
    model, data, manifest = ranking_setup(args, index, folder / "corpus.jsonl.gz", queries, name)
    train, dev = split_dev(train_all)
    cfg = RankingConfig(epochs=epochs, lr=args.lr, batch_size=args.batch_size,
                        hard_negatives=hard_negatives, negative_pool=negative_pool, eval_mode="hybrid",
                        temperature=0.05,
                        max_passages=manifest["model"]["chunker"]["max_passages"], seed=0)
    result = {"sizes": {"documents": len(data.doc_ids), "train_queries": len(train), "dev_queries": len(dev),
                        "eval_queries": len(test)}, "rows": {}, "runs": {}}
    untuned = RankingTrainer(model, cfg, data, train, args.work_dir / f"{name}-untuned")
    ranker = data.ranker(cfg.passage_weight, cfg.similarity)
    result["rows"]["BM25"] = evaluate(ranker.bm25_run(sorted(test), [queries[q] for q in sorted(test)]), test, MEASURES)
    for row, value in scores(untuned, test).items():
        result["rows"][f"untuned {row}"] = value
    if name == "qmsum" and args.qmsum_init is not None:
        label = args.qmsum_init.parent.name if args.qmsum_init.name == "model" else args.qmsum_init.name
        pretrained = RankingTrainer(_start_from(args.qmsum_init, model), cfg, data, train,
                                    args.work_dir / f"{name}-pretrained")
        for row, value in scores(pretrained, test).items():
            result["rows"][f"pretrained only ({label}) {row}"] = value
        variants = [(f"{graph} from {label}", graph_type) for graph, graph_type in variants]
        data.set_model(model)
    log(f"{name} untuned: {json.dumps(result['rows'])}")
    for label, graph_type in variants:
        if name == "qmsum" and args.qmsum_init is not None:
            start = _start_from(args.qmsum_init, model, graph_type)
        else:
            start = model if graph_type is None else _with_graph(model, graph_type)
        out = args.work_dir / f"{name}-{label.replace(' ', '_')}"
        shutil.rmtree(out, ignore_errors=True)
        t0 = time.perf_counter()
        trainer = RankingTrainer(copy.deepcopy(start), cfg, data, train, out, dev)
        summary = trainer.train()
        log(f"{name} {label}: trained in {time.perf_counter() - t0:.0f} s, best epoch {summary['best_epoch']}, "
            f"dev {[round(h['dev'], 4) for h in summary['history']]}")
        best = type(start).from_pretrained(out / "model")
        best.passage_encoder.requires_grad_(False)
        trainer.model = best
        data.set_model(best)
        for row, value in scores(trainer, test, dev).items():
            result["rows"][f"fine-tuned {label} {row}"] = value
        result["runs"][label] = {k: summary[k] for k in ("wall_s", "peak_rss_mib", "best_epoch", "steps", "pairs")}
        result["runs"][label]["history"] = summary["history"]
        log(f"{name} {label}: {json.dumps({k: v for k, v in result['rows'].items() if label in k})}")
    result["config"] = dataclasses.asdict(cfg)
    return result


def _with_graph(model, graph_type: str):
    from graphdoc.encoder import GraphDocEncoder

    config = dataclasses.replace(model.config, graph=dataclasses.replace(model.config.graph, graph_type=graph_type))
    return GraphDocEncoder(model.passage_encoder, config)


def _start_from(path: Path, index_model, graph_type: str | None = None):
    """The saved model at ``path`` with ``index_model``'s chunker and ``graph_type`` (``None``: the index
    model's), its passage encoder ``index_model``'s (the prepared documents and cached vectors are the
    index's): the two encoders must compute the same vectors."""
    from graphdoc.encoder import GraphDocEncoder
    from graphdoc.training.cache import encoder_identity

    init = GraphDocEncoder.from_pretrained(path, device="cpu")
    same = [{k: v for k, v in encoder_identity(m.passage_encoder).items() if k not in ("model", "autocast")}
            for m in (init, index_model)]
    if same[0] != same[1]:  # the start runs on the index model's passage encoder (and precision)
        raise SystemExit(f"{path}: its passage encoder is not the index's; the cached passage vectors would not apply")
    graph = dataclasses.replace(init.config.graph, graph_type=graph_type or index_model.config.graph.graph_type)
    config = dataclasses.replace(init.config, chunker=index_model.config.chunker, graph=graph)
    start = GraphDocEncoder(index_model.passage_encoder, config)
    start.load_state_dict(init.state_dict())
    start.passage_encoder.requires_grad_(False)
    return start


# ------------------------------------------------------------------ 20 Newsgroups
def news_sample(args) -> tuple[list, list]:
    """The stratified train and test documents, ids prefixed with their split."""
    from graphdoc.documents import Document

    def read(split, n):
        with gzip.open(args.data_dir / "20news" / f"{split}.jsonl.gz", "rt", encoding="utf-8") as h:
            recs = stratified([json.loads(line) for line in h], n, 0)
        return [dataclasses.replace(Document.from_dict(r), id=f"{split}/{r['_id']}") for r in recs]

    return read("train", args.news_train), read("test", args.news_test)


def news_config(args):
    """The default model's config at the ``--precision`` asked for."""
    from graphdoc.config import ModelConfig

    config = ModelConfig()
    return dataclasses.replace(config, passage_encoder=dataclasses.replace(config.passage_encoder,
                                                                           precision=args.precision))


def news_cache(args, model):
    """The passage cache of the frozen default model, seeded with the pretraining benchmark's shards."""
    from graphdoc.finetune.inputs import open_cache

    cache = open_cache(model, True, args.work_dir / "cache", args.work_dir)
    for shard in sorted(args.pretrain_cache.glob(f"{cache.folder.name}/vectors-*")):
        if not (cache.folder / shard.name).exists():
            shutil.copy(shard, cache.folder / shard.name)
    cache.refresh()
    return cache


def news_split(train_keys: list[str]) -> tuple[list[str], list[str]]:
    """90% to fit, a seeded 10% dev set that picks the best epoch."""
    shuffled = np.random.default_rng(0).permutation(train_keys).tolist()  # the files are sorted by label
    return sorted(shuffled[len(shuffled) // 10:]), sorted(shuffled[:len(shuffled) // 10])


def news_task(args) -> dict:
    from graphdoc.encoder import GraphDocEncoder
    from graphdoc.finetune.classification import (
        ClassificationTrainer,
        FixedFeatures,
        LabelledInputs,
        evaluate_classifier,
        prepare_inputs,
    )
    from graphdoc.finetune.classifier import DocumentClassifier
    from graphdoc.finetune.config import ClassificationConfig
    from graphdoc.finetune.fewshot import few_shot
    from graphdoc.training.cache import encoder_identity

    train_docs, test_docs = news_sample(args)
    per_class = Counter(str(d.metadata["label"]) for d in train_docs)
    fewest = min(per_class.values(), default=0)
    if fewest < max(SHOTS):  # few_shot would fail after the full-training runs
        raise SystemExit(f"part news: --news-train {args.news_train} leaves a class with {fewest} training "
                         f"documents; the {max(SHOTS)}-shot runs need {max(SHOTS)} of each class")
    model = GraphDocEncoder.from_pretrained(None, device="cpu", config=news_config(args))
    cache = news_cache(args, model)
    t0, misses = time.perf_counter(), cache.misses
    docs = train_docs + test_docs
    data = prepare_inputs(model, docs, cache, args.news_passages)
    prompt = model.passage_encoder.passage_prompt  # a checkpoint's passage prompt (none for the default model)
    firstp_ids = model.passage_encoder.tokenize([prompt + f"{d.title} {d.text}".strip() for d in docs], truncate=True)
    firstp = torch.cat([cache.encode(firstp_ids[i:i + 256]).cpu() for i in range(0, len(docs), 256)])
    cache.flush()
    log(f"20news: {len(train_docs)} train, {len(test_docs)} test; {cache.misses - misses} passages encoded "
        f"in {time.perf_counter() - t0:.0f} s ({cache.hits} cache hits)")
    meanp = model.__class__.from_pretrained(None, device="cpu", config=news_config(args))
    meanp.requires_grad_(False)

    def frozen_vectors(encoder) -> LabelledInputs:
        data.set_model(encoder)
        vectors = dict(zip(data.inputs.ids(), data.inputs.embed_all(data.inputs.ids()).document_embeddings))
        data.set_model(model)
        return LabelledInputs(FixedFeatures(meanp, vectors), data.labels)

    # name -> (inputs, the encoder training starts from)
    variants = {"graph (GAT layers + head trained)": (data, model),
                "flat FirstP + head": (LabelledInputs(FixedFeatures(meanp, {d.id: v for d, v in zip(docs, firstp)}),
                                                      data.labels), meanp),
                "flat MeanP (untrained graph) + head": (frozen_vectors(model), meanp)}
    if args.news_init is not None:
        init = GraphDocEncoder.from_pretrained(args.news_init, device="cpu")
        same = [{k: v for k, v in encoder_identity(m.passage_encoder).items() if k != "model"} for m in (init, model)]
        if same[0] != same[1]:
            raise SystemExit(f"--news-init {args.news_init}: its passage encoder is not the default model's "
                             f"at --precision {args.precision}; the cached passage vectors would not apply")
        label = args.news_init.parent.name if args.news_init.name == "model" else args.news_init.name
        variants[f"graph from {label} (GAT layers + head trained)"] = (data, init)
        variants[f"{label} vectors (frozen) + head"] = (frozen_vectors(init), meanp)
    train_keys = [d.id for d in train_docs]
    fit_keys, dev_keys = news_split(train_keys)
    test_keys = [d.id for d in test_docs]
    labels = sorted({data.labels[k] for k in train_keys})
    cfg = ClassificationConfig(epochs=args.news_epochs, lr=1e-3, head_lr=1e-2, batch_size=32, dropout=0.1,
                               max_passages=args.news_passages, seed=0)
    result = {"sizes": {"train": len(fit_keys), "dev": len(dev_keys), "test": len(test_keys),
                        "passages": args.news_passages, "classes": len(labels), "precision": args.precision},
              "rows": {}}
    for name, (inputs, encoder) in variants.items():
        out = args.work_dir / f"news-{len(result['rows'])}"
        shutil.rmtree(out, ignore_errors=True)
        runs = []
        for seed in range(args.news_seeds):  # the head (and the graph layers' training) differ by seed
            inputs.set_model(encoder)
            torch.manual_seed(seed)
            clf = DocumentClassifier(encoder, labels, cfg.dropout)
            t0 = time.perf_counter()
            run_dir = out / ("full" if seed == 0 else f"full-seed-{seed}")
            summary = ClassificationTrainer(copy.deepcopy(clf), dataclasses.replace(cfg, seed=seed), inputs, fit_keys,
                                            run_dir, dev_keys).train()
            best = DocumentClassifier.from_pretrained(run_dir / "model")
            inputs.set_model(best.encoder)
            runs.append({"seed": seed, **evaluate_classifier(best, inputs, test_keys),
                         "wall_s": round(time.perf_counter() - t0, 1), "best_epoch": summary["best_epoch"]})
        row = {"full": {m: float(np.mean([r[m] for r in runs])) for m in ("accuracy", "macro_f1")},
               "full_sd": {m: float(np.std([r[m] for r in runs])) for m in ("accuracy", "macro_f1")},
               "full_runs": runs, "full_wall_s": runs[0]["wall_s"], "full_best_epoch": runs[0]["best_epoch"],
               "peak_rss_mib": round(peak_rss_mib())}
        torch.manual_seed(0)
        clf = DocumentClassifier(encoder, labels, cfg.dropout)
        inputs.set_model(encoder)
        for shots in SHOTS:
            t0 = time.perf_counter()
            fs = few_shot(clf, cfg, inputs, train_keys, test_keys, out / f"{shots}-shot", shots, args.repeats)
            row[f"{shots}-shot"] = {"accuracy": fs["accuracy"], "macro_f1": fs["macro_f1"],
                                    "wall_s": round(time.perf_counter() - t0, 1)}
        result["rows"][name] = row
        log(f"20news {name}: {json.dumps(row)}")
    result["config"] = dataclasses.asdict(cfg)
    return result


def news_supcon_task(args) -> dict:
    """Cross-entropy against supervised contrastive training of the graph layers on one 20news sample:
    test accuracy / macro-F1 of the (probe) head, and k-means NMI of the test documents' vectors, over
    ``--supcon-seeds`` training seeds."""
    from graphdoc.encoder import GraphDocEncoder
    from graphdoc.finetune.classification import prepare_inputs

    train_docs, test_docs = news_sample(args)
    model = GraphDocEncoder.from_pretrained(None, device="cpu", config=news_config(args))
    cache = news_cache(args, model)
    t0, misses = time.perf_counter(), cache.misses
    data = prepare_inputs(model, train_docs + test_docs, cache, args.news_passages)
    log(f"20news supcon: {len(train_docs)} train, {len(test_docs)} test; {cache.misses - misses} passages "
        f"encoded in {time.perf_counter() - t0:.0f} s ({cache.hits} cache hits)")
    fit_keys, dev_keys = news_split([d.id for d in train_docs])
    test_keys = [d.id for d in test_docs]
    gold = [data.labels[k] for k in test_keys]
    before = clustering(data.inputs.embed_all(test_keys).document_embeddings, gold, args.kmeans_seeds)
    result = {"sizes": {"train": len(fit_keys), "dev": len(dev_keys), "test": len(test_keys),
                        "passages": args.news_passages, "classes": len(set(gold))},
              "rows": {"untrained graph (mean of passages)": {"NMI": [before["NMI"]], "purity": [before["purity"]]}}}
    for objective in ("cross_entropy", "supcon"):
        runs = [train_objective(args, model, data, (fit_keys, dev_keys, test_keys), objective, seed)
                for seed in range(args.supcon_seeds)]
        row = {k: [r[k] for r in runs] for k in ("accuracy", "macro_f1", "NMI", "purity", "best_epoch", "epoch_s")}
        result["rows"][f"graph layers trained, {objective}"] = dict(row, runs=runs)
        log(f"20news {objective}: {json.dumps(row)}")
    return result


def train_objective(args, model, data, keys: tuple, objective: str, seed: int) -> dict:
    """One fine-tuning run from the default model; the best epoch's test scores and k-means clustering."""
    from graphdoc.finetune.classification import (
        ClassificationTrainer,
        evaluate_classifier,
    )
    from graphdoc.finetune.classifier import DocumentClassifier
    from graphdoc.finetune.config import ClassificationConfig

    fit_keys, dev_keys, test_keys = keys
    cfg = ClassificationConfig(epochs=args.news_epochs, lr=1e-3, head_lr=1e-2, batch_size=32, dropout=0.1,
                               max_passages=args.news_passages, seed=seed, objective=objective,
                               temperature=args.supcon_temperature)
    torch.manual_seed(seed)  # the same graph layers and head for both objectives
    clf = DocumentClassifier(copy.deepcopy(model), sorted({data.labels[k] for k in fit_keys}), cfg.dropout)
    out = args.work_dir / f"news-{objective}-{seed}"
    shutil.rmtree(out, ignore_errors=True)
    summary = ClassificationTrainer(clf, cfg, data, fit_keys, out, dev_keys).train()
    best = DocumentClassifier.from_pretrained(out / "model")
    data.set_model(best.encoder)
    test = evaluate_classifier(best, data, test_keys)
    c = clustering(data.inputs.embed_all(test_keys).document_embeddings, [data.labels[k] for k in test_keys],
                   args.kmeans_seeds)
    data.set_model(model)
    # the median epoch's time: the machine is shared, single epochs can stall
    epoch_s = float(np.median(np.diff([0.0] + [h["elapsed_s"] for h in summary["history"]])))
    return {"seed": seed, **test, "NMI": c["NMI"], "purity": c["purity"], "best_epoch": summary["best_epoch"],
            "epoch_s": round(epoch_s, 2), "history": summary["history"], "config": dataclasses.asdict(cfg)}


# ------------------------------------------------------------------ report
def ranking_table(res: dict) -> list[str]:
    lines = ["| system | nDCG@10 | R@100 |", "|---|---:|---:|"]
    lines += [f"| {k} | {v['nDCG@10']:.4f} | {v['R@100']:.4f} |" for k, v in res["rows"].items()]
    lines += ["", "| run | wall s | peak RSS MiB (process) | best epoch | steps | pairs |", "|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {k} | {v['wall_s']} | {v['peak_rss_mib']} | {v['best_epoch']} | {v['steps']} | {v['pairs']} |"
              for k, v in res["runs"].items()]
    return lines


def news_table(res: dict) -> list[str]:
    lines = ["| model | full acc | full macro-F1 | 5-shot acc | 5-shot F1 | 10-shot acc | 10-shot F1 |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name, r in res["rows"].items():
        fs = [f"{100 * r[s][m]['mean']:.2f} ± {100 * r[s][m]['std']:.2f}" for s in ("5-shot", "10-shot")
              for m in ("accuracy", "macro_f1")]
        full = [f"{100 * r['full'][m]:.2f}" + (f" ± {100 * r['full_sd'][m]:.2f}" if len(r.get("full_runs", [])) > 1
                                                else "") for m in ("accuracy", "macro_f1")]
        lines.append(f"| {name} | {' | '.join(full)} | " + " | ".join(fs) + " |")
    return lines


def supcon_table(res: dict) -> list[str]:
    def cell(values: list[float], scale: float = 1.0, digits: int = 2) -> str:
        mean = f"{scale * np.mean(values):.{digits}f}"
        return mean if len(values) == 1 else f"{mean} ± {scale * np.std(values):.{digits}f}"

    lines = ["| model | test acc | test macro-F1 | k-means NMI | k-means purity | best epochs | s / epoch |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name, r in res["rows"].items():
        scores = f"{cell(r['accuracy'], 100)} | {cell(r['macro_f1'], 100)}" if "accuracy" in r else "- | -"
        lines.append(f"| {name} | {scores} | {cell(r['NMI'], digits=4)} | {cell(r['purity'], digits=4)} | "
                     f"{', '.join(map(str, r.get('best_epoch', ['-'])))} | {cell(r['epoch_s']) if 'epoch_s' in r else '-'} |")
    return lines


def checked_parts(args) -> list[str]:
    """The ``--parts`` asked for, once each is known and has its data files and index (one error line if not)."""
    parts = args.parts.split(",")
    unknown = [part for part in parts if part not in PARTS]
    if unknown:
        raise SystemExit(f"--parts: unknown part {', '.join(map(repr, unknown))}; valid: {', '.join(PARTS)}")
    for part in parts:
        files, index_option = PARTS[part]
        require_data(args.data_dir, files)
        index = getattr(args, index_option) if index_option else None
        if index is not None and not (index / "manifest.json").is_file():
            raise SystemExit(f"--{index_option.replace('_', '-')} {index}: not a graphdoc index (part {part} starts "
                             "from an untrained default-model index of its corpus, built by `graphdoc index`)")
    return parts


def main(argv=None) -> int:
    args = parse_args(argv)
    parts = checked_parts(args)
    torch.set_num_threads(args.threads)
    args.work_dir.mkdir(parents=True, exist_ok=True)
    results_path = args.work_dir / "results.json"
    results = json.loads(results_path.read_text()) if results_path.is_file() else {}
    t_all = time.perf_counter()
    for part in parts:
        if part == "scifact":
            results["scifact"] = ranking_task(args, "scifact", args.scifact_index, args.data_dir / "scifact", "train",
                                              "test", [("full graph", None)], args.epochs, args.hard_negatives)
        elif part in ("qmsum", "qmsum-full"):
            full = part == "qmsum-full"
            results[part] = ranking_task(args, "qmsum", args.qmsum_index, args.data_dir / "qmsum", "train", "val",
                                         [("full graph", "full")] if full else [("section graph", None)],
                                         args.qmsum_full_epochs if full else args.qmsum_epochs,
                                         1 if full else args.qmsum_hard_negatives, args.qmsum_negative_pool)
        elif part == "news":
            results["news"] = news_task(args)
        elif part == "news-supcon":
            results["news-supcon"] = news_supcon_task(args)
        results_path.write_text(json.dumps(results, indent=1))
        write_report(args, results)
    log(f"done in {time.perf_counter() - t_all:.0f} s, peak RSS {peak_rss_mib():.0f} MiB")
    write_report(args, results)
    return 0


def write_report(args, results: dict) -> None:
    machine = platform.processor() or platform.machine()
    out = [(f"Measured by `python benchmarks/finetune.py` on {machine}, {args.threads} threads, CPU only; "
            "frozen encoder (all-MiniLM-L6-v2), cached passage vectors."), ""]
    for name in ("scifact", "qmsum", "qmsum-full"):
        if name in results:
            out += [f"## {name}", "", f"sizes: {json.dumps(results[name]['sizes'])}", ""] + ranking_table(results[name]) + [""]
    if "news" in results:
        out += ["## 20news", "", f"sizes: {json.dumps(results['news']['sizes'])}", ""] + news_table(results["news"])
    if "news-supcon" in results:
        res = results["news-supcon"]
        out += ["", "## 20news: cross-entropy vs supcon", "", f"sizes: {json.dumps(res['sizes'])}", ""]
        out += supcon_table(res)
    report = args.output or args.work_dir / "report.md"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text("\n".join(out) + "\n", encoding="utf-8")
    log(f"report: {report}")


if __name__ == "__main__":
    sys.exit(main())
