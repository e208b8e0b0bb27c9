r"""Contrastive objectives: positive pairs built from a document's passages, and their InfoNCE losses.

The passage objectives turn a document of ``n`` passages into two sub-documents, each embedded as its
own graph (``docsplit``, ``simcse`` and ``crop`` make two texts instead: see
:mod:`graphdoc.training.flat_objectives`; they share the symmetric loss). A batch of ``N`` documents gives ``2N`` sub-document vectors laid out in pairs: rows ``2i`` and
``2i + 1`` come from document ``i``. Keeping pairs adjacent means that concatenating the rows of
several processes keeps every pair together, in the same order as one process would have them.

- ``half`` (the paper, section 2.2): the passages are split at random into two halves.
- ``ict`` (inverse cloze task): one passage (the first one with probability ``first_passage``, else a
  random one) against the rest; the single passage is a single-node graph.

:func:`supervised_contrastive_loss` (fine-tuning with labels) takes any layout: its positives are the
sub-documents that share a label, not fixed pairs.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from graphdoc.errors import GraphDocError

Split = tuple[np.ndarray, np.ndarray]


def split_halves(num_passages: int, rng: np.random.Generator) -> Split:
    """Two random halves of ``range(num_passages)``, each in document order.

    The first half has ``n // 2`` passages, the second ``n - n // 2``; together they hold every
    passage exactly once.
    """
    if num_passages < 2:
        raise ValueError(f"a split needs at least 2 passages; got {num_passages}")
    order = rng.permutation(num_passages)
    half = num_passages // 2
    return np.sort(order[:half]), np.sort(order[half:])


def split_ict(num_passages: int, rng: np.random.Generator, first_passage: float = 0.5) -> Split:
    """One passage (``[1]``) and the others in document order (``[n - 1]``)."""
    if num_passages < 2:
        raise ValueError(f"a split needs at least 2 passages; got {num_passages}")
    single = 0 if rng.random() < first_passage else int(rng.integers(num_passages))
    return np.array([single]), np.delete(np.arange(num_passages), single)


def make_split(objective: str, num_passages: int, rng: np.random.Generator,
               ict_first_passage: float = 0.5) -> Split:
    """The two sub-documents of ``objective`` as passage index arrays."""
    if objective == "half":
        return split_halves(num_passages, rng)
    if objective == "ict":
        return split_ict(num_passages, rng, ict_first_passage)
    raise GraphDocError(f"unknown objective {objective!r}; valid: half, ict")


def similarity_matrix(a: torch.Tensor, b: torch.Tensor, similarity: str = "cosine",
                      temperature: float = 1.0) -> torch.Tensor:
    """Scores ``s(a_i, b_j) / temperature``: dot product or cosine. Shapes: ``[n, d], [m, d] -> [n, m]``."""
    a, b = a.float(), b.float()
    if similarity == "cosine":
        a, b = F.normalize(a, dim=-1), F.normalize(b, dim=-1)
    elif similarity != "dot":
        raise GraphDocError(f"unknown similarity {similarity!r}; valid: dot, cosine")
    return a @ b.T / temperature


def symmetric_info_nce(z: torch.Tensor, similarity: str = "cosine", temperature: float = 1.0) -> torch.Tensor:
    r"""The symmetric loss of the paper's eqs. 5-6 over ``2N`` sub-documents in pairs ``(2i, 2i + 1)``.

    .. math::
        \mathcal{L} = \frac{1}{2N} \sum_{k=1}^{2N} -\log
            \frac{\exp(s(z_k, z_{k^+}) / \tau)}{\sum_{j \ne k} \exp(s(z_k, z_j) / \tau)}

    where :math:`k^+` is ``k``'s partner: each half is scored against its other half, with every
    other sub-document of the batch as a negative, in both directions.

    Shapes: ``z: [2N, d]`` -> scalar.
    """
    _check_pairs(z)
    scores = similarity_matrix(z, z, similarity, temperature)  # [2N, 2N]
    eye = torch.eye(len(z), dtype=torch.bool, device=z.device)
    scores = scores.masked_fill(eye, float("-inf"))
    partners = torch.arange(len(z), device=z.device) ^ 1  # 0<->1, 2<->3, ...
    return F.cross_entropy(scores, partners)


def ict_info_nce(z: torch.Tensor, similarity: str = "cosine", temperature: float = 1.0) -> torch.Tensor:
    r"""Inverse-cloze loss: each single passage ``q_i = z_{2i}`` picks its document ``d_i = z_{2i+1}``.

    .. math::
        \mathcal{L} = \frac{1}{N} \sum_{i=1}^{N} -\log
            \frac{\exp(s(q_i, d_i) / \tau)}{\sum_{j=1}^{N} \exp(s(q_i, d_j) / \tau)}

    The softmax runs over the long sub-documents of the batch, as in the paper's retrieval variant.

    Shapes: ``z: [2N, d]`` -> scalar.
    """
    _check_pairs(z)
    scores = similarity_matrix(z[0::2], z[1::2], similarity, temperature)  # [N, N]
    return F.cross_entropy(scores, torch.arange(len(scores), device=z.device))


def supervised_contrastive_loss(z: torch.Tensor, labels: torch.Tensor | Sequence[int], similarity: str = "cosine",
                                temperature: float = 0.1) -> torch.Tensor:
    r"""Supervised contrastive loss (Khosla et al. 2020, :math:`\mathcal{L}^{sup}_{out}`; CoLDE's objective).

    Every other sample with the same label is a positive, every other sample a candidate:

    .. math::
        \mathcal{L} = \frac{1}{|I'|} \sum_{i \in I'} \frac{-1}{|P(i)|} \sum_{p \in P(i)} \log
            \frac{\exp(s(z_i, z_p) / \tau)}{\sum_{a \ne i} \exp(s(z_i, z_a) / \tau)}

    with :math:`P(i) = \{p \ne i : y_p = y_i\}` and :math:`I' = \{i : |P(i)| > 0\}`: an anchor with no
    positive in the batch is left out of the mean. A batch with no positive pair at all gives ``0``
    (still part of the graph, so ``backward`` works and changes nothing). With labels in pairs
    ``[0, 0, 1, 1, ...]`` it equals :func:`symmetric_info_nce`.

    Shapes: ``z: [N, d]``, ``labels: [N]`` (integers) -> scalar.
    """
    labels = torch.as_tensor(labels, device=z.device)
    if z.dim() != 2 or labels.shape != (len(z),):
        raise ValueError(f"expected [N, d] vectors and [N] labels; got {tuple(z.shape)} and {tuple(labels.shape)}")
    scores = similarity_matrix(z, z, similarity, temperature)  # [N, N]
    eye = torch.eye(len(z), dtype=torch.bool, device=z.device)
    log_prob = scores.masked_fill(eye, float("-inf")).log_softmax(dim=-1)  # [N, N], -inf on the diagonal
    positive = (labels[:, None] == labels[None, :]) & ~eye  # [N, N]
    counts = positive.sum(dim=-1)  # [N]
    anchors = counts > 0
    if not anchors.any():
        return scores.sum() * 0.0
    per_anchor = -log_prob.masked_fill(~positive, 0.0).sum(dim=-1)[anchors] / counts[anchors]  # [|I'|]
    return per_anchor.mean()


def _check_pairs(z: torch.Tensor) -> None:
    if z.dim() != 2 or len(z) < 2 or len(z) % 2:
        raise ValueError(f"expected [2N, d] sub-document vectors in pairs; got shape {tuple(z.shape)}")


LossFn = Callable[[torch.Tensor, str, float], torch.Tensor]

#: objective name -> its loss over ``[2N, d]`` paired vectors (sub-documents, or the two texts of a document)
LOSSES: dict[str, LossFn] = {"half": symmetric_info_nce, "ict": ict_info_nce, "docsplit": symmetric_info_nce,
                             "simcse": symmetric_info_nce, "crop": symmetric_info_nce}
