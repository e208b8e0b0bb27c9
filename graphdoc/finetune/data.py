"""What a ranking run reads: the corpus and its queries held as graphs, BM25 over the corpus, qrels."""

from __future__ import annotations

import functools
import hashlib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from graphdoc.corpus import read_corpus, read_qrels, read_queries
from graphdoc.documents import Document
from graphdoc.errors import GraphDocError
from graphdoc.finetune.inputs import GraphInputs
from graphdoc.finetune.retriever import CorpusRanker
from graphdoc.retrieval.bm25 import BM25Index
from graphdoc.training.cache import PassageVectorCache

logger = logging.getLogger(__name__)


@dataclass
class RankingData:
    """The corpus (``documents``, in ``doc_ids`` order = BM25 rows), the query texts and their graphs."""

    documents: GraphInputs
    doc_ids: list[str]
    queries: GraphInputs
    query_texts: dict[str, str]
    bm25: BM25Index

    def set_model(self, model) -> None:
        """Embed with ``model`` from now on (the cached passage vectors stay valid: the encoder is frozen)."""
        self.documents.model = self.queries.model = model

    def ranker(self, passage_weight: float, similarity: str) -> CorpusRanker:
        return CorpusRanker(self.documents, self.doc_ids, self.bm25, passage_weight, similarity)

    @functools.cached_property
    def corpus_digest(self) -> str:
        """A digest of the corpus as BM25 reads it (ids, titles and texts, in order); computed once."""
        digest = hashlib.sha256()
        for doc_id in self.doc_ids:
            doc = self.documents.prepared[doc_id].document
            for part in (doc.id, doc.title, doc.text):
                digest.update(part.encode("utf-8", "surrogatepass") + b"\0")
        return digest.hexdigest()[:16]


@dataclass
class RankingSources:
    """The corpus and the query texts of a ranking run, read and checked before a model loads (``doc_ids`` and
    ``query_texts`` are what :func:`read_known_qrels` checks judgements against)."""

    documents: list[Document]
    query_texts: dict[str, str]

    @property
    def doc_ids(self) -> list[str]:
        return [d.id for d in self.documents]


def read_ranking_sources(corpus: str | Path | Iterable[Document], queries: str | Path | Mapping[str, str],
                         split: str | None = None, fields=None) -> RankingSources:
    """The corpus and the queries (a path, or documents / ``{id: text}`` already in memory); an empty one is an
    error. ``fields``: the corpus's record fields (:class:`graphdoc.corpus.Fields`)."""
    docs = list(read_corpus(corpus, fields=fields) if isinstance(corpus, (str, Path)) else corpus)
    if not docs:
        raise GraphDocError(f"the corpus {corpus} holds no document")
    texts = dict(read_queries(queries, split)) if isinstance(queries, (str, Path)) else dict(queries)
    if not texts:
        where = ("the queries given" if not isinstance(queries, (str, Path)) else
                 f"the queries file {queries}" if Path(queries).is_file() else f"the queries of {queries}")
        raise GraphDocError(f"{where} holds no queries" + (f" (split {split!r})" if split else ""))
    return RankingSources(docs, texts)


def load_ranking_data(model, corpus: str | Path | Iterable[Document] | RankingSources,
                      queries: str | Path | Mapping[str, str] | None = None, cache: PassageVectorCache | None = None,
                      max_passages: int | None = None, split: str | None = None,
                      bm25: BM25Index | None = None) -> RankingData:
    """Prepare the corpus and queries (:class:`RankingSources` already read, or what
    :func:`read_ranking_sources` reads).

    ``bm25``, when given, must index the corpus in its order (e.g. an index folder's ``final/bm25``).
    """
    sources = corpus if isinstance(corpus, RankingSources) else read_ranking_sources(corpus, queries, split)
    docs, texts = sources.documents, sources.query_texts
    documents, query_inputs = GraphInputs(model, cache), GraphInputs(model, cache)
    documents.add_documents(docs, max_passages)
    query_inputs.add_queries(texts.items())
    if bm25 is None:
        bm25 = CorpusRanker.build_bm25([f"{d.title} {d.text}".strip() for d in docs])
    elif bm25.num_docs != len(docs):
        raise GraphDocError(f"the BM25 index holds {bm25.num_docs} documents; the corpus {len(docs)}")
    return RankingData(documents, [d.id for d in docs], query_inputs, texts, bm25)


def read_qrels_arg(qrels: str | Path | Mapping[str, Mapping[str, int]], split: str | None = None) -> dict:
    """Qrels from a path (BEIR ``.tsv`` or TREC) or as given."""
    return read_qrels(qrels, split) if isinstance(qrels, (str, Path)) else {q: dict(d) for q, d in qrels.items()}


def read_known_qrels(qrels: str | Path | Mapping[str, Mapping[str, int]], data: RankingData | RankingSources, *,
                     train: bool = False, name: str | None = None) -> dict:
    """:func:`read_qrels_arg` without the judgements of queries or documents that ``data`` does not hold (usual
    for TREC qrels over part of a collection), with one warning that counts them; an error when no relevant
    judgement is left (training qrels, ``train``, or dev qrels: an unusable dev set is not silently dropped).
    ``name`` names the qrels in messages (default: the path)."""
    name = name or (str(qrels) if isinstance(qrels, (str, Path)) else "the training qrels" if train
                    else "the dev qrels")
    docs = set(data.doc_ids)
    kept, no_query, no_doc = {}, [], []
    for qid, judged in read_qrels_arg(qrels).items():
        if qid not in data.query_texts:
            no_query += [qid] * len(judged)
            continue
        no_doc += [d for d in judged if d not in docs]
        if any(d in docs for d in judged):
            kept[qid] = {d: rel for d, rel in judged.items() if d in docs}
    parts = []
    for ids, what in ((no_query, "a query not in the queries"), (no_doc, "a document not in the corpus")):
        if ids:
            noun = "" if parts else " judgement" if len(ids) == 1 else " judgements"
            parts.append(f"{len(ids)}{noun} of {what} ({ids[0]})")
    if parts:
        logger.warning("%s: %s; ignored", name, ", ".join(parts))
    if not any(rel > 0 for judged in kept.values() for rel in judged.values()):
        purpose = "to train on" if train else "to score the epochs on"
        raise GraphDocError(f"{name}: no relevant judgement of a query in the queries and a document in the corpus "
                            f"{purpose}")
    return kept
