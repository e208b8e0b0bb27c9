r"""Pretraining objectives of flat backbones: positive texts, their in-batch loss and MLM masking.

A flat backbone embeds a text directly (no passage graph), so its positives are texts rather than
passage subsets. Each constructor turns one document into two texts; a batch of ``N`` documents gives
two views ``a, b: [N, d]`` once embedded, and :func:`info_nce_pairs` scores them.

- ``docsplit``: every sentence goes at random to one of two halves, each kept in document order;
  trained as contrastive loss + ``0.1`` x masked language modelling (:func:`docsplit_loss`).
- ``simcse``: the text against itself; the two views differ only by dropout, so the encoder must be in
  training mode (dropout on) for both forward passes, and the two passes must be separate calls (or one
  call over the duplicated batch): with dropout off the positives are identical and the loss learns
  nothing.
- ``crop``: two independent random word spans of the document (Contriever's cropping).

These are pure building blocks: nothing here touches a model or the trainer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from graphdoc.chunker import sentence_word_spans
from graphdoc.documents import Document
from graphdoc.errors import GraphDocError
from graphdoc.training.objectives import symmetric_info_nce

#: the label of a position the MLM loss ignores (Hugging Face's and PyTorch's cross-entropy default)
IGNORE_INDEX = -100

TextPair = tuple[str, str]


# --- docsplit -------------------------------------------------------------------------------------

def docsplit_halves(sentences: Sequence[str], rng: np.random.Generator) -> tuple[list[int], list[int]]:
    """Sentence indices of two random halves: each sentence goes to either half with probability 1/2.

    Both halves are in document order, hold every sentence exactly once between them, and are never
    empty (if the draw leaves one empty, one random sentence moves over). Needs at least 2 sentences.
    """
    n = len(sentences)
    if n < 2:
        raise ValueError(f"docsplit needs at least 2 sentences; got {n}")
    side = rng.integers(0, 2, size=n)
    if side.min() == side.max():
        side[rng.integers(n)] ^= 1
    return [i for i in range(n) if side[i] == 0], [i for i in range(n) if side[i] == 1]


def document_sentences(doc: Document, end: int | None = None) -> list[str]:
    """The document's sentences (blingfire, within each section), as text, in order. The title is left out.

    ``end``: only the sentences that start before this character offset of ``doc.text`` (e.g. the end of
    the passages a graph model keeps).
    """
    sentences = []
    for section in doc.section_spans():
        for words in sentence_word_spans(doc.text, section.start, section.end):
            if end is not None and words[0][0] >= end:
                return sentences
            sentences.append(doc.text[words[0][0]:words[-1][1]])
    return sentences


def docsplit_pair(sentences: Sequence[str], rng: np.random.Generator) -> TextPair:
    """The two halves of :func:`docsplit_halves` as texts, each half's sentences joined by a space."""
    first, second = docsplit_halves(sentences, rng)
    return " ".join(sentences[i] for i in first), " ".join(sentences[i] for i in second)


def docsplit_texts(doc: Document, rng: np.random.Generator) -> TextPair:
    """The two halves of ``doc`` (see :func:`docsplit_halves`) as texts, sentences joined by a space.

    The title goes in neither half: a title shared by both would make every pair trivially similar.
    Raises ``ValueError`` for a document of fewer than 2 sentences (a caller skips it).
    """
    return docsplit_pair(document_sentences(doc), rng)


# --- simcse ---------------------------------------------------------------------------------------

def simcse_pairs(texts: Sequence[str]) -> list[TextPair]:
    """Each text paired with itself: the identity construction of unsupervised SimCSE.

    The two views only differ through dropout, so both must be encoded with the model in training mode
    (see the module docstring).
    """
    return [(text, text) for text in texts]


# --- crop -----------------------------------------------------------------------------------------

def random_crop(num_words: int, rng: np.random.Generator, min_ratio: float = 0.1,
                max_ratio: float = 0.5) -> tuple[int, int]:
    """A random word span ``[start, end)`` of ``max(1, int(r * num_words))`` words, ``r ~ U(min, max)``.

    As in Contriever: the length ratio is drawn uniformly, then the start uniformly among the spans of
    that length that fit in the text.
    """
    if num_words < 1:
        raise ValueError(f"a crop needs at least 1 word; got {num_words}")
    if not 0.0 < min_ratio <= max_ratio <= 1.0:
        raise ValueError(f"crop ratios must satisfy 0 < min_ratio <= max_ratio <= 1; "
                         f"got {min_ratio!r}, {max_ratio!r}")
    ratio = rng.uniform(min_ratio, max_ratio)
    length = min(num_words, max(1, int(ratio * num_words)))
    start = int(rng.integers(0, num_words - length + 1))
    return start, start + length


