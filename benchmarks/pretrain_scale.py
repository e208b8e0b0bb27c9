"""How much unlabelled in-domain text does frozen-encoder pretraining need to help 20 Newsgroups clustering?

``benchmarks/pretrain.py`` runs the real ``graphdoc pretrain`` on a CPU-sized sample. This script asks the
question it cannot afford there: the default model (all-MiniLM-L6-v2 + 2 residual GAT layers, encoder
frozen) is pretrained with ``half`` on stratified samples of 20news *train* of growing size (and all of
it), then the *whole* 20news test set and the 800-document stratified sample of ``benchmarks/pretrain.py``
are clustered (k-means, k=20, NMI / purity over seeds).

Each training step is the trainer's frozen-mode step (``GraphPretraining.backward``: the objective's
split, the sub-document graphs, the loss; AdamW with warm-up and linear decay from ``graphdoc.training.optim``,
gradient clipping at 1.0) over passage vectors held in memory, without the trainer's streaming, checkpoints
and per-epoch re-chunking, which cost more than the step itself here.
Encoding the ~43,000 passages takes about 30 s on one H100 and about 50 minutes on a 2-core CPU: run it
with a GPU (``--device cuda``), or on a CPU with ``--sizes 1000 --epochs 10`` for a taste (it encodes the
sampled training documents and the whole test set, not all of 20news train).

    python benchmarks/pretrain_scale.py --device cuda          # writes docs/pretrain_scale.md
    python benchmarks/pretrain_scale.py --device cpu --sizes 1000 --epochs 10 --output /tmp/pretrain_scale.md

The report goes between the benchmark markers of ``--output``; the notes around them are kept.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from multiprocessing import Pool
from pathlib import Path

import numpy as np
import torch

from doc_blocks import write_block
from pretrain import DEFAULT_DATA, ROOT, clustering, log, read_jsonl_gz, require_data, stratified

_MODEL = None  # the model ``prepare`` runs in worker processes (set before the pool forks)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    p.add_argument("--model", default=None, help="passage encoder (default: the built-in all-MiniLM-L6-v2)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: CUDA when present)")
    p.add_argument("--sizes", default="1000,3000,5000,0",
                   help="20news train documents sampled (stratified) per run; 0: all 11,314")
    p.add_argument("--epochs", default="10,20,15,20", help="epochs of each run (one per size, or one for all)")
    p.add_argument("--train-passages", type=int, default=4, help="first passages of a training document")
    p.add_argument("--eval-passages", type=int, default=4, help="first passages of a test document")
    p.add_argument("--objective", default="half", choices=("half", "ict"))
    p.add_argument("--temperature", type=float, default=0.2)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--seeds", type=int, default=5, help="k-means seeds")
    p.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1), help="processes chunking")
    p.add_argument("--output", type=Path, default=ROOT / "docs" / "pretrain_scale.md")
    args = p.parse_args(argv)
    try:
        sizes, epochs = ([int(x) for x in text.split(",")] for text in (args.sizes, args.epochs))
    except ValueError:
        p.error("--sizes and --epochs take comma-separated integers")
    epochs = epochs * len(sizes) if len(epochs) == 1 else epochs
    if len(epochs) != len(sizes):
        p.error(f"--epochs needs one value, or one per --sizes value ({len(sizes)} of them)")
    args.runs = list(zip(sizes, epochs))  # (20news train documents sampled or 0 for all, epochs)
    return args


def _prepare(args: tuple[dict, int]):
    from graphdoc.documents import Document

    record, cap = args
    return _MODEL.prepare(Document.from_dict(record), cap)


def prepare_all(model, records: list[dict], cap: int, workers: int) -> list:
    global _MODEL
    _MODEL = model
    if workers <= 1:
        return [_prepare((r, cap)) for r in records]
    with Pool(workers) as pool:
        return pool.map(_prepare, [(r, cap) for r in records], chunksize=64)


@torch.inference_mode()
def passage_vectors(model, prepared: list, chunk: int = 4096) -> list[torch.Tensor]:
    """Each document's ``[n_i, hidden]`` passage vectors (the frozen encoder's inference vectors)."""
    ids = [t for p in prepared for t in p.token_ids]
    flat = torch.cat([model.passage_encoder.encode_ids(ids[i:i + chunk]).float() for i in range(0, len(ids), chunk)])
    return list(torch.split(flat, [len(p.token_ids) for p in prepared]))


@torch.no_grad()
def document_vectors(model, vectors: list[torch.Tensor], prepared: list, batch: int = 512) -> torch.Tensor:
    model.eval()
    out = [model.forward_passage_vectors(vectors[i:i + batch], [p.section_ids for p in prepared[i:i + batch]])
           .document_embeddings.float() for i in range(0, len(vectors), batch)]
    return torch.cat(out).cpu()


class MemoryCache:
    """Frozen passage vectors by token ids, held in memory: what ``PassageVectorCache.encode`` gives."""

    def __init__(self, examples, vectors) -> None:
        self.vectors = {tuple(t): v for ex, vs in zip(examples, vectors) for t, v in zip(ex.prepared.token_ids, vs)}

    def encode(self, token_ids) -> torch.Tensor:
        return torch.stack([self.vectors[tuple(t)] for t in token_ids])  # [n, hidden]


def pretrain(base, examples, vectors, args, epochs: int, work: Path) -> tuple[object, float, float]:
    """A fresh graph model over ``base``'s frozen encoder, trained with the trainer's frozen-mode step."""
    from graphdoc.encoder import GraphDocEncoder
    from graphdoc.training.config import PretrainConfig
    from graphdoc.training.graph_pretraining import GraphPretraining
    from graphdoc.training.objectives import LOSSES
    from graphdoc.training.optim import build_optimizer, build_scheduler

    cfg = PretrainConfig(objective=args.objective, temperature=args.temperature, lr=args.lr,
                         batch_size=args.batch_size, epochs=epochs, frozen_encoder=True, cache_dir=str(work))
    torch.manual_seed(cfg.seed)  # dropout, as the trainer seeds it
    model = GraphDocEncoder(base.passage_encoder, base.config, device=base.device)  # graph layers start at zero
    task = GraphPretraining(model, cfg, work)  # freezes the encoder
    task.cache = MemoryCache(examples, vectors)
    steps = epochs * -(-len(examples) // cfg.batch_size)
    optimizer = build_optimizer(model, cfg)
    scheduler = build_scheduler(optimizer, cfg, steps)
    params = [p for p in model.parameters() if p.requires_grad]

    def loss_fn(z: torch.Tensor) -> torch.Tensor:
        return LOSSES[cfg.objective](z, cfg.similarity, cfg.temperature)

    start, loss = time.perf_counter(), 0.0
    for epoch in range(epochs):
        model.train()
        model.passage_encoder.eval()
        order = np.random.default_rng([cfg.seed, epoch]).permutation(len(examples))
        for b in range(0, len(order), cfg.batch_size):
            optimizer.zero_grad(set_to_none=True)
            loss, _ = task.backward([examples[i] for i in order[b:b + cfg.batch_size]], epoch, loss_fn, None,
                                    model.device)
            torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
            optimizer.step()
            scheduler.step()
    return model, loss, time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    require_data(args.data_dir, ("20news/train.jsonl.gz", "20news/test.jsonl.gz"))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from graphdoc.config import ModelConfig, PassageEncoderConfig
    from graphdoc.device import resolve_device
    from graphdoc.encoder import GraphDocEncoder
    from graphdoc.errors import GraphDocError
    from graphdoc.training.data import Example

    try:  # before any work; it only counts CUDA devices, so the chunking pool can still fork
        device = resolve_device(args.device)
    except GraphDocError as exc:
        raise SystemExit(f"--device {args.device}: {exc}") from None
    config = ModelConfig(passage_encoder=PassageEncoderConfig(model_name_or_path=args.model)) if args.model else None
    model = GraphDocEncoder.from_pretrained(args.model, config=config, device="cpu")
    all_train = read_jsonl_gz(args.data_dir / "20news" / "train.jsonl.gz")
    test = read_jsonl_gz(args.data_dir / "20news" / "test.jsonl.gz")
    samples = {size: {r["_id"] for r in (stratified(all_train, size, 0) if size else all_train)}
               for size, _ in args.runs}
    positions = [i for i, r in enumerate(all_train) if any(r["_id"] in sample for sample in samples.values())]
    train = [all_train[i] for i in positions]  # the documents some run trains on: only these are encoded
    t0 = time.perf_counter()
    train_prep = prepare_all(model, train, args.train_passages, args.workers)  # before CUDA: the pool forks
    test_prep = prepare_all(model, test, args.eval_passages, args.workers)
    log(f"chunked {len(train)} train and {len(test)} test documents in {time.perf_counter() - t0:.0f} s")
    model.to(device)
    model.passage_encoder.eval()
    t0 = time.perf_counter()
    usable = [i for i, p in enumerate(train_prep) if len(p.token_ids) >= 2]
    train_vectors = dict(zip(usable, passage_vectors(model, [train_prep[i] for i in usable])))
    test_vectors = passage_vectors(model, test_prep)
    encoded = sum(len(v) for v in train_vectors.values()) + sum(len(v) for v in test_vectors)
    encode_s = time.perf_counter() - t0
    log(f"encoded {encoded} passages in {encode_s:.0f} s on {model.device}")

    labels = [r["label"] for r in test]
    sample = [r["_i"] for r in stratified([dict(r, _i=i) for i, r in enumerate(test)], 800, 0)]

    def scores(x: torch.Tensor) -> dict:
        return {"full": clustering(x, labels, args.seeds),
                "s800": clustering(x[sample], [labels[i] for i in sample], args.seeds)}

    prompt = model.passage_encoder.passage_prompt  # a checkpoint's passage prompt (none for the default model)
    firstp = model.passage_encoder.tokenize([prompt + f"{r.get('title') or ''} {r['text']}".strip() for r in test],
                                            truncate=True)
    with torch.inference_mode():
        firstp_vectors = torch.cat([model.passage_encoder.encode_ids(firstp[i:i + 4096]).float().cpu()
                                    for i in range(0, len(firstp), 4096)])
    rows = [{"run": "FirstP (flat, first 256 tokens)", "docs": 0, "passages": 0, "epochs": 0, "steps": 0,
             **scores(firstp_vectors)},
            {"run": "MeanP = graphdoc untrained", "docs": 0, "passages": 0, "epochs": 0, "steps": 0,
             **scores(document_vectors(model, test_vectors, test_prep))}]
    log(f"untrained: {json.dumps(rows[1]['full'])}")
    for size, n_epochs in args.runs:
        idx = [i for i in usable if train[i]["_id"] in samples[size]]
        examples = [Example(positions[i], train_prep[i]) for i in idx]  # the position seeds the objective's split
        with tempfile.TemporaryDirectory() as work:
            trained, loss, seconds = pretrain(model, examples, [train_vectors[i] for i in idx], args, n_epochs,
                                              Path(work))
        row = {"run": f"{args.objective}, {size or len(all_train)} train documents sampled", "docs": len(idx),
               "passages": sum(len(train_vectors[i]) for i in idx), "epochs": n_epochs,
               "steps": n_epochs * -(-len(idx) // args.batch_size), "loss": loss, "train_s": seconds,
               **scores(document_vectors(trained, test_vectors, test_prep))}
        rows.append(row)
        log(f"{row['run']}: {row['docs']} usable, loss {loss:.3f}, {seconds:.0f} s; full {json.dumps(row['full'])}")
    write_block(args.output, report(args, rows, encoded, encode_s, str(model.device), len(test)))
    log(f"wrote {args.output}")
    return 0


def report(args, rows: list[dict], encoded: int, encode_s: float, device: str, n_test: int) -> str:
    import platform

    import transformers

    import graphdoc

    lines = ["# Pretraining: how much in-domain text it takes (benchmarks/pretrain_scale.py)", "",
             f"Measured by `{' '.join(['python benchmarks/pretrain_scale.py', *sys.argv[1:]])}` on {device} "
             f"({platform.machine()}); graphdoc {graphdoc.__version__}, torch {torch.__version__}, "
             f"transformers {transformers.__version__}. {encoded} passage vectors encoded in {encode_s:.0f} s.", "",
             f"Default model (all-MiniLM-L6-v2 + 2 residual GAT layers, 2 heads), passage encoder frozen; "
             f"`{args.objective}`, cosine, temperature {args.temperature}, AdamW lr {args.lr} (10% warm-up, "
             f"linear decay), {args.batch_size} documents per step; training documents: a stratified sample of "
             f"20news train, first {args.train_passages} passages, one-passage documents skipped (as the trainer "
             f"skips them). Clustering: k-means k=20 on L2-normalised document vectors (first "
             f"{args.eval_passages} passages), mean (sd) over {args.seeds} seeds, on the whole 20news test set "
             f"({n_test:,}) and on the 800-document stratified sample `benchmarks/pretrain.py` uses.", "",
             "| run | usable docs | passages | epochs | steps | NMI (test) | purity (test) | NMI (800) | purity (800) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        f, s = r["full"], r["s800"]
        lines.append(f"| {r['run']} | {r['docs']} | {r['passages']} | {r['epochs']} | {r['steps']} | "
                     f"{f['NMI']:.3f} ({f['NMI sd']:.3f}) | {f['purity']:.3f} ({f['purity sd']:.3f}) | "
                     f"{s['NMI']:.3f} ({s['NMI sd']:.3f}) | {s['purity']:.3f} ({s['purity sd']:.3f}) |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
