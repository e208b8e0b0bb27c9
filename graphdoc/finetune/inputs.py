"""Documents and queries held ready for training: prepared once, embedded as graphs with gradients.

In frozen-encoder mode every passage vector comes from a :class:`~graphdoc.training.cache.PassageVectorCache`
(each passage encoded once, ever) and only the graph layers see gradients; in full mode the passage
encoder runs on every batch. A query is a single-node graph (:meth:`GraphDocEncoder.prepare_query`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch

from graphdoc.documents import Document
from graphdoc.errors import GraphDocError
from graphdoc.modes import eval_mode
from graphdoc.outputs import GraphOutput, PreparedDocument
from graphdoc.training.cache import PassageVectorCache, cache_folder

ENCODE_BATCH = 256  # passages per cache lookup (misses are encoded in one call)

logger = logging.getLogger(__name__)


def open_cache(model, frozen: bool, cache_dir: str | Path | None, output: Path) -> PassageVectorCache | None:
    """The passage vector cache of the frozen mode (``None`` in full mode); freezes the passage encoder."""
    if not frozen:
        if cache_dir is not None:  # as pretrain says it
            logger.warning("ignoring cache_dir (--cache-dir) %s: only a frozen encoder caches passage vectors",
                           cache_dir)
        return None
    if cache_dir is not None and not hasattr(model, "forward_passage_vectors"):
        logger.warning("ignoring cache_dir (--cache-dir) %s: a flat model's document vectors are computed from "
                       "its text, not from cached passage vectors", cache_dir)
    model.passage_encoder.requires_grad_(False)
    model.passage_encoder.eval()  # the cached vectors are the encoder's inference vectors
    return PassageVectorCache(cache_folder(cache_dir, output), model.passage_encoder)


class GraphInputs:
    """Prepared documents by id, with their cached passage vectors (``[n, hidden]``) in frozen mode."""

    def __init__(self, model, cache: PassageVectorCache | None = None) -> None:
        self.model, self.cache = model, cache
        self.prepared: dict[str, PreparedDocument] = {}
        self.vectors: dict[str, torch.Tensor] = {}

    def __len__(self) -> int:
        return len(self.prepared)

    def __contains__(self, key: str) -> bool:
        return key in self.prepared

    def ids(self) -> list[str]:
        return list(self.prepared)

    def add_documents(self, documents: Iterable[Document], max_passages: int | None = None) -> None:
        self.add_prepared([self.model.prepare(doc, max_passages) for doc in documents])

    def add_queries(self, queries: Iterable[tuple[str, str]]) -> None:
        self.add_prepared([self.model.prepare_query(text, qid) for qid, text in queries])

    def add_prepared(self, prepared: list[PreparedDocument]) -> None:
        """Hold documents already prepared (their passage vectors looked up now in frozen mode)."""
        for start in range(0, len(prepared), 64):
            chunk = prepared[start:start + 64]
            for doc in chunk:
                self.prepared[doc.document.id] = doc
            if self.cache is not None:
                flat = self.cache.encode([ids for doc in chunk for ids in doc.token_ids])  # [sum n_i, hidden]
                parts = torch.split(flat.cpu(), [len(doc.token_ids) for doc in chunk])
                self.vectors.update({doc.document.id: v for doc, v in zip(chunk, parts)})
        if self.cache is not None:
            self.cache.flush()

    def embed(self, keys: Sequence[str]) -> GraphOutput:
        """The graphs of ``keys`` through the model (with gradients unless under ``no_grad``)."""
        return self.embed_views([(k, None) for k in keys])

    def embed_views(self, views: Sequence[tuple[str, Sequence[int] | None]]) -> GraphOutput:
        """Graphs of sub-documents: ``(id, passage indices)``, each its own graph (``None``: every passage).

        Frozen mode takes the rows of the cached passage vectors; full mode runs the passage encoder on
        the sub-document (:meth:`PreparedDocument.subset`).
        """
        missing = [k for k, _ in views if k not in self.prepared]
        if missing:
            raise GraphDocError(f"unknown document or query id {missing[0]!r}")
        parts = [self.prepared[k] if idx is None else self.prepared[k].subset(idx) for k, idx in views]
        if self.cache is None:
            return self.model(parts)
        device = self.model.device
        vectors = [self.vectors[k] if idx is None else self.vectors[k][torch.as_tensor(idx, dtype=torch.long)]
                   for k, idx in views]  # [n_i, hidden] each
        return self.model.forward_passage_vectors([v.to(device) for v in vectors], [p.section_ids for p in parts])

    def embed_all(self, keys: Sequence[str], batch_size: int = 64) -> GraphOutput:
        """:meth:`embed` in inference mode over many ids, concatenated (``node_embeddings``, ``ptr`` global)."""
        docs, nodes, ptrs, offset = [], [], [torch.zeros(1, dtype=torch.long)], 0
        try:
            with eval_mode(self.model), torch.inference_mode():
                for start in range(0, len(keys), batch_size):
                    out = self.embed(keys[start:start + batch_size])
                    docs.append(out.document_embeddings.float().cpu())
                    nodes.append(out.node_embeddings.float().cpu())
                    ptrs.append(out.ptr[1:].cpu() + offset)
                    offset += len(out.node_embeddings)
        finally:
            if self.cache is not None:  # a frozen encoder stays in eval mode whatever the model's mode
                self.model.passage_encoder.eval()
        dim = self.model.dimension
        return GraphOutput([], torch.cat(docs) if docs else torch.zeros(0, dim),
                           torch.cat(nodes) if nodes else torch.zeros(0, dim), torch.cat(ptrs))
