from __future__ import annotations

import json
import logging
import os
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from graphdoc.batching import token_budget_batches
from graphdoc.config import PassageEncoderConfig
from graphdoc.device import autocast
from graphdoc.errors import ModelLoadError

logger = logging.getLogger(__name__)

MAX_BATCH_SEQUENCES = 512

#: architectures (``config.model_type``) whose attention is local unless a token is marked global
GLOBAL_FIRST_TOKEN = frozenset({"longformer"})


class PassageEncoder(nn.Module):
    r"""A Hugging Face encoder pooled into one vector per passage.

    Pooling is ``cls`` (the first token), ``mean`` (masked mean of token vectors) or ``max``;
    vectors are L2-normalised when the checkpoint was trained that way. :meth:`encode_ids` encodes
    any number of token sequences sorted by length in batches that fit a token budget, so memory
    stays bounded whatever the number of passages.

    Shapes:
        :meth:`forward`: ``input_ids, attention_mask: [B, L]`` -> ``[B, hidden_size]``.
    """

    def __init__(self, model: nn.Module, tokenizer, config: PassageEncoderConfig) -> None:
        super().__init__()
        self.model = model
        self.tokenizer = tokenizer
        self.config = config
        self.pooling = config.pooling or "cls"
        self.normalize = bool(config.normalize)
        self.max_seq_length = config.max_seq_length or 512
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0

    @property
    def hidden_size(self) -> int:
        return int(self.model.config.hidden_size)

    @classmethod
    def load(cls, name_or_path: str, config: PassageEncoderConfig) -> "PassageEncoder":
        """Load a Hugging Face encoder and tokenizer; unset pooling settings come from the checkpoint."""
        from transformers import AutoModel, AutoTokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(name_or_path)
            model = AutoModel.from_pretrained(name_or_path)
        except (OSError, ValueError) as exc:
            raise ModelLoadError(_load_error(name_or_path, exc)) from None
        resolved = resolve_settings(name_or_path, config, tokenizer, model.config)
        return cls(model, tokenizer, resolved)

    def tokenize(self, texts: list[str], truncate: bool = False) -> list[list[int]]:
        """Token ids with special tokens; without truncation unless asked (the chunker checks lengths)."""
        if not texts:
            return []
        kwargs = {"truncation": True, "max_length": self.max_seq_length} if truncate else {}
        return self.tokenizer(texts, add_special_tokens=True, verbose=False, **kwargs)["input_ids"]

    def hidden_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """The encoder's last-layer token vectors: ``[B, L]`` -> ``[B, L, hidden_size]``."""
        extra = global_first_token(input_ids) if self.model.config.model_type in GLOBAL_FIRST_TOKEN else {}
        return self.model(input_ids=input_ids, attention_mask=attention_mask, **extra).last_hidden_state

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.hidden_states(input_ids, attention_mask)
        pooled = pool(hidden, attention_mask, self.pooling).float()
        return F.normalize(pooled, dim=-1) if self.normalize else pooled

    def encode_ids(self, ids: list[list[int]]) -> torch.Tensor:
        """Encode token sequences in length-sorted, token-budget batches; rows in input order.

        Works with or without gradients (it follows the caller's grad mode).
        """
        device = next(self.model.parameters()).device
        if not ids:
            return torch.empty((0, self.hidden_size), device=device)
        batches = token_budget_batches([len(t) for t in ids], self.config.max_tokens_per_batch,
                                       MAX_BATCH_SEQUENCES)
        outputs, order = [], []
        for batch in batches:
            input_ids, mask = self.pad([ids[i] for i in batch], device)
            with autocast(device, self.config.precision):
                outputs.append(self(input_ids, mask))
            order.extend(batch)
        inverse = torch.empty(len(order), dtype=torch.long)
        inverse[torch.tensor(order)] = torch.arange(len(order))
        return torch.cat(outputs)[inverse.to(device)]

    def pad(self, seqs: list[list[int]], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """Right-padded ``input_ids`` and ``attention_mask``, ``[B, longest]`` each."""
        longest = max(len(s) for s in seqs)
        input_ids = torch.full((len(seqs), longest), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), longest), dtype=torch.long)
        for row, seq in enumerate(seqs):
            input_ids[row, :len(seq)] = torch.tensor(seq, dtype=torch.long)
            mask[row, :len(seq)] = 1
        return input_ids.to(device), mask.to(device)

    def save(self, folder: str | Path) -> None:
        """Save the Hugging Face model (safetensors) and tokenizer into ``folder``."""
        self.model.save_pretrained(folder, safe_serialization=True)
        self.tokenizer.save_pretrained(folder)

    def extra_repr(self) -> str:
        return (f"model={self.config.model_name_or_path!r}, pooling={self.pooling!r}, "
                f"normalize={self.normalize}, max_seq_length={self.max_seq_length}")


