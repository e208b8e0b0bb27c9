"""Supervised contrastive classification fine-tuning (CoLDE's objective) with an online linear probe.

Every training document of a batch is split into two sub-documents, two random halves of its passages
(pretraining's ``half`` split, drawn from ``(seed, epoch, position)`` as
:func:`graphdoc.training.data.sub_documents` draws it; a one-passage document is a single view, itself).
Each sub-document is its own graph. The supervised contrastive loss over all the batch's sub-document
vectors, with their documents' labels, trains the model: every same-label sub-document is a positive.

The linear head is trained in the same step with cross-entropy on the *detached* whole-document vectors,
so it follows the model without shaping it, and the saved classifier predicts as a cross-entropy one does.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from graphdoc.finetune.inputs import GraphInputs
from graphdoc.training.objectives import make_split, supervised_contrastive_loss


def view_indices(num_passages: int, seed: int, epoch: int, position: int) -> list[np.ndarray]:
    """The passage indices of each view of a document: two random halves, or the single passage."""
    if num_passages < 2:
        return [np.arange(num_passages)]
    return list(make_split("half", num_passages, np.random.default_rng([seed, epoch, position])))


def supcon_losses(inputs: GraphInputs, head, keys: Sequence[str], targets: torch.Tensor,
                  positions: Sequence[int], config, epoch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The contrastive loss over the sub-documents of ``keys`` and the probe's cross-entropy.

    ``targets`` (``[B]``) are the documents' class indices; ``positions`` their places in the training
    set (with ``config.seed`` and ``epoch``, they fix the splits); ``head`` maps ``[B, d]`` to logits.
    """
    views, owners = [], []
    for i, (key, position) in enumerate(zip(keys, positions)):
        for idx in view_indices(len(inputs.prepared[key].passages), config.seed, epoch, position):
            views.append((key, idx.tolist()))
            owners.append(i)
    z = inputs.embed_views(views).document_embeddings  # [V, d], V <= 2B
    contrastive = supervised_contrastive_loss(z, targets[owners], config.similarity, config.temperature)
    with torch.no_grad():
        whole = inputs.embed(keys).document_embeddings  # [B, d]
    return contrastive, F.cross_entropy(head(whole), targets)
