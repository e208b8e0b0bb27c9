from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from graphdoc.batching import token_budget_batches
from graphdoc.config import MIN_SEQ_LENGTH, POOLING_MODES, PassageEncoderConfig
from graphdoc.device import arithmetic, autocast
from graphdoc.errors import GraphDocError, ModelLoadError
from graphdoc.fileio import check_finite
from graphdoc.models import st_dense, st_files
from graphdoc.progress import no_transformers_bar

logger = logging.getLogger(__name__)

MAX_BATCH_SEQUENCES = 512
_LAST_WORD = re.compile(r"\s+\S*$")  # the spaces before the last (partial) word
_WORD = re.compile(r"\S+")

#: architectures (``config.model_type``) whose attention is local unless a token is marked global
GLOBAL_FIRST_TOKEN = frozenset({"longformer"})
#: encoder-decoder architectures whose encoder alone encodes passages (GTR, sentence-T5), as sentence-transformers
#: loads them: ``AutoModel`` would build the decoder too, with no decoder inputs to run it on
ENCODER_ONLY_CLASSES = {"t5": "T5EncoderModel", "mt5": "MT5EncoderModel", "umt5": "UMT5EncoderModel"}


class PassageEncoder(nn.Module):
    r"""A Hugging Face encoder pooled into one vector per passage.

    Pooling is one of sentence-transformers' modes (see :func:`pool`): ``cls`` (the first token), ``mean``
    (masked mean of token vectors), ``max``, ``mean_sqrt_len_tokens``, ``weightedmean`` or ``lasttoken``;
    vectors are L2-normalised when the checkpoint was trained that way. A sentence-transformers checkpoint's
    ``Dense`` modules (a linear layer and activation on the pooled vector) are applied between the two, as
    sentence-transformers applies them. :meth:`encode_ids` encodes
    any number of token sequences sorted by length in batches that fit a token budget, so memory
    stays bounded whatever the number of passages.

    Shapes:
        :meth:`forward`: ``input_ids, attention_mask: [B, L]`` -> ``[B, hidden_size]`` (the last ``Dense``
        module's ``out_features`` where there is one).
    """

    def __init__(self, model: nn.Module, tokenizer, config: PassageEncoderConfig,
                 dense: tuple[st_dense.Dense, ...] | list[st_dense.Dense] = ()) -> None:
        super().__init__()
        self.model = model
        self.dense = nn.Sequential(*dense)  # no weights without Dense modules: fingerprints stay as they were
        self.tokenizer = tokenizer
        self.config = config
        #: rows of the encoder's token embedding table when its tokenizer knows more tokens (``None`` otherwise): a
        #: token id past them is a tokenizer that is not the model's, checked per batch only then
        rows = embedding_rows(model)
        self.vocabulary_rows = rows if rows is not None and len(tokenizer) > rows else None
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self._prompt_counts: dict[tuple[str, str, int], int] = {}
        self.prompt_tokens(self.passage_prompt, "passage_encoder.passage_prompt")
        self.prompt_tokens(self.query_prompt, "passage_encoder.query_prompt")
        self._last_clip: tuple[tuple[str, int], str] | None = None  # clip()'s last question and answer

    # The settings below live in ``config`` alone (the passage-encoder section of the model's config, which is saved
    # and recorded in an index): set here, they are checked and set there, so what encodes and what is saved agree.
    def _setting(name: str, unset):  # noqa: N805 (a property factory, called in the class body)
        return property(lambda self: getattr(self.config, name) or unset, lambda self, value: self._set(name, value),
                        doc=f"``config.{name}`` ({unset!r} when unset); set, it is checked as a config file's is")

    pooling = _setting("pooling", "cls")
    normalize = _setting("normalize", False)
    max_seq_length = _setting("max_seq_length", 512)
    query_prompt = _setting("query_prompt", "")
    passage_prompt = _setting("passage_prompt", "")
    del _setting

    @property
    def passage_prompt_tokens(self) -> int:
        """Tokens the passage prompt takes of every passage input (titles get half of what is left)."""
        return self.prompt_tokens(self.passage_prompt, "passage_encoder.passage_prompt")

    def _set(self, name: str, value) -> None:
        """Set the config's ``name`` to ``value`` in place (the model's config holds the same object), checked as a
        config file's value is; a prompt that would leave too few tokens is refused and nothing changes."""
        value = getattr(replace(self.config, **{name: value}), name)  # checked (one error line) and converted
        before = getattr(self.config, name)
        setattr(self.config, name, value)
        try:
            self.prompt_tokens(self.passage_prompt, "passage_encoder.passage_prompt")
            self.prompt_tokens(self.query_prompt, "passage_encoder.query_prompt")
        except GraphDocError:
            setattr(self.config, name, before)
            raise

    def prompt_tokens(self, prompt: str, name: str = "prompt") -> int:
        """The tokens ``prompt`` (the setting or argument ``name``) takes; one that leaves the text fewer than
        ``MIN_SEQ_LENGTH`` of the encoder's tokens is refused (every passage would be cut to a few words, every query
        to nothing)."""
        if not prompt:
            return 0
        key = (name, prompt, self.max_seq_length)
        if key in self._prompt_counts:
            return self._prompt_counts[key]
        count = len(self.tokenizer(prompt, add_special_tokens=False, verbose=False)["input_ids"])
        special = len(self.tokenizer("", add_special_tokens=True, verbose=False)["input_ids"])
        left = self.max_seq_length - special - count
        if left < MIN_SEQ_LENGTH:
            raise GraphDocError(f"{name} leaves {left} of the encoder's {self.max_seq_length} tokens "
                                f"(max_seq_length; the prompt takes {count}, special tokens {special}) for the text: "
                                f"at least {MIN_SEQ_LENGTH} are needed")
        self._prompt_counts[key] = count
        return count

    @property
    def arithmetic(self) -> str:
        """What its passages are encoded in on its device, its ``precision`` as it runs there: ``fp32``, ``bf16``
        or ``fp16`` (:func:`graphdoc.device.arithmetic`)."""
        return arithmetic(next(self.model.parameters()).device, self.config.precision)

    @property
    def hidden_size(self) -> int:
        """The size of a passage vector."""
        return self.dense[-1].out_features if len(self.dense) else int(self.model.config.hidden_size)

    @classmethod
    def load(cls, name_or_path: str, config: PassageEncoderConfig) -> "PassageEncoder":
        """Load a Hugging Face encoder and tokenizer; unset pooling settings come from the checkpoint."""
        import huggingface_hub.errors
        from safetensors import SafetensorError
        from transformers import AutoTokenizer

        _check_local_path(name_or_path)
        try:
            with no_transformers_bar():
                tokenizer = AutoTokenizer.from_pretrained(name_or_path, trust_remote_code=False)
                model = _load_encoder(name_or_path)
        # (the last: transformers' check of config.json values, with huggingface_hub 0.32 or later)
        except (OSError, ValueError, SafetensorError, *_strict_dataclass_errors(huggingface_hub.errors)) as exc:
            raise ModelLoadError(_load_error(name_or_path, exc)) from None
        check_finite(model.named_parameters(), name_or_path)
        rows = embedding_rows(model)
        if rows is not None and len(tokenizer) * 10 < rows:  # transformers makes a tokenizer of its special tokens
            raise ModelLoadError(f"{name_or_path}: its tokenizer knows {len(tokenizer)} tokens, the model {rows}: "
                                 "its tokenizer files are missing or are not the model's")
        folder = st_files.settings_folder(name_or_path)
        st = st_files.read_settings(folder) if folder is not None else {}
        resolved = resolve_settings(name_or_path, config, tokenizer, model.config, position_limit(model), st)
        if st.get("lower_case"):
            st_files.lower_case_tokenizer(tokenizer, name_or_path)
        dense = st_files.dense_modules(st.get("dense", []), int(model.config.hidden_size))
        return cls(model, tokenizer, resolved, dense)

    def tokenize(self, texts: list[str], truncate: bool = False) -> list[list[int]]:
        """Token ids with special tokens; without truncation unless asked (the chunker checks lengths).

        Truncating, a long text is tokenized from its first ``max_seq_length`` words only (each word is a
        token at least), not whole: a 200,000-word document's FirstP input took 0.8 s to tokenize. A prefix
        cut before a run of spaces tokenizes to the same first tokens as the whole text; where it comes out
        short of the limit (words that tokenize to nothing), the whole text is tokenized after all.
        """
        if not texts:
            return []
        if not truncate:
            return self.tokenizer(texts, add_special_tokens=True, verbose=False)["input_ids"]
        prefixes = [_first_words(text, self.max_seq_length) for text in texts]
        ids = self._tokenize_truncated(prefixes)
        short = [i for i, (text, prefix) in enumerate(zip(texts, prefixes))
                 if len(prefix) < len(text) and len(ids[i]) < self.max_seq_length]
        for i, whole in zip(short, self._tokenize_truncated([texts[i] for i in short])):
            ids[i] = whole
        return ids

    def _tokenize_truncated(self, texts: list[str]) -> list[list[int]]:
        if not texts:
            return []
        return self.tokenizer(texts, add_special_tokens=True, verbose=False, truncation=True,
                              max_length=self.max_seq_length)["input_ids"]

    def clip(self, text: str, max_tokens: int) -> str:
        """The longest prefix of ``text`` of at most ``max_tokens`` tokens (special tokens not counted), cut
        between words, or between tokens in a text without spaces. The last answer is kept: each passage of a
        document asks for its title."""
        if len(text.encode("utf-8")) + len(text.split()) <= max_tokens:
            return text  # no tokenizer makes more tokens than bytes plus word starts: most titles end here
        if self._last_clip is not None and self._last_clip[0] == (text, max_tokens):
            return self._last_clip[1]
        try:
            offsets = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True,
                                     verbose=False).get("offset_mapping")
        except NotImplementedError:  # a Python tokenizer has no offsets (transformers 5 leaves them out)
            offsets = None
        if offsets is None:
            clipped = _word_prefix(text, len(_longest_prefix(text, max_tokens, self._count_tokens)))
        else:  # cut where the first token past the budget starts: no character is left half-encoded
            clipped = text if len(offsets) <= max_tokens else _word_prefix(text, offsets[max_tokens][0])
        self._last_clip = ((text, max_tokens), clipped)
        return clipped

    def _count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])

    def hidden_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """The encoder's last-layer token vectors: ``[B, L]`` -> ``[B, L, hidden_size]``."""
        extra = global_first_token(input_ids) if self.model.config.model_type in GLOBAL_FIRST_TOKEN else {}
        return self.model(input_ids=input_ids, attention_mask=attention_mask, **extra).last_hidden_state

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.hidden_states(input_ids, attention_mask)
        # float32 for the layers above, even under autocast; a model cast whole (``model.half()``) gets its dtype
        dtype = next(self.model.parameters()).dtype
        pooled = pool(hidden, attention_mask, self.pooling).to(dtype if dtype.is_floating_point else torch.float32)
        if len(self.dense):
            pooled = self.dense(pooled).to(pooled.dtype)
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
        if self.vocabulary_rows is not None:
            top = max((max(s) for s in seqs if s), default=0)
            if top >= self.vocabulary_rows:
                raise GraphDocError(f"the tokenizer gave token id {top}, past the {self.vocabulary_rows} rows of the "
                                    "encoder's token embeddings: the tokenizer is not the model's")
        input_ids = torch.full((len(seqs), longest), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), longest), dtype=torch.long)
        for row, seq in enumerate(seqs):
            input_ids[row, :len(seq)] = torch.tensor(seq, dtype=torch.long)
            mask[row, :len(seq)] = 1
        return input_ids.to(device), mask.to(device)

    def save(self, folder: str | Path) -> None:
        """Save the Hugging Face model (safetensors) and tokenizer into ``folder``, with the
        sentence-transformers files that describe the pooling, ``Dense`` modules, normalisation, length
        limit and prompts: the folder loads in sentence-transformers too, and gives the same vectors."""
        folder = Path(folder)
        with no_transformers_bar():  # its "Writing model shards" bar
            self.model.save_pretrained(folder, safe_serialization=True)
            self.tokenizer.save_pretrained(folder)
        st_files.write_settings(folder, self)

    def extra_repr(self) -> str:
        return (f"model={self.config.model_name_or_path!r}, pooling={self.pooling!r}, "
                f"normalize={self.normalize}, max_seq_length={self.max_seq_length}"
                + (f", query_prompt={self.query_prompt!r}" if self.query_prompt else "")
                + (f", passage_prompt={self.passage_prompt!r}" if self.passage_prompt else ""))


