"""GraphDocEncoder: text -> passages -> passage vectors -> document graph -> GAT -> document vector."""

from __future__ import annotations

import inspect
import logging
import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.data import Batch

from graphdoc.chunker import Chunker, fit_to_token_limit
from graphdoc.config import ModelConfig, check_count
from graphdoc.device import resolve_device
from graphdoc.documents import Document, Passage, as_document, check_query_text, query_names
from graphdoc.errors import ArgumentTypeError, GraphDocError, ModelLoadError
from graphdoc.graph import document_graph
from graphdoc.models import DocumentGraphEncoder, PassageEncoder, Projection
from graphdoc.modes import eval_mode
from graphdoc.outputs import GraphOutput, PreparedDocument
from graphdoc.progress import progress_bar
from graphdoc.encode_output import check_encode_options, finish_embeddings
from graphdoc.quantization import OutputPrecision
from graphdoc import serialization

logger = logging.getLogger(__name__)

DocumentLike = Document | str | Mapping[str, Any]
TITLE_MAX_WORDS = 32  # and at most half of the encoder's token limit: a title must leave room for text


class GraphDocEncoder(nn.Module):
    """Embeds long documents through a graph of their passages.

    A Hugging Face encoder gives each passage a vector (optionally projected, ``tanh(Wh + b)``); the
    document node starts as the mean of its passages; ``graph.num_layers`` residual GAT layers run
    over the document graph; the document node's final vector is the embedding. Untrained, the
    residual branches are zero, so a document's embedding is the mean of its passage vectors and a
    query's is the encoder's own.

    Example::

        model = GraphDocEncoder.from_pretrained()          # built-in all-MiniLM-L6-v2
        vectors = model.encode(["a long text ...", {"title": "T", "text": "..."}])
    """

    def __init__(self, passage_encoder: PassageEncoder, config: ModelConfig | None = None,
                 device: str | torch.device | None = None) -> None:
        super().__init__()
        check_passage_encoder(type(self), passage_encoder)
        self.config = replace(config or ModelConfig(), passage_encoder=passage_encoder.config)
        self.chunker = Chunker(self.config.chunker)
        self.passage_encoder = passage_encoder
        proj_dim = self.config.passage_encoder.projection_dim
        hidden = passage_encoder.hidden_size
        g = self.config.graph
        check_heads(g.heads, proj_dim or hidden, "passage_encoder.projection_dim" if proj_dim else
                    "the encoder's hidden size")
        # a fixed seed: the same untrained model (and weights fingerprint) on every load; the CPU's generator only
        # (the layers are built there), so that loading a model leaves the CUDA generators' state as it was
        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(0)
            self.projection = Projection(hidden, proj_dim) if proj_dim else nn.Identity()
            self.graph = DocumentGraphEncoder(proj_dim or hidden, g.num_layers, g.heads, g.dropout,
                                              g.attention_dropout)
        self.name_or_path = self.config.passage_encoder.model_name_or_path  # set by from_pretrained
        #: how an index should score this model (``{"dense": {...}, "fusion": {...}, "metric": ...}``), as a
        #: ranking fine-tuning trained it; saved in ``config.json``, read by ``build_index`` for a new index
        self.search_defaults: dict | None = None
        self.to(resolve_device(device))

    # ----------------------------------------------------------------- properties
    config = property(lambda self: self.__dict__["_config"], lambda self, value: set_model_config(self, value),
                      doc="The model's settings. Another one assigned (``dataclasses.replace(model.config, ...)``) "
                          "gives its chunker and passage-encoder sections to the chunker and the passage encoder, "
                          "which read them: what encodes, what is saved and what an index records agree.")

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    def dimension(self) -> int:
        return self.graph.channels

    def get_sentence_embedding_dimension(self) -> int:  # sentence-transformers' name
        return self.dimension

    # ----------------------------------------------------------------- preparation
    def passage_input(self, document: Document, passage: Passage, prompt: str | None = None) -> str:
        """The text the passage encoder sees for a passage: its passage prompt (``prompt`` where given: an
        ``encode(prompt=...)``'s), then the title (per ``chunker.title``) and the passage's text."""
        prompt = self.passage_encoder.passage_prompt if prompt is None else prompt
        return prompt + self._titled(document, passage, prompt)

    def _titled(self, document: Document, passage: Passage, prompt: str | None = None) -> str:
        mode = self.config.chunker.title
        if not passage.text:  # a document of a title alone is its title, whatever the mode
            return self.title_input(document.title, prompt) if document.title else ""
        if document.title and (mode == "all" or (mode == "first" and passage.index == 0)):
            title = self.title_input(document.title, prompt)
            if title and not starts_with_title(passage.text, document.title):
                return f"{title} {passage.text}" if passage.text else title
        return passage.text

    def title_input(self, title: str, prompt: str | None = None) -> str:
        """A title as passage inputs carry it: at most :data:`TITLE_MAX_WORDS` words and half of the
        encoder's token limit left after the passage prompt (or ``prompt``; a title without spaces, CJK text or a
        URL, is cut by tokens)."""
        words = " ".join(title.split()[:TITLE_MAX_WORDS])
        encoder = self.passage_encoder
        used = encoder.passage_prompt_tokens if prompt is None else encoder.prompt_tokens(prompt)
        return encoder.clip(words, (encoder.max_seq_length - used) // 2)

    def prepare(self, document: Document, max_passages: int | None = None,
                prompt: str | None = None) -> PreparedDocument:
        """Chunk and tokenize one document, re-splitting passages over the encoder's token limit; ``prompt``
        replaces the passage prompt (``None``: the model's)."""
        passages = self.chunker(document)
        if not passages:  # empty text: one empty passage (the title, if any), as for a query
            passages = [Passage(document.id, 0, 0, "", 0, 0, "")]
        # passages past the cap are not tokenized: re-splitting only splits, so the first `limit` fitted passages
        # come from the first `limit` chunked ones (a 1M-word document tokenized 10,000 passages to keep 100)
        limit = self.chunker.limit(max_passages)
        beyond = len(passages) - limit if limit is not None and len(passages) > limit else 0
        passages, ids, left_out = fit_to_token_limit(
            document.text, passages[:len(passages) - beyond], lambda p: self.passage_input(document, p, prompt),
            self.passage_encoder.tokenize, self.passage_encoder.max_seq_length, limit)
        kept = self.chunker.cap(document, passages, max_passages, cut_before=beyond + left_out)
        ids = ids[:len(kept)]
        limit = self.passage_encoder.max_seq_length
        for i in [i for i, t in enumerate(ids) if len(t) > limit]:  # a title alone over the limit
            ids[i] = self.passage_encoder.tokenize([self.passage_input(document, kept[i], prompt)], truncate=True)[0]
        return PreparedDocument(document, kept, ids, prompt=prompt)

    def prepare_query(self, text: str, query_id: str = "", prompt: str | None = None) -> PreparedDocument:
        """A query is a single-node graph: one passage (the query prompt, or ``prompt`` where given, and the
        text), truncated to the encoder's limit."""
        prompt = self.passage_encoder.query_prompt if prompt is None else prompt
        ids = self.passage_encoder.tokenize([prompt + text], truncate=True)
        return PreparedDocument(Document(query_id, text), [Passage(query_id, 0, 0, "", 0, len(text), text)], ids,
                                query=True)

    # ----------------------------------------------------------------- forward
    def forward(self, prepared: Sequence[PreparedDocument], return_attention_weights: bool = False) -> GraphOutput:
        """Encode every passage of the batch together, build the graphs, run the GAT layers."""
        flat_ids = [ids for doc in prepared for ids in doc.token_ids]
        vectors = self.passage_encoder.encode_ids(flat_ids)  # [P, hidden]
        sizes = [len(doc.token_ids) for doc in prepared]
        out = self.forward_passage_vectors(list(torch.split(vectors, sizes)),
                                           [doc.section_ids for doc in prepared], return_attention_weights)
        out.documents = list(prepared)
        return out

    def forward_passage_vectors(self, passage_vectors: Sequence[torch.Tensor], section_ids: Sequence[Sequence[int]],
                                return_attention_weights: bool = False) -> GraphOutput:
        """The graph part alone, from passage-encoder vectors (e.g. cached ones, with a frozen encoder).

        Shapes: ``passage_vectors[i]``: ``[n_i, hidden]`` (before the projection).
        """
        graphs = [document_graph(self.projection(v), ids, self.config.graph.graph_type)
                  for v, ids in zip(passage_vectors, section_ids)]
        batch = Batch.from_data_list(graphs)
        result = self.graph(batch.x, batch.edge_index, return_attention_weights=return_attention_weights)
        nodes, attention = result if return_attention_weights else (result, None)
        return GraphOutput([], nodes[batch.ptr[:-1]], nodes, batch.ptr, attention)

    # ----------------------------------------------------------------- encoding API
    def iter_forward(self, documents: Iterable[DocumentLike], batch_size: int = 32,
                     return_attention_weights: bool = False, max_passages: int | None = None,
                     document_only: bool = False, prompt: str | None = None) -> Iterator[GraphOutput]:
        """Stream :class:`GraphOutput` batches of ``batch_size`` documents (inference mode).

        ``document_only``: the caller reads nothing but the document vectors, so a model that does not need
        the passages for them (a flat FirstP model) may leave them out instead of chunking and tokenizing
        text it never encodes. ``prompt``: the passage prompt in place of the model's.
        """
        check_count("batch_size", batch_size)
        with eval_mode(self):
            batch: list[PreparedDocument] = []
            for i, item in enumerate(documents):
                batch.append(self.prepare_for_inference(as_document(item, i), max_passages,
                                                        document_only and not return_attention_weights, prompt))
                if len(batch) == batch_size:
                    yield self._infer(batch, return_attention_weights)
                    batch = []
            if batch:
                yield self._infer(batch, return_attention_weights)

    def prepare_for_inference(self, document: Document, max_passages: int | None, document_only: bool,
                              prompt: str | None = None) -> PreparedDocument:
        """:meth:`prepare`: a graph embeds its passages, so it needs them even for the document vector alone."""
        return self.prepare(document, max_passages, prompt)

    def _infer(self, batch: list[PreparedDocument], return_attention_weights: bool) -> GraphOutput:
        with torch.inference_mode():
            return self(batch, return_attention_weights=return_attention_weights)

    def encode(self, documents: DocumentLike | Sequence[DocumentLike], batch_size: int = 32,
               show_progress_bar: bool | None = None, normalize_embeddings: bool = False,
               convert_to_numpy: bool = True, convert_to_tensor: bool = False, prompt: str | None = None,
               precision: OutputPrecision = "float32", truncate_dim: int | None = None,
               calibration_embeddings: np.ndarray | torch.Tensor | None = None) -> np.ndarray | torch.Tensor:
        """Embed documents (strings, ``{"title", "text", "sections"}`` dicts or :class:`Document`).

        Returns a ``[n, dimension]`` float32 array (or tensor); a single document gives ``[dimension]``.
        The options below are sentence-transformers' ``encode``'s (``calibration_embeddings``, its
        ``quantize_embeddings``'s):

        - ``prompt``: the text put before every passage (and FirstP input) for this call in place of the model's
          passage prompt (``passage_encoder.passage_prompt``); ``""``: none.
        - ``truncate_dim``: keep the first ``truncate_dim`` dimensions (a Matryoshka model's), before
          ``normalize_embeddings``; 1 to :attr:`dimension`, ``None``: all.
        - ``precision``: how the returned embeddings are stored: ``float32``; ``int8`` / ``uint8`` (each dimension's
          range, of ``calibration_embeddings`` where given, else of these embeddings, cut into 256 buckets);
          ``binary`` / ``ubinary`` (sign bits packed 8 to a byte, ``[n, ceil(d / 8)]``), as
          ``sentence_transformers.quantization.quantize_embeddings`` gives them. A quantised result is a numpy array
          (a CPU tensor with ``convert_to_tensor``). This is *not* the arithmetic the encoder computes in, which
          is the model config's ``passage_encoder.precision`` (``auto``/``fp32``/``bf16``/``fp16``, ``--precision``
          on the command line); those values are refused here.
        """
        check_count("batch_size", batch_size)
        check_encode_options(self, prompt, precision, truncate_dim, calibration_embeddings)
        if isinstance(documents, Mapping) and documents and all(isinstance(v, Mapping) for v in documents.values()):
            raise TypeError("documents is a dict of dicts, not one document: embed documents by id with "
                            "encode_corpus, or pass list(documents.values())")
        single = isinstance(documents, (str, Document, Mapping))
        docs = [documents] if single else list(_iterable(documents, "documents", "a str, a dict, a Document"))
        cut_before = self.chunker.counts()
        bar = progress_bar(total=len(docs), desc="Documents", unit="doc", disable=not _show(show_progress_bar))
        chunks = []
        for out in self.iter_forward(docs, batch_size, document_only=True, prompt=prompt):
            chunks.append(out.document_embeddings)
            bar.update(len(out.documents))
        bar.close()
        self.chunker.warn_cut(cut_before)
        return finish_embeddings(chunks, self.dimension, self.device, single, normalize_embeddings,
                                 convert_to_numpy and not convert_to_tensor, truncate_dim, precision,
                                 calibration_embeddings)

    def encode_queries(self, queries: str | Sequence[str] | Mapping[Any, str], batch_size: int = 32,
                       show_progress_bar: bool | None = None, normalize_embeddings: bool = False,
                       convert_to_numpy: bool = True, convert_to_tensor: bool = False, prompt: str | None = None,
                       precision: OutputPrecision = "float32", truncate_dim: int | None = None,
                       calibration_embeddings: np.ndarray | torch.Tensor | None = None, **kwargs: Any):
        """Embed queries as single-node graphs: a string gives ``[dimension]``, a list (or a dict's values,
        ``{query_id: text}``, in its order) ``[n, dimension]``.

        ``prompt`` replaces the model's query prompt (``passage_encoder.query_prompt``) for this call;
        ``precision``, ``truncate_dim`` and ``calibration_embeddings`` are :meth:`encode`'s (``precision`` quantises
        the output; it is not the encoder's arithmetic).

        The signature is BEIR's; other keyword arguments (which BEIR's callers may pass on) are ignored,
        with a warning naming them.
        """
        if kwargs:
            logger.warning("encode_queries ignores the argument(s) %s", ", ".join(sorted(kwargs)))
        check_count("batch_size", batch_size)
        check_encode_options(self, prompt, precision, truncate_dim, calibration_embeddings)
        single, ids = isinstance(queries, str), None
        if isinstance(queries, Mapping):
            ids, queries = list(queries), list(queries.values())
        texts = [queries] if single else list(_iterable(queries, "queries", "a str"))
        names = ["the query"] if single else query_names(ids, len(texts))
        for name, text in zip(names, texts):
            check_query_text(text, name)
        chunks = []
        with eval_mode(self):
            for start in progress_bar(range(0, len(texts), batch_size), desc="Queries",
                                      disable=not _show(show_progress_bar)):
                prepared = [self.prepare_query(t, prompt=prompt) for t in texts[start:start + batch_size]]
                chunks.append(self._infer(prepared, False).document_embeddings)
        return finish_embeddings(chunks, self.dimension, self.device, single, normalize_embeddings,
                                 convert_to_numpy and not convert_to_tensor, truncate_dim, precision,
                                 calibration_embeddings)

    @staticmethod
    def similarity(a: np.ndarray | torch.Tensor, b: np.ndarray | torch.Tensor) -> torch.Tensor:
        """Cosine similarity of every embedding in ``a`` with every one in ``b`` (``[n, d]`` or ``[d]`` each),
        as sentence-transformers' ``similarity``: a ``[n, m]`` float32 tensor."""
        first, second = (_embeddings(x) for x in (a, b))
        first, second = (x[None] if x.dim() == 1 else x for x in (first, second))
        if first.dim() != 2 or second.dim() != 2 or first.shape[1] != second.shape[1]:
            raise GraphDocError(f"similarity needs [n, d] and [m, d] embeddings; got {list(first.shape)} and "
                                f"{list(second.shape)}")
        return F.normalize(first, dim=-1) @ F.normalize(second.to(first.device), dim=-1).T

    def encode_corpus(self, corpus: Sequence[Mapping[str, Any]] | Mapping[str, Mapping[str, Any]],
                      batch_size: int = 32, **kwargs: Any):
        """BEIR-compatible: a list of ``{"title", "text"}`` dicts (or a dict of them by id). Other keyword arguments
        go to :meth:`encode` (``normalize_embeddings``, ``prompt``, ``precision``, ``truncate_dim``, ...); those it
        does not take are ignored with a warning, as :meth:`encode_queries` does."""
        known = {k: v for k, v in kwargs.items() if k in inspect.signature(self.encode).parameters}
        if len(known) < len(kwargs):
            logger.warning("encode_corpus ignores the argument(s) %s", ", ".join(sorted(set(kwargs) - set(known))))
        return self.encode(corpus_documents(corpus), batch_size=batch_size, **known)

    # ----------------------------------------------------------------- save / load
    @classmethod
    def from_pretrained(cls, name_or_path: str | Path | None = None, config: ModelConfig | None = None,
                        device: str | torch.device | None = None) -> "GraphDocEncoder":
        """Load a saved graphdoc model, or build an untrained one on any Hugging Face encoder.

        ``None`` (or ``"all-MiniLM-L6-v2"``) is the built-in default model. ``config`` sets the
        chunker, graph and pooling settings of a model built on a plain encoder: a :class:`ModelConfig`, or a
        config file or built-in config's name (``"section-graph"``).
        """
        return load_pretrained(cls, name_or_path, config, device)

    @classmethod
    def from_config(cls, config: ModelConfig, device: str | torch.device | None = None) -> "GraphDocEncoder":
        """Build an untrained model on ``config.passage_encoder.model_name_or_path``."""
        check_config_type(cls, config)
        return load_pretrained(cls, config.passage_encoder.model_name_or_path, config, device)

    def save_pretrained(self, path: str | Path, *, shown_as: str | Path | None = None) -> None:
        """Write ``config.json``, ``model.safetensors``, ``passage_encoder/`` and a ``README.md`` model card into
        ``path``; ``shown_as`` is the folder the card names (default ``path``: a caller saving into a temporary
        folder renamed afterwards names the final one)."""
        serialization.save(self, path, shown_as=shown_as)

    def head_state_dict(self) -> dict[str, torch.Tensor]:
        """The weights graphdoc adds on top of the passage encoder (projection and GAT layers)."""
        return {k: v for k, v in self.state_dict().items() if not k.startswith("passage_encoder.")}


def load_pretrained(cls: type, name_or_path: str | Path | None, config, device):
    """:func:`graphdoc.serialization.load` for any backbone.

    A device that is not there is reported before anything loads; a saved model without its passage
    encoder folder is reported as such (loading that folder's path would otherwise try it as a hub id).
    """
    check_model_name(name_or_path)
    if isinstance(config, (str, os.PathLike)):
        config = config_from_file(cls, config)
    if config is not None:
        check_config_type(cls, config)
    resolve_device(device)
    path = Path(name_or_path) if name_or_path is not None else None
    if path is not None and serialization.is_graphdoc_model(path) \
            and not (path / serialization.PASSAGE_ENCODER_DIR).is_dir():
        raise ModelLoadError(f"{path} is a saved graphdoc model without its {serialization.PASSAGE_ENCODER_DIR}/ "
                             "folder (copy the whole model folder)")
    return serialization.load(cls, name_or_path, config, device)


def check_model_name(name_or_path: Any) -> None:
    """Refuse, in one line, a model name that is empty (it would be read as the current folder) or not a name."""
    if name_or_path is None:
        return
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise TypeError(f"a model is named by a str or a path (a Hugging Face id or a folder); got a "
                        f"{type(name_or_path).__name__}")
    if not str(name_or_path).strip():
        raise GraphDocError("the model is an empty name: give a model folder or a Hugging Face id")


def set_model_config(model: nn.Module, config) -> None:
    """Give ``model`` (a graph or flat model) ``config``, and its sections to the chunker and passage encoder that
    read them (before they exist, while the model is built, there is nothing to give)."""
    check_config_type(type(model), config)
    model.__dict__["_config"] = config
    chunker = model.__dict__.get("chunker")
    if chunker is not None:
        chunker.config = config.chunker
    encoder = model._modules.get("passage_encoder")
    if encoder is not None and encoder.config is not config.passage_encoder:
        encoder.config = config.passage_encoder


def config_from_file(cls: type, name_or_path: str | os.PathLike):
    """The model settings of a config file, or of a built-in config named (``"section-graph"``), as ``cls``'s
    configuration: a model config is all model settings; a pretrain or finetune config holds them in its
    ``model`` section."""
    from graphdoc.config import from_dict, model_section, naming_file

    section, _, where = model_section(name_or_path)
    with naming_file(name_or_path):
        return from_dict(serialization.config_class_of(cls), section, where)


def check_config_type(cls: type, config: Any) -> None:
    """Refuse, in one line, a ``config`` that is not the model class's own configuration dataclass (a dict, a
    file name, another backbone's config): it would fail later, or save a model that cannot be loaded."""
    expected = serialization.config_class_of(cls)
    if not isinstance(config, expected):
        hint = f" (build one with {expected.__name__}.from_dict)" if isinstance(config, Mapping) else ""
        raise TypeError(f"{cls.__name__} takes a {expected.__name__} as config; got a {type(config).__name__}{hint}")


def starts_with_title(text: str, title: str) -> bool:
    """Whether the first line of ``text`` is ``title`` (a Markdown file's ``# Title`` line, a page
    that opens with its name on a line of its own), case, runs of white space and ``#`` marks aside:
    such a passage gets no second copy of the title."""
    line = text.lstrip()[: 2 * len(title) + 16].split("\n", 1)[0].strip()
    heading = _HEADING_MARKS.sub("", line)  # "# C#" -> "C#", "## Title ##" -> "Title"
    wanted = " ".join(title.split()).casefold()
    return any(" ".join(x.split()).casefold() == wanted for x in (line, heading, line.strip("#")))


#: a Markdown heading's opening marks and optional closing ones
_HEADING_MARKS = re.compile(r"^#{1,6}\s+|\s+#+$")


def check_heads(heads: int, size: int, source: str) -> None:
    """GAT heads split the node vectors evenly: ``heads`` must divide their ``size`` (from ``source``)."""
    if size % heads:
        valid = ", ".join(str(d) for d in range(1, size + 1) if size % d == 0)
        raise GraphDocError(f"graph.heads must divide the node size {size} ({source}): one of {valid}; got {heads}")


def check_passage_encoder(cls: type, passage_encoder: Any) -> None:
    """A model is built on a PassageEncoder; a name or path is what ``from_pretrained`` takes."""
    if not isinstance(passage_encoder, PassageEncoder):
        hint = (f"; to load {passage_encoder!r} use {cls.__name__}.from_pretrained({passage_encoder!r})"
                if isinstance(passage_encoder, (str, os.PathLike)) else "")
        raise ArgumentTypeError(f"{cls.__name__} is built on a graphdoc PassageEncoder, got "
                                f"{type(passage_encoder).__name__}{hint}")


def corpus_documents(corpus: Any) -> list:
    """BEIR's corpus, a list of ``{"title", "text"}`` dicts or a dict of them by id (``{id: text}`` too), as the
    documents :meth:`GraphDocEncoder.encode` takes; a str (one text, not a corpus) and other types are refused."""
    if isinstance(corpus, str):
        raise TypeError("corpus must be a list of {'title', 'text'} dicts or a dict of them by id; got a str (embed "
                        "one text with encode)")
    if isinstance(corpus, Mapping):
        docs = []
        for doc_id, value in corpus.items():
            if isinstance(value, str):
                value = {"text": value}
            elif not isinstance(value, Mapping):
                raise TypeError(f"corpus[{doc_id!r}] must be a {{'title', 'text'}} dict or a str; got a "
                                f"{type(value).__name__}")
            docs.append({**value, "_id": doc_id})
        return docs
    return list(_iterable(corpus, "corpus", "a {'title', 'text'} dict"))


def _iterable(items: Any, name: str, one: str) -> Iterable:
    """``items`` if it can be iterated as a collection of them (bytes and None cannot), else a TypeError."""
    if items is None or isinstance(items, (bytes, bytearray)) or not isinstance(items, Iterable) or \
            (isinstance(items, np.ndarray) and items.ndim == 0):
        got = "a 0-d array" if isinstance(items, np.ndarray) else type(items).__name__
        raise TypeError(f"{name} must be {one} or an iterable of them; got {got}")
    if hasattr(items, "columns") and hasattr(items, "iterrows"):  # a pandas DataFrame iterates its column names
        raise TypeError(f"{name} is a table ({type(items).__name__}), whose items are its column names: pass one "
                        "column (df['text']) or its rows as dicts (df.to_dict('records'))")
    return items


def _embeddings(x: Any) -> torch.Tensor:
    """``x`` as a float32 tensor; texts or other objects (which torch names only as 'too many dimensions 'str''
    or 'can't convert np.ndarray of type numpy.object_') are one error line."""
    try:
        return torch.as_tensor(x).float()
    except (TypeError, ValueError, RuntimeError):
        got = (f"an array of {x.dtype}" if isinstance(x, np.ndarray) else
               f"a {type(x).__name__} of {type(x[0]).__name__}" if isinstance(x, (list, tuple)) and x else
               f"a {type(x).__name__}")
        raise ArgumentTypeError("similarity takes embeddings, an array or tensor of numbers as encode returns them "
                                f"(texts: encode them first); got {got}") from None


def _show(flag: bool | None) -> bool:
    return logger.getEffectiveLevel() <= logging.INFO if flag is None else flag
