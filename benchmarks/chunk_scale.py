"""Chunking time and memory against document size: a document of QMSum transcripts repeated to 1 to 50 MB.

Each size runs in its own process, so that its peak RSS is its own; the figure of interest is the peak above
the document itself (bytes a character) and the time a MB, which should stay flat as the size grows::

    python benchmarks/chunk_scale.py [--sizes 1 5 20 50] [--max-words 100] [--unpunctuated]

``--unpunctuated``: the transcripts on one line without punctuation (an ASR transcript): blingfire finds no
sentence end, so every window of a million characters is cut at its last space.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import gzip
import json
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "qmsum" / "corpus.jsonl.gz"


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def reset_peak_mib() -> float:
    """Start the peak RSS over from the current RSS (Linux: ``/proc/self/clear_refs``) and return it, so that
    what was built and freed before (the transcripts, the joined text) is not counted in the baseline."""
    gc.collect()
    try:  # glibc keeps freed heap memory: hand it back, or the chunker would reuse it unseen by the RSS
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")  # VmHWM, which ru_maxrss reads, back to VmRSS
    except OSError as exc:
        sys.exit(f"chunk_scale: cannot reset the peak RSS ({exc}); it needs Linux")
    return peak_mib()


def one(size_mb: float, max_words: int, unpunctuated: bool = False) -> dict:
    from graphdoc.chunker import chunk_document
    from graphdoc.documents import Document

    with gzip.open(DATA, "rt", encoding="utf-8") as f:
        transcripts = [json.loads(line)["text"] for line in f]
    target, parts, total = int(size_mb * 1e6), [], 0
    while total < target:
        for text in transcripts:
            parts.append(text)
            total += len(text) + 1
            if total >= target:
                break
    text = "\n".join(parts)
    doc = Document("big", re.sub(r"[^\w ]+", " ", text) if unpunctuated else text)
    del parts, transcripts, text
    before = reset_peak_mib()
    start = time.perf_counter()
    passages = chunk_document(doc, max_words)
    seconds = time.perf_counter() - start
    return {"chars": len(doc.text), "passages": len(passages), "seconds": seconds,
            "peak_above_mib": peak_mib() - before}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=float, nargs="+", default=[1, 5, 20, 50], help="document sizes in MB")
    parser.add_argument("--max-words", type=int, default=100)
    parser.add_argument("--unpunctuated", action="store_true", help="one line, no punctuation")
    parser.add_argument("--one", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if min(args.sizes) <= 0:
        parser.error(f"--sizes must be above 0 MB, got {min(args.sizes):g}")
    if args.one is not None:
        print(json.dumps(one(args.one, args.max_words, args.unpunctuated)))
        return
    if not DATA.is_file():
        sys.exit(f"chunk_scale: QMSum not found at {DATA} (see shared/data/README.md)")
    print("| document | passages | seconds | s / MB | peak RSS above the document | bytes / char |")
    print("|---:|---:|---:|---:|---:|---:|")
    for size in args.sizes:
        flags = ["--unpunctuated"] if args.unpunctuated else []
        done = subprocess.run([sys.executable, __file__, "--one", str(size), "--max-words", str(args.max_words),
                               *flags], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
            sys.exit(f"chunk_scale: the {size:g} MB run failed: {last}")
        r = json.loads(done.stdout)
        mb = r["chars"] / 1e6
        print(f"| {mb:.1f} M chars | {r['passages']:,} | {r['seconds']:.1f} | {r['seconds'] / mb:.2f} | "
              f"{r['peak_above_mib']:.0f} MiB | {r['peak_above_mib'] * 2**20 / r['chars']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