def pool(hidden: torch.Tensor, mask: torch.Tensor, mode: str) -> torch.Tensor:
    """Pool right-padded ``[B, L, H]`` token vectors into ``[B, H]`` as sentence-transformers' ``Pooling``
    does: ``cls`` (the first token), masked ``mean``, ``max``, ``mean_sqrt_len_tokens`` (the sum over the
    square root of the length), ``weightedmean`` (token ``i`` weighted ``i + 1``) or ``lasttoken``."""
    if mode == "cls":
        return hidden[:, 0]
    if mode == "lasttoken":
        last = mask.sum(dim=1).clamp(min=1) - 1  # [B]
        return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
    if mode == "max":
        return hidden.masked_fill(mask.unsqueeze(-1) == 0, torch.finfo(hidden.dtype).min).max(dim=1).values
    # sums in float32 for half-precision vectors, as sentence-transformers does: position weights alone
    # overflow fp16 (their sum passes 65,504 past 361 tokens)
    accumulate = torch.float32 if hidden.dtype in (torch.float16, torch.bfloat16) else hidden.dtype
    m = mask.unsqueeze(-1).to(accumulate)  # [B, L, 1]
    if mode == "weightedmean":
        m = m * torch.arange(1, hidden.shape[1] + 1, device=hidden.device, dtype=accumulate)[None, :, None]
    summed, count = (hidden.to(accumulate) * m).sum(dim=1), m.sum(dim=1).clamp(min=1e-9)
    if mode in ("mean", "weightedmean"):
        return (summed / count).to(hidden.dtype)
    if mode == "mean_sqrt_len_tokens":
        return (summed / count.sqrt()).to(hidden.dtype)
    raise ValueError(f"unknown pooling {mode!r}; valid: {', '.join(POOLING_MODES)}")


