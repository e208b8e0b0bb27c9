"""Explanations and comparisons: why a document matched a query, which parts of two documents are alike,
and figures of embeddings and attention.

``passages`` and ``compare`` are plain functions over vectors and records; ``hits`` reads them from an
index; ``html`` renders a comparison as a self-contained page; ``plot`` draws PNG figures (optional
extra ``plot``).
"""

from graphdoc.explain.compare import (
           Comparison,
           PassagePair,
           SectionInfo,
           compare_documents,
           compare_vectors,
)
from graphdoc.explain.hits import explain_hits, load_passage_attention
from graphdoc.explain.html import render_comparison
from graphdoc.explain.passages import (
           PassageExplanation,
           explain_passages,
           format_explanation,
           rank_passages,
)

__all__ = ["Comparison", "PassageExplanation", "PassagePair", "SectionInfo", "compare_documents",
           "compare_vectors", "explain_hits", "explain_passages", "format_explanation", "load_passage_attention",
           "rank_passages", "render_comparison"]
