"""Choosing the pretraining settings on held-out training text, at full scale.

``benchmarks/pretrain.py`` trains on the whole 20news training set, so no 20news train document is left to
choose settings on. This script holds out a stratified ``--held-out`` of them: it trains the default model
(frozen encoder, ``pretrain.py``'s training text and options) on the rest plus the Wikipedia and QMSum
text, once per setting, and clusters the held-out documents (k-means k=20 on L2-normalised vectors, NMI /
purity over ``--seeds`` seeds). Nothing is scored on the test sets. Passage vectors come through ``pretrain.py``'s
cache layout (``--work-dir``).

    python benchmarks/pretrain_select.py --settings half:0.2:20 ict:0.2:20 ict:0.1:20 half:0.1:20 ict:0.2:20:512 \
        ict:0.2:20:projection_head=384
    python benchmarks/pretrain_select.py --held-out-order latest --settings half:0.2:20 ict:0.2:5

``--held-out-order latest`` holds out each newsgroup's latest posts instead of a random sample: the bydate
test set was posted after the training set, and a random sample shares more threads (quoted text, subject
lines) with the documents trained on than the test set does.

A setting is ``OBJECTIVE:TEMPERATURE:EPOCHS``, then optionally ``:BATCH`` and any ``:KEY=VALUE`` of the
``pretrain`` section (the value read as YAML).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

import torch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pretrain as bench  # the pretraining benchmark's data, training and scoring


def parse(argv: list[str] | None) -> tuple[argparse.Namespace, argparse.Namespace]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=bench.SHARED_OPTIONS)
    p.add_argument("--held-out", type=int, default=1000, help="20news train documents held out (stratified)")
    p.add_argument("--held-out-order", choices=("random", "latest"), default="random",
                   help="which documents of each newsgroup are held out: a random sample, or the latest posts "
                        "(highest article numbers), as the bydate test set follows the training set in time")
    p.add_argument("--settings", nargs="+", default=["half:0.2:20", "ict:0.2:20"],
                   metavar="OBJECTIVE:TEMPERATURE:EPOCHS[:BATCH][:KEY=VALUE...]",
                   help="BATCH: documents per step (--batch-size); KEY=VALUE: any other pretrain setting")
    p.add_argument("--output", type=Path, default=None, help="also write the table to this file")
    own, rest = p.parse_known_args(argv)
    return own, bench.parse_args(rest)


def parse_setting(spec: str, batch_size: int) -> tuple[str, float, int, int, dict]:
    """``(objective, temperature, epochs, batch size, other pretrain settings)`` of one ``--settings`` value,
    checked as a ``pretrain`` config section (one error line naming the setting if it is not one)."""
    from graphdoc.config import from_dict
    from graphdoc.errors import GraphDocError
    from graphdoc.training.config import PretrainConfig

    parts = spec.split(":")
    try:
        if len(parts) < 3:
            raise ValueError("too few fields")
        objective, temperature, epochs, *rest = parts
        extra = {key: yaml.safe_load(value) for key, value in (part.split("=", 1) for part in rest if "=" in part)}
        batch = [part for part in rest if "=" not in part]
        if len(batch) > 1:
            raise ValueError("more than one BATCH field")
        run = (objective, float(temperature), int(epochs), int(batch[0]) if batch else batch_size, extra)
        from_dict(PretrainConfig, {"objective": objective, "temperature": run[1], "epochs": run[2],
                                   "batch_size": run[3], **extra}, "pretrain")
    except (ValueError, GraphDocError) as exc:
        raise SystemExit(f"--settings {spec}: {exc} (expected OBJECTIVE:TEMPERATURE:EPOCHS[:BATCH][:KEY=VALUE...])")
    return run


def latest_posts(news: list[dict], n: int, seed: int) -> frozenset[str]:
    """The ids of the ``n`` latest posts (highest article numbers, ``group/NUMBER``) with the newsgroup
    counts of a stratified sample of ``n``: held out like the bydate test set, which was posted after the
    training set, so held-out documents share fewer threads with the training text than a random sample."""
    counts = Counter(r["label"] for r in bench.stratified(news, n, seed))
    by_label: dict[str, list[dict]] = {}
    for r in news:
        by_label.setdefault(r["label"], []).append(r)
    held = []
    for label, count in counts.items():
        held += sorted(by_label[label], key=lambda r: int(r["_id"].rsplit("/", 1)[1]))[-count:]
    return frozenset(r["_id"] for r in held)


def main(argv: list[str] | None = None) -> int:
    own, args = parse(argv)
    bench.require_data(args.data_dir)
    settings = [parse_setting(spec, args.batch_size) for spec in own.settings]  # every typo before any work
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(args.threads)
    from graphdoc.config import ModelConfig
    from graphdoc.encoder import GraphDocEncoder
    from graphdoc.training.cache import PassageVectorCache

    if args.train_on_test:
        raise SystemExit("--train-on-test trains on the 20news test set, which this script keeps out of sight: "
                         "use benchmarks/pretrain.py")
    news = bench.read_jsonl_gz(args.data_dir / "20news" / "train.jsonl.gz")
    args.news_train = len(news) - own.held_out
    exclude = latest_posts(news, own.held_out, args.seed) if own.held_out_order == "latest" else frozenset()
    config = ModelConfig()
    base = GraphDocEncoder.from_pretrained(device="cpu", config=replace(
        config, passage_encoder=replace(config.passage_encoder, precision=args.precision)))
    args.work_dir.mkdir(parents=True, exist_ok=True)
    d = bench.prepare_data(args, args.work_dir, base, exclude=exclude)
    used = {r["_id"] for r in d["news_train"]}
    held = [r for r in news if r["_id"] not in used]
    cache = PassageVectorCache(args.work_dir / "cache", base.passage_encoder)
    bench.pretrain_corpus(base, cache, d["sources"], args.train_passages)  # the training text, cached once
    vectors = bench.passage_vectors(base, cache, held, args.eval_passages)
    labels = [r["label"] for r in held]
    untrained = bench.clustering(bench.graph_vectors(base, vectors), labels, args.seeds, args.kmeans_init)
    rows = {"untrained (mean of passages)": (untrained, None)}
    for objective, temperature, epochs, batch_size, extra in settings:
        run_args = argparse.Namespace(**{**vars(args), "temperature": temperature, "epochs": epochs,
                                         "batch_size": batch_size})
        run = bench.train(run_args, args.work_dir, objective, d["sources"], extra=extra)
        model = GraphDocEncoder.from_pretrained(args.work_dir / "runs" / f"{objective}-frozen" / "model", device="cpu")
        settings = "".join(f", {key} {value}" for key, value in extra.items())
        rows[f"{objective}, temperature {temperature}, {epochs} epochs, batch {batch_size}{settings}"] = (
            bench.clustering(bench.graph_vectors(model, vectors), labels, args.seeds, args.kmeans_init), run)
    lines = [(f"{len(d['news_train'])} 20news train documents (+ Wikipedia {d['wiki']}, QMSum train "
              f"{len(d['qm_train'])}) trained on, first {args.train_passages} passages; {len(held)} held out "
              f"({'the latest posts of each newsgroup' if exclude else 'stratified at random'}) and "
              f"clustered (first {args.eval_passages} passages, {args.seeds} seeds)"), "",
             "| setting | NMI | purity | steps | training s |", "|---|---:|---:|---:|---:|"]
    for name, (c, run) in rows.items():
        trained = f"{run['steps']} | {run['wall_s']:.0f}" if run else "- | -"
        lines.append(f"| {name} | {c['NMI']:.3f} ({c['NMI sd']:.3f}) | {c['purity']:.3f} ({c['purity sd']:.3f}) "
                     f"| {trained} |")
    bench.show_table(lines, own.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