def pool(hidden: torch.Tensor, mask: torch.Tensor, mode: str) -> torch.Tensor:
    """Pool ``[B, L, H]`` token vectors into ``[B, H]`` by ``cls``, masked ``mean`` or masked ``max``."""
    if mode == "cls":
        return hidden[:, 0]
    m = mask.unsqueeze(-1).to(hidden.dtype)
    if mode == "mean":
        return (hidden * m).sum(dim=1) / m.sum(dim=1).clamp(min=1e-9)
    if mode == "max":
        return hidden.masked_fill(m == 0, torch.finfo(hidden.dtype).min).max(dim=1).values
    raise ValueError(f"unknown pooling {mode!r}; valid: cls, mean, max")


def global_first_token(input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """Longformer's global attention on the first token (``<s>``), as its authors set it for
    document-level tasks (and as transformers' ``LongformerForSequenceClassification`` does): the
    token pooled as CLS then sees, and is seen by, the whole sequence."""
    mask = torch.zeros_like(input_ids)  # [B, L]
    mask[:, 0] = 1
    return {"global_attention_mask": mask}


def resolve_settings(name_or_path: str, config: PassageEncoderConfig, tokenizer,
                     model_config) -> PassageEncoderConfig:
    """Fill unset pooling / normalize / max_seq_length from the checkpoint's own files."""
    st = _sentence_transformers_settings(Path(name_or_path))
    pooling = config.pooling or st.get("pooling") or "cls"
    normalize = config.normalize if config.normalize is not None else st.get("normalize", False)
    max_len = config.max_seq_length or st.get("max_seq_length")
    if max_len is None:
        limit = getattr(tokenizer, "model_max_length", None)
        max_len = limit if limit and limit < 100_000 else getattr(model_config, "max_position_embeddings", 512)
    return replace(config, pooling=pooling, normalize=bool(normalize), max_seq_length=int(max_len))


def _sentence_transformers_settings(folder: Path) -> dict:
    """Pooling, normalisation and length limit from a sentence-transformers model folder, if it is one."""
    settings: dict = {}
    modules_file = folder / "modules.json"
    if not modules_file.is_file():
        return settings
    modules = json.loads(modules_file.read_text(encoding="utf-8"))
    for module in modules:
        kind = module.get("type", "")
        if kind.endswith("Pooling"):
            pooling_cfg = json.loads((folder / module["path"] / "config.json").read_text(encoding="utf-8"))
            for mode in ("cls", "mean", "max"):
                key = "pooling_mode_cls_token" if mode == "cls" else f"pooling_mode_{mode}_tokens"
                if pooling_cfg.get(key):
                    settings["pooling"] = mode
                    break
        elif kind.endswith("Normalize"):
            settings["normalize"] = True
    sbert = folder / "sentence_bert_config.json"
    if sbert.is_file():
        settings["max_seq_length"] = json.loads(sbert.read_text(encoding="utf-8")).get("max_seq_length")
    return settings


def _load_error(name_or_path: str, exc: BaseException) -> str:
    """Why ``name_or_path`` did not load, in one line: a missing folder, or the loader's words."""
    path = Path(name_or_path)
    if not path.exists() and _is_path_name(name_or_path):
        return f"no model folder at {name_or_path}"
    where = "local folder" if path.exists() else "Hugging Face hub model"
    return (f"cannot load {where} {name_or_path!r}: {_first_line(exc)} "
            "(name a local model folder, or a hub id once it is cached)")


def _is_path_name(name: str) -> bool:
    """Whether ``name`` can only mean a folder: absolute, ``./``, ``../`` or ``~``, or a separator no hub id has."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if Path(name).is_absolute() or name.startswith(("./", "../", "~")):
        return True
    try:
        validate_repo_id(name)
    except HFValidationError:
        return any(sep and sep in name for sep in (os.sep, os.altsep))
    return False


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