def global_first_token(input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """Longformer's global attention on the first token (``<s>``), as its authors set it for
    document-level tasks (and as transformers' ``LongformerForSequenceClassification`` does): the
    token pooled as CLS then sees, and is seen by, the whole sequence."""
    mask = torch.zeros_like(input_ids)  # [B, L]
    mask[:, 0] = 1
    return {"global_attention_mask": mask}


def resolve_settings(name_or_path: str, config: PassageEncoderConfig, tokenizer, model_config,
                     positions: int | None = None, st: dict | None = None) -> PassageEncoderConfig:
    """Fill unset pooling / normalize / max_seq_length / prompts from the checkpoint's own sentence-transformers
    settings (``st``: :func:`~graphdoc.models.st_files.read_settings` of its settings folder; ``None``: it has
    none).

    ``positions`` (see :func:`position_limit`) bounds ``max_seq_length``: a larger setting is an error, a
    larger limit read from the checkpoint is lowered to it.
    """
    if config.max_seq_length is not None and positions is not None and config.max_seq_length > positions:
        raise GraphDocError(f"passage_encoder.max_seq_length must be at most {positions}, the token positions "
                            f"of {name_or_path}; got {config.max_seq_length}")
    st = st or {}
    if config.pooling is None and "concatenated" in st:
        raise ModelLoadError(f"{st['concatenated']}; graphdoc pools one way: set passage_encoder.pooling "
                             f"({', '.join(POOLING_MODES)})")
    if st.get("unapplied"):
        logger.warning("%s: graphdoc does not apply its sentence-transformers module(s) %s; its passage vectors "
                       "are the pooled%s transformer output", name_or_path, ", ".join(st["unapplied"]),
                       " and normalised" if st.get("normalize") else "")
    causal = is_causal(model_config)
    pooling = config.pooling or st.get("pooling") or ("lasttoken" if causal else "cls")
    if causal and pooling == "cls":  # its first token sees nothing after it: every passage would be one vector
        raise GraphDocError(f"{name_or_path} is a decoder-only model ({model_config.model_type}), whose first "
                            "token sees no other: cls pooling gives every passage the same vector; set "
                            "passage_encoder.pooling to lasttoken or mean")
    if causal and not config.pooling and not st.get("pooling"):
        logger.warning("%s is a decoder-only model (%s), not an encoder: its passages are pooled by their last token "
                       "(passage_encoder.pooling sets another)", name_or_path, model_config.model_type)
    normalize = config.normalize if config.normalize is not None else st.get("normalize", False)
    max_len = config.max_seq_length if config.max_seq_length is not None else st.get("max_seq_length")
    if max_len is None:
        limit = getattr(tokenizer, "model_max_length", None)
        max_len = limit if limit and limit < 100_000 else getattr(model_config, "max_position_embeddings", 512)
    if positions is not None:
        max_len = min(int(max_len), positions)
    query_prompt, passage_prompt = st.get("prompts", ("", ""))
    if config.query_prompt is not None:
        query_prompt = config.query_prompt
    if config.passage_prompt is not None:
        passage_prompt = config.passage_prompt
    if st.get("prompt_not_pooled") and (query_prompt or passage_prompt):
        logger.warning("%s: its pooling leaves the prompt's tokens out (include_prompt false); graphdoc pools them "
                       "with the text's", name_or_path)
    return replace(config, pooling=pooling, normalize=bool(normalize), max_seq_length=int(max_len),
                   query_prompt=query_prompt, passage_prompt=passage_prompt)


#: language models with no masked-LM head whose tokens still see the whole text (XLNet's permutation LM)
BIDIRECTIONAL_LM = ("xlnet",)


def is_causal(model_config) -> bool:
    """Whether a checkpoint is decoder-only (GPT-2, Llama, Qwen): a causal language model's architecture that has
    no masked language model (BERT and RoBERTa have both)."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    kind = getattr(model_config, "model_type", None)
    if kind in BIDIRECTIONAL_LM or getattr(model_config, "use_bidirectional_attention", False):
        return False  # EmbeddingGemma's Gemma 3 attends both ways
    return bool(getattr(model_config, "is_decoder", False)) or (
        kind in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and kind not in MODEL_FOR_MASKED_LM_MAPPING_NAMES)


def full_precision() -> dict[str, torch.dtype]:
    """``from_pretrained``'s keyword for float32 weights. Without it a checkpoint stored in fp16 or bf16 loads in
    that dtype (transformers 5), which graphdoc's float32 layers cannot take and AdamW cannot train (its updates
    round away); autocast gives reduced precision where ``precision`` asks for it."""
    import transformers
    from packaging.version import Version

    new = Version(transformers.__version__) >= Version("4.56")  # torch_dtype was renamed dtype
    return {"dtype" if new else "torch_dtype": torch.float32}


def _load_encoder(name_or_path: str) -> nn.Module:
    """``AutoModel``, or the encoder alone of an encoder-decoder checkpoint (T5 and its kin); another
    encoder-decoder architecture is refused in one line."""
    import transformers
    from transformers import AutoConfig, AutoModel

    model_config = AutoConfig.from_pretrained(name_or_path, trust_remote_code=False)
    # (a T5 encoder saved alone, as sentence-transformers saves it, has is_encoder_decoder false)
    encoder_class = ENCODER_ONLY_CLASSES.get(model_config.model_type)
    if encoder_class is not None:
        loader = getattr(transformers, encoder_class)
    elif not getattr(model_config, "is_encoder_decoder", False):
        loader = AutoModel
    else:
        raise ModelLoadError(f"{name_or_path} is an encoder-decoder model ({model_config.model_type}): use an "
                             "encoder-only model, or a T5-family one "
                             f"({', '.join(sorted(ENCODER_ONLY_CLASSES))}), whose encoder graphdoc runs alone")
    try:
        model, info = loader.from_pretrained(name_or_path, use_safetensors=True, output_loading_info=True,
                                             trust_remote_code=False, **full_precision())
    except RuntimeError as exc:
        if "mismatched" not in str(exc) and "size mismatch" not in str(exc):  # (transformers 5 / 4.x wording)
            raise
        raise ModelLoadError(f"cannot load local folder {name_or_path!r}: its weights do not have the sizes its "
                             "config.json gives (the config or the weights file is another model's)") from None
    except TypeError as exc:  # a config value of the wrong type, which transformers before 5 passes on to torch
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ModelLoadError(f"cannot load {name_or_path!r}: building it from its config.json failed (TypeError: "
                             f"{reason}): a value there may have the wrong type") from None
    _check_missing_weights(name_or_path, model, info["missing_keys"])
    return model


def _check_missing_weights(name_or_path: str, model: nn.Module, missing) -> None:
    """Refuse weights a checkpoint lacks, which transformers initialises at random on every load (vectors and
    fingerprints that change from one load to the next), except a pooler: a masked-LM checkpoint such as
    roberta-base has none, and graphdoc never runs it, so it is dropped. Tied weights are not missing."""
    params = dict(model.named_parameters(remove_duplicate=False))
    prefix = f"{getattr(model, 'base_model_prefix', '')}."  # transformers before 4.50 named them "roberta.pooler..."
    missing = [name.removeprefix(prefix) if name.removeprefix(prefix) in params else name for name in missing]
    loaded = {t.data_ptr() for name, t in params.items() if name not in missing}
    missing = sorted(name for name in missing if name not in params or params[name].data_ptr() not in loaded)
    if missing and all(name.startswith("pooler.") for name in missing):  # (its weights: it is model.pooler)
        model.pooler = None  # (BERT-style models skip a pooler that is None)
        return
    if missing:
        shown = ", ".join(missing[:3]) + (", ..." if len(missing) > 3 else "")
        raise ModelLoadError(f"cannot load {name_or_path!r}: its weights file lacks {len(missing)} of the "
                             f"{type(model).__name__}'s tensors ({shown}), which would be random on every load: "
                             "the file is damaged or is another architecture's")


def embedding_rows(model: nn.Module) -> int | None:
    """The rows of an encoder's token embedding table; ``None`` when it has no plain one."""
    try:
        table = model.get_input_embeddings()
    except (AttributeError, NotImplementedError):
        return None
    return table.num_embeddings if isinstance(table, nn.Embedding) else None


