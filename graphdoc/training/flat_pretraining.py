"""What pretraining does with a flat model: documents -> two texts -> FirstP vectors -> backward (+ MLM).

- ``docsplit`` (DocSplit / SimDE): each sentence goes at random to one of two halves, order kept; the
  contrastive loss plus ``mlm_weight`` (0.1 by default) times the masked-language-model loss.
- ``simcse``: the document's FirstP text (title and text) twice; the two views differ by dropout only.
- ``crop``: two random word spans of the text (Contriever).

A view is embedded the way :class:`~graphdoc.flat_encoder.FlatEncoder` embeds a document in ``first``
mode, the text truncated to the encoder's ``max_seq_length`` and pooled, but in training mode: dropout is
on, which ``simcse`` needs (both views of a text go through the same call; each row draws its own
dropout). The MLM loss runs the encoder again over masked copies of every view, as SimCSE's auxiliary
MLM does, through a :class:`~graphdoc.training.masked_lm_head.MaskedLMHead` that shares the encoder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from graphdoc.backbones import FLAT
from graphdoc.batching import token_budget_batches
from graphdoc.device import autocast
from graphdoc.documents import Document
from graphdoc.errors import GraphDocError
from graphdoc.models.passage_encoder import MAX_BATCH_SEQUENCES, PassageEncoder
from graphdoc.training import checkpoint as ckpt
from graphdoc.training import data
from graphdoc.training.config import PretrainConfig
from graphdoc.training.distributed import DistContext, gather_tensors
from graphdoc.training.flat_objectives import (
    IGNORE_INDEX,
    crop_texts,
    docsplit_pair,
    document_sentences,
    mask_tokens,
)
from graphdoc.training.grad_cache import LossFn, grad_cache_backward
from graphdoc.training.graph_pretraining import enable_checkpointing
from graphdoc.training.masked_lm_head import MaskedLMHead
from graphdoc.training.projection_head import (
    PROJECTION_HEAD,
    projection_head,
    restore_head,
)

REQUIREMENTS = {"docsplit": "two or more sentences", "simcse": "text", "crop": "text"}
MLM_HEAD = "mlm_head"  # the head's weights in a checkpoint: mlm_head.safetensors


class FlatPretraining:
    """The flat backbone's side of a run: preparation, text views, the backward pass of a step.

    ``trainable`` is what the optimiser updates: the model, with the MLM head when the loss has an MLM term
    (the head's output embeddings are the model's, so they are one parameter) and the projection head when
    there is one.
    """

    def __init__(self, model, cfg: PretrainConfig, resume: bool = False, ctx: DistContext | None = None) -> None:
        self.model, self.cfg, self.ctx = model, cfg, ctx or DistContext()
        self.encoder: PassageEncoder = model.passage_encoder
        self.requirement = REQUIREMENTS[cfg.objective]
        self.cache = None
        self.mlm_weight = cfg.effective_mlm_weight(FLAT)
        if cfg.gradient_checkpointing:
            enable_checkpointing(self.encoder.model)
        self.mlm_head = None
        if self.mlm_weight > 0:  # a resumed run reads the head's weights from its checkpoint
            self.mlm_head = MaskedLMHead.load(self.encoder, None if resume else mlm_source(model), cfg.seed)
        self.head = projection_head(model, cfg.projection_head, cfg.seed)
        extra = {name: m for name, m in ((MLM_HEAD, self.mlm_head), (PROJECTION_HEAD, self.head)) if m is not None}
        self.trainable = nn.ModuleDict({"model": model, **extra}) if extra else model
        self.trainable.train()

    # ------------------------------------------------------------------ data
    def prepare(self, doc: Document) -> Any:
        """What the views are made of: the sentences (``docsplit``), the FirstP text (``simcse``), the text."""
        if self.cfg.objective == "docsplit":
            return document_sentences(doc)
        return self.model.first_input(doc) if self.cfg.objective == "simcse" else doc.text

    def usable(self, prepared: Any) -> bool:
        return len(prepared) >= 2 if self.cfg.objective == "docsplit" else bool(prepared.split())

    def views(self, examples: Sequence[data.Example], epoch: int) -> list[list[int]]:
        """Token ids of the two views of every example, in pairs ``[a_1, b_1, a_2, b_2, ...]``, truncated."""
        cfg, texts = self.cfg, []
        for example in examples:
            rng = np.random.default_rng([cfg.seed, epoch, example.position])
            if cfg.objective == "docsplit":
                texts += docsplit_pair(example.prepared, rng)
            elif cfg.objective == "simcse":
                texts += [example.prepared, example.prepared]
            else:
                texts += crop_texts(example.prepared, rng, cfg.crop_min_ratio, cfg.crop_max_ratio)
        prompt = "" if cfg.objective == "simcse" else self.encoder.passage_prompt  # FirstP inputs carry it already
        return self.encoder.tokenize([prompt + text for text in texts], truncate=True)

    # ------------------------------------------------------------------ step
    def backward(self, examples: Sequence[data.Example], epoch: int, loss_fn: LossFn, scale,
                 device: torch.device) -> tuple[float, float | None]:
        """Back-propagate ``contrastive + mlm_weight * mlm``; returns the total and the MLM loss (or ``None``)."""
        ids = self.views(examples, epoch)
        loss = float(grad_cache_backward(self.embed, ids, [1] * len(ids), self.cfg.grad_cache_chunk, loss_fn,
                                         scale, device))
        if self.mlm_head is None:
            return loss, None
        masked, labels = self.masked_views(ids, examples, epoch)
        # the mean over the masked tokens of every process: each back-propagates its share, scaled by the
        # number of processes, which the gradient average divides out again
        total = self._sum_over_processes(sum(int((lab != IGNORE_INDEX).sum()) for lab in labels), device)
        share = masked_lm_backward(self.encoder, self.mlm_head, masked, labels, self.mlm_weight * self.ctx.world_size,
                                   scale, total)
        mlm = self._sum_over_processes(share, device)
        return loss + self.mlm_weight * mlm, mlm

    def _sum_over_processes(self, value: float, device: torch.device) -> float:
        return float(sum(t.item() for t in gather_tensors(torch.tensor([float(value)], device=device), self.ctx)))

    def embed(self, ids: Sequence[list[int]]) -> torch.Tensor:
        """Pooled vectors of token sequences, with gradients, through the projection head if there is one:
        ``[len(ids), hidden]``."""
        if not ids:  # a process with no share of a tiny last batch still joins the gather
            vectors = torch.zeros((0, self.model.dimension), device=self.model.device, requires_grad=True)
        else:
            vectors = self.encoder.encode_ids(list(ids))
        return vectors if self.head is None else self.head(vectors)

    def masked_views(self, ids: list[list[int]], examples: Sequence[data.Example],
                     epoch: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """BERT masking of every view, drawn from ``(seed, epoch, position, view)``: inputs and labels."""
        masked, labels = [], []
        for i, seq in enumerate(ids):
            rng = np.random.default_rng([self.cfg.seed, epoch, examples[i // 2].position, 1 + i % 2])
            m, lab = mask_tokens(torch.tensor(seq), self.encoder.tokenizer, rng, self.cfg.mlm_probability)
            masked.append(m)
            labels.append(lab)
        return masked, labels

    # ------------------------------------------------------------------ checkpoints
    def checkpoint_tensors(self) -> dict[str, dict[str, torch.Tensor]]:
        """The heads' own weights, saved beside the model (which is the FlatEncoder alone)."""
        tensors = {} if self.mlm_head is None else {MLM_HEAD: self.mlm_head.own_state_dict()}
        return tensors if self.head is None else {**tensors, PROJECTION_HEAD: self.head.state_dict()}

    def restore_tensors(self, folder: Path) -> None:
        if self.head is not None:
            restore_head(self.head, folder)
        if self.mlm_head is None:
            return
        path = folder / f"{MLM_HEAD}.safetensors"
        if not path.is_file():
            raise GraphDocError(f"checkpoint {folder} has no {path.name}: it was not written by an MLM run")
        with ckpt.unreadable_as_error(folder):
            self.mlm_head.load_own_state_dict(ckpt.load_tensors(folder, path.name))


