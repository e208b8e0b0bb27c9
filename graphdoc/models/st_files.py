"""A sentence-transformers model folder's settings files, read as sentence-transformers reads them.

``modules.json`` (pooling, ``Dense`` modules, normalisation), ``sentence_bert_config.json`` (the length limit,
lowercasing) and ``config_sentence_transformers.json`` (query and passage prompts), from a local folder or a hub
model's snapshot in the Hugging Face cache. :class:`~graphdoc.models.passage_encoder.PassageEncoder` resolves its
unset settings from them and writes them back when it saves.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from graphdoc.config import POOLING_MODES
from graphdoc.errors import ModelLoadError
from graphdoc.models import st_dense


#: sentence-transformers' model settings: its prompts among them
ST_CONFIG = "config_sentence_transformers.json"
#: the prompt ``encode_document`` uses: the first of these the checkpoint has
ST_DOCUMENT_PROMPTS = ("document", "passage", "corpus")

#: sentence-transformers' Pooling config keys, by mode
ST_POOLING_KEYS = {"cls": "pooling_mode_cls_token", "mean": "pooling_mode_mean_tokens",
                   "max": "pooling_mode_max_tokens", "mean_sqrt_len_tokens": "pooling_mode_mean_sqrt_len_tokens",
                   "weightedmean": "pooling_mode_weightedmean_tokens", "lasttoken": "pooling_mode_lasttoken"}


def settings_folder(name_or_path: str) -> Path | None:
    """Where a checkpoint's sentence-transformers files are: a local folder is its own; a hub model's are in its
    snapshot in the Hugging Face cache, fetched there (as its weights were) when the hub can be reached.
    ``None``: a hub model without ``modules.json``, whose pooling is then the config's or ``cls``."""
    path = Path(name_or_path)
    if path.is_dir():
        return path
    modules = _hub_file(name_or_path, "modules.json")
    if modules is None:
        return None
    try:
        entries = json.loads(modules.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        entries = []  # reported as the local folder's would be, by read_settings
    revision = modules.parent.name  # the snapshot's commit: its other files come from the cache with no request
    for entry in entries if isinstance(entries, list) else []:
        sub = entry.get("path") if isinstance(entry, dict) else None
        if isinstance(sub, str) and sub:
            _hub_file(name_or_path, "config.json", sub, revision)
            if str(entry.get("type", "")).endswith(".Dense"):
                _hub_file(name_or_path, st_dense.WEIGHTS, sub, revision)
    _hub_file(name_or_path, "sentence_bert_config.json", revision=revision)
    _hub_file(name_or_path, ST_CONFIG, revision=revision)
    return modules.parent


def _hub_file(repo_id: str, filename: str, subfolder: str = "", revision: str | None = None) -> Path | None:
    """A hub model's file from the Hugging Face cache, downloaded first where the hub can be reached and it is
    not cached; ``None`` when the model has no such file or it cannot be had."""
    from transformers.utils import cached_file

    try:
        found = cached_file(repo_id, filename, subfolder=subfolder, revision=revision,
                            _raise_exceptions_for_missing_entries=False,
                            _raise_exceptions_for_connection_errors=False)
    except (OSError, ValueError):
        return None
    return Path(found) if found else None


def dense_modules(paths: list[Path], hidden_size: int) -> list[st_dense.Dense]:
    """The ``Dense`` modules in ``paths`` (:func:`read_settings`' ``"dense"``: those graphdoc applies, on the pooled
    vector, before any ``Normalize``), in order; the first must take the transformer's ``hidden_size`` vectors,
    each next one the vectors of the one before."""
    layers: list[st_dense.Dense] = []
    for path in paths:
        layer = st_dense.load(path, st_dense.read_config(path))
        width = layers[-1].out_features if layers else hidden_size
        if layer.in_features != width:
            source = f"the Dense module before it ({layers[-1].out_features})" if layers else \
                f"the transformer's hidden size ({hidden_size})"
            raise ModelLoadError(f"{path / 'config.json'}: in_features {layer.in_features} is not "
                                 f"{source}")
        layers.append(layer)
    return layers


def read_settings(folder: Path) -> dict:
    """Pooling, normalisation, length limit and the folders of the ``Dense`` modules graphdoc applies, from a
    sentence-transformers model folder, if it is one."""
    settings: dict = {}
    modules_file = folder / "modules.json"
    if not modules_file.is_file():
        return settings
    modules = _read_json(modules_file, list)
    for module in modules:
        if not isinstance(module, dict):
            raise ModelLoadError(f"{modules_file}: each module must be a JSON object; got {module!r}")
        kind = str(module.get("type", ""))
        if kind.endswith("Pooling"):
            if not isinstance(module.get("path"), str):
                raise ModelLoadError(f"{modules_file}: the {kind} module has no 'path'")
            _check_inside(module, modules_file)
            pooling_file = folder / module["path"] / "config.json"
            pooling_config = _read_json(pooling_file, dict, modules_file)
            modes = _st_pooling_modes(pooling_file, pooling_config)
            settings["prompt_not_pooled"] = pooling_config.get("include_prompt") is False
            if len(modes) > 1:
                settings["concatenated"] = f"{pooling_file} pools by {' + '.join(modes)}, concatenated"
            else:
                settings["pooling"] = modes[0]
        elif kind.endswith("Normalize"):
            settings["normalize"] = True
        elif kind.endswith(".Dense") and _applied_dense(folder, module, settings, modules_file):
            settings.setdefault("dense", []).append(folder / module["path"])
        elif not kind.endswith("Transformer"):
            settings.setdefault("unapplied", []).append(f"{kind.rsplit('.', 1)[-1]} ({module.get('path', '?')})")
    if (folder / ST_CONFIG).is_file():
        settings["prompts"] = _st_prompts(folder / ST_CONFIG)
    sbert = folder / "sentence_bert_config.json"
    if sbert.is_file():
        sbert_config = _read_json(sbert, dict)
        max_len = sbert_config.get("max_seq_length")
        if max_len is not None and (isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1):
            raise ModelLoadError(f"{sbert}: max_seq_length must be a positive integer; got {max_len!r}")
        settings["max_seq_length"] = max_len
        settings["lower_case"] = sbert_config.get("do_lower_case") is True
    return settings


def old_transformer_folder(folder: Path) -> str | None:
    """The sub-folder an older sentence-transformers model keeps its transformer in
    (``0_Transformer``), per its modules.json; ``None`` when there is no such module (or no readable file)."""
    try:
        modules = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    for module in modules if isinstance(modules, list) else []:
        if isinstance(module, dict) and str(module.get("type", "")).endswith("Transformer"):
            sub = module.get("path")
            return sub if isinstance(sub, str) and sub and (folder / sub / "config.json").is_file() else None
    return None


def lower_case_tokenizer(tokenizer, where) -> None:
    """Lowercase the text before tokenizing, as sentence-transformers does for a model whose
    sentence_bert_config.json sets ``do_lower_case``: in the fast tokenizer's normalizer, which keeps offsets
    into the original text and is saved with it. A tokenizer that lowercases already is left as it is."""
    probe = "Graph ATTENTION"
    if tokenizer(probe)["input_ids"] == tokenizer(probe.lower())["input_ids"]:
        return
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise ModelLoadError(f"{where}: its sentence_bert_config.json asks for lowercased text (do_lower_case), "
                             "which graphdoc applies in a fast tokenizer only (tokenizer.json)")
    from tokenizers import normalizers

    lower = normalizers.Lowercase()
    backend.normalizer = lower if backend.normalizer is None else normalizers.Sequence([backend.normalizer, lower])


def _check_inside(module: dict, modules_file: Path) -> None:
    """Refuse a module ``path`` that leaves the model folder (absolute, or with ``..``): a downloaded folder's
    settings are read from that folder only."""
    path = module["path"]
    if os.path.isabs(path) or ".." in Path(path).parts or (os.altsep and os.altsep in path):
        raise ModelLoadError(f"{modules_file}: the {module.get('type')} module's path {path!r} leaves the model "
                             "folder")


def _applied_dense(folder: Path, module: dict, settings: dict, modules_file: Path) -> bool:
    """Whether graphdoc applies this ``Dense`` module: one on the pooled vector, after the pooling and before any
    normalisation (the order graphdoc computes in); any other is named as not applied."""
    if not isinstance(module.get("path"), str) or not module["path"]:
        raise ModelLoadError(f"{modules_file}: the {module.get('type')} module has no 'path'")
    _check_inside(module, modules_file)
    pooled = "pooling" in settings or "concatenated" in settings
    return (pooled and not settings.get("normalize")
            and st_dense.applies_to_pooled_vector(st_dense.read_config(folder / module["path"])))


def _st_prompts(path: Path) -> tuple[str, str]:
    """(query prompt, passage prompt) of a ``config_sentence_transformers.json``, as sentence-transformers'
    ``encode_query`` and ``encode_document`` choose them: ``query``, and the first of ``document``, ``passage``
    and ``corpus``; else the default prompt, if one is named; else none. Empty passage prompts are passed over:
    sentence-transformers 6 adds an empty ``document`` prompt to every model it loads or saves, which would
    hide E5's ``"passage: "`` (its own ``encode_document`` then prompts no E5 passage)."""
    config = _read_json(path, dict)
    prompts, default = config.get("prompts") or {}, config.get("default_prompt_name")
    if not isinstance(prompts, dict) or not all(isinstance(v, str) for v in prompts.values()):
        raise ModelLoadError(f"{path}: 'prompts' must map prompt names to strings; got {prompts!r}")
    if default is not None and default not in prompts:
        raise ModelLoadError(f"{path}: default_prompt_name {default!r} is not among its prompts "
                             f"({', '.join(prompts) or 'none'})")
    fallback = prompts[default] if default is not None else ""
    document = next((prompts[name] for name in ST_DOCUMENT_PROMPTS if prompts.get(name)), fallback)
    return prompts.get("query", fallback), document


def _st_pooling_modes(path: Path, config: dict) -> list[str]:
    """The modes of a sentence-transformers ``Pooling`` config: ``pooling_mode`` (a name or a list of them,
    sentence-transformers >= 6) or the older ``pooling_mode_*`` flags; neither means ``mean``, as there."""
    named = config.get("pooling_mode")
    if named is None:
        modes = [mode for mode, key in ST_POOLING_KEYS.items() if config.get(key)]
    else:
        modes = [named] if isinstance(named, str) else named
        if not isinstance(modes, list) or not all(mode in POOLING_MODES for mode in modes):
            raise ModelLoadError(f"{path}: unknown pooling_mode {named!r}; graphdoc pools by "
                                 f"{', '.join(POOLING_MODES)}")
    return modes or ["mean"]


def _read_json(path: Path, kind: type, named_in: Path | None = None) -> Any:
    """A sentence-transformers settings file holding a JSON ``kind`` (``dict`` or ``list``); a missing or
    broken one is a :class:`ModelLoadError` naming it."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelLoadError(f"{path} is missing" + (f" (named in {named_in})" if named_in else "")) from None
    except OSError as exc:
        raise ModelLoadError(f"{path}: cannot read it ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise ModelLoadError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise ModelLoadError(f"{path}: invalid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, kind):
        raise ModelLoadError(f"{path}: expected a JSON {'object' if kind is dict else 'array'}")
    return data


def write_settings(folder: Path, encoder) -> None:
    """Write a :class:`~graphdoc.models.passage_encoder.PassageEncoder`'s settings into ``folder`` (which holds
    its Hugging Face model) as sentence-transformers' files: pooling, ``Dense`` modules, normalisation, length
    limit and prompts."""
    modules = [{"path": "", "type": "sentence_transformers.models.Transformer"},
               {"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    (folder / "1_Pooling").mkdir(exist_ok=True)
    pooling = {"word_embedding_dimension": int(encoder.model.config.hidden_size),
               **{key: mode == encoder.pooling for mode, key in ST_POOLING_KEYS.items()}}
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling, indent=2) + "\n", encoding="utf-8")
    for layer in encoder.dense:
        modules.append({"path": f"{len(modules)}_Dense", "type": "sentence_transformers.models.Dense"})
        layer.save(folder / modules[-1]["path"])
    if encoder.normalize:
        modules.append({"path": f"{len(modules)}_Normalize", "type": "sentence_transformers.models.Normalize"})
    modules = [{"idx": i, "name": str(i), **module} for i, module in enumerate(modules)]
    (folder / "modules.json").write_text(json.dumps(modules, indent=2) + "\n", encoding="utf-8")
    (folder / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": encoder.max_seq_length, "do_lower_case": False}, indent=2) + "\n",
        encoding="utf-8")
    prompts = {name: text for name, text in (("query", encoder.query_prompt), ("document", encoder.passage_prompt))
               if text}
    (folder / ST_CONFIG).write_text(
        json.dumps({"prompts": prompts, "default_prompt_name": None}, indent=2) + "\n", encoding="utf-8")