def crop_texts(text: str, rng: np.random.Generator, min_ratio: float = 0.1,
               max_ratio: float = 0.5) -> TextPair:
    """Two independent random crops of ``text`` (whitespace words, joined by a space)."""
    words = text.split()
    crops = []
    for _ in range(2):
        start, end = random_crop(len(words), rng, min_ratio, max_ratio)
        crops.append(" ".join(words[start:end]))
    return crops[0], crops[1]


# --- losses ---------------------------------------------------------------------------------------

def info_nce_pairs(a: torch.Tensor, b: torch.Tensor, temperature: float = 0.05,
                   similarity: str = "cosine") -> torch.Tensor:
    r"""Symmetric in-batch InfoNCE over pairs ``(a_i, b_i)``: the graph objectives' loss, for two views.

    The views are interleaved into ``z = [a_1, b_1, a_2, b_2, ...]`` and scored by
    :func:`~graphdoc.training.objectives.symmetric_info_nce`: each of the ``2N`` vectors picks its
    partner among the ``2N - 1`` others, so flat and graph backbones train under the same loss.

    Shapes: ``a, b: [N, d]`` (``N >= 1``) -> scalar.
    """
    if a.shape != b.shape or a.dim() != 2:
        raise ValueError(f"expected two [N, d] views of the same shape; got {tuple(a.shape)} and {tuple(b.shape)}")
    z = torch.stack([a, b], dim=1).reshape(-1, a.shape[-1])  # [2N, d], rows 2i and 2i + 1 are a pair
    return symmetric_info_nce(z, similarity, temperature)


def docsplit_loss(contrastive: torch.Tensor, mlm: torch.Tensor, mlm_weight: float = 0.1) -> torch.Tensor:
    """The docsplit objective: ``contrastive + mlm_weight * mlm`` (the MLM loss keeps the encoder's
    token-level knowledge while the contrastive loss reshapes its document vectors)."""
    if mlm_weight < 0:
        raise ValueError(f"mlm_weight must be >= 0; got {mlm_weight!r}")
    return contrastive + mlm_weight * mlm


# --- masked language modelling --------------------------------------------------------------------

Generator = np.random.Generator | torch.Generator


def mask_tokens(input_ids: torch.Tensor, tokenizer: Any, rng_or_generator: Generator,
                probability: float = 0.15) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's masking, as Hugging Face's ``DataCollatorForLanguageModeling`` does it.

    Each token that is not special (``[CLS]``, ``[SEP]``, padding, ...) is selected with
    ``probability``; a selected token becomes the mask token 80% of the time, a random vocabulary token
    10% of the time, and stays as it is otherwise. ``labels`` holds the original id at the selected
    positions and ``-100`` (ignored by the loss) everywhere else; ``input_ids`` is left unchanged.

    Shapes: ``input_ids: [B, L]`` (or ``[L]``) -> ``masked_ids, labels`` of the same shape.
    """
    if tokenizer.mask_token_id is None:
        raise GraphDocError("masked language modelling needs a tokenizer with a mask token; this one has none")
    if not 0.0 <= probability <= 1.0:
        raise ValueError(f"probability must be in [0, 1]; got {probability!r}")
    shape, device = input_ids.shape, input_ids.device
    special = torch.isin(input_ids, torch.tensor(sorted(tokenizer.all_special_ids), dtype=input_ids.dtype,
                                                 device=device))
    selected = (_uniform(shape, rng_or_generator, device) < probability) & ~special
    labels = torch.where(selected, input_ids, torch.full_like(input_ids, IGNORE_INDEX))
    # 80% [MASK]; of the remaining 20%, half a random token, half unchanged
    to_mask = selected & (_uniform(shape, rng_or_generator, device) < 0.8)
    to_random = selected & ~to_mask & (_uniform(shape, rng_or_generator, device) < 0.5)
    random_ids = _integers(len(tokenizer), shape, rng_or_generator).to(device=device, dtype=input_ids.dtype)
    masked = input_ids.clone()
    masked[to_mask] = tokenizer.mask_token_id
    masked[to_random] = random_ids[to_random]
    return masked, labels


def _uniform(shape: torch.Size, gen: Generator, device: torch.device) -> torch.Tensor:
    # drawn on the CPU (where the generator lives), so a seed gives the same masks on every device
    if isinstance(gen, torch.Generator):
        return torch.rand(shape, generator=gen).to(device)
    return torch.from_numpy(gen.random(tuple(shape))).to(device)


def _integers(high: int, shape: torch.Size, gen: Generator) -> torch.Tensor:
    if isinstance(gen, torch.Generator):
        return torch.randint(high, shape, generator=gen)
    return torch.from_numpy(gen.integers(0, high, size=tuple(shape)))
