"""QMSum ranking fine-tuning settings on a dev split grouped by meeting.

QMSum's val queries ask about meetings no training query is judged on. ``benchmarks/finetune.py`` holds
out a random 10% of the training *queries* as dev, whose meetings the model still trains on. This script
holds out a seeded ``--held-out`` share of the training *meetings* with all their queries instead, and
fine-tunes the index's model (frozen encoder, negative pool ``judged``, the benchmark's settings) once per
setting on the rest, reporting the dev score (hybrid, alpha 0.6), the best epoch and the val scores, so
one can see whether the grouped dev picks what val would.

    python benchmarks/finetune_select.py --precision bf16 --settings base: lr3e-4:lr=0.0003 t0.1:temperature=0.1

A setting is ``NAME:KEY=VALUE,...`` over ``RankingConfig`` fields (defaults: epochs 4, lr 1e-3, batch 32,
2 hard negatives, temperature 0.05, seed 0).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import finetune as bench  # the fine-tuning benchmark's setup and scoring

DEFAULTS = {"epochs": 4, "lr": 1e-3, "batch_size": 32, "hard_negatives": 2, "negative_pool": "judged",
            "eval_mode": "hybrid", "temperature": 0.05, "seed": 0}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--settings", nargs="+", default=["base:"], metavar="NAME:KEY=VALUE,...")
    p.add_argument("--held-out", type=float, default=0.1, help="share of the training meetings held out as dev")
    p.add_argument("--graph", choices=("section", "full"), default=None, help="graph type (default: the index's)")
    p.add_argument("--qmsum-index", type=Path, default=Path("/tmp/qmidx"))
    p.add_argument("--data-dir", type=Path, default=bench.DEFAULT_DATA, help="holds qmsum/")
    p.add_argument("--work-dir", type=Path, default=Path("/tmp/graphdoc-finetune-select"))
    p.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto",
                   help="the precision the index was built at")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    names = [spec.partition(":")[0] for spec in args.settings]
    for name in names:  # each names a folder of --work-dir that the run deletes first, and a row of the report
        if name in ("", ".", "..", "untuned") or "/" in name or "\\" in name:
            p.error(f"--settings: {name!r} cannot name a setting (NAME:KEY=VALUE,...; NAME is a folder of "
                    "--work-dir, not empty, '.', '..', 'untuned' or a path)")
        if names.count(name) > 1:
            p.error(f"--settings: {name!r} names two settings (each needs its own NAME)")
    return args


def parse_setting(spec: str, max_passages: int):
    from graphdoc.errors import GraphDocError
    from graphdoc.finetune.config import RankingConfig

    name, _, pairs = spec.partition(":")
    values = dict(DEFAULTS, max_passages=max_passages)
    fields = {f.name for f in dataclasses.fields(RankingConfig)}
    for item in filter(None, pairs.split(",")):
        key, _, value = item.partition("=")
        if key not in fields:
            raise SystemExit(f"{spec}: {key!r} is not a RankingConfig field")
        values[key] = yaml.safe_load(value)  # as in a config file: RankingConfig checks the type
    try:
        return name, RankingConfig(**values)
    except GraphDocError as exc:
        raise SystemExit(f"{spec}: {exc}") from None


def grouped_dev(qrels: dict, share: float, seed: int = 0) -> tuple[dict, dict, int]:
    """``(train, dev, meetings held out)``: every query judged on a held-out meeting goes to dev."""
    meetings = sorted({d for docs in qrels.values() for d, r in docs.items() if r > 0})
    held = set(np.random.default_rng(seed).permutation(meetings)[:max(1, round(share * len(meetings)))].tolist())
    dev = {q: docs for q, docs in qrels.items() if any(d in held and r > 0 for d, r in docs.items())}
    return {q: docs for q, docs in qrels.items() if q not in dev}, dev, len(held)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(args.threads)
    from graphdoc.corpus import read_qrels, read_queries
    from graphdoc.finetune.ranking_trainer import RankingTrainer

    args.qmsum_init, args.parts = None, "qmsum"
    bench.checked_parts(args)  # the data files and the index are there
    manifest = json.loads((args.qmsum_index / "manifest.json").read_text(encoding="utf-8"))
    max_passages = manifest["model"]["chunker"]["max_passages"]
    settings = [parse_setting(spec, max_passages) for spec in args.settings]  # every typo before any training
    args.work_dir.mkdir(parents=True, exist_ok=True)
    folder = args.data_dir / "qmsum"
    queries = dict(read_queries(folder / "queries.jsonl"))
    train_all, val = read_qrels(folder, "train"), read_qrels(folder, "val")
    queries = {q: t for q, t in queries.items() if q in train_all or q in val}
    model, data, manifest = bench.ranking_setup(args, args.qmsum_index, folder / "corpus.jsonl.gz", queries, "qmsum")
    train, dev, held = grouped_dev(train_all, args.held_out)
    bench.log(f"grouped dev: {held} meetings, {len(dev)} dev queries, {len(train)} training queries")
    start = model if args.graph is None else bench._with_graph(model, args.graph)
    untuned = RankingTrainer(start, parse_setting("untuned:", max_passages)[1], data, train, args.work_dir / "untuned")
    rows = {"untuned": {"dev": bench.scores(untuned, dev), "val": bench.scores(untuned, val)}}
    results_path = args.work_dir / "results.json"
    for name, cfg in settings:
        out = args.work_dir / name
        shutil.rmtree(out, ignore_errors=True)
        t0 = time.perf_counter()
        data.set_model(start)
        trainer = RankingTrainer(copy.deepcopy(start), cfg, data, train, out, dev)
        summary = trainer.train()
        best = type(start).from_pretrained(out / "model")
        best.passage_encoder.requires_grad_(False)
        trainer.model = best
        data.set_model(best)
        rows[name] = {"dev": bench.scores(trainer, dev), "val": bench.scores(trainer, val, dev),
                      "best_epoch": summary["best_epoch"], "dev_history": [h["dev"] for h in summary["history"]],
                      "wall_s": round(time.perf_counter() - t0)}
        results_path.write_text(json.dumps(rows, indent=1))
        bench.log(f"{name}: trained in {rows[name]['wall_s']} s")
    print(report(rows))
    return 0


def report(rows: dict) -> str:
    lines = ["| setting | best epoch | dev hybrid nDCG@10 | val dense | val hybrid a=0.6 | val hybrid, alpha tuned on dev |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, row in rows.items():
        val = {k.split(" (")[0]: v["nDCG@10"] for k, v in row["val"].items()}
        tuned = next((f"{v['nDCG@10']:.4f} ({k.split()[1]})" for k, v in row["val"].items() if "tuned" in k), "")
        lines.append(f"| {name} | {row.get('best_epoch', '')} | {row['dev']['hybrid a=0.6']['nDCG@10']:.4f} | "
                     f"{val['dense']:.4f} | {val['hybrid a=0.6']:.4f} | {tuned} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
