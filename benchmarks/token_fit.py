"""Fitting a passage far over the encoder's token limit: a long token with no space in it (a hyphenated string,
a base64 blob) that the chunker cannot cut, re-split until every piece fits the default model's tokenizer.

The reference halves one level at a time and tokenizes every piece of every level (graphdoc before stop 28:
``PRESPLIT`` set to infinity, no cap); graphdoc halves without tokenizing while a piece is far over the limit,
and drops what lies past the passage cap before splitting it further::

    HF_HUB_OFFLINE=1 python benchmarks/token_fit.py [--chars 1000000] [--unit a-b-] [--cap 100]
"""

from __future__ import annotations

import argparse
import math
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chars", type=int, default=1_000_000)
    parser.add_argument("--unit", default="a-b-", help="repeated to make the token")
    parser.add_argument("--cap", type=int, default=100, help="passages kept (the chunker's default cap)")
    args = parser.parse_args()
    if not args.unit or args.chars < len(args.unit):
        parser.error(f"--unit must be a non-empty string of at most --chars ({args.chars}) characters, "
                     f"got {args.unit!r}")

    import graphdoc.chunker as chunker
    from graphdoc import GraphDocEncoder
    from graphdoc.chunker import chunk_document, fit_to_token_limit
    from graphdoc.documents import Document

    encoder = GraphDocEncoder.from_pretrained().passage_encoder
    text = args.unit * (args.chars // len(args.unit))
    passages = chunk_document(Document("d", text))
    rounds: list[int] = []

    def tokenize(texts: list[str]) -> list[list[int]]:
        rounds.append(sum(map(len, texts)))
        return encoder.tokenize(texts)

    def fit(limit: int | None) -> tuple[float, list, int]:
        rounds.clear()
        start = time.perf_counter()
        fitted, _, _ = fit_to_token_limit(text, passages, lambda p: p.text, tokenize, encoder.max_seq_length, limit)
        return time.perf_counter() - start, fitted, len(rounds)

    presplit = chunker.PRESPLIT
    chunker.PRESPLIT = math.inf
    ref_time, ref, ref_rounds = fit(None)
    chunker.PRESPLIT = presplit
    whole_time, whole, whole_rounds = fit(None)
    cap_time, capped, cap_rounds = fit(args.cap)
    print(f"{len(text):,} characters of {args.unit!r}, limit {encoder.max_seq_length} tokens")
    print(f"reference (a level at a time): {ref_time:.1f} s, {ref_rounds} tokenizations, {len(ref)} passages")
    print(f"graphdoc, no cap:   {whole_time:.1f} s ({whole_time / ref_time:.2f}x), {whole_rounds} tokenizations, "
          f"{len(whole)} passages, same as the reference: {[(p.start, p.end) for p in whole] == [(p.start, p.end) for p in ref]}")
    print(f"graphdoc, cap {args.cap}: {cap_time:.1f} s ({cap_time / ref_time:.2f}x), {cap_rounds} tokenizations, "
          f"the reference's first {args.cap}: {capped == ref[:args.cap]}")


if __name__ == "__main__":
    main()