def masked_lm_backward(encoder: PassageEncoder, head: MaskedLMHead, masked: list[torch.Tensor],
                       labels: list[torch.Tensor], weight: float,
                       scale: Callable[[torch.Tensor], torch.Tensor] | None = None, total: float | None = None) -> float:
    """Back-propagate ``weight`` x the cross-entropy summed over the masked tokens of ``masked`` and divided by
    ``total`` (default: their number, i.e. the mean); returns that sum / ``total``.

    Sequences go through the encoder in token-budget batches; the head only sees the masked positions
    (``[M, hidden] -> [M, vocab]``), which keeps the vocabulary-sized logits small.
    """
    scale = scale or (lambda loss: loss)
    total = total if total is not None else int(sum(int((lab != IGNORE_INDEX).sum()) for lab in labels))
    if total == 0:
        return 0.0
    device = next(encoder.parameters()).device
    mean = 0.0
    for batch in token_budget_batches([len(m) for m in masked], encoder.config.max_tokens_per_batch,
                                      MAX_BATCH_SEQUENCES):
        input_ids, mask = encoder.pad([masked[i].tolist() for i in batch], device)  # [B, L]
        target = torch.full_like(input_ids, IGNORE_INDEX)
        for row, i in enumerate(batch):
            target[row, :len(labels[i])] = labels[i].to(device)
        picked = target != IGNORE_INDEX
        if not picked.any():
            continue
        with autocast(device, encoder.config.precision):
            logits = head(encoder.hidden_states(input_ids, mask)[picked])  # [M, vocab]
        loss = F.cross_entropy(logits.float(), target[picked], reduction="sum") / total
        scale(weight * loss).backward()
        mean += float(loss.detach())
    return mean


def mlm_source(model) -> str:
    """Where the model's encoder weights came from, to load its checkpoint's MLM head: a saved graphdoc
    model's ``passage_encoder/`` folder, or the Hugging Face name or folder it was built on."""
    from graphdoc.default_model import resolve_model_name
    from graphdoc.serialization import PASSAGE_ENCODER_DIR, is_graphdoc_model

    path = Path(str(model.name_or_path))
    return str(path / PASSAGE_ENCODER_DIR) if is_graphdoc_model(path) else resolve_model_name(str(model.name_or_path))
