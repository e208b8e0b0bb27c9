"""``graphdoc info``: what an index folder or a saved model holds, and how it was made.

For an index: its documents, passages and shards, whether it is searchable or a build is under way, its model
(name, weights, chunker, pooling, graph), dense, BM25 and fusion settings, and each corpus read into it. For a
saved graphdoc model: its backbone, encoder, dimension, settings and search defaults. ``--json`` prints the
same as one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from graphdoc.cli.common import counted
from graphdoc.errors import GraphDocError


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("info", help="describe an index folder or a saved model", description=__doc__)
    parser.add_argument("path", type=Path, help="an index folder (graphdoc index) or a saved graphdoc model folder")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from graphdoc.retrieval.manifest import MANIFEST_NAME
    from graphdoc.serialization import is_graphdoc_model

    path = args.path
    if not path.exists():
        raise GraphDocError(f"{path}: no such file or folder")
    if not path.is_dir():
        raise GraphDocError(f"{path} is a file: give an index folder or a saved model folder")
    if (path / MANIFEST_NAME).is_file():
        info = index_info(path)
        lines = _index_lines
    elif is_graphdoc_model(path):
        info = model_info(path)
        lines = _model_lines
    else:
        raise GraphDocError(f"{path} is neither a graphdoc index (no manifest.json) nor a saved graphdoc model "
                            "(no config.json written by graphdoc)")
    print(json.dumps(info, indent=2, ensure_ascii=False) if args.json else "\n".join(lines(info)))
    return 0


# ------------------------------------------------------------------ index
def index_info(folder: Path) -> dict[str, Any]:
    """The manifest of the index in ``folder`` (as :class:`Manifest` loads it: checked), with its state: ``final``
    (the searchable build's documents and passages, or ``None``), ``building`` (the corpora not read to the
    end), ``arithmetic`` (what its corpora were encoded in, as recorded), each source's ``part_documents`` (its
    part's documents of those read; ``stopped``: read no further by ``graphdoc index --stop-reading``) and ``bytes``
    on disk."""
    from dataclasses import asdict

    from graphdoc.retrieval.finalize import FINAL_DIR, read_build
    from graphdoc.retrieval.manifest import Manifest

    manifest = Manifest.load(folder)
    data = asdict(manifest)
    final = folder / FINAL_DIR
    build = read_build(final) if final.is_dir() else None
    data["final"] = None if build is None and not final.is_dir() else \
        {"documents": None if build is None else build["documents"],
         "passages": None if build is None else build["passages"],
         "metadata": None if build is None else build.get("metadata")}
    data["building"] = [f"{s.corpus} ({s.part})" if s.part != "1/1" else s.corpus
                        for s in manifest.sources if not s.complete]
    data["arithmetic"] = sorted({s.precision for s in manifest.sources if s.precision})
    for source, shown in zip(manifest.sources, data["sources"]):
        shown["part_documents"] = source.part_documents()
    data["bytes"] = _size(folder)
    data["path"] = str(folder)
    return data


def _index_lines(info: dict[str, Any]) -> list[str]:
    model, final = info["model"], info["final"]
    if final is None and not info["shards"] and info["sources"] and all(s["complete"] for s in info["sources"]):
        state = "an empty part, holding no document (its corpus had none for it): merge it with the other parts"
    elif final is None:
        state = "not searchable yet"
    else:
        counts = final if final["documents"] is not None else info["counts"]  # (an index of before build.json)
        state = ", ".join(counted(counts.get(what) or 0, what) for what in ("documents", "passages"))
        deleted = info["counts"].get("deleted") or 0  # (finalize's count: ids added again since are not)
        if deleted:
            state += f" ({counted(deleted, 'documents')} deleted)"
        if not info["finalized"]:
            state += (" in its last complete build, searched until an add or a delete under way (or stopped: rerun "
                      "it) is finalised")
    lines = [f"index {info['path']} (graphdoc {info['graphdoc_version'] or 'before 0.1'}, created {info['created']})",
             f"  {state}; {counted(len(info['shards']), 'shards')}, {_mib(info['bytes'])} on disk"]
    if info["building"]:
        lines.append(f"  build under way or interrupted (rerun the graphdoc index command, or build_index with the "
                     f"same documents, to finish it; or keep what it read: graphdoc index --index-dir DIR "
                     f"--stop-reading CORPUS): {', '.join(info['building'])}")
    lines += _model_settings(model.get("path") or model.get("name"), model, info["dimension"])
    lines.append(f"  weights: {str(model.get('fingerprint', ''))[:12]}")
    if info["sources"]:
        lines.append(f"  arithmetic: {_arithmetic(info)}")
    dense = info.get("dense") or {}
    lines.append(f"  dense: {info['faiss_factory']}, {info['metric']}, passage weight "
                 f"{dense.get('passage_weight', 1.0)}; passages {'stored' if info['store_passages'] else 'not stored'}")
    bm25 = info.get("bm25") or {}
    lines.append(f"  BM25: {bm25.get('method')} (k1 {bm25.get('k1')}, b {bm25.get('b')}), stop words "
                 f"{bm25.get('stopwords') or 'none'}, stemmer {bm25.get('stemmer') or 'none'}, "
                 f"{bm25.get('terms')} terms")
    fusion = info.get("fusion") or {}
    lines.append("  fusion: " + (f"rrf (k {fusion.get('rrf_k')})" if fusion.get("method") == "rrf" else
                                 f"weighted, alpha {fusion.get('alpha')}, {fusion.get('normalization')}"))
    metadata = (final or {}).get("metadata")
    if metadata is not None:  # (None: a build finalised before graphdoc summed its metadata up)
        lines.append(_metadata_line(metadata))
    lines.append("  corpora:" if info["sources"] else "  corpora: none read yet")
    lines += [_source_line(source) for source in info["sources"]]
    return lines


def _metadata_line(metadata: dict[str, dict[str, Any]]) -> str:
    """The fields a filter may name, from ``final/build.json``'s summary. One of no values (an object's, or a list
    of lists', summed up before graphdoc named an object's fields by their paths) is left out, and said why."""
    named = "; ".join(f"{field} ({counted(seen['documents'], 'documents')}, "
                      f"{'more than ' if seen.get('values_capped') else ''}{counted(seen['values'], 'values')})"
                      for field, seen in metadata.items() if seen["values"])
    unmatched = [field for field, seen in metadata.items() if not seen["values"]]
    left_out = (f" (not {', '.join(unmatched)}: no value a filter matches; the fields of an object are named by "
                "their paths, FIELD.KEY, listed here after the index's next add or delete)") if unmatched else ""
    return f"  metadata (what --filter may name): {named or 'none'}{left_out}"


def _arithmetic(info: dict[str, Any]) -> str:
    """What an index's corpora were encoded in (``bf16 and fp32``), as their sources recorded it."""
    recorded = info["arithmetic"]
    if not recorded:
        return "not recorded (built before graphdoc recorded it)"
    shown = " and ".join(recorded)
    if len(recorded) > 1:
        shown += " (their vectors differ by about 1e-3; each corpus's below)"
    if not all(source.get("precision") for source in info["sources"]):
        shown += "; not recorded for a corpus read before graphdoc recorded it"
    return shown


