"""The ``README.md`` a saved model folder holds: what the model is and how to use it, as the Hugging Face hub
shows a model card (its YAML header names the library, the base encoder and the task)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from graphdoc.default_model import DEFAULT_MODEL_ALIASES, DEFAULT_MODEL_NAME

CARD_NAME = "README.md"
#: the card's last line: a README.md holding it is graphdoc's, written anew when the model is saved again (one
#: without it is the user's, which a save keeps)
MARKER = ("<!-- written by graphdoc: saving the model again writes this file anew; remove this line to keep your "
          "edits -->")


def is_graphdoc_card(path: Path) -> bool:
    """Whether ``path`` is a card graphdoc wrote (it holds :data:`MARKER`)."""
    try:
        return MARKER in path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


def base_model(encoder: str) -> str | None:
    """The hub id of the passage encoder, for the card's ``base_model``; ``None`` for a local folder (no id)."""
    if encoder in DEFAULT_MODEL_ALIASES:
        return f"sentence-transformers/{DEFAULT_MODEL_NAME}"
    if Path(encoder).expanduser().exists() or encoder.startswith(("/", ".", "~")) or encoder.count("/") > 1:
        return None
    return encoder


def model_card(saved: dict[str, Any], name: str) -> str:
    """The card of a model whose ``config.json`` holds ``saved``; ``name`` is what loads it (its folder)."""
    model = saved.get("model") or {}
    chunker, encoder, graph = (model.get(key) or {} for key in ("chunker", "passage_encoder", "graph"))
    encoder_name = str(encoder.get("model_name_or_path") or DEFAULT_MODEL_NAME)
    base = base_model(encoder_name)
    header = ["---", "library_name: graphdoc"]
    if base:
        header.append(f"base_model: {base}")
    header += ["pipeline_tag: feature-extraction", "tags:", "- graphdoc", "- feature-extraction",
               "- sentence-similarity", "- long-documents", "---", ""]
    cap = chunker.get("max_passages")
    passages = (f"passages of about {chunker.get('max_words', 100)} words on sentence boundaries, never across a "
                f"section" + (f" (at most {cap} a document)" if cap else ""))
    encoded = (f"`{encoder_name}` embeds each passage ({encoder.get('pooling')} pooling, at most "
               f"{encoder.get('max_seq_length')} tokens)")
    if saved.get("backbone") == "flat":
        shape = ("the document's title and text, cut to the encoder's limit, are embedded whole"
                 if graph.get("document", "first") == "first" else
                 f"a long document is split into {passages}, and its embedding is the mean of theirs")
        what = (f"A graphdoc flat model: {encoded.replace('each passage', 'text')}; {shape} "
                f"({saved.get('dimension')} dimensions).")
    else:
        graph_kind = "every passage linked to every other" if graph.get("graph_type") == "full" else \
            "passages linked within their section"
        what = (f"A graphdoc model: a long document is split into {passages}; "
                f"{encoded}; a document node and the passage nodes ({graph_kind}) go through "
                f"{graph.get('num_layers')} graph attention layers ({graph.get('heads')} heads), and the document "
                f"node is the document's {saved.get('dimension')}-dimensional embedding.")
    lines = header + [f"# {Path(name).name or name}", "", what, "", "## Use", "", "```python",
                      "import graphdoc", "",
                      f"model = graphdoc.load_model({_json(name)})  # either backbone, graph or flat",
                      'vectors = model.encode(["a long document ...", {"title": "T", "sections": [{"title": "A", '
                      '"text": "..."}]}])',
                      'queries = model.encode_queries(["what is ..."])',
                      "scores = model.similarity(queries, vectors)", "```", "", "```bash",
                      f"graphdoc index --corpus corpus.jsonl --index-dir idx --model {shlex.quote(name)}",
                      'graphdoc search --index-dir idx "a query"', "```", ""]
    search = saved.get("search")
    if search:
        lines += ["Indexes built with it search with the settings it was fine-tuned with: "
                  + ", ".join(f"{key} {value}" for key, value in sorted(_flat(search).items())) + ".", ""]
    made = ", ".join(f"{key.removesuffix('_version')} {saved[key]}" for key in
                     ("graphdoc_version", "torch_version", "transformers_version") if saved.get(key))
    lines += ["## Settings", "", "```json", _json(model), "```", "", f"Saved with {made}.", "", MARKER, ""]
    return "\n".join(lines)


def _flat(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _json(data: Any) -> str:
    import json

    return json.dumps(data, indent=2, ensure_ascii=False)
