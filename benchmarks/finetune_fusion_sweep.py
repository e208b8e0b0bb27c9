"""How much a QMSum ranking model's hybrid score depends on the fusion settings (a diagnostic).

Scores a saved model (e.g. the best model of ``benchmarks/finetune.py --parts qmsum``) on the dev queries
(``benchmarks/finetune.py``'s 10% of the training queries) and the val queries at every passage weight and
z-score fusion alpha given. Choosing on val itself gives the most any of these settings could reach there:
an upper bound for the fusion settings, not a result.

    python benchmarks/finetune_fusion_sweep.py --index /tmp/spanft/idx2 \\
        --model /tmp/spanft/ft2/qmsum-section_graph/model --work-dir /tmp/spanft/ft2 --precision bf16

``--index`` is the index the model was fine-tuned over (its BM25 and passage vectors are read, as the
benchmark reads them); ``--work-dir`` holds the benchmark's passage cache (reused).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import finetune as bench  # the fine-tuning benchmark's data set-up and dev split


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--index", type=Path, required=True, help="the QMSum index the model was fine-tuned over")
    p.add_argument("--model", type=Path, required=True, help="a saved graphdoc model folder")
    p.add_argument("--work-dir", type=Path, required=True, help="passage cache folder (the benchmark's)")
    p.add_argument("--data-dir", type=Path, default=bench.DEFAULT_DATA, help="holds qmsum/ (default: %(default)s)")
    p.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto",
                   help="the precision the index was built at (as benchmarks/finetune.py's --precision)")
    p.add_argument("--passage-weights", type=float, nargs="+", default=[1.0, 0.9, 0.7, 0.5])
    p.add_argument("--alphas", type=float, nargs="+", default=[0.3, 0.4, 0.5, 0.6, 0.7, 0.8])
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from graphdoc.corpus import read_qrels, read_queries
    from graphdoc.finetune.config import RankingConfig
    from graphdoc.finetune.ranking_trainer import RankingTrainer
    from graphdoc.retrieval.evaluation import evaluate
    from graphdoc.retrieval.fusion import FusionConfig

    folder = args.data_dir / "qmsum"
    if not folder.is_dir():
        raise SystemExit(f"{folder} not found: the QMSum data (see ../shared/data/README.md) is needed")
    train_all, val = read_qrels(folder, "train"), read_qrels(folder, "val")
    queries = {q: t for q, t in read_queries(folder / "queries.jsonl") if q in train_all or q in val}
    index_model, data, manifest = bench.ranking_setup(args, args.index, folder / "corpus.jsonl.gz", queries,
                                                      "qmsum")
    train, dev = bench.split_dev(train_all)
    model = bench._start_from(args.model, index_model)  # refused if its encoder is not the index's
    data.set_model(model)
    header = "| passage weight | queries | dense | " + " | ".join(f"alpha {a}" for a in args.alphas) + " |"
    lines = [header, "|" + "---|" * (3 + len(args.alphas))]
    for weight in args.passage_weights:
        cfg = RankingConfig(passage_weight=weight, max_passages=manifest["model"]["chunker"]["max_passages"])
        trainer = RankingTrainer(model, cfg, data, train, args.work_dir / "fusion-sweep")
        for name, qrels in (("dev", dev), ("val", val)):
            ranked = trainer.rank(sorted(qrels))
            cells = [evaluate(ranked["dense"], qrels, ["nDCG@10"])["nDCG@10"]]
            cells += [evaluate(ranked["components"].hybrid(FusionConfig(alpha=a, normalization="zscore")), qrels,
                               ["nDCG@10"])["nDCG@10"] for a in args.alphas]
            lines.append(f"| {weight} | {name} | " + " | ".join(f"{c:.4f}" for c in cells) + " |")
            print(lines[-1], flush=True)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
