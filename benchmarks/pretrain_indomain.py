"""In-domain pretraining for long-document retrieval: ``ict`` and ``half`` on the QMSum train meetings alone.

``benchmarks/pretrain.py`` pretrains on all its local text (mostly 20news posts) and checks QMSum val
retrieval on the side. This script trains the same default model (frozen encoder, same settings, the
same options as ``pretrain.py``) on the QMSum train meetings only, then scores QMSum val retrieval
(nDCG@10, cosine; MaxP and the untrained mean of passages as references) and, to show what it costs,
20news test clustering. Passage vectors come through ``pretrain.py``'s cache (same ``--work-dir`` layout).

    python benchmarks/pretrain_indomain.py --train-passages 24 --batch-size 32 --news-test 800 --news-train 800
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pretrain as bench  # the pretraining benchmark's data, training and scoring


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=bench.SHARED_OPTIONS)
    p.add_argument("--output", type=Path, default=None, help="also write the table to this file")
    own, rest = p.parse_known_args(argv)
    args = bench.parse_args(rest)
    if args.train_on_test:
        raise SystemExit("--train-on-test does not apply here: this script trains on QMSum train meetings alone")
    bench.require_data(args.data_dir)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(args.threads)
    from graphdoc.config import ModelConfig
    from graphdoc.encoder import GraphDocEncoder
    from graphdoc.training.cache import PassageVectorCache

    config = ModelConfig()
    base = GraphDocEncoder.from_pretrained(device="cpu", config=replace(
        config, passage_encoder=replace(config.passage_encoder, precision=args.precision)))
    args.work_dir.mkdir(parents=True, exist_ok=True)
    d = bench.prepare_data(args, args.work_dir, base)
    d["sources"] = [s for s in d["sources"] if Path(s).name == "qmsum_train.jsonl"]  # the only text trained on
    # the evaluation vectors (20news test, QMSum val), and the passages of the QMSum training text
    vectors = bench.encode_all(args, base, PassageVectorCache(args.work_dir / "cache", base.passage_encoder), d)
    runs = {o: bench.train(args, args.work_dir, o, d["sources"]) for o in ("ict", "half")}
    models = {"graphdoc untrained": base}
    models.update({f"graphdoc pretrained on QMSum train ({o})": GraphDocEncoder.from_pretrained(
        args.work_dir / "runs" / f"{o}-frozen" / "model", device="cpu") for o in runs})
    cluster, retrieval = bench.evaluate_models(args, models, vectors, d)
    lines = [(f"QMSum train meetings: {len(d['qm_train'])}, first {args.train_passages} passages; "
              f"{args.epochs} epochs, {args.batch_size} documents per step, temperature {args.temperature}"), "",
             "| system | QMSum val nDCG@10 | 20news NMI | 20news purity | steps | loss (last) |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, score in retrieval.items():
        c = cluster.get(name)
        clustered = f"{c['NMI']:.3f} | {c['purity']:.3f}" if c else "- | -"
        run = next((r for o, r in runs.items() if name.endswith(f"({o})")), None)
        trained = f"{run['steps']} | {run['loss']:.3f}" if run else "- | -"
        lines.append(f"| {name} | {score:.3f} | {clustered} | {trained} |")
    bench.show_table(lines, own.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
