"""What pretraining does with a graph model: documents -> two sub-document graphs -> vectors -> backward.

- ``half`` / ``ict``: the two sub-documents are subsets of the document's first ``max_passages`` passages.
- ``docsplit``: the sentences of those passages go at random to two halves (order kept); each half's text
  is chunked by the model's own :meth:`~graphdoc.encoder.GraphDocEncoder.prepare` into its own graph.

With a frozen encoder every passage vector comes from the on-disk cache (the halves of ``docsplit`` change
every epoch, so their passages are new ones, encoded once each) and only the graph layers train.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn

from graphdoc.documents import Document
from graphdoc.encoder import GraphDocEncoder
from graphdoc.training import data
from graphdoc.training.cache import PassageVectorCache, cache_folder
from graphdoc.training.config import PretrainConfig
from graphdoc.training.flat_objectives import docsplit_pair, document_sentences
from graphdoc.training.grad_cache import LossFn, grad_cache_backward
from graphdoc.training.projection_head import PROJECTION_HEAD, projection_head, restore_head

#: what a document needs to be split, by objective
REQUIREMENTS = {"half": "two or more passages", "ict": "two or more passages",
                "docsplit": "two or more sentences"}


class GraphPretraining:
    """The graph backbone's side of a run: preparation, positives and the backward pass of a step.

    ``trainable`` is what the optimiser updates: the model, with the projection head when there is one;
    ``cache`` the frozen-encoder passage cache.
    """

    def __init__(self, model: GraphDocEncoder, cfg: PretrainConfig, output: Path) -> None:
        self.model, self.trainable, self.cfg = model, model, cfg
        self.requirement = REQUIREMENTS[cfg.objective]
        self.cache: PassageVectorCache | None = None
        encoder = model.passage_encoder
        if cfg.frozen_encoder:
            encoder.requires_grad_(False)
            self.cache = PassageVectorCache(cache_folder(cfg.cache_dir, output),
                                            encoder)
        elif cfg.gradient_checkpointing:
            enable_checkpointing(encoder.model)
        self.head = projection_head(model, cfg.projection_head, cfg.seed)
        if self.head is not None:
            self.trainable = nn.ModuleDict({"model": model, PROJECTION_HEAD: self.head})
        self.trainable.train()
        if cfg.frozen_encoder:
            encoder.eval()  # no dropout: the cached vectors are the encoder's inference vectors

    # ------------------------------------------------------------------ data
    def prepare(self, doc: Document) -> Any:
        """The document's first ``max_passages`` passages; for ``docsplit``, the sentences of its first
        ``max_passages`` chunks (the halves are chunked and tokenized in the step)."""
        if self.cfg.objective != "docsplit":
            return self.model.prepare(doc, self.cfg.max_passages)
        chunks = self.model.chunker(doc)
        return document_sentences(doc, end=chunks[min(len(chunks), self.cfg.max_passages) - 1].end) if chunks else []

    def usable(self, prepared: Any) -> bool:
        return len(prepared) >= 2 if self.cfg.objective == "docsplit" else data.two_passages(prepared)

    def sub_documents(self, examples: Sequence[data.Example], epoch: int) -> list[data.SubDocument]:
        """Pairs ``[a_1, b_1, a_2, b_2, ...]``, with cached passage vectors in frozen mode."""
        cfg = self.cfg
        if cfg.objective != "docsplit":
            subdocs = data.sub_documents(examples, cfg.objective, cfg.seed, epoch, cfg.ict_first_passage)
        else:
            subdocs = []
            for example in examples:
                rng = np.random.default_rng([cfg.seed, epoch, example.position])
                for text in docsplit_pair(example.prepared, rng):
                    half = self.model.prepare(Document(str(example.position), text), cfg.max_passages)
                    subdocs.append(data.SubDocument(half.token_ids, half.section_ids))
        if self.cache is not None:
            flat = self.cache.encode([t for s in subdocs for t in s.token_ids])  # [sum n_i, hidden]
            for subdoc, vectors in zip(subdocs, torch.split(flat, [s.num_passages for s in subdocs])):
                subdoc.vectors = vectors
        return subdocs

    # ------------------------------------------------------------------ step
    def backward(self, examples: Sequence[data.Example], epoch: int, loss_fn: LossFn, scale,
                 device: torch.device) -> tuple[float, float | None]:
        """Back-propagate the contrastive loss of ``examples``; returns it (and no MLM loss)."""
        subdocs = self.sub_documents(examples, epoch)
        loss = grad_cache_backward(self.embed, subdocs, [s.num_passages for s in subdocs], self.cfg.grad_cache_chunk,
                                   loss_fn, scale, device)
        return float(loss), None

    def embed(self, subdocs: Sequence[data.SubDocument]) -> torch.Tensor:
        """Document vectors of sub-documents, each its own graph, through the projection head if there is one:
        ``[len(subdocs), d]``."""
        if not subdocs:  # a process with no share of a tiny last batch still joins the gather
            vectors = torch.zeros((0, self.model.dimension), device=self.model.device, requires_grad=True)
        elif subdocs[0].vectors is not None:
            vectors = self.model.forward_passage_vectors([s.vectors for s in subdocs],
                                                         [s.section_ids for s in subdocs]).document_embeddings
        else:
            flat = self.model.passage_encoder.encode_ids([t for s in subdocs for t in s.token_ids])
            vectors = self.model.forward_passage_vectors(list(torch.split(flat, [s.num_passages for s in subdocs])),
                                                         [s.section_ids for s in subdocs]).document_embeddings
        return vectors if self.head is None else self.head(vectors)

    # ------------------------------------------------------------------ checkpoints
    def checkpoint_tensors(self) -> dict[str, dict[str, torch.Tensor]]:
        """Weights to checkpoint beside the model and optimiser: the projection head's, if any."""
        return {} if self.head is None else {PROJECTION_HEAD: self.head.state_dict()}

    def restore_tensors(self, folder: Path) -> None:
        if self.head is not None:
            restore_head(self.head, folder)


def enable_checkpointing(hf_model) -> None:
    """Activation (gradient) checkpointing of a Hugging Face model; the method was renamed in transformers 5."""
    if not getattr(hf_model, "supports_gradient_checkpointing", False):
        return
    kwargs = {"use_reentrant": False}
    if hasattr(hf_model, "activation_checkpointing_enable"):
        hf_model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        hf_model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