def position_limit(model: nn.Module) -> int | None:
    """How many tokens an encoder with a learned absolute position table takes; ``None`` without one.

    A RoBERTa-style table starts its positions after its padding index (514 rows: 512 tokens).
    """
    table = getattr(getattr(model, "embeddings", None), "position_embeddings", None)
    if not isinstance(table, nn.Embedding):
        return None
    return table.num_embeddings - (table.padding_idx + 1 if table.padding_idx is not None else 0)


#: weight files that are Python pickles (torch.save's), which graphdoc never loads
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")


def _check_local_path(name_or_path: str) -> None:
    """A file, or a folder without ``config.json``, holds no Hugging Face model: say so before the loaders try."""
    path = Path(name_or_path)
    if path.is_file():
        raise ModelLoadError(f"{name_or_path} is a file, not a model folder")
    if path.is_dir() and not (path / "config.json").is_file():
        inner = [p for p in (path / "model", path / "encoder", path / "model" / "encoder")
                 if (p / "config.json").is_file()]
        hint = f"; did you mean {inner[0]}?" if inner else ""  # a pretrain/finetune run's folder, or a classifier's
        if not inner and st_files.old_transformer_folder(path) is not None:
            hint = (f"; its modules.json puts the transformer in {st_files.old_transformer_folder(path)}/, as "
                    "older sentence-transformers saved models: load it with SentenceTransformer and save it again "
                    "to have the current layout")
        raise ModelLoadError(f"no model in {name_or_path} (no config.json){hint}")
    if path.is_dir():
        try:
            settings = json.loads((path / "config.json").read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ModelLoadError(f"cannot load local folder {name_or_path!r}: config.json cannot be read ({exc})") \
                from None
        if not isinstance(settings, dict):
            raise ModelLoadError(f"cannot load local folder {name_or_path!r}: its config.json is not a JSON object")
        names = [p.name for p in path.iterdir()]
        pickles = [name for name in names if name.endswith(PICKLE_SUFFIXES)]
        if pickles and not any(name.endswith((".safetensors", ".safetensors.index.json")) for name in names):
            raise ModelLoadError(f"{name_or_path} holds its weights only as pickle ({', '.join(sorted(pickles))}), "
                                 "which graphdoc does not load: save them as safetensors (a model's "
                                 "save_pretrained writes model.safetensors)")


def _longest_prefix(text: str, max_tokens: int, count: Callable[[str], int]) -> str:
    """The longest prefix of ``text`` with at most ``max_tokens`` tokens by ``count`` (a binary search)."""
    low, high = 0, len(text)
    while low < high:
        mid = (low + high + 1) // 2
        if count(text[:mid]) <= max_tokens:
            low = mid
        else:
            high = mid - 1
    return text[:low]


def _first_words(text: str, n: int) -> str:
    """``text`` up to the end of its ``n``-th word (whitespace-separated): the text itself when it has fewer."""
    if len(text) <= n:  # no more than n characters, so no more than n words
        return text
    for count, match in enumerate(_WORD.finditer(text), start=1):
        if count == n:
            return text[:match.end()]
    return text


def _word_prefix(text: str, end: int) -> str:
    """``text[:end]``, back at the last space when ``end`` falls inside a word that is not the first."""
    if end < len(text) and not text[end].isspace():
        inside = _LAST_WORD.search(text, 0, end)
        if inside is not None and inside.start() > 0:
            end = inside.start()
    return text[:end].rstrip()


def _strict_dataclass_errors(errors_module) -> tuple[type, ...]:
    """huggingface_hub's ``StrictDataclassError``, where it has one (0.32 and later)."""
    error = getattr(errors_module, "StrictDataclassError", None)
    return (error,) if error is not None else ()


def _load_error(name_or_path: str, exc: BaseException) -> str:
    """Why ``name_or_path`` did not load, in one line: a missing folder, or the loader's words."""
    path = Path(name_or_path)
    if not path.exists() and _is_path_name(name_or_path):
        return f"no model folder at {name_or_path}"
    if "trust_remote_code" in str(exc) or "contains custom code" in str(exc):
        return (f"cannot load {name_or_path!r}: it needs its own Python code (auto_map in its config), which "
                "graphdoc does not run; use a model transformers supports itself")
    if path.exists():  # a folder with a config.json (see _check_local_path): its files are damaged
        return f"cannot load local folder {name_or_path!r}: {_first_line(exc)}"
    return (f"cannot load Hugging Face hub model {name_or_path!r}: {_first_line(exc)} "
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
    """The first line of an error's words, and the next when the first ends in a colon (what it introduces)."""
    text = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if not text:
        return type(exc).__name__
    return f"{text[0]} {text[1]}" if text[0].endswith(":") and len(text) > 1 else text[0]
