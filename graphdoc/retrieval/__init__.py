"""Search over documents: BM25, score fusion, run files, evaluation and fusion tuning."""

from graphdoc.retrieval.bm25 import BM25Config, BM25Index
from graphdoc.retrieval.evaluation import (
    DEFAULT_MEASURES,
    evaluate,
    evaluate_per_query,
    format_markdown_table,
    format_table,
    parse_measures,
)
from graphdoc.retrieval.fusion import (
    FusionConfig,
    fuse,
    fuse_runs,
    normalize,
    reciprocal_rank_fusion,
    weighted_fusion,
)
from graphdoc.retrieval.runs import (
    hits_to_run,
    ranked,
    run_from_hits,
    top_k,
    truncate_run,
)
from graphdoc.retrieval.trec import read_run, write_run
from graphdoc.retrieval.tuning import TuningResult, tune_alpha
from graphdoc.lazy import lazy_names

# the index and searcher import FAISS and the model: loaded on first use
_LAZY = {"Searcher": "graphdoc.retrieval.searcher", "Hit": "graphdoc.retrieval.searcher",
         "build_index": "graphdoc.retrieval.builder", "IndexSettings": "graphdoc.retrieval.builder",
         "merge_indexes": "graphdoc.retrieval.merge", "delete_documents": "graphdoc.retrieval.deletion",
         "stop_reading": "graphdoc.retrieval.stopping"}

__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())


__all__ = [
    "Hit",
    "IndexSettings",
    "Searcher",
    "build_index",
    "delete_documents",
    "merge_indexes",
    "stop_reading",
    "DEFAULT_MEASURES",
    "BM25Config",
    "BM25Index",
    "FusionConfig",
    "TuningResult",
    "evaluate",
    "evaluate_per_query",
    "format_markdown_table",
    "format_table",
    "fuse",
    "fuse_runs",
    "hits_to_run",
    "normalize",
    "parse_measures",
    "ranked",
    "read_run",
    "reciprocal_rank_fusion",
    "run_from_hits",
    "top_k",
    "truncate_run",
    "tune_alpha",
    "weighted_fusion",
    "write_run",
]
