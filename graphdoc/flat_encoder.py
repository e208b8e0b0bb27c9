"""FlatEncoder: a Hugging Face encoder embedding a document directly, without a passage graph."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Sequence

import torch
from torch import nn

from graphdoc.backbones import FLAT
from graphdoc.chunker import Chunker
from graphdoc.device import resolve_device
from graphdoc.documents import Document, Passage
from graphdoc.encoder import GraphDocEncoder, check_config_type, check_passage_encoder, load_pretrained
from graphdoc.flat_config import FlatModelConfig
from graphdoc.models import PassageEncoder
from graphdoc.outputs import GraphOutput, PreparedDocument


class FlatEncoder(nn.Module):
    """Embeds a document with a Hugging Face encoder alone: the ``flat`` backbone (BERT, RoBERTa,
    Longformer, BigBird, ...), the baseline a graph model is measured against.

    ``graph.document`` picks the document vector: ``first`` (FirstP) encodes the title and text as one
    sequence truncated to the encoder's ``max_seq_length``; ``mean`` averages the passage vectors. The
    passages (chunked as for a graph model) are encoded too when the mode needs them or an index keeps
    passage vectors, which is where MaxP scoring comes from (``passage_weight`` 1.0). A query's vector is
    the encoder's own. Pooling is the passage encoder's (CLS or mean); Longformer's global attention on
    the first token is set in :class:`~graphdoc.models.PassageEncoder`.

    Example::

        model = FlatEncoder.from_pretrained("bert-base-uncased", FlatModelConfig())   # FirstP-512
        vectors = model.encode(["a long text ...", {"title": "T", "text": "..."}])

    Shapes: :meth:`forward` gives ``document_embeddings: [B, hidden]``; with passages, graph ``i`` of
    the output is its document row followed by its ``n_i`` passage rows (no edges).
    """

    backbone = FLAT
    config_class = FlatModelConfig

    def __init__(self, passage_encoder: PassageEncoder, config: FlatModelConfig | None = None,
                 device: str | torch.device | None = None) -> None:
        super().__init__()
        check_passage_encoder(type(self), passage_encoder)
        self.config = replace(config or FlatModelConfig(), passage_encoder=passage_encoder.config)
        self.chunker = Chunker(self.config.chunker)
        self.passage_encoder = passage_encoder
        self.name_or_path = self.config.passage_encoder.model_name_or_path  # set by from_pretrained
        #: how an index should score this model (``{"dense": {...}, "fusion": {...}, "metric": ...}``), as a
        #: ranking fine-tuning trained it; saved in ``config.json``, read by ``build_index`` for a new index
        self.search_defaults: dict | None = None
        self.to(resolve_device(device))

    config = GraphDocEncoder.config

    @property
    def dimension(self) -> int:
        return self.passage_encoder.hidden_size

    # The text side is the graph encoder's, shared rather than copied: these methods only need
    # ``chunker``, ``passage_encoder``, ``config.chunker``, ``dimension`` and this class's ``forward``.
    device = GraphDocEncoder.device
    get_sentence_embedding_dimension = GraphDocEncoder.get_sentence_embedding_dimension
    passage_input = GraphDocEncoder.passage_input
    _titled = GraphDocEncoder._titled
    title_input = GraphDocEncoder.title_input
    prepare = GraphDocEncoder.prepare
    prepare_query = GraphDocEncoder.prepare_query
    iter_forward = GraphDocEncoder.iter_forward
    _infer = GraphDocEncoder._infer
    encode = GraphDocEncoder.encode
    encode_queries = GraphDocEncoder.encode_queries
    encode_corpus = GraphDocEncoder.encode_corpus
    similarity = staticmethod(GraphDocEncoder.similarity)
    save_pretrained = GraphDocEncoder.save_pretrained
    head_state_dict = GraphDocEncoder.head_state_dict  # empty: a flat model adds no weights

    # ----------------------------------------------------------------- forward
    def prepare_for_inference(self, document: Document, max_passages: int | None, document_only: bool,
                              prompt: str | None = None) -> PreparedDocument:
        """:meth:`prepare`, except that FirstP's document vector alone needs no passages: with
        ``document_only`` a ``first`` model leaves them out (its forward reads the document's text)."""
        if document_only and self.config.graph.document == "first":
            return PreparedDocument(document, [], [], prompt=prompt)
        return self.prepare(document, max_passages, prompt)

    def first_input(self, document: Document, prompt: str | None = None) -> str:
        """FirstP's text: the whole document as one passage, titled as the first passage is (after ``prompt``,
        ``None``: the model's passage prompt)."""
        return self.passage_input(document, Passage(document.id, 0, 0, "", 0, len(document.text), document.text),
                                  prompt)

    def _first_ids(self, prepared: Sequence[PreparedDocument]) -> list[list[int]]:
        """FirstP's input ids of each document: its text tokenized whole (truncated); a query's own input, which
        carries the query prompt."""
        documents = [i for i, doc in enumerate(prepared) if not doc.query]
        ids = [doc.token_ids[0] if doc.query else [] for doc in prepared]
        tokenized = self.passage_encoder.tokenize([self.first_input(prepared[i].document, prepared[i].prompt)
                                                   for i in documents], truncate=True)
        for i, document_ids in zip(documents, tokenized):
            ids[i] = document_ids
        return ids

    def forward(self, prepared: Sequence[PreparedDocument], return_attention_weights: bool = False) -> GraphOutput:
        """Document vectors, with passage vectors when the mode needs them or attention is asked for.

        The index builder asks for attention to store passages; a flat document attends to its
        passages uniformly (exactly so in ``mean`` mode), so the output carries no GAT layers
        (``attention=[]``) and :meth:`GraphOutput.document_attention` gives ``1 / n_passages``.
        """
        mean = self.config.graph.document == "mean"
        with_passages = mean or return_attention_weights
        first_ids = [] if mean else self._first_ids(prepared)
        passage_ids = [ids for doc in prepared for ids in doc.token_ids] if with_passages else []
        vectors = self.passage_encoder.encode_ids(first_ids + passage_ids)  # one length-sorted pass: [B' + P, d]
        if not with_passages:  # each document a single node
            return GraphOutput(list(prepared), vectors, vectors, torch.arange(len(prepared) + 1, device=vectors.device))
        passages = torch.split(vectors[len(first_ids):], [len(doc.token_ids) for doc in prepared])
        documents = torch.stack([p.mean(dim=0) for p in passages]) if mean else vectors[:len(first_ids)]
        nodes = torch.cat([torch.cat([d[None], p]) for d, p in zip(documents, passages)])  # [B + P, d]
        ptr = torch.tensor([0] + [1 + len(p) for p in passages], device=vectors.device).cumsum(0)  # [B + 1], as PyG
        return GraphOutput(list(prepared), documents, nodes, ptr, [] if return_attention_weights else None)

    # ----------------------------------------------------------------- save / load
    @classmethod
    def from_pretrained(cls, name_or_path: str | Path | None = None, config: FlatModelConfig | None = None,
                        device: str | torch.device | None = None) -> "FlatEncoder":
        """Load a saved flat model, or build one on any Hugging Face encoder (``None``: the built-in
        all-MiniLM-L6-v2); ``config`` sets the chunker, pooling and document mode of a new one."""
        return load_pretrained(cls, name_or_path, config, device)

    @classmethod
    def from_config(cls, config: FlatModelConfig, device: str | torch.device | None = None) -> "FlatEncoder":
        """Build a model on ``config.passage_encoder.model_name_or_path``."""
        check_config_type(cls, config)
        return load_pretrained(cls, config.passage_encoder.model_name_or_path, config, device)

    def extra_repr(self) -> str:
        return f"document={self.config.graph.document!r}, dimension={self.dimension}"
