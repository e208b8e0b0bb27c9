"""Token-budget batching: group sequences, longest first, so each padded batch fits a token budget."""

from __future__ import annotations

from typing import Sequence


def token_budget_batches(lengths: Sequence[int], max_tokens: int,
                         max_batch_size: int | None = None) -> list[list[int]]:
    """Split sequence indices into batches whose padded size (``len(batch) * longest``) fits ``max_tokens``.

    Indices are sorted by length, longest first, so padding is minimal; a sequence longer than the
    budget gets a batch of its own. Every index appears in exactly one batch.
    """
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for i in order:
        longest_if_added = max(longest, lengths[i], 1)
        full = max_batch_size is not None and len(current) >= max_batch_size
        if current and (full or (len(current) + 1) * longest_if_added > max_tokens):
            batches.append(current)
            current, longest_if_added = [], max(lengths[i], 1)
        current.append(i)
        longest = longest_if_added
    if current:
        batches.append(current)
    return batches
