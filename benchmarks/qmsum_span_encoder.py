"""Train the default model's passage encoder on QMSum's answer spans; save it as a graphdoc model folder.

An experiment for docs/finetune.md (QMSum): the fine-tuning benchmark trains graph layers over a frozen
passage encoder, which never learns what a QMSum query asks for. Here the encoder itself learns it from
passage-level labels: each training query is paired with a passage overlapping one of its answer spans
(``qmsum/spans/train.tsv``), against the batch's other passages and one BM25-ranked passage of a meeting the
query is not about (passages of the query's own meetings are never negatives). InfoNCE on cosine
similarity, AdamW with 10% warm-up and linear decay, CPU bf16 autocast. Only the training queries and
their meetings are used; the val meetings are never seen. The graph layers stay the untrained ones.

    python benchmarks/qmsum_span_encoder.py --output /tmp/span-model                 # ~7 min on 2 cores
    graphdoc index --corpus ../shared/data/qmsum --index-dir /tmp/span-idx --model /tmp/span-model --precision bf16
    graphdoc search --index-dir /tmp/span-idx --queries ../shared/data/qmsum --split val \
        --qrels ../shared/data/qmsum --mode hybrid
    python benchmarks/finetune.py --parts qmsum --precision bf16 --qmsum-index /tmp/span-idx --lr 3e-4
"""

from __future__ import annotations

import argparse
import csv
import os
import random
import resource
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--output", type=Path, required=True, help="the graphdoc model folder to write")
    p.add_argument("--data-dir", type=Path, default=DEFAULT_DATA, help="holds qmsum/")
    p.add_argument("--config", type=Path, default=ROOT / "graphdoc" / "configs" / "section-graph.yaml")
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32, help="queries per step")
    p.add_argument("--temperature", type=float, default=0.05)
    p.add_argument("--negative-depth", type=int, default=20, help="BM25 passages a hard negative is drawn from")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    return p.parse_args(argv)


def log(message: str) -> None:
    print(time.strftime("%H:%M:%S"), message, flush=True)


def read_spans(path: Path) -> dict[str, list[tuple[str, int, int]]]:
    spans = defaultdict(list)
    with path.open(encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle, delimiter="\t"):
            spans[row["query-id"]].append((row["corpus-id"], int(row["start"]), int(row["end"])))
    return spans


class Passages:
    """Every passage of the training meetings: its meeting, token ids, text and character span."""

    def __init__(self, model, docs: dict, meetings: list[str], max_passages: int | None) -> None:
        self.doc, self.ids, self.text, self.span = [], [], [], []
        self.of_doc: dict[str, list[int]] = defaultdict(list)
        for doc_id in meetings:
            prepared = model.prepare(docs[doc_id], max_passages)
            for passage, ids in zip(prepared.passages, prepared.token_ids):
                self.of_doc[doc_id].append(len(self.doc))
                self.doc.append(doc_id)
                self.ids.append(ids)
                self.text.append(passage.text)
                self.span.append((passage.start, passage.end))

    def answering(self, spans: list[tuple[str, int, int]]) -> list[int]:
        """The passages overlapping one of ``spans``."""
        return sorted({i for doc_id, start, end in spans for i in self.of_doc[doc_id]
                       if self.span[i][0] < end and self.span[i][1] > start})


def hard_negatives(passages: Passages, examples: list, queries: dict, depth: int) -> dict[str, list[int]]:
    """For each query, the BM25-best passages of meetings it is not about."""
    import bm25s

    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(passages.text, stopwords="en", show_progress=False), show_progress=False)
    qids = [q for q, _, _ in examples]
    ranked, _ = retriever.retrieve(bm25s.tokenize([queries[q] for q in qids], stopwords="en", show_progress=False),
                                   k=depth * 4, show_progress=False)
    return {q: [int(i) for i in row if passages.doc[int(i)] not in about][:depth]
            for q, row, (_, _, about) in zip(qids, ranked, examples)}


def train(model, passages: Passages, examples: list, negatives: dict, query_ids: dict, args) -> None:
    encoder = model.passage_encoder
    optimizer = torch.optim.AdamW(encoder.parameters(), lr=args.lr, weight_decay=0.01)
    total = args.epochs * -(-len(examples) // args.batch_size)
    warm = max(1, total // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warm, max(0.0, (total - s) / max(1, total - warm))))
    precision, encoder.config.precision = encoder.config.precision, "bf16"
    encoder.train()
    step, start = 0, time.perf_counter()
    for epoch in range(args.epochs):
        order = random.sample(examples, len(examples))
        for b in range(0, len(order), args.batch_size):
            batch = order[b:b + args.batch_size]
            candidates = [random.choice(positives) for _, positives, _ in batch] + \
                [random.choice(negatives[q]) for q, _, _ in batch if negatives[q]]
            q_vectors = encoder.encode_ids([query_ids[q] for q, _, _ in batch])        # [B, hidden]
            p_vectors = encoder.encode_ids([passages.ids[i] for i in candidates])     # [C, hidden]
            scores = (q_vectors @ p_vectors.T).float() / args.temperature          # [B, C]
            own = torch.tensor([[c != r and passages.doc[i] in about for c, i in enumerate(candidates)]
                                for r, (_, _, about) in enumerate(batch)])
            loss = F.cross_entropy(scores.masked_fill(own, -1e4), torch.arange(len(batch)))
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(encoder.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            step += 1
            if step % 10 == 0 or step == total:
                log(f"epoch {epoch + 1} step {step}/{total}: loss {loss.item():.4f}, "
                    f"{time.perf_counter() - start:.0f} s")
    encoder.eval()
    encoder.config.precision = precision


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    folder = args.data_dir / "qmsum"
    needed = [folder / name for name in ("corpus.jsonl.gz", "queries.jsonl", "spans/train.tsv")]
    missing = [str(p) for p in needed if not p.is_file()]
    if missing:
        raise SystemExit(f"qmsum_span_encoder.py: missing {', '.join(missing)} (see --data-dir)")
    torch.set_num_threads(args.threads)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    from graphdoc.config import load_config_file
    from graphdoc.corpus import read_corpus, read_queries
    from graphdoc.encoder import GraphDocEncoder

    config = load_config_file(args.config)
    model = GraphDocEncoder.from_pretrained(None, config=config, device="cpu")
    docs = {d.id: d for d in read_corpus(folder)}
    queries = dict(read_queries(folder, "train"))
    spans = {q: s for q, s in read_spans(folder / "spans" / "train.tsv").items() if q in queries}
    meetings = sorted({doc_id for s in spans.values() for doc_id, _, _ in s})
    passages = Passages(model, docs, meetings, config.chunker.max_passages)
    examples = [(q, passages.answering(s), {doc_id for doc_id, _, _ in s}) for q, s in spans.items()]
    examples = [e for e in examples if e[1]]
    log(f"{len(examples)} training queries over {len(meetings)} meetings ({len(passages.doc)} passages); "
        f"{np.mean([len(e[1]) for e in examples]):.1f} answer passages a query")
    negatives = hard_negatives(passages, examples, queries, args.negative_depth)
    query_ids = {q: model.prepare_query(queries[q]).token_ids[0] for q, _, _ in examples}  # with any query prompt
    start = time.perf_counter()
    train(model, passages, examples, negatives, query_ids, args)
    model.save_pretrained(args.output)
    log(f"saved {args.output}: trained in {time.perf_counter() - start:.0f} s, "
        f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
