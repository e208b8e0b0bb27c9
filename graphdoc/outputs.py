"""What a forward pass over a batch of document graphs returns."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import torch

from graphdoc.documents import Document, Passage


@dataclass
class PreparedDocument:
    """A document chunked and tokenized: its passages and each passage's encoder token ids."""

    document: Document
    passages: list[Passage]
    token_ids: list[list[int]]
    #: a query (:meth:`GraphDocEncoder.prepare_query`): its one input carries the query prompt, which a model
    #: reading the text itself (flat FirstP) must keep
    query: bool = False
    #: the passage prompt its inputs carry where not the model's (``encode(prompt=...)``), which a model reading the
    #: text itself (flat FirstP) must put before it too
    prompt: str | None = None

    @property
    def section_ids(self) -> list[int]:
        return [p.section for p in self.passages]

    def subset(self, indices: Sequence[int]) -> PreparedDocument:
        """A sub-document: the passages ``indices`` (keeping their token ids, sections and indices).

        Its text is theirs joined by newlines, offsets moved to match, so a model that reads the text
        (a flat FirstP model) sees the same part of the document as one that reads the passages.
        """
        passages, offset = [], 0
        for i in indices:
            p = self.passages[i]
            passages.append(replace(p, start=offset, end=offset + len(p.text)))
            offset += len(p.text) + 1
        document = replace(self.document, text="\n".join(p.text for p in passages), sections=None)
        return PreparedDocument(document, passages, [self.token_ids[i] for i in indices], prompt=self.prompt)


@dataclass
class GraphOutput:
    """Node vectors of a batch of document graphs.

    ``node_embeddings`` holds every graph's nodes, graph ``i`` at rows ``ptr[i]:ptr[i+1]``, its
    document node first. ``attention`` holds, per GAT layer, ``(edge_index [2, E], alpha [E, heads])``
    over the batch's global node numbering (self-loops included), when asked for.
    """

    documents: list[PreparedDocument]
    document_embeddings: torch.Tensor  # [B, d]
    node_embeddings: torch.Tensor  # [N, d]
    ptr: torch.Tensor  # [B + 1]
    attention: list[tuple[torch.Tensor, torch.Tensor]] | None = field(default=None)

    def cpu(self) -> "GraphOutput":
        """The same output with its tensors in the CPU's memory, in float32: one copy from a GPU for the batch
        rather than a few small ones (each a wait) per document when the documents are read one by one."""
        attention = None if self.attention is None else [(e.cpu(), a.float().cpu()) for e, a in self.attention]
        return GraphOutput(self.documents, self.document_embeddings.float().cpu(), self.node_embeddings.float().cpu(),
                           self.ptr.cpu(), attention)

    def passage_embeddings(self, i: int) -> torch.Tensor:
        """The graph-contextualised passage vectors of document ``i``: ``[n_passages, d]``."""
        start, end = int(self.ptr[i]), int(self.ptr[i + 1])
        return self.node_embeddings[start:end] if end - start == 1 else self.node_embeddings[start + 1:end]

    def document_attention(self, i: int, layer: int = -1) -> torch.Tensor:
        """Document ``i``'s node attention over its passages in ``layer``, mean over heads: ``[n_passages]``.

        The weights leave out the document node's attention to itself, so they sum to at most 1.
        A one-passage document attends only to itself: ``[1.0]``; with no GAT layers the weights are
        uniform (the document node is the mean of its passages).
        """
        if self.attention is None:
            raise ValueError("attention weights were not requested (return_attention_weights=True)")
        start, end = int(self.ptr[i]), int(self.ptr[i + 1])
        if end - start == 1:
            return torch.ones(1)
        if not self.attention:  # no GAT layers: the document node is the plain mean of its passages
            return torch.full((end - start - 1,), 1.0 / (end - start - 1))
        att_index, alpha = self.attention[layer]
        incoming = (att_index[1] == start) & (att_index[0] > start) & (att_index[0] < end)
        weights = torch.zeros(end - start - 1, device=alpha.device)
        weights[att_index[0, incoming] - start - 1] = alpha[incoming].mean(dim=-1)
        return weights