def _source_line(source: dict[str, Any]) -> str:
    """One corpus read into an index: a ``--shard I/N`` part by its own documents, of those of the corpus read."""
    part, read, of = "", counted(source["documents_read"], "documents"), ""
    if source["part"] != "1/1":
        part = f" part {source['part']}"
        if source.get("part_documents") is not None:
            first = "" if source["complete"] and not source["stopped"] else "first "
            read, of = counted(source["part_documents"], "documents"), \
                f" (its part of the corpus's {first}{source['documents_read']})"
    fields = source.get("fields") or {}
    named = f"; fields {', '.join(f'{k}={v}' for k, v in fields.items())}" if fields else ""
    done = "stopped" if source["stopped"] else "complete" if source["complete"] else "not finished"
    at = f", encoded at {source['precision']}" if source.get("precision") else ""
    return f"    {source['corpus']}{part}: {read} read{of}, {done}{at}{named}"


# ------------------------------------------------------------------ model
def model_info(folder: Path) -> dict[str, Any]:
    """The ``config.json`` of the saved model in ``folder``, with its ``path`` and ``bytes`` on disk."""
    from graphdoc.serialization import CONFIG_NAME

    try:
        data = json.loads((folder / CONFIG_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise GraphDocError(f"{folder / CONFIG_NAME}: cannot be read ({err})") from None
    return {"path": str(folder), **data, "bytes": _size(folder)}


def _model_lines(info: dict[str, Any]) -> list[str]:
    model = info.get("model") or {}
    encoder = model.get("passage_encoder") or {}
    made = ", ".join(f"{name.removesuffix('_version')} {info[name]}" for name in
                     ("graphdoc_version", "torch_version", "transformers_version") if info.get(name))
    lines = [f"model {info['path']} ({made}); {_mib(info['bytes'])} on disk",
             f"  backbone: {info.get('backbone', 'graph')}"]
    lines += _model_settings(encoder.get("model_name_or_path"), model, info.get("dimension"))
    search = info.get("search")
    if search:
        lines.append(f"  search defaults for its indexes: {json.dumps(search, sort_keys=True)}")
    return lines


def _model_settings(name: str | None, model: dict[str, Any], dimension: int | None) -> list[str]:
    """The lines shared by an index's model and a saved model: encoder, chunker, graph."""
    chunker, encoder, graph = (model.get(key) or {} for key in ("chunker", "passage_encoder", "graph"))
    cap = chunker.get("max_passages")
    version = f" (chunker version {chunker['version']})" if "version" in chunker else ""
    if graph.get("graph_type") == "flat":
        shape = f"flat: the encoder alone, document vector {graph.get('document', 'first')}"
    else:
        shape = (f"{graph.get('graph_type')} graph, {counted(graph.get('num_layers', 0), 'GAT layers')}, "
                 f"{counted(graph.get('heads', 0), 'heads')}")
    return [f"  encoder: {name}, {encoder.get('pooling')} pooling, {encoder.get('max_seq_length')} tokens a passage, "
            f"dimension {dimension}",
            f"  passages: {chunker.get('max_words')} words, at most {cap if cap else 'any number of'} a "
            f"document{version}",
            f"  graph: {shape}"]


# ------------------------------------------------------------------ sizes
def _size(folder: Path) -> int:
    """Bytes of the files under ``folder`` (links not followed)."""
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:  # removed meanwhile (a build running beside)
                pass
    return total


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"
